#!/usr/bin/env bash
# Many models in one server (issue 29, item 1): loads MODELS copies of `simple` (the bundled add_sub
# backend, one instance each) — every MIX-th one a copy of `image_classify_preprocess` instead (two
# instances, a 512 MiB memory limit) when MIX > 0 — and reports the time from starting the process
# to its "Nereus is ready" line, how many are READY, RSS and threads; then one request to every
# `simple` copy (one keep-alive HTTP connection, JSON) and, after them, the time that took, RSS,
# threads, and the sandboxes built again on demand (`nereus_instance_sandbox_builds_on_demand`).
# A whole-process count, measured once per call: no timing race, so no alternation.
#
#   bench/density.sh [BINARY] [MODELS] [MIX] [extra nereus flags...]
#   bench/density.sh target/release/nereus 10000 10
# Run by the suite (bench/suite.sh HOOKS="... density"): bench/density.sh ROUNDS with SUITE_COST_CSV
# set measures 10,000 models with every tenth an image model (QUICK=1: 2,000) ROUNDS times and appends
# each number to SUITE_COST_CSV (bench/csv.sh's cost_row), for the README's table of costs.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ ${SUITE_COST_CSV:-} && -z ${ROUND:-} ]]; then  # the hook: ROUNDS measurements, ROUND set in each
  rounds=${1:-3} models=10000
  [[ ${QUICK:-0} == 1 ]] && models=2000
  for r in $(seq 1 "$rounds"); do ROUND=$r bench/density.sh "${NEREUS_BIN:?}" "$models" 10; done
  exit
fi
bin=${1:-${CARGO_TARGET_DIR:-target}/release/nereus}
models=${2:-10000}
mix=${3:-0}
extra=("${@:4}")
python=${PYTHON:-python3}
# shellcheck source=SCRIPTDIR/csv.sh
source bench/csv.sh
scenario="density $models models"
((mix > 0)) && scenario+=" (1 in $mix image)"
# record MEASURE VALUE: a row of the suite's cost table when run as its hook.
record() { [[ -z ${SUITE_COST_CSV:-} ]] || cost_row "$SUITE_COST_CSV" "$scenario" "$1" nereus "${ROUND:-1}" "$2"; }

repo=$(mktemp -d)
log=$(mktemp)
pid=
trap '[[ -n $pid ]] && kill "$pid" 2>/dev/null; rm -rf "$repo" "$log"' EXIT
simple_config=$(<model_repository/simple/config.pbtxt)
image_config=$(<model_repository/image_classify_preprocess/config.pbtxt)
for ((i = 0; i < models; i++)); do
  mkdir -p "$repo/m$i/1"
  if ((mix > 0 && i % mix == mix - 1)); then
    printf '%s\n' "${image_config//name: \"image_classify_preprocess\"/name: \"m$i\"}" >"$repo/m$i/config.pbtxt"
  else
    printf '%s\n' "${simple_config//name: \"simple\"/name: \"m$i\"}" >"$repo/m$i/config.pbtxt"
  fi
done

started=$(date +%s.%N)
"$bin" serve --model-repository "$repo" --http-address 127.0.0.1 --http-port 0 --grpc-port 0 --metrics-port 0 \
  --strict-readiness false "${extra[@]}" >"$log" 2>&1 &
pid=$!
until grep -q 'Nereus is ready' "$log"; do
  kill -0 "$pid" 2>/dev/null || { tail -20 "$log"; exit 1; }
  sleep 0.02
done
ready_at=$(date +%s.%N)
port=$(sed -n 's/.*Started HTTPService at .*:\([0-9][0-9]*\).*/\1/p' "$log" | head -1)
metrics_port=$(sed -n 's/.*Started Metrics Service at .*:\([0-9][0-9]*\).*/\1/p' "$log" | head -1)
proc() { awk -v k="$1:" '$1 == k {print $2}' "/proc/$pid/status"; }
ready_line=$(grep -o '[0-9]* of [0-9]* models READY' "$log" | head -1)
ready_s=$(awk -v a="$started" -v b="$ready_at" 'BEGIN {printf "%.2f", b - a}')
rss=$(($(proc VmRSS) / 1024)) threads=$(proc Threads)
echo "models: $models (every ${mix}th an image_classify_preprocess copy; 0: none)  flags: ${extra[*]:-(defaults)}"
echo "ready line: $ready_line, $ready_s s after start"
echo "after load: RSS $rss MiB, threads $threads"
record "models READY" "${ready_line%% *}"
record "s from start to ready" "$ready_s"
record "RSS MiB after load" "$rss"
record "threads after load" "$threads"

requests=$("$python" - "$port" "$models" "$mix" <<'EOF'
import http.client, json, sys, time
port, models, mix = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
conn = http.client.HTTPConnection("127.0.0.1", port)
body = lambda b: json.dumps({"inputs": [
    {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": list(range(16))},
    {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": [b] * 16}]})
t0, n, bad = time.monotonic(), 0, 0
for i in range(models):
    if mix > 0 and i % mix == mix - 1:
        continue
    conn.request("POST", f"/v2/models/m{i}/infer", body(i % 100), {"Content-Type": "application/json"})
    r = conn.getresponse()
    out = json.loads(r.read())
    n += 1
    if r.status != 200 or out["outputs"][0]["data"] != [x + i % 100 for x in range(16)]:
        bad += 1
print(f"one request to each of {n} simple copies: {time.monotonic() - t0:.2f} s, {bad} wrong or failed")
EOF
)
echo "$requests"
rss=$(($(proc VmRSS) / 1024)) threads=$(proc Threads)
rebuilt=$(curl -s "127.0.0.1:$metrics_port/metrics" | awk '/^nereus_instance_sandbox_builds_on_demand\{/ {s += $2} END {print s + 0}')
echo "after requests: RSS $rss MiB, threads $threads, sandboxes built on demand: $rebuilt"
[[ $requests == *" 0 wrong or failed" ]] || { echo "some requests failed" >&2; exit 1; }
record "s for one request to each simple copy" "$(sed -n 's/.*copies: \([0-9.]*\) s.*/\1/p' <<<"$requests")"
record "RSS MiB after the requests" "$rss"
record "threads after the requests" "$threads"
