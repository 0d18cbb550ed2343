#!/usr/bin/env bash
# Throughput against batch size for a model whose cost is per execution, not per item (as a GPU
# kernel launch or a Python backend call is): `batch_probe` spinning WORK iterations per execution.
# One Nereus, one model per max_batch_size (dynamic_batching, no delay), perf_analyzer at
# concurrency C over HTTP (zero inputs: batch_probe treats rows starting at 1e6 as slow requests); the mean batch size comes from the server's own statistics.
#   bench/batch_scaling.sh [C] [WORK]      (defaults: 16, 500000 iterations ≈ 0.5 ms here)
# Prints a markdown table and appends it to bench/results/<UTC date>.md. Not a test.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
anchors=$(cd "$root/../shared/anchors" && pwd)
conc=${1:-16} work=${2:-500000}
A=${ANCHORS_HOME:-$HOME/.cache/anchors}
[[ -x $A/bin/perf_analyzer ]] || "$anchors/setup.sh"
target=${CARGO_TARGET_DIR:-$root/target}
(cd "$root" && cargo build --release --locked -p nereus)

repo=$(mktemp -d)
sizes=(1 2 4 8 16)
for b in "${sizes[@]}"; do
  mkdir -p "$repo/cost_b$b/1"
  cat >"$repo/cost_b$b/config.pbtxt" <<CFG
name: "cost_b$b"
backend: "batch_probe"
max_batch_size: $b
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "BATCH" data_type: TYPE_INT32 dims: [ -1 ] } ]
dynamic_batching { }
parameters { key: "work_per_execution" value: { string_value: "$work" } }
CFG
done
port=18300
"$target/release/nereus" serve --model-repository "$repo" --http-address 127.0.0.1 --http-port $port \
  --grpc-address 127.0.0.1 --grpc-port $((port + 1)) --allow-metrics=false >"$repo/nereus.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true; rm -rf "$repo"' EXIT
for _ in $(seq 1 100); do curl -sf localhost:$port/v2/health/ready >/dev/null && break; sleep 0.1; done

mkdir -p "$here/results"
out="$here/results/$(date -u +%Y-%m-%d).md"
{
  echo
  echo "Per-execution cost ($work iterations of \`batch_probe\` per execution), perf_analyzer HTTP, concurrency $conc, $(nproc) cores, $(date -u +%Y-%m-%d)."
  echo
  echo "| max_batch_size | infer/s | p50 µs | p99 µs | mean batch size | executions/s |"
  echo "|---|---|---|---|---|---|"
  for b in "${sizes[@]}"; do
    before=$(curl -s localhost:$port/v2/models/cost_b$b/stats)
    line=$("$anchors/perf.sh" localhost:$port "cost_b$b" http "$conc" --input-data zero)
    after=$(curl -s localhost:$port/v2/models/cost_b$b/stats)
    t=$(sed -n 's/.*throughput=\([0-9.]*\).*/\1/p' <<<"$line")
    a=$(sed -n 's/.*p50_us=\([0-9]*\).*/\1/p' <<<"$line")
    z=$(sed -n 's/.*p99_us=\([0-9]*\).*/\1/p' <<<"$line")
    mean=$(python3 -c '
import json, sys
b, a = (json.loads(x)["model_stats"][0] for x in sys.argv[1:3])
i = int(a["inference_count"]) - int(b.get("inference_count", 0))
e = int(a["execution_count"]) - int(b.get("execution_count", 0))
print(f"{i / max(e, 1):.2f}")' "$before" "$after")
    awk -v b="$b" -v t="$t" -v a="$a" -v z="$z" -v m="$mean" \
      'BEGIN { printf "| %s | %.0f | %s | %s | %s | %.0f |\n", b, t, a, z, m, t / m }'
  done
} | tee -a "$out"
