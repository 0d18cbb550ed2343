#!/usr/bin/env bash
# Merged batches for a Python plugin (issue 29, item 3): model_repository's `simple_py` (the Python
# `add_sub_py`, whose bindings build each request's objects, ~70 µs of a small request) served three
# ways from a scratch repository — unbatched (`py`), with Triton's `simple_dyna` batching (`py_dyna`)
# and with it merged (`py_dyna_merged`, `merge_batches`) — and compared by bench/batcher_conns.sh.
#   bench/merged_python.sh [NEREUS_BIN] [ROUNDS]     (CONNS, SECS, WARM as batcher_conns.sh; CONNS=16 here)
# Needs model_repository/simple_py/add_sub_py.wasm, which scripts/setup.sh builds.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
wasm=$root/model_repository/simple_py/add_sub_py.wasm
[[ -f $wasm ]] || { echo "no $wasm: run scripts/setup.sh first (it builds the Python plugins)" >&2; exit 1; }
repo=$(mktemp -d)
trap 'rm -rf "$repo"' EXIT
for m in py py_dyna py_dyna_merged; do
  mkdir -p "$repo/$m/1"
  cp "$wasm" "$repo/$m/"
  sed "s/^name: \"simple_py\"/name: \"$m\"/" "$root/model_repository/simple_py/config.pbtxt" >"$repo/$m/config.pbtxt"
done
for m in py_dyna py_dyna_merged; do
  echo 'dynamic_batching { max_queue_delay_microseconds: 100 }' >>"$repo/$m/config.pbtxt"
done
echo 'parameters { key: "merge_batches" value { string_value: "true" } }' >>"$repo/py_dyna_merged/config.pbtxt"
REPO=$repo MODELS="py py_dyna py_dyna_merged" CONNS=${CONNS:-16} "$here/batcher_conns.sh" "$@"
