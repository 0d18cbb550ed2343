#!/usr/bin/env bash
# Large tensors (issue 28, item 4): one FP32 input of 1, 4, 16 and 64 MiB per request through an identity and
# a reduce (sum of the last axis), over HTTP (binary extension), gRPC (raw contents) and system shared memory
# (inputs and outputs in regions the client registered; the control over HTTP), served by
#   - Nereus: the Wasm models (identity_fp32, reduce_sum_fp32: the bundled identity and reduce_sum plugins)
#     and their ONNX Runtime twins (*_onnx), bench/model_repository;
#   - Triton (CPU, python backend): the anchors' identity_fp32 and bench/triton_models/reduce_sum_fp32;
#   - the ceiling: bench/tensors' tensor-ceiling, bare hyper and bare tonic doing the same with nothing
#     in the way;
# all driven by bench/tensors' tensor-load (one shared request buffer, answers checked as they stream in).
#   bench/tensors.sh [NEREUS_BIN] [ROUNDS]      (defaults: $CARGO_TARGET_DIR/release/nereus, 3)
#   SIZES="1 4 16 64" (MiB)  CONCS="1 4"  PATHS="http grpc shm" (also grpc-stream: ModelStreamInfer)  KINDS="identity reduce"
#   SECS=2 (window) WARM=0.5 (warm-up) per measurement;
#   PERF_CHECK=1 also measures the ceiling with perf_analyzer once per point (is the client the limit?).
#   Run by the suite (bench/suite.sh HOOKS=tensors): also appends its rows to SUITE_CSV in the suite's
#   columns (the ONNX rows as scenario tensor_<kind>_<MiB>MiB_onnx, with Triton's and the ceiling's rows
#   repeated there), NEREUS_BIN picks the server, QUICK=1 measures 1 and 64 MiB at c=4, identity only.
# Each round visits every point, the servers in an order rotated point by point; the CSV gets one row per
# measurement (bench/results/<date>-tensors.csv, the suite's columns plus each side's CPU per request), the
# summary (medians, ratios) beside it as .md (OUT=path.csv to write elsewhere). Not a test. About 10 minutes a round.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
anchors=$(cd "$root/../shared/anchors" && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
if [[ ${SUITE_CSV:-} ]]; then  # called as the suite's hook: bench/tensors.sh ROUNDS
  bin=${NEREUS_BIN:-$target/release/nereus} rounds=${1:-3}
  [[ ${QUICK:-0} == 1 ]] && : "${SIZES:=1 64}" "${CONCS:=4}" "${KINDS:=identity}"
else
  bin=${1:-$target/release/nereus} rounds=${2:-3}
fi
read -r -a sizes <<<"${SIZES:-1 4 16 64}"
read -r -a concs <<<"${CONCS:-1 4}"
read -r -a paths <<<"${PATHS:-http grpc shm}"
read -r -a kinds <<<"${KINDS:-identity reduce}"
secs=${SECS:-2} warm=${WARM:-0.5}
A=${ANCHORS_HOME:-$HOME/.cache/anchors}
tport=${TRITON_PORT:-18600} nport=${NEREUS_PORT:-18700} cport=${CEILING_PORT:-18800}
for port in "$tport" "$nport" "$cport"; do  # never measure (or stop) a server this script did not start
  ! curl -s -o /dev/null "localhost:$port/v2/health/live" || { echo "port $port is in use" >&2; exit 1; }
done
[[ -x $A/bin/perf_analyzer ]] || "$anchors/setup.sh"
(cd "$root" && cargo build -q --release --locked -p tensor-bench)
load=$target/release/tensor_load
# shellcheck disable=SC1091  # bench/csv.sh: SUITE_COLUMNS
source "$here/csv.sh"
log=$(mktemp -d)
mkdir -p "$log/triton"
cp -r "$anchors/triton_models/identity_fp32" "$here/triton_models/reduce_sum_fp32" "$log/triton/"

# Both servers accept a 64 MiB tensor with its JSON header (tritonserver's default --http-max-input-size
# is 64 MiB, the body included).
"$bin" serve --model-repository "$here/model_repository" --http-address 127.0.0.1 --http-port "$nport" \
  --grpc-address 127.0.0.1 --grpc-port $((nport + 1)) --metrics-port $((nport + 2)) --allow-client-shm=true \
  --http-max-input-size $((256 << 20)) >"$log/nereus.log" 2>&1 &
npid=$!
"$target/release/tensor_ceiling" "$cport" >"$log/ceiling.log" 2>&1 &
cpid=$!
cleanup() { kill "$npid" "$cpid" 2>/dev/null || true; "$anchors/triton.sh" stop "$tport" >/dev/null 2>&1 || true; }
trap cleanup EXIT
"$anchors/triton.sh" start "$log/triton" "$tport" >&2
for port in "$nport" "$cport"; do
  for _ in $(seq 1 100); do curl -sf "localhost:$port/v2/health/ready" >/dev/null && break; sleep 0.1; done
done
tpid=$(cat "$A/triton-$tport.pid")
# Triton's CPU is its own and its python backend stubs' (a process per instance).
tpids() { echo "$tpid$(pgrep -P "$tpid" | sed 's/^/,/' | tr -d '\n')"; }

date=$(date -u +%Y-%m-%d)
# As the suite's hook, beside the suite's CSV (a day's own tensors run is not overwritten).
default_csv=$here/results/$date-tensors.csv
[[ ${SUITE_CSV:-} ]] && default_csv=${SUITE_CSV%.csv}-tensors.csv
csv=${OUT:-$default_csv}
mkdir -p "$(dirname "$csv")"
echo "scenario,model,server,protocol,concurrency,round,infer_per_sec,p50_us,p99_us,mb_per_sec,client_cpu_ms_per_req,server_cpu_ms_per_req,client" >"$csv"
servers=(nereus nereus_onnx triton ceiling)
k=0
for r in $(seq 1 "$rounds"); do
  for kind in "${kinds[@]}"; do
    for path in "${paths[@]}"; do
      for mib in "${sizes[@]}"; do
        for c in "${concs[@]}"; do
          k=$((k + 1))
          for i in 0 1 2 3; do
            s=${servers[$(((i + k) % 4))]}
            model=${kind/identity/identity_fp32}; model=${model/reduce/reduce_sum_fp32}
            case $s in
              nereus) port=$nport pids=$npid ;;
              nereus_onnx) port=$nport pids=$npid model=${model}_onnx ;;
              triton) port=$tport pids=$(tpids) ;;
              ceiling) port=$cport pids=$cpid ;;
            esac
            proto=http shm=()
            [[ $path == grpc ]] && { proto=grpc; port=$((port + 1)); }
            # The same messages on a ModelStreamInfer stream per connection (the ceiling serves no streams).
            if [[ $path == grpc-stream ]]; then [[ $s == ceiling ]] && continue; proto=grpc-stream port=$((port + 1)); fi
            [[ $path == shm ]] && shm=(--shm)
            line=$("$load" --url "127.0.0.1:$port" --protocol "$proto" --model "$model" --bytes $((mib << 20)) \
              --concurrency "$c" --seconds "$secs" --warmup "$warm" --server-pid "$pids" "${shm[@]}" 2>&1) || {
              echo "round $r $s $kind $path $mib MiB c=$c failed: $line" >&2; continue; }
            echo "round $r $s $kind $path ${mib}MiB c=$c: $line" >&2
            v() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<" $line"; }
            server=nereus; [[ $s == triton || $s == ceiling ]] && server=$s
            row="$model,$server,$path,$c,$r,$(v throughput),$(v p50_us),$(v p99_us),$(v mb_per_sec)"
            echo "tensor_${kind}_${mib}MiB,$row,$(v client_cpu_ms_per_req),$(v server_cpu_ms_per_req),tensor-load" >>"$csv"
            if [[ ${SUITE_CSV:-} ]]; then
              [[ -s $SUITE_CSV ]] || echo "$SUITE_COLUMNS" >"$SUITE_CSV"
              [[ $s != nereus_onnx ]] && echo "tensor_${kind}_${mib}MiB,$row" >>"$SUITE_CSV"
              [[ $s != nereus ]] && echo "tensor_${kind}_${mib}MiB_onnx,$row" >>"$SUITE_CSV"
            fi
          done
          if [[ ${PERF_CHECK:-0} == 1 && ($path == http || $path == grpc) && $r == 1 ]]; then
            port=$cport; [[ $path == grpc ]] && port=$((cport + 1))
            model=${kind/identity/identity_fp32}; model=${model/reduce/reduce_sum_fp32}
            line=$(PERF_INTERVAL_MS=$((${secs%.*} * 1000)) "$anchors/perf.sh" "localhost:$port" "$model" "$path" "$c" \
              --shape "INPUT0:$((mib << 18))" 2>&1) || { echo "perf_analyzer $kind $path $mib c=$c failed: $line" >&2; continue; }
            echo "perf_analyzer ceiling $kind $path ${mib}MiB c=$c: $line" >&2
            t=$(sed -n 's/.*throughput=\([0-9.]*\).*/\1/p' <<<"$line")
            p50=$(sed -n 's/.*p50_us=\([0-9]*\).*/\1/p' <<<"$line"); p99=$(sed -n 's/.*p99_us=\([0-9]*\).*/\1/p' <<<"$line")
            echo "tensor_${kind}_${mib}MiB,$model,ceiling,$path,$c,$r,$t,$p50,$p99,$(awk -v t="$t" -v m="$mib" 'BEGIN{printf "%.1f", t*m*1048576/1e6}'),,,perf_analyzer" >>"$csv"
          fi
        done
      done
    done
  done
done
machine="$(nproc) cores, $(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -1), Linux $(uname -r), $(date -u +%Y-%m-%dT%H:%MZ), nereus $(git -C "$root" rev-parse --short HEAD)"
python3 "$here/tensors_report.py" "$csv" "$machine" "$rounds" | tee "${csv%.csv}.md"
