#!/usr/bin/env bash
# Business logic scripting, measured (issue 27): Nereus's `bls_add_sub` (a plugin calling `simple` twice
# from its sandbox) against Nereus's `ensemble_add_sub` (the same two steps as an ensemble) and against
# Triton's python-backend BLS (bench/triton_models/bls_add_sub: pb_utils.InferenceRequest(...).exec()
# calling the anchors' python `simple` twice), all over HTTP:
#   bench/bls.sh [NEREUS_BIN] [ROUNDS] [CONCURRENCY...]     (defaults: target/release/nereus, 5, 1 4)
# Each round runs perf_analyzer on the three in an order rotated round by round; the summary gives each
# one's median throughput and p50, and the per-round ratios' medians. Not a test.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
anchors=$(cd "$here/../../shared/anchors" && pwd)
bin=${1:-${CARGO_TARGET_DIR:-$here/../target}/release/nereus}
rounds=${2:-5}; shift $(( $# < 2 ? $# : 2 ))
concs=("${@:-1 4}"); read -r -a concs <<<"${concs[*]}"
A=${ANCHORS_HOME:-$HOME/.cache/anchors}
tport=${TRITON_PORT:-18400} nport=${NEREUS_PORT:-18500}
for port in "$tport" "$nport"; do  # never measure (or stop) a server this script did not start
  ! curl -s -o /dev/null "localhost:$port/v2/health/live" || { echo "port $port is in use" >&2; exit 1; }
done
[[ -x $A/bin/perf_analyzer ]] || "$anchors/setup.sh"
log=$(mktemp -d)
# Triton's repository: the anchors' python `simple` and ensemble, plus the BLS model.
cp -r "$anchors/triton_models/simple" "$anchors/triton_models/ensemble_add_sub" "$here/triton_models/bls_add_sub" "$log/"
mkdir -p "$log/triton" && mv "$log/simple" "$log/ensemble_add_sub" "$log/bls_add_sub" "$log/triton/"
"$bin" serve --model-repository "$here/model_repository" --http-address 127.0.0.1 --http-port "$nport" \
  --grpc-address 127.0.0.1 --grpc-port $((nport + 1)) --metrics-port $((nport + 2)) >"$log/nereus.log" 2>&1 &
pid=$!
cleanup() { kill "$pid" 2>/dev/null || true; "$anchors/triton.sh" stop "$tport" >/dev/null 2>&1 || true; }
trap cleanup EXIT
"$anchors/triton.sh" start "$log/triton" "$tport" >&2
for _ in $(seq 1 100); do curl -sf "localhost:$nport/v2/health/ready" >/dev/null && break; sleep 0.1; done
body='{"inputs":[{"name":"A","shape":[1,16],"datatype":"INT32","data":[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15]},{"name":"B","shape":[1,16],"datatype":"INT32","data":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]}]}'
for target in "$nport/bls_add_sub" "$nport/ensemble_add_sub" "$tport/bls_add_sub"; do  # same answers, or nothing to measure
  out=$(curl -s -X POST "localhost:${target%%/*}/v2/models/${target#*/}/infer" -d "$body")
  grep -q '"data":\[0,2,4,6,8,10,12,14,16,18,20,22,24,26,28,30\]' <<<"$out" || { echo "$target answers wrongly: $out" >&2; exit 1; }
done
names=(bls ensemble triton_bls)
out=$log/rounds.txt
for r in $(seq 1 "$rounds"); do
  for c in "${concs[@]}"; do
    for k in 0 1 2; do
      s=${names[$(((r + k) % 3))]}
      case $s in bls) url=localhost:$nport m=bls_add_sub ;; ensemble) url=localhost:$nport m=ensemble_add_sub ;;
        triton_bls) url=localhost:$tport m=bls_add_sub ;; esac
      line=$(PERF_INTERVAL_MS=${PERF_INTERVAL_MS:-2000} "$anchors/perf.sh" "$url" "$m" http "$c")
      echo "$r $s $line" | tee -a "$out" >&2
    done
  done
done
python3 - "$out" <<'PY'
import re, statistics as st, sys, collections
d = collections.defaultdict(dict)
for l in open(sys.argv[1]):
    m = re.match(r'(\d+) (\S+) \S+ proto=\S+ c=(\d+) throughput=([\d.]+) p50_us=(\d+)', l)
    if m:
        d[(int(m[3]), int(m[1]))][m[2]] = (float(m[4]), int(m[5]))
for c in sorted({c for c, _ in d}):
    rs = [k for k in d if k[0] == c and len(d[k]) == 3]
    print(f"HTTP c={c}, {len(rs)} rounds (medians):")
    for s in ('bls', 'ensemble', 'triton_bls'):
        print(f"  {s:10} {st.median(d[k][s][0] for k in rs):8.0f} infer/s  p50 {st.median(d[k][s][1] for k in rs):6.0f} us")
    print(f"  bls/triton_bls throughput {st.median(d[k]['bls'][0] / d[k]['triton_bls'][0] for k in rs):.2f}x;"
          f" bls/ensemble p50 latency {st.median(d[k]['bls'][1] / d[k]['ensemble'][1] for k in rs):.2f}x;"
          f" bls/ensemble throughput {st.median(d[k]['bls'][0] / d[k]['ensemble'][0] for k in rs):.2f}x")
PY
