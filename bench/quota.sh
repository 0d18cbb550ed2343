#!/usr/bin/env bash
# Under a CPU quota (issue 29, item 4): does the busy-poll spinner starve request work when the
# server may use only QUOTA cores (a Kubernetes CPU limit)? Nereus with its defaults (A), Nereus with
# `--busy-poll-us 0` (B) and the bare-hyper ceiling each run in a cgroup of their own (cgroup v1
# `cpu` controller, cfs_quota_us = QUOTA × cfs_period_us), and perf_analyzer measures HTTP `simple`
# at each concurrency: throughput, p50 and p99, alternating targets round by round, medians. Also
# how often each cgroup was throttled (cpu.stat). Needs root and a writable /sys/fs/cgroup/cpu.
#   bench/quota.sh NEREUS_BIN [ROUNDS] [QUOTA] [C...]      (defaults: 3 rounds, 1 core, c=1 and 4)
# Run by the suite (bench/suite.sh HOOKS="... quota"): bench/quota.sh ROUNDS with SUITE_COST_CSV and
# NEREUS_BIN set measures Nereus with its defaults and the ceiling (not B) at 1 core, c=1 and c=4, and
# appends each round's throughput, p50 and p99 to SUITE_COST_CSV (QUICK=1: c=4 only). Not a test.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
anchors=$(cd "$here/../../shared/anchors" && pwd)
targets=(A B limit)
if [[ ${SUITE_COST_CSV:-} ]]; then
  bin=${NEREUS_BIN:?} rounds=${1:-3} quota=1 concurrencies=(1 4) targets=(A limit)
  [[ ${QUICK:-0} == 1 ]] && concurrencies=(4)
else
  bin=$1 rounds=${2:-3} quota=${3:-1}
  shift $(($# < 3 ? $# : 3))
  concurrencies=("${@:-1 4}")
  read -ra concurrencies <<<"${concurrencies[*]}"
fi
A=${ANCHORS_HOME:-$HOME/.cache/anchors}
cg=/sys/fs/cgroup/cpu
[[ -w $cg ]] || { echo "needs a writable cgroup v1 cpu controller at $cg" >&2; exit 1; }
log=$(mktemp -d)
groups=()
# Puts process $2 in a new cgroup named $1 with the quota.
confine() {
  local dir=$cg/nereus-bench-$1
  mkdir -p "$dir"
  echo 100000 >"$dir/cpu.cfs_period_us"
  echo "$(awk -v q="$quota" 'BEGIN {printf "%d", q * 100000}')" >"$dir/cpu.cfs_quota_us"
  # Every thread the process has now; threads it starts later inherit the group.
  for task in /proc/"$2"/task/*; do echo "${task##*/}" >"$dir/tasks"; done
  groups+=("$dir")
}
# shellcheck source=SCRIPTDIR/servers.sh
source "$here/servers.sh"
# shellcheck source=SCRIPTDIR/csv.sh
source "$here/csv.sh"
ports_free 18100 18200 18300
pid_a=$(nereus_start "$bin" 18100)
pid_b=$(nereus_start "$bin" 18300 --busy-poll-us 0)
cleanup() {
  kill "$pid_a" "$pid_b" 2>/dev/null || true
  "$anchors/limit.sh" stop 18200 >/dev/null || true
  sleep 0.5
  for dir in "${groups[@]}"; do rmdir "$dir" 2>/dev/null || true; done
}
trap cleanup EXIT
pid_limit=$(ceiling_start 18200)
wait_ready 18100 18300
confine A "$pid_a"
confine B "$pid_b"
confine limit "$pid_limit"
throttled() { awk '$1 == "nr_throttled" {print $2}' "$cg/nereus-bench-$1/cpu.stat"; }
for r in $(seq 1 "$rounds"); do
  for c in "${concurrencies[@]}"; do
    for t in "${targets[@]}"; do
      case $t in A) port=18100 ;; B) port=18300 ;; limit) port=18200 ;; esac
      before=$(throttled "$t")
      out=$("$anchors/perf.sh" "127.0.0.1:$port" simple http "$c")
      echo "$r $t c=$c $out throttled=$(($(throttled "$t") - before))"
      if [[ ${SUITE_COST_CSV:-} ]]; then
        server=nereus; [[ $t == limit ]] && server=ceiling
        for k in throughput p50_us p99_us; do
          v=$(sed -n "s/.* $k=\([0-9.]*\).*/\1/p" <<<"$out")
          case $k in throughput) m="infer/s" ;; p50_us) m="p50 µs" ;; p99_us) m="p99 µs" ;; esac
          cost_row "$SUITE_COST_CSV" "CPU quota $quota core c=$c" "$m" "$server" "$r" "$v"
        done
      fi
    done
  done
done | tee "$log/rounds"
python3 - "$log/rounds" "$quota" <<'PY'
import collections, re, statistics, sys
by = collections.defaultdict(lambda: collections.defaultdict(list))
for line in open(sys.argv[1]):
    f = dict(re.findall(r"(\w+)=([\d.]+)", line))
    t, c = line.split()[1], line.split()[2]
    for k in ("throughput", "p50_us", "p99_us", "throttled"):
        by[(c, t)][k].append(float(f[k]))
print(f"\nmedians, CPU quota {sys.argv[2]} core(s) per server:")
print("| c | server | infer/s | p50 µs | p99 µs | periods throttled |")
print("|---|---|---|---|---|---|")
names = {"A": "Nereus (busy poll on)", "B": "Nereus --busy-poll-us 0", "limit": "bare hyper"}
for (c, t), v in sorted(by.items()):
    m = {k: statistics.median(x) for k, x in v.items()}
    print(f"| {c[2:]} | {names[t]} | {m['throughput']:.0f} | {m['p50_us']:.0f} | {m['p99_us']:.0f} | {m['throttled']:.0f} |")
PY
