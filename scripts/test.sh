#!/usr/bin/env bash
# Runs every test: unit tests, the integration tests that drive the real `nereus` binary, each fuzz
# target briefly, and Triton's own Python clients against `nereus` serving model_repository/. Works on
# a fresh machine with rustup's stable toolchain: rust-toolchain.toml brings the wasm32-wasip2 target,
# cargo brings cargo-fuzz, pip brings the clients and ONNX Runtime's library.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
target=${CARGO_TARGET_DIR:-$root/target}

echo "== ONNX Runtime (its CPU library from the PyPI wheel, for the onnxruntime backend's tests)"
NEREUS_ONNXRUNTIME_LIB=${NEREUS_ONNXRUNTIME_LIB:-$(scripts/setup-onnxruntime.sh)}
export NEREUS_ONNXRUNTIME_LIB NEREUS_REQUIRE_ONNXRUNTIME=1

echo "== cargo test (unit + integration)"
cargo test --release --locked

echo "== fuzz targets (libFuzzer via cargo-fuzz, stable Rust): each briefly, from a fixed seed"
scripts/fuzz.sh ci

echo "== Triton's Python clients (tritonclient[http], tritonclient[grpc]) against nereus"
venv=${NEREUS_TEST_VENV:-$target/pyvenv}
if [[ ! -x $venv/bin/python ]] || ! "$venv/bin/python" -c 'import tritonclient.http, tritonclient.grpc, numpy, onnx, onnxruntime' 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check 'tritonclient[http,grpc]' numpy onnx onnxruntime
fi
# Starts nereus on a repository (extra flags after it) and sets $pid, $port and $grpc_port.
start_nereus() {
  local log
  log=$(mktemp)
  logs+=("$log")
  "$target/release/nereus" serve --model-repository "$1" --http-address 127.0.0.1 --http-port 0 \
    --grpc-address 127.0.0.1 --grpc-port 0 --allow-metrics=false "${@:2}" >"$log" 2>&1 &
  pid=$!
  pids+=("$pid")
  port= grpc_port=
  for _ in $(seq 1 600); do
    port=$(sed -n 's/.*Started HTTPService at .*:\([0-9][0-9]*\).*/\1/p' "$log" | head -1)
    grpc_port=$(sed -n 's/.*Started GRPCInferenceService at .*:\([0-9][0-9]*\).*/\1/p' "$log" | head -1)
    [[ -n $port && -n $grpc_port ]] && return 0
    kill -0 "$pid" 2>/dev/null || { cat "$log"; exit 1; }
    sleep 0.1
  done
  echo "nereus did not start"; cat "$log"; exit 1
}
pids=() logs=()
trap 'kill "${pids[@]}" 2>/dev/null || true; rm -rf "${logs[@]}"' EXIT

start_nereus model_repository --allow-client-shm=true
"$venv/bin/python" tests/python/test_tritonclient_http.py "127.0.0.1:$port"
"$venv/bin/python" tests/python/test_tritonclient_grpc.py "127.0.0.1:$grpc_port"
"$venv/bin/python" tests/python/test_image_classifier.py "127.0.0.1:$port" "127.0.0.1:$grpc_port"
"$venv/bin/python" tests/python/test_system_shm.py "127.0.0.1:$port" "127.0.0.1:$grpc_port"
kill -TERM "$pid"
wait "$pid"

echo "== Triton's Python clients against Triton's example ONNX models (tests/onnx_models) on ONNX Runtime"
start_nereus tests/onnx_models --onnxruntime-library "$NEREUS_ONNXRUNTIME_LIB"
"$venv/bin/python" tests/python/test_tritonclient_onnx.py "127.0.0.1:$port" "127.0.0.1:$grpc_port"
kill -TERM "$pid"
wait "$pid"

echo "== an MLP and a CNN built with the onnx package (configs auto-completed) against onnxruntime in Python"
generated=$(mktemp -d)
logs+=("$generated")
"$venv/bin/python" tests/python/test_onnx_vs_ort.py build "$generated"
start_nereus "$generated" --onnxruntime-library "$NEREUS_ONNXRUNTIME_LIB"
"$venv/bin/python" tests/python/test_onnx_vs_ort.py check "$generated" "127.0.0.1:$port" "127.0.0.1:$grpc_port"
kill -TERM "$pid"
wait "$pid"
echo "all tests passed"
