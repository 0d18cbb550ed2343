#!/usr/bin/env bash
# What the sandbox costs image preprocessing, counted in instructions rather than timed: the same
# builds as bench/preprocess_sandbox.sh (plugins/image_classify_preprocess/examples/preprocess_time.rs
# natively and for the sandbox), run under valgrind (cachegrind, no cache simulation), which counts
# every instruction executed whatever else the machine runs. Instructions per image = (count with
# N=6 minus count with N=2) / 4, which leaves out the start, the warm-up image and, in the sandbox,
# the compilation (loaded precompiled: host/examples/wasm_command.rs, NEREUS_WASM_PRECOMPILE).
#   bench/preprocess_instructions.sh [IMAGE…]     (default: the two PNGs and two JPEGs of preprocess_inputs.py)
# Not a timing: an instruction of Cranelift's is not one of LLVM's (stack spills are cheap, SIMD
# is not scalar), so use it to compare builds of the same side on a machine too noisy to time them,
# and bench/preprocess_sandbox.sh for the ratio the issue names. Needs valgrind (apt install valgrind),
# numpy and Pillow.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
command -v valgrind >/dev/null || { echo "needs valgrind (apt install valgrind)" >&2; exit 1; }
# shellcheck source=bench/preprocess_builds.sh
source "$here/preprocess_builds.sh"
# Compiled under valgrind, for the CPU features valgrind shows the code.
NEREUS_WASM_PRECOMPILE="$work/p.cwasm" valgrind -q --tool=none "$runner" "$wasm"
count() { valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file=/dev/null "$@" 2>&1 |
  sed -n 's/.*I *refs: *//p' | tr -d ,; }
images=("$@")
((${#images[@]})) || images=(640x480.png 1920x1080.png 640x480.jpg 1920x1080.jpg)
echo "| image | native M instructions | sandbox M instructions | sandbox ÷ native |"
echo "|---|---|---|---|"
for img in "${images[@]}"; do
  f=$work/img/$img
  n2=$(count "$native" "$f" 2) n6=$(count "$native" "$f" 6)
  w2=$(count "$runner" "$work/p.cwasm" "$f" 2) w6=$(count "$runner" "$work/p.cwasm" "$f" 6)
  python3 -c "n = ($n6 - $n2) / 4e6; w = ($w6 - $w2) / 4e6; print(f'| $img | {n:.1f} | {w:.1f} | {w / n:.2f}× |')"
done
