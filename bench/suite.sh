#!/usr/bin/env bash
# The benchmark suite (issue 28): every scenario of the README's performance statements, Nereus next to
# Triton (python backend, ../shared/anchors/triton.sh) and the ceiling (bare hyper / bare tonic serving
# `simple`, ../shared/anchors/limit.sh), all three served at once, measured by perf_analyzer
# (../shared/anchors/perf.sh) in rounds; each case's three servers in an order rotated case by case and
# round by round. Then bench/report.py: medians, the chart, and the README's table.
#   bench/suite.sh [--quick] [--no-readme] [ROUNDS]     (also: bench/run.sh suite ..., bench/run.sh --quick)
# Cases (scenario model protocol concurrency [perf_analyzer args]):
#   small     simple            HTTP and gRPC, c=1 and c=4
#   batching  simple_dyna       HTTP c=16 and c=64 (dynamic batching)
#   batching_off  simple        HTTP c=16 and c=64 (the same plugin unbatched, beside it)
#   sequence  simple_sequence   gRPC c=4, --sequence-length 20
#   ensemble  ensemble_add_sub  HTTP c=1 and c=4 (Triton: the anchors' ensemble of two python `simple`s)
#   bls       bls_add_sub       HTTP c=1 and c=4 (Triton: bench/triton_models/bls_add_sub, python BLS)
# The ceiling serves `simple` on the same protocol and concurrency in every case (it has no batcher,
# sequences, ensembles or BLS): read its column as the cost of one bare add/sub round trip.
# Default: 3 rounds, 2 s perf_analyzer windows: 117 measurements and the hooks, 2,252 s on the 2-core
# machine on 2026-11-28, of which about 600 s were four perf_analyzer runs that did not settle (cut at
# PERF_TIMEOUT, 150 s) and about 700 s the hooks. --quick: 1 round, 0.5 s windows, the small cases and
# the others at c=4 only: 24 measurements, and the hooks' quick forms (one round of 3 s windows, 2,000
# models, c=4 under the quota): about 3 minutes on 2026-11-28.
# Environment:
#   NEREUS_BIN     the server binary (unset: cargo build --release of this tree); NEREUS_COMMIT the
#                  commit it was built from, for the record (unset: this tree's HEAD when built here,
#                  else "unknown"); NEREUS_ARGS extra server flags
#   PERF_INTERVAL_MS  perf_analyzer's window (default 2000, 500 with --quick); PERF_TIMEOUT the seconds
#                  one measurement may take (default 150; past it, no row and a note)
#   SCENARIOS      a subset, e.g. "small bls"
#   HOOKS          scripts run after the suite's own cases (default "connections density light_load
#                  quota": 256 connections, bench/connections.sh; 10,000 models, bench/density.sh; CPU
#                  idle and at 200 requests a second, bench/light_load.sh; p50/p99 under a 1-core CPU
#                  quota, bench/quota.sh; HOOKS= runs none), e.g. "connections languages tensors":
#                  bench/<name>.sh ROUNDS with SUITE_CSV (append rows with bench/csv.sh's csv_row),
#                  SUITE_COST_CSV (rows of the costs table, cost_row), NEREUS_BIN, NEREUS, QUICK (1 or 0)
#                  and PERF_INTERVAL_MS set; their rows join the tables and the chart. A hook that is not
#                  there is skipped with a line saying so.
#   OUT            the results' base path (default bench/results/<UTC date>-suite[-quick])
# Writes OUT.csv (every round), OUT-cost.csv (the hooks' costs: models, memory, threads, CPU, latency
# under a quota), OUT.machine.txt (nproc, CPU, kernel, date, commits, settings, mean batch sizes), and
# through bench/report.py OUT.md (medians), OUT.svg and OUT-ratio.svg (charts), and the tables between
# <!-- bench:begin --> and <!-- bench:end --> in README.md (not with --no-readme).
# Ports: Triton 18000 (gRPC 18001, metrics 18002), Nereus 18100 (18101, 18102), ceiling 18200 (18201).
# Not a test.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
anchors=$(cd "$root/../shared/anchors" && pwd)
A=${ANCHORS_HOME:-$HOME/.cache/anchors}

quick=0 readme=1 rest=()
for arg in "$@"; do
  case $arg in
    --quick) quick=1 ;;
    --no-readme) readme=0 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "unknown option $arg (try --help)" >&2; exit 2 ;;
    *) rest+=("$arg") ;;
  esac
done
rounds=${rest[0]:-$((quick ? 1 : 3))}
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "ROUNDS must be a positive number, not '$rounds'" >&2; exit 2; }
export PERF_INTERVAL_MS=${PERF_INTERVAL_MS:-$((quick ? 500 : 2000))}

if ((quick)); then
  cases=("small simple http 1" "small simple http 4" "small simple grpc 1" "small simple grpc 4"
    "batching simple_dyna http 16" "sequence simple_sequence grpc 4 --sequence-length 20"
    "ensemble ensemble_add_sub http 4" "bls bls_add_sub http 4")
else
  cases=("small simple http 1" "small simple http 4" "small simple grpc 1" "small simple grpc 4"
    "batching simple_dyna http 16" "batching simple_dyna http 64" "batching_off simple http 16"
    "batching_off simple http 64" "sequence simple_sequence grpc 4 --sequence-length 20"
    "ensemble ensemble_add_sub http 1" "ensemble ensemble_add_sub http 4"
    "bls bls_add_sub http 1" "bls bls_add_sub http 4")
fi
if [[ -n ${SCENARIOS:-} ]]; then
  kept=()
  for case_ in "${cases[@]}"; do [[ " $SCENARIOS " == *" ${case_%% *} "* ]] && kept+=("$case_"); done
  ((${#kept[@]})) || { echo "SCENARIOS='$SCENARIOS' names none of: small batching batching_off sequence ensemble bls" >&2; exit 2; }
  cases=("${kept[@]}")
fi

tport=18000 nport=18100 cport=18200
log=$(mktemp -d)
# shellcheck source=SCRIPTDIR/servers.sh
source "$here/servers.sh"
# shellcheck source=SCRIPTDIR/csv.sh
source "$here/csv.sh"
ports_free $tport $((tport + 1)) $nport $((nport + 1)) $cport $((cport + 1))
[[ -x $A/bin/perf_analyzer ]] || "$anchors/setup.sh"

if [[ -n ${NEREUS_BIN:-} ]]; then
  bin=$NEREUS_BIN nereus_commit=${NEREUS_COMMIT:-unknown}
  [[ -x $bin ]] || { echo "NEREUS_BIN=$bin is not an executable" >&2; exit 1; }
else
  (cd "$root" && cargo build --release --locked -p nereus)
  bin=${CARGO_TARGET_DIR:-$root/target}/release/nereus
  nereus_commit=${NEREUS_COMMIT:-$(git -C "$root" describe --always --dirty)}
fi

mkdir -p "$here/results"
suffix=suite; ((quick)) && suffix=suite-quick
out=${OUT:-$here/results/$(date -u +%Y-%m-%d)-$suffix}
[[ -z ${OUT:-} && -e $out.csv ]] && out=$out-$(date -u +%H%M)  # a second run that day: a file of its own
csv=$out.csv machine=$out.machine.txt
rm -f "$csv"
t0=$(date +%s)
{
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "mode: $( ((quick)) && echo quick || echo full)"
  echo "rounds: $rounds"
  echo "perf_interval_ms: $PERF_INTERVAL_MS"
  echo "nproc: $(nproc)"
  echo "cpu: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)"
  echo "kernel: $(uname -sr)"
  echo "commit: $(git -C "$root" describe --always --dirty)"
  echo "nereus_bin: $bin"
  echo "nereus_commit: $nereus_commit"
  echo "nereus_args: ${NEREUS_ARGS:-}"
  echo "load_before: $(cut -d' ' -f1-3 /proc/loadavg)"
} >"$machine"

# Triton's repository: the anchors' python models (simple, simple_dyna, simple_sequence, the ensemble)
# and the python BLS model next to them.
mkdir -p "$log/triton"
cp -r "$anchors/triton_models/." "$log/triton/"
cp -r "$here/triton_models/bls_add_sub" "$log/triton/"
# shellcheck disable=SC2086
"$bin" serve --model-repository "$here/model_repository" --http-address 127.0.0.1 --http-port $nport \
  --grpc-address 127.0.0.1 --grpc-port $((nport + 1)) --metrics-port $((nport + 2)) ${NEREUS_ARGS:-} \
  >"$log/nereus.log" 2>&1 &
nereus_pid=$!
cleanup() {
  kill "$nereus_pid" 2>/dev/null || true
  "$anchors/triton.sh" stop $tport >/dev/null 2>&1 || true
  "$anchors/limit.sh" stop $cport >/dev/null 2>&1 || true
  rm -rf "$log"
}
trap cleanup EXIT
"$anchors/triton.sh" start "$log/triton" $tport >&2
ceiling_up $cport
wait_ready $nport
curl -sf "localhost:$nport/v2/health/ready" >/dev/null || { echo "nereus is not ready:" >&2; tail -20 "$log/nereus.log" >&2; exit 1; }

# Wrong answers are worth no measurement: one request to each model that has a known answer.
seq16='[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15]' ones='[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]'
check() {  # PORT MODEL IN0 IN1 EXPECTED_FIRST_OUTPUT
  local body got
  body="{\"inputs\":[{\"name\":\"$3\",\"shape\":[1,16],\"datatype\":\"INT32\",\"data\":$seq16},{\"name\":\"$4\",\"shape\":[1,16],\"datatype\":\"INT32\",\"data\":$ones}]}"
  got=$(curl -s -X POST "localhost:$1/v2/models/$2/infer" -d "$body")
  grep -q "\"data\":$5" <<<"$got" || { echo "$2 on port $1 answers wrongly: $got" >&2; exit 1; }
}
for port in $nport $tport; do
  check "$port" simple INPUT0 INPUT1 '\[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16\]'
  for m in ensemble_add_sub bls_add_sub; do
    [[ " ${cases[*]} " == *" $m "* ]] && check "$port" "$m" A B '\[0,2,4,6,8,10,12,14,16,18,20,22,24,26,28,30\]'
  done
done

failed=0 n=0
total=$((rounds * ${#cases[@]} * 3))
for r in $(seq 1 "$rounds"); do
  i=0
  for case_ in "${cases[@]}"; do
    read -r scenario model proto c extra_s <<<"$case_"
    extra=(); [[ -n ${extra_s:-} ]] && read -r -a extra <<<"$extra_s"
    offset=0; [[ $proto == grpc ]] && offset=1
    # The order rotates from case to case and round to round (triton nereus ceiling, then nereus
    # ceiling triton, ...): whatever a run leaves behind on this machine (Triton's python backend is
    # the heaviest) must not always weigh on the same server.
    order=(triton nereus ceiling)
    k=$(((r - 1 + i) % 3)); i=$((i + 1))
    for s in "${order[@]:$k}" "${order[@]:0:$k}"; do
      args=("${extra[@]}") m=$model
      case $s in
        triton) port=$tport ;;
        nereus) port=$nport ;;
        ceiling) port=$cport m=simple args=() ;;
      esac
      n=$((n + 1))
      # A time limit per measurement: perf_analyzer against the bare-hyper ceiling at c=64 sometimes ran
      # on for minutes without settling (4 of 6 times on 2026-11-27); timeout stops its process group.
      if line=$(timeout "${PERF_TIMEOUT:-150}" "$anchors/perf.sh" "localhost:$((port + offset))" "$m" "$proto" "$c" "${args[@]}"); then
        csv_row "$csv" "$scenario" "$m" "$s" "$proto" "$c" "$r" "$line"
        echo "[$(($(date +%s) - t0)) s, $n/$total] round $r $scenario $s: $line" >&2
      else
        failed=$((failed + 1))
        echo "[$(($(date +%s) - t0)) s, $n/$total] round $r $scenario $s $m $proto c=$c: perf_analyzer failed, no row" >&2
      fi
    done
  done
done

# Mean batch sizes over the whole run, from each server's statistics.
for m in simple_dyna simple_sequence; do
  [[ " ${cases[*]} " == *" $m "* ]] || continue
  for s in nereus triton; do
    port=$nport; [[ $s == triton ]] && port=$tport
    curl -sf "localhost:$port/v2/models/$m/stats" | python3 -c '
import json, sys
m = json.load(sys.stdin)["model_stats"][0]
i, e = int(m["inference_count"]), int(m["execution_count"])
print(f"note: {sys.argv[1]} {sys.argv[2]}: {i} inferences in {e} executions over the whole run, mean batch size {i / max(e, 1):.2f}")' \
      "$s" "$m" >>"$machine" || true
  done
done
kill "$nereus_pid" 2>/dev/null || true
"$anchors/triton.sh" stop $tport >/dev/null 2>&1 || true
"$anchors/limit.sh" stop $cport >/dev/null 2>&1 || true

cost_csv=$out-cost.csv
rm -f "$cost_csv"
for h in ${HOOKS-connections density light_load quota}; do  # scenarios other scripts own, after the suite's servers are gone
  script=$here/$h.sh
  if [[ ! -x $script ]]; then echo "hook $h: no $script, skipped" >&2; continue; fi
  echo "hook $h: $script $rounds" >&2
  SUITE_CSV=$csv SUITE_COST_CSV=$cost_csv NEREUS_BIN=$bin NEREUS=$bin QUICK=$quick "$script" "$rounds" >&2 \
    || { failed=$((failed + 1)); echo "hook $h failed" >&2; }
  echo "hook: $h" >>"$machine"
done

{ echo "load_after: $(cut -d' ' -f1-3 /proc/loadavg)"; echo "duration_s: $(($(date +%s) - t0))"; } >>"$machine"
((failed == 0)) || echo "note: $failed measurement(s) or hook(s) failed and have no row" >>"$machine"
[[ -s $csv ]] || { echo "no measurement succeeded" >&2; exit 1; }
report=(python3 "$here/report.py" "$csv")
[[ -s $cost_csv ]] && report+=(--cost "$cost_csv")
((readme)) || report+=(--no-readme)
"${report[@]}"
echo "results: $csv, $out.md, $out.svg ($(($(date +%s) - t0)) s)" >&2
