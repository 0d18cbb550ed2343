#!/usr/bin/env bash
# Throughput and latency of Nereus next to the real Triton (python backend) and the bare-hyper ceiling,
# measured by Triton's perf_analyzer on this machine, alternating servers round by round.
#   bench/run.sh [ROUNDS] [CONCURRENCIES...]      (defaults: 2 rounds, concurrency 1 and 4)
#   bench/run.sh suite [--quick] [ROUNDS] and bench/run.sh --quick run the whole suite instead (bench/suite.sh:
#   every scenario, a CSV of rounds, charts and the README's table).
#   NEREUS_BIN=path/to/nereus serves a prebuilt binary (unset: cargo build --release of this tree).
#   PROTOS="http grpc" (default both) picks the protocols.
#   MODEL=simple_dyna measures the dynamically batched twin of `simple` on Triton and Nereus (the
#   ceiling has no batcher and always serves `simple`). PERF_ARGS adds perf_analyzer arguments for
#   Triton and Nereus, e.g. MODEL=simple_sequence PROTOS=grpc PERF_ARGS="--sequence-length 20".
# Prints a markdown table and appends it to bench/results/<UTC date>.md (earlier runs of the day stay). Not a test.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
case ${1:-} in
  suite | --suite) shift; exec "$here/suite.sh" "$@" ;;
  --quick) exec "$here/suite.sh" "$@" ;;
esac
anchors=$(cd "$root/../shared/anchors" && pwd)
rounds=${1:-2}
model=${MODEL:-simple}
shift || true
concs=("${@:-1 4}")
[[ $# -eq 0 ]] && concs=(1 4)
A=${ANCHORS_HOME:-$HOME/.cache/anchors}
[[ -x $A/bin/perf_analyzer ]] || "$anchors/setup.sh"

if [[ -n ${NEREUS_BIN:-} ]]; then
  bin=$NEREUS_BIN
else
  (cd "$root" && cargo build --release --locked -p nereus)
  bin=${CARGO_TARGET_DIR:-$root/target}/release/nereus
fi

triton_port=18000 nereus_port=18100 limit_port=18200
log=$(mktemp -d)
"$bin" serve --model-repository "$here/model_repository" --http-address 127.0.0.1 \
  --http-port $nereus_port --grpc-address 127.0.0.1 --grpc-port $((nereus_port + 1)) --allow-metrics=false \
  >"$log/nereus.log" 2>&1 &
nereus_pid=$!
cleanup() { kill $nereus_pid 2>/dev/null || true; "$anchors/triton.sh" stop $triton_port || true; "$anchors/limit.sh" stop $limit_port || true; }
trap cleanup EXIT
"$anchors/triton.sh" start "$anchors/triton_models" $triton_port
# shellcheck source=SCRIPTDIR/servers.sh
source "$here/servers.sh"
ceiling_up $limit_port
for _ in $(seq 1 100); do curl -sf localhost:$nereus_port/v2/health/ready >/dev/null && break; sleep 0.1; done

read -r -a protos <<<"${PROTOS:-http grpc}"
declare -A tput p50 p99
for proto in "${protos[@]}"; do
  offset=0; [[ $proto == grpc ]] && offset=1
  for c in "${concs[@]}"; do
    for r in $(seq 1 "$rounds"); do
      # The order rotates each round (triton nereus limit, then nereus limit triton, ...), so no
      # server always runs right after the same other one: whatever a run leaves behind on this
      # machine (Triton's python backend is the heaviest) must not weigh on one server only.
      order=(triton nereus limit)
      k=$(((r - 1) % 3))
      for s in "${order[@]:$k}" "${order[@]:0:$k}"; do
        case $s in triton) port=$triton_port ;; nereus) port=$nereus_port ;; limit) port=$limit_port ;; esac
        m=$model extra=(); read -r -a extra <<<"${PERF_ARGS:-}"; [[ $s == limit ]] && { m=simple; extra=(); }
        line=$("$anchors/perf.sh" localhost:$((port + offset)) "$m" "$proto" "$c" "${extra[@]}")
        echo "round $r $s: $line" >&2
        t=$(sed -n 's/.*throughput=\([0-9.]*\).*/\1/p' <<<"$line")
        a=$(sed -n 's/.*p50_us=\([0-9]*\).*/\1/p' <<<"$line")
        b=$(sed -n 's/.*p99_us=\([0-9]*\).*/\1/p' <<<"$line")
        k=$s,$proto,$c
        tput[$k]="${tput[$k]:-} $t"; p50[$k]="${p50[$k]:-} $a"; p99[$k]="${p99[$k]:-} $b"
      done
    done
  done
done

median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
mkdir -p "$here/results"
out="$here/results/$(date -u +%Y-%m-%d).md"
[[ $model != simple ]] && out="$here/results/$(date -u +%Y-%m-%d)-$model.md"
{
  echo "perf_analyzer ${PERF_ARGS:-}, model \`$model\`, median of $rounds alternating rounds (order rotated each round), $(nproc) cores, $(date -u +%Y-%m-%d)."
  [[ $model != simple ]] && { echo; echo "The ceiling serves \`simple\` (it has no batcher)."; }
  echo
  echo "| protocol | server | concurrency | infer/s | p50 µs | p99 µs | vs Triton | vs ceiling |"
  echo "|---|---|---|---|---|---|---|---|"
  for proto in "${protos[@]}"; do
    for c in "${concs[@]}"; do
      tt=$(median <<<"${tput[triton,$proto,$c]}"); tl=$(median <<<"${tput[limit,$proto,$c]}")
      for s in triton nereus limit; do
        k=$s,$proto,$c
        t=$(median <<<"${tput[$k]}"); a=$(median <<<"${p50[$k]}"); b=$(median <<<"${p99[$k]}")
        name=Nereus; [[ $s == triton ]] && name="Triton (python backend)"
        [[ $s == limit ]] && { name="ceiling (bare hyper)"; [[ $proto == grpc ]] && name="ceiling (bare tonic)"; }
        awk -v p="$proto" -v n="$name" -v c="$c" -v t="$t" -v a="$a" -v b="$b" -v tt="$tt" -v tl="$tl" \
          'BEGIN { printf "| %s | %s | %s | %.0f | %s | %s | %.2f× | %.0f%% |\n", p, n, c, t, a, b, t / tt, 100 * t / tl }'
      done
    done
  done
  if [[ $model != simple ]]; then
    echo
    for s in triton nereus; do
      port=$triton_port; [[ $s == nereus ]] && port=$nereus_port
      curl -s "localhost:$port/v2/models/$model/stats" | python3 -c '
import json, sys
m = json.load(sys.stdin)["model_stats"][0]
i, e = int(m["inference_count"]), int(m["execution_count"])
print(f"- {sys.argv[1]}: {i} inferences in {e} executions over the whole run, mean batch size {i / max(e, 1):.2f}")' "$s"
    done
  fi
} | { [[ -s $out ]] && echo >>"$out"; tee -a "$out"; }
