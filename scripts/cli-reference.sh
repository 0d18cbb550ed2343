#!/usr/bin/env bash
# The command-line reference, docs/cli.md, is generated from `nereus serve --help` so it cannot drift
# from the binary.
#   scripts/cli-reference.sh [NEREUS]           writes docs/cli.md
#   scripts/cli-reference.sh --check [NEREUS]   fails (and shows the difference) when docs/cli.md is
#                                               not what the binary prints; scripts/test.sh runs this
# NEREUS defaults to the release binary in the cargo target folder (built by `cargo build --release`).
set -euo pipefail
cd "$(dirname "$0")/.."
check=false
if [[ ${1:-} == --check ]]; then check=true; shift; fi
nereus=${1:-${CARGO_TARGET_DIR:-$PWD/target}/release/nereus}
[[ -x $nereus ]] || { echo "no nereus binary at $nereus: run cargo build --release first" >&2; exit 1; }

render() {
  cat <<'EOF'
# Command-line reference

Generated from `nereus serve --help` by `scripts/cli-reference.sh`; `scripts/test.sh` checks that it
matches the binary, so edit the flags' doc comments in `host/src/cli.rs` and run the script again.
`nereus` without a subcommand serves too, as tritonserver does. Flag names follow tritonserver's where
the two overlap; [configuration.md](configuration.md) groups the important ones by topic.

```text
EOF
  # The binary's own name, whatever path it was run from.
  NO_COLOR=1 "$nereus" serve --help | sed -e 's/[[:space:]]*$//'
  echo '```'
}

if $check; then
  if ! diff -u docs/cli.md <(render); then
    echo "docs/cli.md does not match \`nereus serve --help\`: run scripts/cli-reference.sh" >&2
    exit 1
  fi
  echo "docs/cli.md matches \`nereus serve --help\`"
else
  render >docs/cli.md
  echo "wrote docs/cli.md" >&2
fi
