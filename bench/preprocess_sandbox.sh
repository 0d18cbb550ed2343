#!/usr/bin/env bash
# What the sandbox costs image preprocessing (issue 28: "the sandboxed code within 1.3× of its own native
# build"): plugins/image_classify_preprocess/examples/preprocess_time.rs, the plugin's decode and
# resize + crop + normalise, built natively (x86-64, release) and for the sandbox (wasm32-wasip2, the
# plugin profile, Wasm SIMD, as the server builds the plugin) from the same source, each run pinned to
# one CPU on the 640x480 and 1920x1080 JPEG and PNG of preprocess_inputs.py, rounds alternating
# (medians of the rounds' means, and of their fastest images, which a busy neighbour disturbs less):
#   bench/preprocess_sandbox.sh [ROUNDS] [N]      (defaults 3 rounds of N=40 images per file and build)
# The Wasm build runs under host/examples/wasm_command.rs (the server's engine settings: Cranelift at
# `speed`, SIMD, epoch interruption). Medians per file and step, and Wasm ÷ native. Not a test.
# The native build runs the scalar resize (no x86 SIMD path is written); jpeg-decoder has SIMD on both
# (SSSE3 natively, simd128 in Wasm), png's unfiltering is vectorised by the compiler on both.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
rounds=${1:-3} n=${2:-40}
# shellcheck source=bench/preprocess_builds.sh
source "$here/preprocess_builds.sh"
pin=(); command -v taskset >/dev/null && pin=(taskset -c "$(($(nproc) - 1))")
images=(640x480.jpg 1920x1080.jpg 640x480.png 1920x1080.png)
for r in $(seq 1 "$rounds"); do
  for img in "${images[@]}"; do
    order=(native wasm); ((r % 2 == 0)) && order=(wasm native)
    for build in "${order[@]}"; do
      if [[ $build == native ]]; then line=$("${pin[@]}" "$native" "$work/img/$img" "$n")
      else line=$("${pin[@]}" "$runner" "$wasm" "$work/img/$img" "$n"); fi
      echo "$r $build $line" | tee -a "$work/rounds.txt" >&2
    done
  done
done
echo "CPU: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), $(nproc) cores; $rounds rounds of $n images, medians"
python3 - "$work/rounds.txt" <<'PY'
import collections, re, statistics as st, sys
d = collections.defaultdict(lambda: collections.defaultdict(list))
for l in open(sys.argv[1]):
    m = re.match(r'\d+ (\S+) (\S+) decode_ms=([\d.]+) resize_ms=([\d.]+) total_ms=([\d.]+).* fastest_ms=([\d.]+)', l)
    if m:
        d[m[2]][m[1]].append(tuple(map(float, m.group(3, 4, 5, 6))))
# The fastest image of a round too: on a shared machine a round's mean carries whatever else ran then.
print("| image | native decode ms | Wasm decode ms | native resize ms | Wasm resize ms | native total ms | Wasm total ms | Wasm ÷ native (total) | fastest image native / Wasm ms | Wasm ÷ native (fastest) |")
print("|---|---|---|---|---|---|---|---|---|---|")
for img, v in d.items():
    n = [st.median(x[i] for x in v["native"]) for i in range(4)]
    w = [st.median(x[i] for x in v["wasm"]) for i in range(4)]
    print(f"| {img} | {n[0]:.2f} | {w[0]:.2f} | {n[1]:.2f} | {w[1]:.2f} | {n[2]:.2f} | {w[2]:.2f} | {w[2] / n[2]:.2f}× "
          f"| {n[3]:.2f} / {w[3]:.2f} | {w[3] / n[3]:.2f}× |")
PY
