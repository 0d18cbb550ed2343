#!/usr/bin/env bash
# Checks that `cargo test --release` can reuse what `cargo build --release` compiled: every crate the
# server is built from gets the same features with the tests' dev-dependencies as without them. A
# dev-dependency that turns on another feature of a shared crate (tokio's test-util, say) makes the
# test build compile that crate and everything above it again, the server included: minutes of
# scripts/test.sh on two cores. host/Cargo.toml names the crates added to even them out.
#   scripts/check-test-features.sh      (exit 1, naming the crates, when they differ)
set -euo pipefail
cd "$(dirname "$0")/.."
features() { cargo tree --locked -e "$1" --prefix none -f '{p} [{f}]' | sort -u; }
python3 - <(features normal) <(features normal,dev) <<'PY'
import sys
def load(path):
    crates = {}
    for line in open(path):
        line = line.strip()
        if "[" in line:
            crates.setdefault(line.split(" [")[0], set()).update(f for f in line[line.index("[") + 1:line.rindex("]")].split(",") if f)
    return crates
release, test = load(sys.argv[1]), load(sys.argv[2])
differ = {c: sorted(test[c] - f) for c, f in release.items() if c in test and test[c] != f}
for crate, extra in sorted(differ.items()):
    print(f"{crate}: the test build adds {', '.join(extra)}")
if differ:
    print("cargo test --release would compile these, and the crates above them, again (see host/Cargo.toml)")
    sys.exit(1)
print(f"the test build compiles the {len(release)} crates of the release build with the same features")
PY
