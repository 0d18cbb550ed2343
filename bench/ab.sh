#!/usr/bin/env bash
# A/B of two Nereus builds (or one build with two sets of flags) next to the ceiling, in one run:
#   bench/ab.sh BIN_A BIN_B [ROUNDS] [http|grpc] [CONCURRENCY]     (defaults: 12 rounds, http, 4)
#   ARGS_A / ARGS_B add server flags (e.g. ARGS_B="--busy-poll-us 0"); PERF_INTERVAL_MS (1500) the window;
#   MODEL (simple) the model A and B serve (e.g. simple_dyna; the ceiling always adds the numbers itself),
#   MODEL_B (MODEL) another for B: one build serving `simple` as A and `simple_dyna` as B compares them in one run.
#   Both serve metrics, as by default (on the port after gRPC's); ARGS_B="--allow-metrics=false" measures
#   what they cost.
# All three serve `simple` at once; each round runs perf_analyzer against each, in an order rotated
# round by round, and records the server's CPU time (user+system, all threads) per request served.
# On this noisy 2-vCPU machine the throughput of all three moves together from one minute to the
# next, so what counts is the A/B ratio taken per round (its median, and in how many rounds A won),
# not two medians taken apart. Not a test.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
anchors=$(cd "$here/../../shared/anchors" && pwd)
a=$1 b=$2 rounds=${3:-12} proto=${4:-http} conc=${5:-4}
A=${ANCHORS_HOME:-$HOME/.cache/anchors}
[[ -x $A/bin/perf_analyzer ]] || "$anchors/setup.sh"
log=$(mktemp -d)
start() {  # binary port flags...
  local bin=$1 port=$2; shift 2
  "$bin" serve --model-repository "$here/model_repository" --http-address 127.0.0.1 --http-port "$port" \
    --grpc-address 127.0.0.1 --grpc-port $((port + 1)) --metrics-port $((port + 2)) "$@" >"$log/$port.log" 2>&1 &
  echo $!
}
# shellcheck disable=SC2086
pid_a=$(start "$a" 18100 ${ARGS_A:-})
# shellcheck disable=SC2086
pid_b=$(start "$b" 18300 ${ARGS_B:-})
cleanup() { kill "$pid_a" "$pid_b" 2>/dev/null || true; "$anchors/limit.sh" stop 18200 >/dev/null || true; }
trap cleanup EXIT
"$anchors/limit.sh" start 18200 >/dev/null
pid_limit=$(cat "$A/limit_probe-18200.pid")
[[ $proto == grpc ]] && pid_limit=$(cat "$A/grpc_limit_probe-18201.pid")
for port in 18100 18300; do
  for _ in $(seq 1 100); do curl -sf "localhost:$port/v2/health/ready" >/dev/null && break; sleep 0.1; done
done
offset=0; [[ $proto == grpc ]] && offset=1
model=${MODEL:-simple} model_b=${MODEL_B:-${MODEL:-simple}}
served() { curl -sf "localhost:$1/v2/models/$2/stats" | python3 -c 'import json,sys; print(json.load(sys.stdin)["model_stats"][0]["inference_count"])'; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
out=$log/rounds.txt
names=(A B limit)
for r in $(seq 1 "$rounds"); do
  for k in 0 1 2; do
    s=${names[$(((r + k) % 3))]}
    case $s in A) port=18100 pid=$pid_a m=$model ;; B) port=18300 pid=$pid_b m=$model_b ;; limit) port=18200 pid=$pid_limit m=simple ;; esac
    # The gRPC ceiling keeps no count an HTTP call can read: its CPU per request is not measured.
    counted=1; [[ $proto == grpc && $s == limit ]] && counted=0
    ((counted)) && n0=$(served $port "$m") t0=$(cpu_ticks "$pid")
    line=$(PERF_INTERVAL_MS=${PERF_INTERVAL_MS:-1500} "$anchors/perf.sh" "localhost:$((port + offset))" "$m" "$proto" "$conc")
    cpu=nan
    ((counted)) && t1=$(cpu_ticks "$pid") n1=$(served $port "$m") \
      && cpu=$(python3 -c "print('%.1f' % (($t1 - $t0) * 1e6 / $(getconf CLK_TCK) / max(1, $n1 - $n0)))")
    echo "$r $s $line cpu_us=$cpu" | tee -a "$out" >&2
  done
done
python3 - "$out" "$proto" "$conc" <<'PY'
import re, statistics as st, sys, collections
d = collections.defaultdict(dict)
for l in open(sys.argv[1]):
    m = re.match(r'(\d+) (\S+) .*throughput=([\d.]+) p50_us=(\d+).*cpu_us=([\d.]+|nan)', l)
    if m:
        d[int(m[1])][m[2]] = (float(m[3]), int(m[4]), float(m[5]))
rs = [r for r in d if len(d[r]) == 3]
ratio = [d[r]['A'][0] / d[r]['B'][0] for r in rs]
print(f"{sys.argv[2]} c={sys.argv[3]}, {len(rs)} rounds: A/B median {st.median(ratio):.3f}, A higher in {sum(x > 1 for x in ratio)}")
for s in ('A', 'B', 'limit'):
    t, p, c = (st.median(d[r][s][i] for r in rs) for i in range(3))
    vs = st.median(d[r][s][0] / d[r]['limit'][0] for r in rs)
    print(f"  {s:5} {t:8.0f} infer/s  p50 {p:4.0f} us  server CPU {c:5.1f} us/request  {100 * vs:4.0f}% of the ceiling")
PY
