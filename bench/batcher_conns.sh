#!/usr/bin/env bash
# The dynamic batcher with the benchmark's own client (issue 29, item 3): `simple_dyna` and
# `simple_dyna_merged` (its batches handed to the plugin as one request, `merge_batches`) against the
# same plugin unbatched (`simple`), one Nereus serving them all, driven by bench/tensors' conn-load (a
# closed-loop client like `wrk -c N`, every answer checked), which spends about a third of
# perf_analyzer's CPU a request and so leaves the server more of a small machine's cores.
#   bench/batcher_conns.sh [NEREUS_BIN] [ROUNDS]     (defaults: $CARGO_TARGET_DIR/release/nereus, 6)
#   CONNS="16 64"  PROTOCOLS=http  SECS=6 (window)  WARM=2 (warm-up)
#   MODELS="simple simple_dyna simple_dyna_merged" (the first is the unbatched reference)
#   REPO=bench/model_repository (the repository served; bench/merged_python.sh passes its own)
# Each round runs every model at each connection count, in an order rotated round by round; prints
# every measurement (throughput, p99, the CPU a request of client and server from /proc, and each
# batched model's mean batch from its statistics over the window) and, per connection count and
# batched model, the median of the per-round ratios to the reference and in how many rounds the
# batched model was ahead.
# Not a test; kept out of bench/results unless a run is written down there.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
bin=${1:-$target/release/nereus} rounds=${2:-6}
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "ROUNDS must be a positive number, not '$rounds'" >&2; exit 2; }
[[ -x $bin ]] || { echo "no server binary at $bin (build it: cargo build --release -p nereus)" >&2; exit 1; }
load=$target/release/conn_load
[[ -x $load ]] || cargo build --release -q -p tensor-bench --manifest-path "$root/Cargo.toml"
read -r -a conns <<<"${CONNS:-16 64}"
read -r -a protocols <<<"${PROTOCOLS:-http}"
secs=${SECS:-6} warm=${WARM:-2} port=18960
log=$(mktemp -d)
# shellcheck source=SCRIPTDIR/servers.sh
source "$here/servers.sh"
pid=$(nereus_start "$bin" $port)
cleanup() { kill "$pid" 2>/dev/null || true; rm -rf "$log"; }
trap cleanup EXIT
wait_ready $port
curl -sf "localhost:$port/v2/health/ready" >/dev/null || { echo "nereus is not ready:" >&2; tail -20 "$log/$port.log" >&2; exit 1; }
read -r -a models <<<"${MODELS:-simple simple_dyna simple_dyna_merged}"
counts() { curl -sf "localhost:$port/v2/models/$1/stats" | python3 -c \
  'import json,sys; s=json.load(sys.stdin)["model_stats"][0]; print(s["inference_count"], s["execution_count"])'; }

echo "protocol,connections,round,model,infer_per_sec,p99_us,client_cpu_us,server_cpu_us,mean_batch" >"$log/rows.csv"
for r in $(seq 1 "$rounds"); do
  for proto in "${protocols[@]}"; do
    p=$port; [[ $proto == grpc ]] && p=$((port + 1))
    for c in "${conns[@]}"; do
      n=${#models[@]} order=()
      for ((k = 0; k < n; k++)); do order+=("${models[(k + r - 1) % n]}"); done
      for m in "${order[@]}"; do
        read -r inf0 exe0 < <(counts "$m")
        line=$("$load" --url "127.0.0.1:$p" --protocol "$proto" --model "$m" --connections "$c" \
          --seconds "$secs" --warmup "$warm" --server-pid "$pid" | tail -1)
        read -r inf1 exe1 < <(counts "$m")
        batch=-
        [[ $m != "${models[0]}" ]] && batch=$(python3 -c "print(f'{($inf1-$inf0)/max($exe1-$exe0,1):.2f}')")
        echo "round $r $proto c=$c $m: $line mean_batch=$batch" >&2
        python3 - "$line" "$proto" "$c" "$r" "$m" "$batch" >>"$log/rows.csv" <<'PY'
import re, sys
line, proto, c, r, m, batch = sys.argv[1:]
get = lambda k: re.search(rf"{k}=([0-9.]+)", line).group(1)
print(f"{proto},{c},{r},{m},{get('throughput')},{get('p99_us')},{get('client_cpu_us_per_req')},{get('server_cpu_us_per_req')},{batch}")
PY
      done
    done
  done
done

python3 - "$log/rows.csv" "${models[@]}" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
reference, batched = sys.argv[2], sys.argv[3:]
print(f"| protocol | connections | model | / {reference} (median of rounds) | ahead in | infer/s model / {reference} | server CPU µs a request model / {reference} | mean batch |")
print("|---|---|---|---|---|---|---|---|")
for key in sorted({(r["protocol"], int(r["connections"])) for r in rows}):
    sel = [r for r in rows if (r["protocol"], int(r["connections"])) == key]
    by = {(r["round"], r["model"]): r for r in sel}
    rounds = sorted({r["round"] for r in sel}, key=int)
    med = lambda m, col: statistics.median(float(r[col]) for r in sel if r["model"] == m)
    for m in batched:
        ratios = [float(by[k, m]["infer_per_sec"]) / float(by[k, reference]["infer_per_sec"]) for k in rounds]
        print(f"| {key[0]} | {key[1]} | {m} | {statistics.median(ratios):.3f} ({', '.join(f'{x:.2f}' for x in ratios)}) | "
              f"{sum(x > 1 for x in ratios)} of {len(ratios)} | {med(m, 'infer_per_sec'):,.0f} / "
              f"{med(reference, 'infer_per_sec'):,.0f} | {med(m, 'server_cpu_us'):.1f} / "
              f"{med(reference, 'server_cpu_us'):.1f} | {med(m, 'mean_batch'):.2f} |")
PY
