#!/usr/bin/env bash
# What serving an ONNX model through Nereus costs over running it in a bare ONNX Runtime session:
# Triton's `simple` ONNX model (INT32 add/sub, 1×16), one intra-op thread in both.
#   bare:   host/examples/ort_bare.rs, the same inputs run in a loop (µs per run, tensors included)
#   server: nereus, perf_analyzer at concurrency 1 and 4 over HTTP and gRPC; the server-side time per
#           request comes from its statistics (success ns / count: arrival to response).
# Prints a markdown table and appends it to bench/results/<UTC date>.md. Not a test.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
anchors=$(cd "$root/../shared/anchors" && pwd)
A=${ANCHORS_HOME:-$HOME/.cache/anchors}
[[ -x $A/bin/perf_analyzer ]] || "$anchors/setup.sh"
target=${CARGO_TARGET_DIR:-$root/target}
lib=$("$root/scripts/setup-onnxruntime.sh")
cd "$root"
cargo build --release --locked -p nereus --example ort_bare
bare=$("$target/release/examples/ort_bare" "$lib" tests/onnx_models/simple/1/model.onnx 200000)

repo=$(mktemp -d)
cp -r tests/onnx_models/simple "$repo/"
printf '\nparameters { key: "intra_op_thread_count" value: { string_value: "1" } }\n' >>"$repo/simple/config.pbtxt"
port=18400
"$target/release/nereus" serve --model-repository "$repo" --http-address 127.0.0.1 --http-port $port \
  --grpc-address 127.0.0.1 --grpc-port $((port + 1)) --allow-metrics=false --onnxruntime-library "$lib" \
  >"$repo/nereus.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true; rm -rf "$repo"' EXIT
for _ in $(seq 1 100); do curl -sf localhost:$port/v2/health/ready >/dev/null && break; sleep 0.1; done

mkdir -p "$here/results"
out="$here/results/$(date -u +%Y-%m-%d).md"
{
  echo
  echo "ONNX Runtime backend overhead, Triton's \`simple\` ONNX model, one intra-op thread, $(nproc) cores, $(date -u +%Y-%m-%d)."
  echo "Bare ONNX Runtime session (tensors in and out included): **$bare µs** per run."
  echo
  echo "| protocol | concurrency | infer/s | client p50 µs | client p99 µs | server µs/request | server overhead µs |"
  echo "|---|---|---|---|---|---|---|"
  for proto in http grpc; do
    offset=0; [[ $proto == grpc ]] && offset=1
    for c in 1 4; do
      before=$(curl -s localhost:$port/v2/models/simple/stats)
      line=$("$anchors/perf.sh" localhost:$((port + offset)) simple "$proto" "$c")
      after=$(curl -s localhost:$port/v2/models/simple/stats)
      t=$(sed -n 's/.*throughput=\([0-9.]*\).*/\1/p' <<<"$line")
      a=$(sed -n 's/.*p50_us=\([0-9]*\).*/\1/p' <<<"$line")
      z=$(sed -n 's/.*p99_us=\([0-9]*\).*/\1/p' <<<"$line")
      server=$(python3 -c '
import json, sys
b, a = (json.loads(x)["model_stats"][0]["inference_stats"]["success"] for x in sys.argv[1:3])
n = int(a["count"]) - int(b["count"]); ns = int(a["ns"]) - int(b["ns"])
print(f"{ns / max(n, 1) / 1000:.1f}")' "$before" "$after")
      awk -v p="$proto" -v c="$c" -v t="$t" -v a="$a" -v z="$z" -v s="$server" -v b="$bare" \
        'BEGIN { printf "| %s | %s | %.0f | %s | %s | %s | %.1f |\n", p, c, t, a, z, s, s - b }'
    done
  done
} | tee -a "$out"
