#!/usr/bin/env bash
# Runs every test: unit tests, the integration tests that drive the real `nereus` binary, the fuzz
# targets' bodies over their seeds and mutations of them (tests/fuzz_replay.rs; the coverage-guided
# run is scripts/fuzz.sh), the command-line reference check, and Triton's own Python clients (its client
# examples unchanged, and scripts of ours using tritonclient) against `nereus`, and the quick subset
# of Triton's own QA suites (conformance/run.sh --quick) where Triton's qa folder is. Works on a fresh
# machine with rustup's stable toolchain and Python 3: scripts/setup.sh --test installs the rest
# (the wasm32-wasip2 target, ONNX Runtime's CPU library, cargo-fuzz, a Python environment with
# tritonclient) and says what it does.
set -euo pipefail
cd "$(dirname "$0")/.."
# Each step is announced with the time since the script started, so that a slow CI run says where
# its time went.
phase() { echo "== [${SECONDS} s] $*"; }
root=$PWD
target=${CARGO_TARGET_DIR:-$root/target}

phase "set-up (scripts/setup.sh --test)"
venv=$(scripts/setup.sh --test)
NEREUS_ONNXRUNTIME_LIB=${NEREUS_ONNXRUNTIME_LIB:-$(scripts/setup-onnxruntime.sh)}
export NEREUS_ONNXRUNTIME_LIB NEREUS_REQUIRE_ONNXRUNTIME=1
# tests/object_store.rs's S3-compatible server: named here, a missing one fails those tests.
export NEREUS_MOTO_SERVER=$venv/bin/moto_server

phase "the test build reuses the release build: no dev-dependency changes a shared crate's features (scripts/check-test-features.sh)"
scripts/check-test-features.sh

phase "cargo test (unit + integration)"
cargo test --release --locked

phase "image_classify_preprocess's own tests (its vendored jpeg-decoder and fdeflate: region decode, as upstream, inflate), natively and in the sandbox"
cargo test --release --locked -p image_classify_preprocess
# The same tests built for wasm32-wasip2 with Wasm SIMD, as the plugin is (a target directory of its own, as
# plugins/artifacts has), run by the server's engine settings (host/examples/wasm_command.rs, built above).
plugin_tests=$(RUSTFLAGS="-Ctarget-feature=+simd128" cargo test --locked --profile plugin --target wasm32-wasip2 \
  --target-dir "$target/plugin-tests" -p image_classify_preprocess --no-default-features --test region \
  --test upstream --test inflate --no-run --message-format=json | python3 -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable"): print(m["executable"])')
[[ $(wc -l <<<"$plugin_tests") == 3 ]] || { echo "expected the region, upstream and inflate tests, got: $plugin_tests" >&2; exit 1; }
while read -r plugin_test; do "$target/release/examples/wasm_command" "$plugin_test" </dev/null; done <<<"$plugin_tests"

phase "docs/cli.md is what \`nereus serve --help\` prints"
scripts/cli-reference.sh --check "$target/release/nereus"

phase "deploy/: the Containerfile (hadolint), the Kubernetes and KServe manifests (schemas)"
scripts/check-deploy.sh "$venv"

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

phase "Triton's Python clients (tritonclient[http], tritonclient[grpc]) against nereus"
start_nereus model_repository --allow-client-shm=true
"$venv/bin/python" tests/python/test_tritonclient_http.py "127.0.0.1:$port"
"$venv/bin/python" tests/python/test_tritonclient_grpc.py "127.0.0.1:$grpc_port"
"$venv/bin/python" tests/python/test_image_classifier.py "127.0.0.1:$port" "127.0.0.1:$grpc_port"
"$venv/bin/python" tests/python/test_image_classify_preprocess.py "127.0.0.1:$port" "127.0.0.1:$grpc_port"
"$venv/bin/python" tests/python/test_system_shm.py "127.0.0.1:$port" "127.0.0.1:$grpc_port"
"$venv/bin/python" tests/python/test_cuda_shm.py "127.0.0.1:$port" "127.0.0.1:$grpc_port"
"$venv/bin/python" tests/python/test_metrics.py "127.0.0.1:$port" "127.0.0.1:$grpc_port" "127.0.0.1:$metrics_port"
stop_nereus

phase "the C plugins (plugins/c) against the Rust ones and numpy, and the sandbox around C (tests/python/test_c_plugins.py)"
# simple, simple_c, add_sub_fp32 and moving_average_c of model_repository (set-up built the C ones),
# the Rust and C fault plugins side by side, add_sub_c on FP32 and a misconfigured model.
c_repo=$(mktemp -d)
logs+=("$c_repo")
for m in simple simple_c add_sub_fp32 moving_average_c; do ln -s "$root/model_repository/$m" "$c_repo/"; done
"$venv/bin/python" tests/python/test_c_plugins.py repo "$c_repo" "$target/wasm-plugins/wasm32-wasip2/plugin/test_faults.wasm"
for m in faulty_c faulty_deadline_c; do plugins/c/test_faults/build.sh "$c_repo/$m/test_faults_c.wasm"; done
start_nereus "$c_repo" --test-hooks
"$venv/bin/python" tests/python/test_c_plugins.py check "127.0.0.1:$port" "127.0.0.1:$grpc_port" \
  "127.0.0.1:$metrics_port" "${logs[-1]}"
stop_nereus

phase "backends in Python and JavaScript (plugins/python, plugins/js) through tritonclient"
# model_repository (its simple_py, simple_js, tokenizer_py, json_fields_js), FP32 and FP64 twins
# of add_sub_fp32 for each language, and the fault models of each language, built here by
# scripts/build-plugins.sh (test_faults_py, test_faults_js).
languages=$(mktemp -d)
logs+=("$languages")
for m in model_repository/*/; do ln -s "$root/${m%/}" "$languages/"; done
for lang in rs py js; do
  # add_sub on FP32 (the twins of add_sub_fp32) and on FP64, which every add_sub refuses alike.
  backend=add_sub suffix=
  [[ $lang == rs ]] || backend=add_sub_$lang suffix=_$lang
  for type in fp32 fp64; do
    [[ $lang$type == rsfp32 ]] && continue
    mkdir -p "$languages/add_sub_$type$suffix/1"
    sed -e "s/backend: \"add_sub\"/backend: \"$backend\"/" -e "s/TYPE_FP32/TYPE_${type^^}/" \
      model_repository/add_sub_fp32/config.pbtxt >"$languages/add_sub_$type$suffix/config.pbtxt"
  done
  [[ $lang == rs ]] && continue
  # faulty_<lang> meets its deadline first (a loop), hog_<lang> its memory cap (an allocation that
  # a loaded machine may slow down, but never by a minute).
  for model in faulty:300 hog:60000; do
    mkdir -p "$languages/${model%:*}_$lang/1"
    cat >"$languages/${model%:*}_$lang/config.pbtxt" <<EOF
backend: "test_faults_$lang"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ -1 ] } ]
parameters [
  { key: "sandbox.execution_timeout_ms" value: { string_value: "${model#*:}" } },
  { key: "sandbox.memory_limit_mb" value: { string_value: "96" } }
]
EOF
  done
done
# Twins of the string models whose batcher waits (a minute at most) for a full batch of 8 rows: 8
# concurrent requests of one row each are executed together, in one call.
for m in tokenizer_py json_fields_js; do
  mkdir -p "$languages/${m}_batch" && cp -r "model_repository/$m/1" "$languages/${m}_batch/"
  sed -e "s/^name: .*/name: \"${m}_batch\"/" -e 's/max_queue_delay_microseconds: [0-9]*/max_queue_delay_microseconds: 60000000/' \
    "model_repository/$m/config.pbtxt" >"$languages/${m}_batch/config.pbtxt"
done
# bls_add_sub_py and bls_add_sub_js pointed at a model their sandbox.callable_models does not list:
# every call is refused.
for lang in py js; do
  mkdir -p "$languages/bls_add_sub_${lang}_denied/1"
  { sed "s/^name: .*/name: \"bls_add_sub_${lang}_denied\"/" "model_repository/bls_add_sub_$lang/config.pbtxt"
    echo "parameters { key: \"bls.model\" value: { string_value: \"simple_$lang\" } }"; } \
    >"$languages/bls_add_sub_${lang}_denied/config.pbtxt"
done
scripts/build-plugins.sh "$languages"
start_nereus "$languages"
"$venv/bin/python" tests/python/test_languages.py "127.0.0.1:$port" "127.0.0.1:$grpc_port" "$languages"
# A plugin's exception is logged with the guest's own trace: Python's traceback, JavaScript's stack.
for frame in 'in fail_on_purpose' 'failOnPurpose'; do
  grep -q "$frame" "${logs[-1]}" || { echo "no '$frame' in the server log:"; cat "${logs[-1]}"; exit 1; }
done
stop_nereus

phase "Triton's Python client examples, unchanged (tests/python/triton_client_examples)"
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

phase "Triton's model-control examples, unchanged, against nereus --model-control-mode explicit"
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

phase "Triton's Python clients against Triton's example ONNX models (tests/onnx_models) on ONNX Runtime"
start_nereus tests/onnx_models --onnxruntime-library "$NEREUS_ONNXRUNTIME_LIB"
"$venv/bin/python" tests/python/test_tritonclient_onnx.py "127.0.0.1:$port" "127.0.0.1:$grpc_port"
stop_nereus

phase "an MLP and a CNN built with the onnx package (configs auto-completed) against onnxruntime in Python"
generated=$(mktemp -d)
logs+=("$generated")
"$venv/bin/python" tests/python/test_onnx_vs_ort.py build "$generated"
start_nereus "$generated" --onnxruntime-library "$NEREUS_ONNXRUNTIME_LIB"
"$venv/bin/python" tests/python/test_onnx_vs_ort.py check "$generated" "127.0.0.1:$port" "127.0.0.1:$grpc_port"
stop_nereus

phase "Triton's QA suites, the quick subset (conformance/run.sh --quick; docs/conformance.md)"
# Triton's qa/ folder is read where CI lays it (../shared/triton_server), or where
# NEREUS_TRITON_QA says; without it this step says so and is skipped.
qa=${NEREUS_TRITON_QA:-$root/../shared/triton_server}
if [[ -d $qa/qa/common || -d $qa/common ]]; then
  NEREUS_BIN="$target/release/nereus" NEREUS_TEST_VENV="$venv" conformance/run.sh --qa "$qa" --quick
else
  echo "conformance: skipped: Triton's qa folder not found at $qa (set NEREUS_TRITON_QA to a clone of triton-inference-server/server)"
fi
echo "all tests passed"
