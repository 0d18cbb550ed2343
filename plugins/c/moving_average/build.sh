#!/usr/bin/env bash
# Builds this C plugin into a Nereus backend component: build.sh [OUTPUT] (default build/moving_average.wasm
# beside this file). The toolchain (zig, wit-bindgen, wasm-tools, the WASI adapter) is installed
# once into ${NEREUS_TOOLCHAINS:-~/.cache/nereus/toolchains}/c; the WIT folder is $NEREUS_WIT or the
# repository's wit/. See ../toolchain.sh and docs/authoring/c.md.
source "$(dirname "$0")/../toolchain.sh"
nereus_c_build moving_average "${1:-}" moving_average.c
