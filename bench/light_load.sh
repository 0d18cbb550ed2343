#!/usr/bin/env bash
# Light load: what a server costs in CPU at a steady low request rate (issue 29, item 4), beside the
# bare-hyper ceiling doing the same. Each target gets HTTP JSON `simple` requests on one keep-alive
# connection at RATE a second for SECONDS; the server's CPU time (user+system, all threads, from
# /proc/<pid>/stat) over that span, as a percentage of one core. Rounds alternate the targets.
#   bench/light_load.sh NEREUS_BIN [ROUNDS] [RATE] [SECONDS]      (defaults: 3 rounds, 200/s, 10 s)
#   ARGS_B adds a second Nereus configuration (e.g. ARGS_B="--busy-poll-us 0"); BIN_B another build.
# Not a test.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
anchors=$(cd "$here/../../shared/anchors" && pwd)
bin=$1 rounds=${2:-3} rate=${3:-200} secs=${4:-10}
A=${ANCHORS_HOME:-$HOME/.cache/anchors}
log=$(mktemp -d)
# shellcheck source=bench/servers.sh
source "$here/servers.sh"
pid_a=$(nereus_start "$bin" 18100)
# shellcheck disable=SC2086
pid_b=$(nereus_start "${BIN_B:-$bin}" 18300 ${ARGS_B:-})
cleanup() { kill "$pid_a" "$pid_b" 2>/dev/null || true; "$anchors/limit.sh" stop 18200 >/dev/null || true; }
trap cleanup EXIT
pid_limit=$(ceiling_start 18200)
wait_ready 18100 18300
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
ticks=$(getconf CLK_TCK)
for r in $(seq 1 "$rounds"); do
  for t in A B limit; do
    case $t in A) port=18100 pid=$pid_a ;; B) port=18300 pid=$pid_b ;; limit) port=18200 pid=$pid_limit ;; esac
    before=$(cpu "$pid")
    python3 - "$port" "$rate" "$secs" <<'PY'
import http.client, json, sys, time
port, rate, secs = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
body = json.dumps({"inputs": [
    {"name": "INPUT0", "datatype": "INT32", "shape": [1, 16], "data": list(range(16))},
    {"name": "INPUT1", "datatype": "INT32", "shape": [1, 16], "data": [1] * 16}]})
c = http.client.HTTPConnection("127.0.0.1", port)
start = time.monotonic(); n = 0
while time.monotonic() - start < secs:
    c.request("POST", "/v2/models/simple/infer", body, {"Content-Type": "application/json"})
    r = c.getresponse(); r.read()
    assert r.status == 200, r.status
    n += 1
    time.sleep(max(0.0, start + n / rate - time.monotonic()))
PY
    after=$(cpu "$pid")
    echo "$r $t rate=$rate cpu_pct=$(python3 -c "print(round(100*($after-$before)/$ticks/$secs,1))")"
  done
done | tee "$log/rounds"
python3 - "$log/rounds" <<'PY'
import statistics, sys, collections
by = collections.defaultdict(list)
for line in open(sys.argv[1]):
    _, t, _, cpu = line.split()
    by[t].append(float(cpu.split("=")[1]))
for t, v in by.items():
    print(f"  {t:6} median {statistics.median(v):5.1f}% of a core  (rounds: {', '.join(map(str, v))})")
PY
