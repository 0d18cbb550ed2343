#!/usr/bin/env bash
# Runs every test: unit tests, the integration tests that drive the real `nereus` binary, each fuzz
# target briefly, the command-line reference check, and Triton's own Python clients (its client
# examples unchanged, and scripts of ours using tritonclient) against `nereus`, and the quick subset
# of Triton's own QA suites (conformance/run.sh --quick) where Triton's qa folder is. Works on a fresh
# machine with rustup's stable toolchain and Python 3: scripts/setup.sh --test installs the rest
# (the wasm32-wasip2 target, ONNX Runtime's CPU library, cargo-fuzz, a Python environment with
# tritonclient) and says what it does.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
target=${CARGO_TARGET_DIR:-$root/target}

echo "== set-up (scripts/setup.sh --test)"
venv=$(scripts/setup.sh --test)
NEREUS_ONNXRUNTIME_LIB=${NEREUS_ONNXRUNTIME_LIB:-$(scripts/setup-onnxruntime.sh)}
export NEREUS_ONNXRUNTIME_LIB NEREUS_REQUIRE_ONNXRUNTIME=1
# tests/object_store.rs's S3-compatible server: named here, a missing one fails those tests.
export NEREUS_MOTO_SERVER=$venv/bin/moto_server

echo "== cargo test (unit + integration)"
cargo test --release --locked

echo "== docs/cli.md is what \`nereus serve --help\` prints"
scripts/cli-reference.sh --check "$target/release/nereus"

echo "== deploy/: the Containerfile (hadolint), the Kubernetes and KServe manifests (schemas)"
scripts/check-deploy.sh "$venv"

echo "== fuzz targets (libFuzzer via cargo-fuzz, stable Rust): each briefly, from a fixed seed"
scripts/fuzz.sh ci

# Starts nereus on a repository (extra flags after it) and sets $pid, $port, $grpc_port and
# $metrics_port; its log
# (standard output and error) goes to a file, which must hold no terminal escape byte.
start_nereus() {
  local log
  log=$(mktemp)
  logs+=("$log")
  "$target/release/nereus" serve --model-repository "$1" --http-address 127.0.0.1 --http-port 0 \
    --grpc-address 127.0.0.1 --grpc-port 0 --metrics-port 0 "${@:2}" >"$log" 2>&1 &
  pid=$!
  pids+=("$pid")
  port= grpc_port= metrics_port=
  for _ in $(seq 1 600); do
    if grep -q 'Nereus is ready' "$log"; then
      port=$(sed -n 's/.*Started HTTPService at .*:\([0-9][0-9]*\).*/\1/p' "$log" | head -1)
      grpc_port=$(sed -n 's/.*Started GRPCInferenceService at .*:\([0-9][0-9]*\).*/\1/p' "$log" | head -1)
      metrics_port=$(sed -n 's/.*Started Metrics Service at .*:\([0-9][0-9]*\).*/\1/p' "$log" | head -1)
      if grep -q $'\x1b' "$log"; then echo "the log written to a file has terminal escapes:"; cat -v "$log"; exit 1; fi
      return 0
    fi
    kill -0 "$pid" 2>/dev/null || { cat "$log"; exit 1; }
    sleep 0.1
  done
  echo "nereus did not start"; cat "$log"; exit 1
}
# Stops the last server started and checks its whole log for escapes too.
stop_nereus() {
  kill -TERM "$pid"
  wait "$pid"
  if grep -q $'\x1b' "${logs[-1]}"; then echo "the log written to a file has terminal escapes:"; cat -v "${logs[-1]}"; exit 1; fi
}
pids=() logs=()
trap 'kill "${pids[@]}" 2>/dev/null || true; rm -rf "${logs[@]}"' EXIT

echo "== Triton's Python clients (tritonclient[http], tritonclient[grpc]) against nereus"
start_nereus model_repository --allow-client-shm=true
"$venv/bin/python" tests/python/test_tritonclient_http.py "127.0.0.1:$port"
"$venv/bin/python" tests/python/test_tritonclient_grpc.py "127.0.0.1:$grpc_port"
"$venv/bin/python" tests/python/test_image_classifier.py "127.0.0.1:$port" "127.0.0.1:$grpc_port"
"$venv/bin/python" tests/python/test_system_shm.py "127.0.0.1:$port" "127.0.0.1:$grpc_port"
"$venv/bin/python" tests/python/test_metrics.py "127.0.0.1:$port" "127.0.0.1:$grpc_port" "127.0.0.1:$metrics_port"
stop_nereus

echo "== Triton's Python client examples, unchanged (tests/python/triton_client_examples)"
# model_repository, with Triton's own example ONNX models where the examples need Triton's
# semantics (simple_string, simple_int8, and simple_sequence in place of ours).
examples=$(mktemp -d)
logs+=("$examples")
for m in model_repository/*/ tests/onnx_models/simple_string/ tests/onnx_models/simple_int8/; do
  ln -s "$root/${m%/}" "$examples/"
done
rm "$examples/simple_sequence" && ln -s "$root/tests/onnx_models/simple_sequence" "$examples/"
start_nereus "$examples" --allow-client-shm=true --id triton --onnxruntime-library "$NEREUS_ONNXRUNTIME_LIB"
"$venv/bin/python" tests/python/test_triton_client_examples.py "127.0.0.1:$port" "127.0.0.1:$grpc_port"
stop_nereus

echo "== Triton's model-control examples, unchanged, against nereus --model-control-mode explicit"
# Each counts the models of the repository index: seven for the HTTP example, eight for the gRPC
# one. Their `simple` is Triton's ONNX one, which auto-completes from its model when the examples
# reload it with a configuration of max_batch_size alone.
for run in http:7 grpc:8; do
  proto=${run%:*} count=${run#*:}
  control=$(mktemp -d)
  logs+=("$control")
  models=(tests/onnx_models/simple tests/onnx_models/simple_int8 tests/onnx_models/simple_string
    tests/onnx_models/simple_sequence model_repository/identity_fp32 model_repository/repeat_int32
    model_repository/simple_identity model_repository/string_lower)
  for m in "${models[@]:0:$count}"; do ln -s "$root/$m" "$control/"; done
  start_nereus "$control" --model-control-mode explicit --onnxruntime-library "$NEREUS_ONNXRUNTIME_LIB"
  url=127.0.0.1:$port
  [[ $proto == grpc ]] && url=127.0.0.1:$grpc_port
  out=$("$venv/bin/python" "tests/python/triton_client_examples/simple_${proto}_model_control.py" -u "$url")
  echo "$out"
  grep -q "PASS: model control" <<<"$out" || { echo "simple_${proto}_model_control.py did not pass"; exit 1; }
  stop_nereus
done

echo "== Triton's Python clients against Triton's example ONNX models (tests/onnx_models) on ONNX Runtime"
start_nereus tests/onnx_models --onnxruntime-library "$NEREUS_ONNXRUNTIME_LIB"
"$venv/bin/python" tests/python/test_tritonclient_onnx.py "127.0.0.1:$port" "127.0.0.1:$grpc_port"
stop_nereus

echo "== an MLP and a CNN built with the onnx package (configs auto-completed) against onnxruntime in Python"
generated=$(mktemp -d)
logs+=("$generated")
"$venv/bin/python" tests/python/test_onnx_vs_ort.py build "$generated"
start_nereus "$generated" --onnxruntime-library "$NEREUS_ONNXRUNTIME_LIB"
"$venv/bin/python" tests/python/test_onnx_vs_ort.py check "$generated" "127.0.0.1:$port" "127.0.0.1:$grpc_port"
stop_nereus

echo "== Triton's QA suites, the quick subset (conformance/run.sh --quick; docs/conformance.md)"
# Triton's qa/ folder is read where CI lays it (../shared/triton_server), or where
# NEREUS_TRITON_QA says; without it this step says so and is skipped.
qa=${NEREUS_TRITON_QA:-$root/../shared/triton_server}
if [[ -d $qa/qa/common || -d $qa/common ]]; then
  NEREUS_BIN="$target/release/nereus" NEREUS_TEST_VENV="$venv" conformance/run.sh --qa "$qa" --quick
else
  echo "conformance: skipped: Triton's qa folder not found at $qa (set NEREUS_TRITON_QA to a clone of triton-inference-server/server)"
fi
echo "all tests passed"
