#!/usr/bin/env bash
# Coverage-guided fuzzing (libFuzzer, through cargo-fuzz on stable Rust with `--sanitizer none`) of
# everything a client or a model repository hands the server as bytes: the HTTP infer body in its
# three framings, gRPC ModelInferRequest messages, BYTES tensors and config.pbtxt. The targets are
# in fuzz/fuzz_targets/, their seed corpus in fuzz/corpus/ (regenerate with fuzz/make_seeds.py).
#
#   scripts/fuzz.sh ci                     every target, a fixed number of runs from a fixed seed
#                                          (what scripts/test.sh runs; new inputs go to a temp dir)
#   scripts/fuzz.sh run TARGET [SECONDS]   one target for SECONDS (default 600) from the seeds and
#                                          fuzz/local-corpus/TARGET (not checked in), where it keeps
#                                          the inputs that reach new code
#   scripts/fuzz.sh list                   the targets
#
# A crash leaves its input in fuzz/artifacts/TARGET/; replay it with
# `scripts/fuzz.sh run TARGET` after fixing, or `cargo fuzz run -s none TARGET fuzz/artifacts/TARGET/<file>`.
set -euo pipefail
cd "$(dirname "$0")/.."
target=${CARGO_TARGET_DIR:-$PWD/target}
tools=$target/tools
export PATH=$tools/bin:$PATH
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "installing cargo-fuzz into $tools"
  cargo install -q cargo-fuzz --version 0.13.2 --locked --root "$tools"
fi
fuzz=(cargo fuzz run --sanitizer none --release --target-dir "$target/fuzz")
targets=(http_infer_body grpc_infer_request bytes_elements config_pbtxt)

case ${1:-ci} in
  list) printf '%s\n' "${targets[@]}" ;;
  run)
    name=${2:?"usage: $0 run TARGET [SECONDS]"}
    mkdir -p "fuzz/local-corpus/$name"
    "${fuzz[@]}" "$name" "fuzz/local-corpus/$name" "fuzz/corpus/$name" -- -max_total_time="${3:-600}" ;;
  ci)
    runs=${NEREUS_FUZZ_RUNS:-200000}
    for name in "${targets[@]}"; do
      scratch=$(mktemp -d)
      echo "== fuzz $name: $runs runs"
      if "${fuzz[@]}" "$name" "$scratch" "fuzz/corpus/$name" -- -runs="$runs" -seed=1 -max_len=65536 \
        >"$scratch.log" 2>&1; then
        grep -E "^Done|cov:" "$scratch.log" | tail -n 2
      else
        cat "$scratch.log"
        exit 1
      fi
      rm -rf "$scratch" "$scratch.log"
    done ;;
  *) echo "usage: $0 [ci | run TARGET [SECONDS] | list]" >&2; exit 2 ;;
esac
