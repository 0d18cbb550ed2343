#!/usr/bin/env bash
# Many connections (issue 29, item 2): 256 clients, each with its own connection and one request in
# flight, sending Triton's `simple` (add_sub, INT32 [1,16]) over HTTP/1.1 keep-alive (binary tensors, as
# perf_analyzer sends them) and over gRPC (an HTTP/2 connection per client), to
#   - Nereus (bench/model_repository's `simple`, the Wasm plugin),
#   - Triton (CPU, python backend: the anchors' `simple`),
#   - the ceiling: bare hyper and bare tonic doing the add/sub (../shared/anchors/limit.sh),
# driven by bench/tensors' conn-load (a closed-loop client like `wrk -c N`, for both protocols; every
# answer checked), the servers in an order rotated point by point and round by round; medians.
#   bench/connections.sh [NEREUS_BIN] [ROUNDS]    (defaults: $CARGO_TARGET_DIR/release/nereus, 3)
#   CONNS=256  PROTOCOLS="http grpc"  SECS=8 (window)  WARM=2 (warm-up)  SERVERS="nereus triton ceiling"
#   FLAME=1    afterwards, a CPU profile (perf record, DWARF stacks, 250 Hz, 5 s) of Nereus and of the
#              ceiling under the same load, per protocol, as flame graphs (inferno, installed once under
#              ~/.cache/nereus/tools): OUT-flame-<server>-<protocol>.svg, and the folded stacks beside them.
#   Run by the suite (bench/suite.sh HOOKS=connections): appends its rows to SUITE_CSV; QUICK=1 is one
#   round of 3 s windows.
# Writes OUT.csv (default bench/results/<date>-connections.csv, the suite's columns), OUT-cpu.csv (each
# measurement with its maximum latency and the CPU time per request of the client and of the server,
# from /proc) and, through bench/report.py, OUT.md (medians) and charts. Not a test.
# About 1 minute a round (3 servers x 2 protocols x 10 s).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
anchors=$(cd "$root/../shared/anchors" && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
A=${ANCHORS_HOME:-$HOME/.cache/anchors}
if [[ ${SUITE_CSV:-} ]]; then  # called as the suite's hook: bench/connections.sh ROUNDS
  bin=${NEREUS_BIN:-$target/release/nereus} rounds=${1:-3}
  [[ ${QUICK:-0} == 1 ]] && : "${SECS:=3}" "${WARM:=1}"
else
  bin=${1:-$target/release/nereus} rounds=${2:-3}
fi
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "ROUNDS must be a positive number, not '$rounds'" >&2; exit 2; }
[[ -x $bin ]] || { echo "no server binary at $bin (build it: cargo build --release -p nereus)" >&2; exit 1; }
conns=${CONNS:-256} secs=${SECS:-8} warm=${WARM:-2}
read -r -a protocols <<<"${PROTOCOLS:-http grpc}"
read -r -a servers <<<"${SERVERS:-nereus triton ceiling}"
tport=18300 nport=18400 cport=18500
log=$(mktemp -d)
# shellcheck source=SCRIPTDIR/servers.sh
source "$here/servers.sh"
# shellcheck source=SCRIPTDIR/csv.sh
source "$here/csv.sh"
ports_free $tport $((tport + 1)) $nport $((nport + 1)) $cport $((cport + 1))
[[ -x $A/bin/tritonserver || -x $A/bin/perf_analyzer ]] || "$anchors/setup.sh"
(cd "$root" && cargo build -q --release --locked -p tensor-bench --bin conn_load)
load=$target/release/conn_load

nereus_pid=$(nereus_start "$bin" $nport)
cleanup() {
  kill "$nereus_pid" 2>/dev/null || true
  "$anchors/triton.sh" stop $tport >/dev/null 2>&1 || true
  "$anchors/limit.sh" stop $cport >/dev/null 2>&1 || true
  rm -rf "$log"
}
trap cleanup EXIT
[[ " ${servers[*]} " == *" triton "* ]] && "$anchors/triton.sh" start "$anchors/triton_models" $tport >&2
ceiling_up $cport
wait_ready $nport $cport
curl -sf "localhost:$nport/v2/health/ready" >/dev/null || { echo "nereus is not ready:" >&2; tail -20 "$log/$nport.log" >&2; exit 1; }
# Each server's processes, for its CPU time: Triton's with its python backend stubs (a process each).
pids() {
  case $1 in
    nereus) echo "$nereus_pid" ;;
    triton) local t; t=$(cat "$A/triton-$tport.pid"); echo "$t$(pgrep -P "$t" | sed 's/^/,/' | tr -d '\n')" ;;
    ceiling) cat "$A/limit_probe-$cport.pid" "$A/grpc_limit_probe-$((cport + 1)).pid" | paste -sd, ;;
  esac
}
port_of() { case $1 in nereus) echo $nport ;; triton) echo $tport ;; ceiling) echo $cport ;; esac; }

date=$(date -u +%Y-%m-%d)
default_csv=$here/results/$date-connections.csv
[[ ${SUITE_CSV:-} ]] && default_csv=${SUITE_CSV%.csv}-connections.csv
csv=${OUT:-$default_csv}
out=${csv%.csv} cpu_csv=${csv%.csv}-cpu.csv
mkdir -p "$(dirname "$csv")"
rm -f "$csv"
echo "server,protocol,connections,round,infer_per_sec,p50_us,p99_us,max_us,client_cpu_us_per_req,server_cpu_us_per_req" >"$cpu_csv"
k=0 failed=0
for r in $(seq 1 "$rounds"); do
  for proto in "${protocols[@]}"; do
    offset=0; [[ $proto == grpc ]] && offset=1
    n=${#servers[@]} s0=$((k % n)); k=$((k + 1))
    for s in "${servers[@]:$s0}" "${servers[@]:0:$s0}"; do
      port=$(($(port_of "$s") + offset))
      if line=$("$load" --url "127.0.0.1:$port" --protocol "$proto" --connections "$conns" --seconds "$secs" \
        --warmup "$warm" --server-pid "$(pids "$s")" 2>"$log/load.err"); then
        echo "round $r $proto $s: $line" >&2
        csv_row "$csv" connections simple "$s" "$proto" "$conns" "$r" "$line"
        if [[ ${SUITE_CSV:-} ]]; then csv_row "$SUITE_CSV" connections simple "$s" "$proto" "$conns" "$r" "$line"; fi
        f=()
        for name in throughput p50_us p99_us max_us client_cpu_us_per_req server_cpu_us_per_req; do
          f+=("$(sed -n "s/.* $name=\([0-9.-]*\).*/\1/p" <<<"$line")")
        done
        (IFS=,; echo "$s,$proto,$conns,$r,${f[*]}") >>"$cpu_csv"
      else
        failed=$((failed + 1))
        echo "round $r $proto $s: conn-load failed: $(tail -3 "$log/load.err")" >&2
      fi
    done
  done
done

if [[ ${FLAME:-0} == 1 ]]; then
  tools=$HOME/.cache/nereus/tools
  [[ -x $tools/bin/inferno-flamegraph ]] || cargo install -q inferno --version 0.12.8 --locked --root "$tools"
  for proto in "${protocols[@]}"; do
    offset=0; [[ $proto == grpc ]] && offset=1
    for s in nereus ceiling; do
      port=$(($(port_of "$s") + offset)) pid=$nereus_pid
      [[ $s == ceiling ]] && pid=$(cut -d, -f$((offset + 1)) <<<"$(pids ceiling)")
      "$load" --url "127.0.0.1:$port" --protocol "$proto" --connections "$conns" --seconds 8 --warmup 1 >/dev/null &
      load_pid=$!
      sleep 2
      perf record -q -F 250 --call-graph dwarf,16384 -p "$pid" -o "$log/perf.data" -- sleep 5 >/dev/null 2>&1
      wait "$load_pid"  # not a bare wait: the ceiling's probes are this shell's children too
      # --no-inline: perf's inline resolution through addr2line takes minutes on a 200 MB binary.
      perf script --no-inline -i "$log/perf.data" 2>/dev/null | "$tools/bin/inferno-collapse-perf" >"$out-flame-$s-$proto.folded"
      "$tools/bin/inferno-flamegraph" --title "$s, $proto, $conns connections (simple)" \
        <"$out-flame-$s-$proto.folded" >"$out-flame-$s-$proto.svg"
      echo "flame graph: $out-flame-$s-$proto.svg" >&2
    done
  done
fi

((failed == 0)) || echo "note: $failed measurement(s) failed and have no row" >&2
[[ $(wc -l <"$csv") -gt 1 ]] || { echo "no measurement succeeded" >&2; exit 1; }
[[ ${SUITE_CSV:-} ]] || python3 "$here/report.py" "$csv" --no-readme
