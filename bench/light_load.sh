#!/usr/bin/env bash
# Idle and light load: what a server costs in CPU with no traffic and at a steady low request rate
# (issue 29, item 4), beside the bare-hyper ceiling and Triton (python backend) doing the same. Each
# target gets HTTP JSON `simple` requests on one keep-alive connection at each RATE a second (0: none,
# the server idle) for SECONDS; the server's CPU time (user+system, all threads, from /proc/<pid>/stat;
# for Triton also its python backend's stub processes) over that span, as a percentage of one core.
# Rounds alternate the targets.
#   bench/light_load.sh NEREUS_BIN [ROUNDS] [RATES] [SECONDS]    (defaults: 3 rounds, "0 200", 10 s)
#   ARGS_B adds a second Nereus configuration (e.g. ARGS_B="--busy-poll-us 0"); BIN_B another build.
#   TRITON=0 leaves Triton out.
# Run by the suite (bench/suite.sh HOOKS="... light_load"): bench/light_load.sh ROUNDS with
# SUITE_COST_CSV and NEREUS_BIN set appends each round's numbers to SUITE_COST_CSV (QUICK=1: 3 s).
# Ports: Nereus 18100 (B 18300), ceiling 18200, Triton 18000. Not a test.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
anchors=$(cd "$here/../../shared/anchors" && pwd)
if [[ ${SUITE_COST_CSV:-} ]]; then
  bin=${NEREUS_BIN:?} rounds=${1:-3} rates="0 200" secs=10
  [[ ${QUICK:-0} == 1 ]] && secs=3
else
  bin=$1 rounds=${2:-3} rates=${3:-0 200} secs=${4:-10}
fi
read -r -a rates <<<"$rates"
A=${ANCHORS_HOME:-$HOME/.cache/anchors}
log=$(mktemp -d)
# shellcheck source=SCRIPTDIR/servers.sh
source "$here/servers.sh"
# shellcheck source=SCRIPTDIR/csv.sh
source "$here/csv.sh"
targets=(A)
[[ -n ${ARGS_B:-}${BIN_B:-} ]] && targets+=(B)
[[ ${TRITON:-1} == 1 ]] && targets+=(triton)
targets+=(limit)
ports_free 18000 18100 18200 18300
pid_a=$(nereus_start "$bin" 18100)
pid_b=
# shellcheck disable=SC2086
[[ " ${targets[*]} " == *" B "* ]] && pid_b=$(nereus_start "${BIN_B:-$bin}" 18300 ${ARGS_B:-})
cleanup() {
  kill "$pid_a" ${pid_b:+"$pid_b"} 2>/dev/null || true
  "$anchors/limit.sh" stop 18200 >/dev/null || true
  "$anchors/triton.sh" stop 18000 >/dev/null 2>&1 || true
  rm -rf "$log"
}
trap cleanup EXIT
pid_limit=$(ceiling_start 18200)
pid_triton=
if [[ " ${targets[*]} " == *" triton "* ]]; then
  "$anchors/triton.sh" start "$anchors/triton_models" 18000 >&2
  pid_triton=$(cat "$A/triton-18000.pid")
fi
wait_ready 18100 ${pid_b:+18300}
# cpu PID: clock ticks used by PID and its children (Triton's python backend stubs).
cpu() {
  local p total=0
  for p in "$1" $(pgrep -P "$1" || true); do
    total=$((total + $(awk '{print $14 + $15}' "/proc/$p/stat" 2>/dev/null || echo 0)))
  done
  echo "$total"
}
ticks=$(getconf CLK_TCK)
for r in $(seq 1 "$rounds"); do
  for rate in "${rates[@]}"; do
    for t in "${targets[@]}"; do
      case $t in
        A) port=18100 pid=$pid_a ;;
        B) port=18300 pid=$pid_b ;;
        triton) port=18000 pid=$pid_triton ;;
        limit) port=18200 pid=$pid_limit ;;
      esac
      before=$(cpu "$pid")
      python3 - "$port" "$rate" "$secs" <<'PY'
import http.client, json, sys, time
port, rate, secs = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
if rate == 0:  # idle: no request at all
    time.sleep(secs)
    sys.exit()
body = json.dumps({"inputs": [
    {"name": "INPUT0", "datatype": "INT32", "shape": [1, 16], "data": list(range(16))},
    {"name": "INPUT1", "datatype": "INT32", "shape": [1, 16], "data": [1] * 16}]})
c = http.client.HTTPConnection("127.0.0.1", port)
start = time.monotonic(); n = 0
while time.monotonic() - start < secs:
    c.request("POST", "/v2/models/simple/infer", body, {"Content-Type": "application/json"})
    r = c.getresponse(); data = r.read()
    assert r.status == 200, (r.status, data)
    if r.getheader("Content-Type", "").startswith("application/json"):  # the ceiling answers in binary
        assert json.loads(data)["outputs"][0]["data"] == [x + 1 for x in range(16)], data
    n += 1
    time.sleep(max(0.0, start + n / rate - time.monotonic()))
PY
      after=$(cpu "$pid")
      pct=$(python3 -c "print(round(100*($after-$before)/$ticks/$secs,1))")
      echo "$r $t rate=$rate cpu_pct=$pct"
      if [[ ${SUITE_COST_CSV:-} && $t != B ]]; then
        server=nereus; [[ $t == triton ]] && server=triton; [[ $t == limit ]] && server=ceiling
        if ((rate == 0)); then scenario="idle"; else scenario="light load $rate req/s"; fi
        cost_row "$SUITE_COST_CSV" "$scenario" "CPU % of a core" "$server" "$r" "$pct"
      fi
    done
  done
done | tee "$log/rounds"
python3 - "$log/rounds" <<'PY'
import statistics, sys, collections
by = collections.defaultdict(list)
for line in open(sys.argv[1]):
    _, t, rate, cpu = line.split()
    by[(int(rate.split("=")[1]), t)].append(float(cpu.split("=")[1]))
for (rate, t), v in sorted(by.items()):
    print(f"  {rate:4}/s {t:6} median {statistics.median(v):5.1f}% of a core  (rounds: {', '.join(map(str, v))})")
PY
