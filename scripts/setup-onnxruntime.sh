#!/usr/bin/env bash
# Installs ONNX Runtime's CPU shared library from the `onnxruntime` wheel on PyPI into a cache folder
# (default ~/.cache/nereus/onnxruntime, where `nereus` looks by default) and prints the library's path.
# Idempotent. Nereus loads the library at run time; nothing is downloaded at build time.
set -euo pipefail
dest=${NEREUS_ONNXRUNTIME_HOME:-$HOME/.cache/nereus/onnxruntime}
version=${ONNXRUNTIME_VERSION:-1.20.1}
lib=$dest/libonnxruntime.so
if [[ ! -e $lib ]]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  python3 -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: -d "$tmp" "onnxruntime==$version" >&2
  mkdir -p "$dest"
  python3 - "$tmp" "$dest" <<'PY'
import glob, os, sys, zipfile
tmp, dest = sys.argv[1:3]
wheel = glob.glob(os.path.join(tmp, "onnxruntime-*.whl"))[0]
with zipfile.ZipFile(wheel) as z:
    names = [n for n in z.namelist() if os.path.basename(n).startswith("libonnxruntime.so")]
    for n in names:
        with z.open(n) as src, open(os.path.join(dest, os.path.basename(n)), "wb") as out:
            out.write(src.read())
real = sorted(os.path.basename(n) for n in names)[-1]
link = os.path.join(dest, "libonnxruntime.so")
if not os.path.exists(link):
    os.symlink(real, link)
PY
fi
echo "$lib"
