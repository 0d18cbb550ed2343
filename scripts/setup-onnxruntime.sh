#!/usr/bin/env bash
# Installs ONNX Runtime's shared library from its wheel on PyPI into a cache folder and prints the
# library's path. Idempotent. Nereus loads the library at run time; nothing is downloaded at build time.
#   scripts/setup-onnxruntime.sh         CPU: `onnxruntime` into ~/.cache/nereus/onnxruntime (where
#                                        `nereus` looks by default)
#   scripts/setup-onnxruntime.sh --gpu   GPU: `onnxruntime-gpu` (CUDA 13 build, with its CUDA execution
#                                        provider) into ~/.cache/nereus/onnxruntime-gpu; pass the printed
#                                        path to `--onnxruntime-library`. CUDA 13's cudart, cuBLAS, cuRAND,
#                                        cuFFT and cuDNN 9 must be on the loader's path (e.g. from the
#                                        nvidia-* pip packages or a CUDA toolkit), with an NVIDIA driver.
set -euo pipefail
if [[ ${1:-} == --gpu ]]; then
  package=onnxruntime-gpu
  version=${ONNXRUNTIME_GPU_VERSION:-1.31.1}
  dest=${NEREUS_ONNXRUNTIME_GPU_HOME:-$HOME/.cache/nereus/onnxruntime-gpu}
else
  package=onnxruntime
  version=${ONNXRUNTIME_VERSION:-1.20.1}
  dest=${NEREUS_ONNXRUNTIME_HOME:-$HOME/.cache/nereus/onnxruntime}
fi
lib=$dest/libonnxruntime.so
if [[ ! -e $lib ]]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  python3 -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: -d "$tmp" "$package==$version" >&2
  mkdir -p "$dest"
  python3 - "$tmp" "$dest" <<'PY'
import glob, os, sys, zipfile
tmp, dest = sys.argv[1:3]
wheel = glob.glob(os.path.join(tmp, "onnxruntime*.whl"))[0]
# The runtime itself, and (GPU wheel) the CUDA execution provider with the shim it loads through.
wanted = lambda b: b.startswith("libonnxruntime.so") or b in ("libonnxruntime_providers_cuda.so", "libonnxruntime_providers_shared.so")
with zipfile.ZipFile(wheel) as z:
    names = [n for n in z.namelist() if wanted(os.path.basename(n))]
    for n in names:
        with z.open(n) as src, open(os.path.join(dest, os.path.basename(n)), "wb") as out:
            out.write(src.read())
real = sorted(os.path.basename(n) for n in names if os.path.basename(n).startswith("libonnxruntime.so"))[-1]
link = os.path.join(dest, "libonnxruntime.so")
if not os.path.exists(link):
    os.symlink(real, link)
PY
fi
echo "$lib"
