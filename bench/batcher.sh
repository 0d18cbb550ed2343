#!/usr/bin/env bash
# The dynamic batcher under load (issue 29, item 3): `simple_dyna` (dynamic batching, max_batch_size 8)
# against plain `simple` (the same plugin, one request per execution) and the bare-hyper ceiling at
# c=16 and c=64 over HTTP, one Nereus serving both, perf_analyzer driving each in an order rotated round
# by round; and where a request's time goes, from the server's own statistics over each window.
#   bench/batcher.sh [NEREUS_BIN] [ROUNDS]     (defaults: $CARGO_TARGET_DIR/release/nereus, 3)
#   CONCS="16 64"  PERF_INTERVAL_MS=2000 (perf_analyzer's window)
#   The suite measures the same cases (scenarios batching and batching_off, with Triton); this script
#   adds the breakdown.
# Per window of each model, from /v2/models/M/stats before and after (Triton's statistics extension):
#   queue          mean time a request waited for an instance (its batch to form included)
#   compute        mean input + infer + output time of the execution a request was in (as Triton's
#                  statistics count it, a batch's one Wasm call counts whole for each of its requests,
#                  so this is also the mean time of an execution)
#   success        mean time from a request's arrival at the scheduler to its response handed to the
#                  frontend (its queue and compute, validation before, fan-out after; a batch's
#                  responses go out as its outputs are ready, before its compute_output closes, so
#                  success can be a little less than queue + compute)
#   outside        the client's mean latency (Little: concurrency / throughput) less the server's success
#                  time: HTTP parsing and encoding, the I/O threads' scheduling, the loopback
#   batch          mean requests per execution; executions per second (over perf_analyzer's whole run)
# Writes OUT.csv (default bench/results/<date>-batcher.csv: the suite's columns), OUT-breakdown.csv
# and, through bench/report.py, OUT.md with the medians; the breakdown's medians are appended to it.
# Not a test. About 2.5 minutes a round.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
anchors=$(cd "$root/../shared/anchors" && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
A=${ANCHORS_HOME:-$HOME/.cache/anchors}
bin=${1:-$target/release/nereus} rounds=${2:-3}
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "ROUNDS must be a positive number, not '$rounds'" >&2; exit 2; }
[[ -x $bin ]] || { echo "no server binary at $bin (build it: cargo build --release -p nereus)" >&2; exit 1; }
read -r -a concs <<<"${CONCS:-16 64}"
export PERF_INTERVAL_MS=${PERF_INTERVAL_MS:-2000}
nport=18900 cport=18950
log=$(mktemp -d)
# shellcheck source=SCRIPTDIR/servers.sh
source "$here/servers.sh"
# shellcheck source=SCRIPTDIR/csv.sh
source "$here/csv.sh"
ports_free $nport $((nport + 1)) $cport $((cport + 1))
[[ -x $A/bin/perf_analyzer ]] || "$anchors/setup.sh"
nereus_pid=$(nereus_start "$bin" $nport)
cleanup() { kill "$nereus_pid" 2>/dev/null || true; "$anchors/limit.sh" stop $cport >/dev/null 2>&1 || true; rm -rf "$log"; }
trap cleanup EXIT
ceiling_up $cport
wait_ready $nport $cport
curl -sf "localhost:$nport/v2/health/ready" >/dev/null || { echo "nereus is not ready:" >&2; tail -20 "$log/$nport.log" >&2; exit 1; }

date=$(date -u +%Y-%m-%d)
default_csv=$here/results/$date-batcher.csv
csv=${OUT:-$default_csv}
out=${csv%.csv} breakdown=${csv%.csv}-breakdown.csv
mkdir -p "$(dirname "$csv")"
rm -f "$csv"
echo "model,concurrency,round,infer_per_sec,client_mean_us,success_us,queue_us,compute_us,outside_us,mean_batch,executions_per_sec" >"$breakdown"
stats() { curl -sf "localhost:$nport/v2/models/$1/stats"; }

k=0 failed=0
for r in $(seq 1 "$rounds"); do
  for c in "${concs[@]}"; do
    order=(simple_dyna simple ceiling)
    s0=$((k % 3)); k=$((k + 1))
    for s in "${order[@]:$s0}" "${order[@]:0:$s0}"; do
      port=$nport m=$s server=nereus scenario=batching
      [[ $s == simple ]] && scenario=batching_off
      [[ $s == ceiling ]] && port=$cport m=simple server=ceiling
      [[ $server == nereus ]] && stats "$m" >"$log/before.json"
      t0=$(date +%s.%N)
      if ! line=$("$anchors/perf.sh" "localhost:$port" "$m" http "$c"); then
        failed=$((failed + 1)); echo "round $r c=$c $s: perf_analyzer failed, no row" >&2; continue
      fi
      t1=$(date +%s.%N)
      echo "round $r c=$c $s: $line" >&2
      if [[ $server == ceiling ]]; then  # the ceiling's row goes with both scenarios
        csv_row "$csv" batching simple ceiling http "$c" "$r" "$line"
        csv_row "$csv" batching_off simple ceiling http "$c" "$r" "$line"
        continue
      fi
      csv_row "$csv" "$scenario" "$m" nereus http "$c" "$r" "$line"
      stats "$m" >"$log/after.json"
      # The statistics cover every request of perf_analyzer's run (its warm-up and trials too), which
      # is what the means below are of; the throughput is perf_analyzer's last window.
      python3 - "$log/before.json" "$log/after.json" "$m" "$c" "$r" "$line" "$t0" "$t1" >>"$breakdown" <<'PY'
import json, re, sys
before, after = (json.load(open(p))["model_stats"][0] for p in sys.argv[1:3])
model, c, r, line, t0, t1 = sys.argv[3], int(sys.argv[4]), sys.argv[5], sys.argv[6], float(sys.argv[7]), float(sys.argv[8])
def d(*path):
    a, b = after, before
    for p in path:
        a, b = a.get(p, {}), b.get(p, {})
    return int(a or 0) - int(b or 0)
n = d("inference_stats", "success", "count")
mean = lambda k: d("inference_stats", k, "ns") / max(n, 1) / 1e3
execs = d("execution_count")
requests = d("inference_count")
tput = float(re.search(r"throughput=([0-9.]+)", line).group(1))
client = c / tput * 1e6
success, queue = mean("success"), mean("queue")
compute = mean("compute_input") + mean("compute_infer") + mean("compute_output")
print(f"{model},{c},{r},{tput:.1f},{client:.1f},{success:.1f},{queue:.1f},{compute:.1f},"
      f"{client - success:.1f},{requests / max(execs, 1):.2f},"
      f"{execs / max(t1 - t0, 1e-9):.0f}")
PY
    done
  done
done

((failed == 0)) || echo "note: $failed measurement(s) failed and have no row" >&2
[[ -s $csv ]] || { echo "no measurement succeeded" >&2; exit 1; }
python3 "$here/report.py" "$csv" --no-readme
python3 - "$breakdown" >>"$out.md" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
cols = ["infer_per_sec", "client_mean_us", "success_us", "queue_us", "compute_us", "outside_us", "mean_batch", "executions_per_sec"]
print("\n## Where a request's time goes (medians of the rounds; µs unless named)\n")
print("| model | c | " + " | ".join(cols) + " |")
print("|---|---|" + "---|" * len(cols))
for key in sorted({(r["model"], int(r["concurrency"])) for r in rows}, key=lambda k: (k[1], k[0])):
    sel = [r for r in rows if (r["model"], int(r["concurrency"])) == key]
    print(f"| {key[0]} | {key[1]} | " + " | ".join(f"{statistics.median(float(r[c]) for r in sel):.1f}" for c in cols) + " |")
PY
echo "breakdown: $out.md" >&2
