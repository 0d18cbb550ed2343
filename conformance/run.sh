#!/usr/bin/env bash
# Runs Triton's own QA suites (qa/L0_*) against nereus and prints a pass/fail table per suite.
# See docs/conformance.md.
#
#   conformance/run.sh [--qa PATH] [--quick] [-v] [--json FILE] [--update-docs] [SUITE...]
#
#   --qa PATH       Triton's server repository (or its qa/ folder); default ../shared/triton_server
#                   beside this repository, or $NEREUS_TRITON_QA
#   --quick         the quick subset (what scripts/test.sh runs)
#   -v              print every case as it ends, not only failures
#   --json FILE     every case's outcome as JSON
#   --update-docs   write the table and lists into docs/compatibility.md (a full run's job)
#   SUITE...        e.g. L0_logging L0_metrics (default: every suite with a recipe in suites/)
#
# Installs what it needs, once: the Python environment of scripts/setup.sh --test (tritonclient,
# numpy, onnx) plus pytest, requests, ml_dtypes and psutil, which Triton's tests import, and opentelemetry-proto (the collector stand-in); builds
# nereus (cargo build --release) unless NEREUS_BIN names one. Suites run in a network namespace
# of their own when `unshare -rn` works, since Triton's tests use the fixed ports 8000-8005 and
# 10000; otherwise those ports must be free. Exits 1 when a case fails that
# conformance/known_failures.txt does not list, 2 when it cannot run.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
target=${CARGO_TARGET_DIR:-$root/target}
say() { printf 'conformance: %s\n' "$*" >&2; }

qa=${NEREUS_TRITON_QA:-$root/../shared/triton_server}
args=()
while (($#)); do
  case $1 in
    --qa) qa=$2; shift 2 ;;
    --qa=*) qa=${1#--qa=}; shift ;;
    --update-docs) args+=(--update-docs "$root/docs/compatibility.md"); shift ;;
    -h|--help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) args+=("$1"); shift ;;
  esac
done
[[ -d $qa/qa ]] && qa=$qa/qa
if [[ ! -d $qa/common || ! -f $qa/common/util.sh ]]; then
  say "Triton's qa folder not found at $qa: pass --qa PATH to a clone of"
  say "triton-inference-server/server (or set NEREUS_TRITON_QA)"
  exit 2
fi

venv=${NEREUS_TEST_VENV:-$target/pyvenv}
packages=('tritonclient[http,grpc]' numpy onnx pytest requests ml_dtypes psutil opentelemetry-proto sseclient-py)
check='import tritonclient.http, tritonclient.grpc, numpy, onnx, pytest, requests, ml_dtypes, psutil, opentelemetry.proto, sseclient'
if [[ -x $venv/bin/python ]] && "$venv/bin/python" -c "$check" 2>/dev/null; then
  :
else
  say "Python environment: installing into $venv with pip (once): ${packages[*]}"
  [[ -x $venv/bin/python ]] || python3 -m venv "$venv" >&2 ||
    { say "missing Python's venv module: install python3-venv"; exit 2; }
  "$venv/bin/pip" install -q --disable-pip-version-check "${packages[@]}" >&2
  "$venv/bin/python" -c "$check"
fi

# Triton's ONNX model generators, in an environment of their own: the onnx package pinned to a
# release whose models (IR version 10, opset 21) the bundled ONNX Runtime 1.20 reads, as Triton's
# gen_qa_model_repository pins onnx to match its runtime.
genvenv=$target/conformance/genvenv
gencheck='import onnx, numpy, ml_dtypes; assert onnx.__version__ == "1.17.0"'
if ! { [[ -x $genvenv/bin/python ]] && "$genvenv/bin/python" -c "$gencheck" 2>/dev/null; }; then
  say "model generators' environment: installing into $genvenv with pip (once): onnx==1.17.0 numpy ml_dtypes"
  python3 -m venv "$genvenv" >&2
  "$genvenv/bin/pip" install -q --disable-pip-version-check onnx==1.17.0 numpy ml_dtypes >&2
  "$genvenv/bin/python" -c "$gencheck"
fi

if [[ -n ${NEREUS_BIN:-} ]]; then
  nereus=$NEREUS_BIN
else
  scripts/setup.sh
  say "building nereus (cargo build --release)"
  cargo build --release --locked -q
  nereus=$target/release/nereus
fi
# Triton's C++ test backends that plugins not bundled into nereus stand in for (plugins/sequence;
# docs/conformance.md): the plugins crate's build makes every plugin component (at once when the
# build above ran).
if [[ -n ${NEREUS_BIN:-} ]]; then
  cargo build --release --locked -q -p nereus-plugins
fi
export NEREUS_TEST_PLUGINS=$target/wasm-plugins/wasm32-wasip2/plugin
# The suites run a copy, so a build while they run (another cargo command) cannot swap it.
run_bin=$(mktemp -d "${TMPDIR:-/tmp}/nereus-conformance.XXXXXX")
trap 'rm -rf "$run_bin"' EXIT
cp "$nereus" "$run_bin/nereus"
nereus=$run_bin/nereus
NEREUS_ONNXRUNTIME_LIB=${NEREUS_ONNXRUNTIME_LIB:-$(scripts/setup-onnxruntime.sh)}
export NEREUS_ONNXRUNTIME_LIB

run=("$venv/bin/python" -m harness --qa "$qa" --nereus "$nereus" --work "$target/conformance"
  --gen-python "$genvenv/bin/python"
  "${args[@]}")
export PYTHONPATH=$root/conformance PYTHONDONTWRITEBYTECODE=1
if command -v ip >/dev/null && unshare -rn true 2>/dev/null; then
  unshare -rn sh -c 'ip link set lo up && exec "$@"' sh "${run[@]}"
  exit
fi
say "no network namespace (unshare -rn): ports 8000-8005 and 10000 must be free"
"${run[@]}"
