# The C toolchain of Nereus plugins, sourced by each plugin's build.sh (plugins/c/*/build.sh), which
# then calls `nereus_c_build NAME OUTPUT SOURCE...`. It says what it does on standard error.
#
# What it installs, once, idempotently, at pinned versions, into
# ${NEREUS_TOOLCHAINS:-~/.cache/nereus/toolchains}/c (outside the clone):
#   - zig $NEREUS_C_ZIG (PyPI's `ziglang` wheel, with pip): `zig cc -target wasm32-wasi` is clang
#     with wasi-libc built in, no root needed;
#   - wit-bindgen-cli $NEREUS_C_WIT_BINDGEN (crates.io, `cargo install --locked`, its C generator
#     only): the C bindings of wit/backend.wit;
#   - wasm-tools $NEREUS_C_WASM_TOOLS (crates.io, same way): makes a component of the core module
#     (`component new`). Its parser family (0.254) is wasmtime 48's, the host's;
#   - wasmtime's WASI preview 1 adapter, wasi_snapshot_preview1.reactor.wasm, from the crate
#     wasi-preview1-component-adapter-provider $NEREUS_C_ADAPTER (crates.io, fetched by cargo into a
#     throwaway project): it turns wasi-libc's preview 1 imports into the WASI 0.2 ones the host links.
#
# The build: wit-bindgen generates backend.h, backend.c and backend_component_type.o (the world's
# type, a custom section) from the WIT folder ($NEREUS_WIT, else the repository's wit/); zig cc
# compiles and links them with the plugin's sources and plugins/c/common into a core module (a
# reactor: no main); wasm-tools makes a component of it with the adapter, and validates it. The `name` section stays (the server's trap log names C functions);
# DWARF is dropped. A build whose inputs (sources, WIT, this file, versions) have not changed since
# the last one is skipped: only the copy to OUTPUT happens.
set -euo pipefail

NEREUS_C_ZIG=0.15.2
NEREUS_C_WIT_BINDGEN=0.61.1
NEREUS_C_WASM_TOOLS=1.254.2
NEREUS_C_ADAPTER=48.0.8

nereus_c_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
nereus_c_cache=${NEREUS_TOOLCHAINS:-$HOME/.cache/nereus/toolchains}/c
nereus_c_zig=$nereus_c_cache/zig-$NEREUS_C_ZIG/ziglang/zig
nereus_c_bin=$nereus_c_cache/bin
nereus_c_adapter=$nereus_c_cache/adapter-$NEREUS_C_ADAPTER/wasi_snapshot_preview1.reactor.wasm

nereus_c_say() { printf 'c-plugin: %s\n' "$*" >&2; }

# Installs whatever of the above is missing. Several builds may run at once: a lock serialises them.
nereus_c_install() {
  mkdir -p "$nereus_c_cache"
  exec 9>"$nereus_c_cache/.lock"
  flock 9
  if [[ ! -x $nereus_c_zig ]]; then
    nereus_c_say "installing zig $NEREUS_C_ZIG (PyPI's ziglang wheel) into $nereus_c_cache (once)"
    local tmp=$nereus_c_cache/zig-$NEREUS_C_ZIG.tmp
    rm -rf "$tmp"
    python3 -m pip install -q --disable-pip-version-check --root-user-action=ignore --no-deps --target "$tmp" "ziglang==$NEREUS_C_ZIG" >&2
    mv "$tmp" "$nereus_c_cache/zig-$NEREUS_C_ZIG"
  fi
  local tool crate version
  for tool in wit-bindgen:wit-bindgen-cli:$NEREUS_C_WIT_BINDGEN wasm-tools:wasm-tools:$NEREUS_C_WASM_TOOLS; do
    IFS=: read -r tool crate version <<<"$tool"
    if [[ $("$nereus_c_bin/$tool" --version 2>/dev/null) != *" $version"* ]]; then
      local features=(--no-default-features --features c)
      [[ $tool == wasm-tools ]] && features=(--no-default-features --features component,validate,print,strip,objdump)
      nereus_c_say "installing $crate $version with cargo into $nereus_c_cache (once, a few minutes)"
      CARGO_TARGET_DIR=$nereus_c_cache/cargo-build cargo install -q --locked --force --root "$nereus_c_cache" \
        "$crate" --version "$version" "${features[@]}" >&2
    fi
  done
  rm -rf "$nereus_c_cache/cargo-build"
  if [[ ! -f $nereus_c_adapter ]]; then
    nereus_c_say "fetching wasi-preview1-component-adapter-provider $NEREUS_C_ADAPTER with cargo (once)"
    local fetch=$nereus_c_cache/adapter-$NEREUS_C_ADAPTER.tmp
    rm -rf "$fetch" && mkdir -p "$fetch/src" && : >"$fetch/src/lib.rs"
    printf '[package]\nname = "fetch-adapter"\nversion = "0.0.0"\nedition = "2021"\n[dependencies]\nwasi-preview1-component-adapter-provider = "=%s"\n[workspace]\n' \
      "$NEREUS_C_ADAPTER" >"$fetch/Cargo.toml"
    (cd "$fetch" && cargo vendor -q vendor >/dev/null)
    mkdir -p "$(dirname "$nereus_c_adapter")"
    cp "$fetch/vendor/wasi-preview1-component-adapter-provider/artefacts/wasi_snapshot_preview1.reactor.wasm" \
      "$nereus_c_adapter.tmp"
    mv "$nereus_c_adapter.tmp" "$nereus_c_adapter"
    rm -rf "$fetch"
  fi
  flock -u 9
}

# nereus_c_build NAME OUTPUT SOURCE...: builds the plugin whose folder holds the calling build.sh
# into OUTPUT (default <folder>/build/NAME.wasm). SOURCEs are relative to the plugin's folder.
nereus_c_build() {
  local name=$1 out=$2
  shift 2
  local here
  here=$(cd "$(dirname "${BASH_SOURCE[1]}")" && pwd)
  [[ -n $out ]] || out=$here/build/$name.wasm
  local wit=${NEREUS_WIT:-$nereus_c_dir/../../wit}
  [[ -f $wit/backend.wit ]] || { nereus_c_say "no WIT folder at $wit (set NEREUS_WIT)"; return 1; }
  wit=$(cd "$wit" && pwd)
  nereus_c_install
  local build=$here/build
  mkdir -p "$build" "$(dirname "$out")"
  # The inputs' hash: every file of the plugin and of common/, the WIT folder, this file, the flags.
  local flags=(-target wasm32-wasi -mexec-model=reactor -O2 -std=c11 -Wall -Wextra -Werror -g0 -Wl,-z,stack-size=1048576)
  local inputs
  inputs=$( {
    echo "$NEREUS_C_ZIG $NEREUS_C_WIT_BINDGEN $NEREUS_C_WASM_TOOLS $NEREUS_C_ADAPTER ${flags[*]} $*"
    find "$here" "$nereus_c_dir/common" "$wit" -path "$build" -prune -o -type f -print | LC_ALL=C sort |
      xargs sha256sum
    sha256sum "$nereus_c_dir/toolchain.sh"
  } | sha256sum | cut -d' ' -f1)
  local component=$build/$name.wasm stamp=$build/$name.inputs
  if [[ -f $component && $(cat "$stamp" 2>/dev/null) == "$inputs" ]]; then
    nereus_c_say "$name: up to date ($component)"
  else
    nereus_c_say "$name: generating C bindings from $wit (wit-bindgen $NEREUS_C_WIT_BINDGEN)"
    rm -rf "$build/gen" && mkdir -p "$build/gen" "$build/linked"
    "$nereus_c_bin/wit-bindgen" c --world backend --out-dir "$build/gen" "$wit" >/dev/null
    local sources=()
    for s in "$@"; do sources+=("$here/$s"); done
    nereus_c_say "$name: compiling with zig cc ${flags[*]}"
    ZIG_GLOBAL_CACHE_DIR=$nereus_c_cache/zig-cache ZIG_LOCAL_CACHE_DIR=$build/zig-cache \
      "$nereus_c_zig" cc "${flags[@]}" -I "$build/gen" -I "$nereus_c_dir/common" \
      "${sources[@]}" "$nereus_c_dir"/common/*.c "$build/gen/backend.c" "$build/gen/backend_component_type.o" \
      -o "$build/linked/$name.wasm"
    # DWARF out (wasi-libc brings its own), the name section and the world's type in (strip's default).
    "$nereus_c_bin/wasm-tools" strip "$build/linked/$name.wasm" -o "$build/$name.core.wasm"
    nereus_c_say "$name: making a component (wasm-tools component new --adapt wasi_snapshot_preview1)"
    "$nereus_c_bin/wasm-tools" component new "$build/$name.core.wasm" \
      --adapt "wasi_snapshot_preview1=$nereus_c_adapter" -o "$component.tmp"
    "$nereus_c_bin/wasm-tools" validate "$component.tmp"
    mv "$component.tmp" "$component"
    echo "$inputs" >"$stamp"
  fi
  if [[ $(realpath -m "$out") != "$component" ]] && ! cmp -s "$component" "$out"; then
    cp "$component" "$out.tmp" && mv "$out.tmp" "$out"
  fi
  nereus_c_say "$name: $out ($(wc -c <"$out") bytes)"
}
