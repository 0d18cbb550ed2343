#!/usr/bin/env bash
# Runs the GPU checks and benchmarks on a lent GPU machine that has no network and takes at most
# 64 MiB of files a call (the `device` tool of this project's workplace), as on 2026-11-29.
#
#   scripts/gpu-device.sh stage   (here, with network) fills .gpu/ (ignored by git):
#       .gpu/A  ONNX Runtime's CUDA provider with sm_90 code only (scripts/ort-gpu-slim.py), xz: ~52 MB
#       .gpu/B  the test binaries (scripts/gpu-check.sh pack), ONNX Runtime's own library (xz), and
#               the wheels of tritonclient and what its HTTP client needs that the machine lacks: ~45 MB
#   then two calls, the second at once (a machine stays warm 30 s):
#       carry .gpu/A:  bash scripts/gpu-device.sh unpack-provider
#       carry .gpu/B:  bash scripts/gpu-device.sh run     (BENCH=0: the checks alone, ~15 s)
#
# `run` installs the rest from .gpu/B, finds CUDA 13's libraries (the machine's PyTorch has them),
# then: scripts/gpu-check.sh run (the Rust GPU tests, failing without a GPU); tritonclient's CUDA
# shared memory test and Triton's two cudashm client examples against `simple`; and, unless BENCH=0,
# bench/cuda_shm.py and bench/onnx_gpu.py. What it writes goes to $OUT (the tool's folder).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
ort_version=1.31.1
ort=/root/ort
phase() { echo "== [${SECONDS} s] $*"; }

case ${1:-} in
  stage)
    set -e
    grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >>.git/info/exclude
    mkdir -p .gpu/A .gpu/B/whl
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    pip_get() {
      python3 -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
        --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64 -d "$@"
    }
    pip_get "$tmp" "onnxruntime-gpu==$ort_version"
    (cd "$tmp" && unzip -q -o -j onnxruntime_gpu-*.whl '*/capi/libonnxruntime.so*' \
      '*/capi/libonnxruntime_providers_cuda.so' '*/capi/libonnxruntime_providers_shared.so')
    python3 scripts/ort-gpu-slim.py 90 "$tmp/libonnxruntime_providers_cuda.so" "$tmp/slim.so"
    xz -T0 -6 -c "$tmp/slim.so" >.gpu/A/libonnxruntime_providers_cuda.so.xz
    xz -T0 -6 -c "$tmp/libonnxruntime.so.$ort_version" >".gpu/B/libonnxruntime.so.$ort_version.xz"
    cp "$tmp/libonnxruntime_providers_shared.so" .gpu/B/
    # tritonclient and its HTTP client's needs the machine's Python 3.12 does not have (numpy,
    # grpcio, protobuf, cuda-bindings and ml_dtypes it has).
    for p in tritonclient python-rapidjson geventhttpclient gevent greenlet zope.event zope.interface brotli; do
      pip_get .gpu/B/whl "$p"
    done
    scripts/gpu-check.sh pack "$root/.gpu/B/gpu-check.tar.gz"
    du -sh .gpu/A .gpu/B
    ;;
  unpack-provider)
    set -e
    mkdir -p "$ort"
    xz -dc .gpu/A/libonnxruntime_providers_cuda.so.xz >"$ort/libonnxruntime_providers_cuda.so"
    nvidia-smi -L
    ;;
  run)
    G=$root/.gpu/B
    OUT=${OUT:-$(mktemp -d)}
    phase "machine"; nvidia-smi -L; python3 --version
    mkdir -p "$ort"
    xz -dc "$G/libonnxruntime.so.$ort_version.xz" >"$ort/libonnxruntime.so.$ort_version"
    cp "$G/libonnxruntime_providers_shared.so" "$ort/"
    ln -sf "libonnxruntime.so.$ort_version" "$ort/libonnxruntime.so"
    provider=0; [[ -s $ort/libonnxruntime_providers_cuda.so ]] && provider=1
    libdirs=$(find /opt /usr/local /usr/lib -xdev \( -name 'libcudnn.so.9' -o -name 'libcublas.so.13' \
      -o -name 'libcublasLt.so.13' -o -name 'libcudart.so.13' -o -name 'libcufft.so.12' -o -name 'libcurand.so.10' \) \
      -printf '%h\n' 2>/dev/null | sort -u | paste -sd:)
    echo "CUDA library folders: $libdirs"
    export LD_LIBRARY_PATH=$libdirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    export NEREUS_ONNXRUNTIME_LIB=$ort/libonnxruntime.so
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$G"/whl/*.whl &&
      export PYTHONPATH=/tmp/site
    status=0

    phase "1. scripts/gpu-check.sh run (CUDA provider unpacked: $provider)"
    timeout 300 scripts/gpu-check.sh run "$G/gpu-check.tar.gz" >"$OUT/tests.log" 2>&1 || status=1
    grep -E "^test |test result|panicked" "$OUT/tests.log"
    bin=$(tar -xzOf "$G/gpu-check.tar.gz" ./paths.env | sed -n 's/^built_bin=//p')

    phase "2. tritonclient's CUDA shared memory: tests/python/test_cuda_shm.py and Triton's cudashm examples"
    repo=$(mktemp -d); mkdir -p "$repo/simple/1"; cp model_repository/simple/config.pbtxt "$repo/simple/"
    "$bin" serve --model-repository "$repo" --allow-client-shm=true --http-port 18000 --grpc-port 18001 \
      --metrics-port 18002 >"$OUT/server.log" 2>&1 &
    server=$!
    for _ in $(seq 1 300); do grep -q 'Nereus is ready' "$OUT/server.log" && break; sleep 0.1; done
    timeout 60 python3 tests/python/test_cuda_shm.py 127.0.0.1:18000 127.0.0.1:18001 || status=1
    for protocol in http:18000 grpc:18001; do
      timeout 60 python3 "tests/python/triton_client_examples/simple_${protocol%:*}_cudashm_client.py" \
        -u "127.0.0.1:${protocol#*:}" >"$OUT/example_${protocol%:*}.log" 2>&1 || status=1
      grep PASS "$OUT/example_${protocol%:*}.log" || { status=1; tail -20 "$OUT/example_${protocol%:*}.log"; }
    done
    kill -TERM "$server"; wait "$server"

    if [[ $provider == 1 && ${BENCH:-1} == 1 ]]; then
      phase "3. bench/cuda_shm.py"
      NEREUS_BENCH_LOG=$OUT/bench_server.log timeout 300 python3 bench/cuda_shm.py "$bin" "$ort/libonnxruntime.so" \
        "${CS_SECONDS:-1}" "${CS_ROUNDS:-3}" >"$OUT/cuda_shm.md" 2>"$OUT/cuda_shm.err" || status=1
      cat "$OUT/cuda_shm.md"
      phase "4. bench/onnx_gpu.py"
      timeout 120 python3 bench/onnx_gpu.py "$bin" "$ort/libonnxruntime.so" "${OG_SECONDS:-1.5}" \
        >"$OUT/onnx_gpu.md" 2>"$OUT/onnx_gpu.err" || status=1
      cat "$OUT/onnx_gpu.md"
    fi
    phase "done (status $status)"
    exit $status
    ;;
  *)
    sed -n '2,/^set -uo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'
    exit 2
    ;;
esac
