#!/usr/bin/env bash
# A/B of Nereus builds at large tensors, one server at a time, in alternating rounds (issue 28):
#   bench/tensors_ab.sh BIN [BIN...]
#   ROUNDS=3  SECS=4 (window per point)  SIZES="1 16 64" (MiB)  CONCS="1 4"
#   MODELS="identity_fp32 identity_fp32_onnx" (bench/model_repository)  PROTOS="grpc grpc-stream" (tensor-load's
#   --protocol: http, grpc, grpc-stream; or shm: HTTP with inputs and outputs in system shared memory)
# Each round starts every build in turn and measures every point against it with tensor-load (answers checked),
# recording the server's CPU per request. Prints one line per measurement, then a table of medians per point and
# build/protocol with the per-round ratios to the first. Not a test.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
(($#)) || { echo "usage: $0 BIN [BIN...]" >&2; exit 2; }
read -r -a sizes <<<"${SIZES:-1 16 64}"
read -r -a concs <<<"${CONCS:-1 4}"
read -r -a models <<<"${MODELS:-identity_fp32 identity_fp32_onnx}"
read -r -a protos <<<"${PROTOS:-grpc grpc-stream}"
port=${NEREUS_PORT:-18900}
! curl -s -o /dev/null "localhost:$port/v2/health/live" || { echo "port $port is in use" >&2; exit 1; }
(cd "$root" && cargo build -q --release --locked -p tensor-bench)
load=$target/release/tensor_load
out=$(mktemp)
pid=
trap '[[ $pid ]] && kill "$pid" 2>/dev/null; rm -f "$out"' EXIT
for r in $(seq 1 "${ROUNDS:-3}"); do
  for bin in "$@"; do
    "$bin" serve --model-repository "$here/model_repository" --http-address 127.0.0.1 --http-port "$port" \
      --grpc-address 127.0.0.1 --grpc-port $((port + 1)) --metrics-port $((port + 2)) \
      --http-max-input-size $((256 << 20)) --allow-client-shm=true >/dev/null 2>&1 &
    pid=$!
    for _ in $(seq 1 300); do curl -sf "localhost:$port/v2/health/ready" >/dev/null && break; sleep 0.1; done
    for m in "${models[@]}"; do for mib in "${sizes[@]}"; do for c in "${concs[@]}"; do for p in "${protos[@]}"; do
      url=127.0.0.1:$((port + 1)); proto=(--protocol "$p")
      [[ $p == http || $p == shm ]] && url=127.0.0.1:$port
      [[ $p == shm ]] && proto=(--protocol http --shm)
      line=$("$load" --url "$url" "${proto[@]}" --model "$m" --bytes $((mib << 20)) --concurrency "$c" \
        --seconds "${SECS:-4}" --warmup 1 --server-pid "$pid" 2>&1 | tail -1)
      echo "round=$r bin=$bin path=$p $line" | tee -a "$out"
    done; done; done; done
    kill "$pid"; wait "$pid" 2>/dev/null || true; pid=
  done
done
python3 - "$out" "$@" <<'PY'
import re, statistics, sys
from collections import defaultdict
bins = sys.argv[2:]
runs = defaultdict(dict)  # (model, MiB, c) -> (bin, protocol) -> {round: (MB/s, server ms)}
for line in open(sys.argv[1]):
    f = dict(re.findall(r"(\w+)=(\S+)", line))
    if "mb_per_sec" not in f:
        continue
    key = (f["model"], int(f["bytes"]) >> 20, int(f["c"]))
    runs[key].setdefault((f["bin"], f["path"]), {})[int(f["round"])] = (float(f["mb_per_sec"]), float(f["server_cpu_ms_per_req"]))
print("\n| model | MiB | c | build, path | MB/s (median) | per-round ratio to the first | server ms/req (median) |")
print("|---|---|---|---|---|---|---|")
for key, sides in runs.items():
    first = None
    for (b, p), rounds in sides.items():
        first = first or rounds
        ratios = ", ".join(f"{rounds[r][0] / first[r][0]:.2f}" for r in sorted(rounds) if r in first)
        med = lambda i: statistics.median(v[i] for v in rounds.values())
        print(f"| {key[0]} | {key[1]} | {key[2]} | {b} {p} | {med(0):,.0f} | {ratios} | {med(1):.2f} |")
PY
