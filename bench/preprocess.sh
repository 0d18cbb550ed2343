#!/usr/bin/env bash
# Image preprocessing at real sizes (issue 28): Nereus's image_classify_preprocess (a sandboxed Rust
# plugin, Wasm SIMD) against Triton's python backend doing the same with Pillow + numpy
# (bench/triton_models/image_classify_preprocess), on 640x480 and 1920x1080 JPEG and PNG photos:
#   bench/preprocess.sh [NEREUS_BIN] [ROUNDS] [CONCURRENCY...]     (defaults: target/release/nereus, 3, 1 4)
# First the server-side compute per image (GET /v2/models/M/stats, compute_infer ns / count, over a
# perf_analyzer run at c=1) of each JPEG decoder the plugin offers and of Triton's model; then ROUNDS
# rounds of perf_analyzer over HTTP, Nereus and Triton alternating (the order swapped each round), and
# the medians. Not a test. PROTO=grpc measures over gRPC instead; COMPUTE=0 skips the compute phase; IMAGES="640x480.jpg …" measures only those; on a loaded machine PERF_STABILITY=60 lets perf_analyzer settle at c=4.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# ../shared/anchors beside the clone (or beside a worktree's parent folder), or ANCHORS.
for anchors in "${ANCHORS:-}" "$here/../../shared/anchors" "$here/../../../shared/anchors"; do
  [[ -n $anchors && -x $anchors/perf.sh ]] && break
done
[[ -x $anchors/perf.sh ]] || { echo "no ../shared/anchors (set ANCHORS)" >&2; exit 1; }
bin=${1:-${CARGO_TARGET_DIR:-$here/../target}/release/nereus}
rounds=${2:-3}; shift $(( $# < 2 ? $# : 2 ))
concs=("${@:-1 4}"); read -r -a concs <<<"${concs[*]}"
proto=${PROTO:-http}
A=${ANCHORS_HOME:-$HOME/.cache/anchors}
tport=${TRITON_PORT:-18400} nport=${NEREUS_PORT:-18500}
for port in "$tport" "$nport"; do  # never measure (or stop) a server this script did not start
  ! curl -s -o /dev/null "localhost:$port/v2/health/live" || { echo "port $port is in use" >&2; exit 1; }
done
[[ -x $A/bin/perf_analyzer ]] || "$anchors/setup.sh"
python3 -c 'import PIL' 2>/dev/null || { echo "Triton's python backend needs Pillow: python3 -m pip install Pillow" >&2; exit 1; }
log=$(mktemp -d)
python3 "$here/preprocess_inputs.py" "$log/img" >&2
# Nereus's repository: the model as model_repository serves it (jpeg-decoder), zune-jpeg instead, and
# jpeg-decoder reducing in the DCT domain (shorter side kept >= 512 or >= 256).
m=image_classify_preprocess
mkdir -p "$log/nereus" "$log/triton"
cp -r "$here/../model_repository/$m" "$log/nereus/"
variant() {  # NAME PARAMETERS...
  local name=$1; mkdir -p "$log/nereus/$name/1"
  { sed "s/^name: .*/name: \"$name\"/" "$here/../model_repository/$m/config.pbtxt"; shift
    for p in "$@"; do echo "parameters { key: \"${p%%=*}\" value: { string_value: \"${p#*=}\" } }"; done
  } >"$log/nereus/$name/config.pbtxt"
}
variant ${m}_zune jpeg_decoder=zune
variant ${m}_dct512 jpeg_dct_scaling_min_side=512
variant ${m}_dct256 jpeg_dct_scaling_min_side=256
cp -r "$here/triton_models/$m" "$log/triton/"
"$bin" serve --model-repository "$log/nereus" --http-address 127.0.0.1 --http-port "$nport" \
  --grpc-address 127.0.0.1 --grpc-port $((nport + 1)) --metrics-port $((nport + 2)) >"$log/nereus.log" 2>&1 &
pid=$!
cleanup() { kill "$pid" 2>/dev/null || true; "$anchors/triton.sh" stop "$tport" >/dev/null 2>&1 || true; }
trap cleanup EXIT
"$anchors/triton.sh" start "$log/triton" "$tport" >&2
for _ in $(seq 1 100); do curl -sf "localhost:$nport/v2/health/ready" >/dev/null && break; sleep 0.1; done
read -r -a images <<<"${IMAGES:-640x480.jpg 1920x1080.jpg 640x480.png 1920x1080.png}"
port_of() { if [[ $1 == triton ]]; then echo "$tport"; else echo "$nport"; fi; }
url_of() { local p; p=$(port_of "$1"); [[ $proto == grpc ]] && p=$((p + 1)); echo "localhost:$p"; }
compute() {  # PORT MODEL -> "count ns"
  curl -s "localhost:$1/v2/models/$2/stats" | python3 -c 'import json,sys; s=json.load(sys.stdin)["model_stats"][0]["inference_stats"]["compute_infer"]; print(s["count"], s["ns"])'
}
echo "== server-side compute per image (compute_infer ns / count, c=1)" | tee "$log/compute.txt" >&2
[[ ${COMPUTE:-1} == 0 ]] || for model in "$m" ${m}_zune ${m}_dct512 ${m}_dct256 triton; do
  for img in "${images[@]}"; do
    [[ $model == *dct* && $img == *.png ]] && continue
    name=$model; port=$(port_of "$model"); [[ $model == triton ]] && name=$m
    read -r c0 n0 < <(compute "$port" "$name")
    PERF_INTERVAL_MS=1500 "$anchors/perf.sh" "localhost:$port" "$name" http 1 --input-data "$log/img/$img.json" >/dev/null
    read -r c1 n1 < <(compute "$port" "$name")
    echo "$model $img compute_ms=$(python3 -c "print(f'{($n1 - $n0) / ($c1 - $c0) / 1e6:.2f}')") requests=$((c1 - c0))" | tee -a "$log/compute.txt" >&2
  done
done
out=$log/rounds.txt
for r in $(seq 1 "$rounds"); do
  for img in "${images[@]}"; do
    for c in "${concs[@]}"; do
      order=(nereus triton); ((r % 2 == 0)) && order=(triton nereus)
      for s in "${order[@]}"; do
        line=$(PERF_INTERVAL_MS=${PERF_INTERVAL_MS:-2000} "$anchors/perf.sh" "$(url_of "$s")" "$m" "$proto" "$c" \
          --input-data "$log/img/$img.json")
        echo "$r $s $img $line" | tee -a "$out" >&2
      done
    done
  done
done
cat "$log/compute.txt"
python3 - "$out" "$proto" <<'PY'
import collections, re, statistics as st, sys
d = collections.defaultdict(lambda: collections.defaultdict(list))
for l in open(sys.argv[1]):
    m = re.match(r'(\d+) (\S+) (\S+) \S+ proto=\S+ c=(\d+) throughput=([\d.]+) p50_us=(\d+)', l)
    if m:
        d[(m[3], int(m[4]))][m[2]].append((int(m[1]), float(m[5]), int(m[6])))
print(f"\n{sys.argv[2].upper()}, medians of rounds: image | c | Nereus inf/s | p50 ms | Triton inf/s | p50 ms | ratio (median of per-round ratios)")
for (img, c), v in sorted(d.items(), key=lambda kv: (kv[0][0].split('.')[1], kv[0][0], kv[0][1])):
    n, t = v["nereus"], v["triton"]
    ratios = [a[1] / b[1] for a in n for b in t if a[0] == b[0]]
    print(f"| {img} | {c} | {st.median(x[1] for x in n):.1f} | {st.median(x[2] for x in n) / 1000:.2f} | "
          f"{st.median(x[1] for x in t):.1f} | {st.median(x[2] for x in t) / 1000:.2f} | {st.median(ratios):.2f}x |")
PY
echo "(raw lines: $out)" >&2
