//! `nereus plugin new NAME --lang LANG`: a model folder whose backend is a new plugin, that builds
//! (`nereus plugin build NAME`, or its own `build.sh`) and serves on the first try. Every language
//! starts from the repository's own `add_sub` example in that language — the files are the ones CI
//! builds and tests, compiled into this binary — so a new plugin is Triton's `simple` until its
//! author changes it. The folder carries the server's WIT (`.nereus/wit/`), so it builds outside
//! this repository.
use std::path::Path;

use anyhow::Context;

use crate::cli::PluginLanguage;

/// The backend interface this binary implements, written into every new plugin.
pub const WIT: &str = include_str!("../../../wit/backend.wit");

/// One file of a new plugin: its path in the folder, its text, and whether it is a script.
struct File {
    path: String,
    text: String,
    executable: bool,
}

impl File {
    fn new(path: &str, text: impl Into<String>) -> File {
        File { path: path.to_string(), text: text.into(), executable: false }
    }

    fn script(path: &str, text: impl Into<String>) -> File {
        File { path: path.to_string(), text: text.into(), executable: true }
    }
}

pub fn new(name: &str, lang: PluginLanguage, parent: &Path) -> anyhow::Result<()> {
    check_name(name)?;
    let dir = parent.join(name);
    if dir.exists() {
        anyhow::bail!("{} exists already: choose another name or folder", dir.display());
    }
    let mut files = vec![
        File::new("config.pbtxt", config(name, lang)),
        File::new("1/.keep", "The model's version 1: the version folder Triton's repository layout asks for.\n"),
        File::new(".nereus/wit/backend.wit", WIT),
        File::new(".gitignore", "/.nereus/target/\n/build/\n*.wasm\n"),
    ];
    files.extend(sources(name, lang));
    for file in &files {
        let path = dir.join(&file.path);
        if let Some(folder) = path.parent() {
            std::fs::create_dir_all(folder).with_context(|| format!("cannot create {}", folder.display()))?;
        }
        std::fs::write(&path, &file.text).with_context(|| format!("cannot write {}", path.display()))?;
        if file.executable {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
        }
    }
    println!("wrote {} ({} plugin; backend '{name}', Triton's `simple` to start from)", dir.display(), label(lang));
    println!("next:  nereus plugin build {}", dir.display());
    println!(
        "then:  nereus serve --model-repository {}",
        parent.canonicalize().unwrap_or_else(|_| parent.to_path_buf()).display()
    );
    Ok(())
}

/// A model name that is also a usable backend, crate and file name.
fn check_name(name: &str) -> anyhow::Result<()> {
    let ok = name.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !ok {
        anyhow::bail!("'{name}' cannot name a plugin: use letters, digits and '_', starting with a letter");
    }
    Ok(())
}

fn label(lang: PluginLanguage) -> &'static str {
    match lang {
        PluginLanguage::Rust => "Rust",
        PluginLanguage::Python => "Python",
        PluginLanguage::Js => "JavaScript",
        PluginLanguage::C => "C",
    }
}

/// `simple`'s configuration, served by the new backend.
fn config(name: &str, lang: PluginLanguage) -> String {
    format!(
        r#"# A new {lang} plugin, written by `nereus plugin new`: Triton's `simple` to start from
# (OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1). The backend is {name}.wasm in this folder,
# which `nereus plugin build` (or ./build.sh) writes.
name: "{name}"
backend: "{name}"
max_batch_size: 8
input [
  {{ name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] }},
  {{ name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] }}
]
output [
  {{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] }},
  {{ name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ] }}
]
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
"#,
        lang = label(lang)
    )
}

fn sources(name: &str, lang: PluginLanguage) -> Vec<File> {
    match lang {
        PluginLanguage::Rust => rust(name),
        PluginLanguage::C => c(name),
        PluginLanguage::Python => interpreted(
            "app.py",
            include_str!("../../../plugins/python/add_sub_py/app.py"),
            "nereus_sdk.py",
            include_str!("../../../sdk/python/nereus_sdk.py"),
        ),
        PluginLanguage::Js => interpreted(
            "app.js",
            include_str!("../../../plugins/js/add_sub_js/app.js"),
            "nereus_sdk.js",
            include_str!("../../../sdk/js/nereus_sdk.js"),
        ),
    }
}

/// A cargo package depending on a copy of the SDK (it is not on crates.io), itself reading the
/// WIT from `.nereus/wit/`.
fn rust(name: &str) -> Vec<File> {
    vec![
        File::new(
            "Cargo.toml",
            format!(
                r#"[package]
name = "{name}"
version = "0.1.0"
edition = "2024"
publish = false

[lib]
crate-type = ["cdylib"]

[dependencies]
nereus-sdk = {{ path = ".nereus/sdk" }}

# Small, fast components; the name section stays, so that a trap's backtrace in the server's log
# names your functions.
[profile.release]
opt-level = 3
lto = true
codegen-units = 1
panic = "abort"
strip = "debuginfo"

# A package of its own, even inside another cargo workspace.
[workspace]
"#
            ),
        ),
        File::new("src/lib.rs", include_str!("../../../plugins/add_sub/src/lib.rs")),
        File::new(
            ".nereus/sdk/Cargo.toml",
            r#"[package]
name = "nereus-sdk"
description = "Write Nereus backends (sandboxed WebAssembly components) in Rust"
version = "0.1.0"
edition = "2024"
license = "Apache-2.0"
publish = false

[features]
default = ["small-block-cache"]
# The plugin's global allocator keeps small freed blocks for reuse (`small_blocks`).
small-block-cache = []

[dependencies]
wit-bindgen = { version = "0.61", default-features = false, features = ["macros", "realloc"] }
bytemuck = { version = "1.24", features = ["extern_crate_alloc"] }
serde_json = "1"
"#,
        ),
        File::new(".nereus/sdk/src/lib.rs", include_str!("../../../sdk/src/lib.rs")),
        File::new(".nereus/sdk/src/models.rs", include_str!("../../../sdk/src/models.rs")),
        File::new(".nereus/sdk/src/request.rs", include_str!("../../../sdk/src/request.rs")),
        File::new(".nereus/sdk/src/tensor.rs", include_str!("../../../sdk/src/tensor.rs")),
        File::new(".nereus/sdk/src/small_blocks.rs", include_str!("../../../sdk/src/small_blocks.rs")),
        File::script(
            "build.sh",
            format!(
                r#"#!/usr/bin/env bash
# Builds this plugin into a WebAssembly component: ./build.sh [OUT.wasm] (default: {name}.wasm in
# this folder, where the server finds the model's backend). Adds the Rust target wasm32-wasip2 with
# rustup if it is missing.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${{1:-$here/{name}.wasm}}
if [[ ! -d $(rustc --print sysroot)/lib/rustlib/wasm32-wasip2 ]]; then
  echo "build: adding the Rust target wasm32-wasip2 with rustup (once)" >&2
  rustup target add wasm32-wasip2 >&2
fi
target=${{NEREUS_PLUGIN_TARGET_DIR:-$here/.nereus/target}}
echo "build: cargo build --release --target wasm32-wasip2 (in $target)" >&2
(cd "$here" && cargo build --quiet --release --target wasm32-wasip2 --target-dir "$target" >&2)
cp "$target/wasm32-wasip2/release/{name}.wasm" "$out"
echo "build: wrote $out" >&2
"#
            ),
        ),
    ]
}

/// Python and JavaScript: the example `add_sub` as the entry module, the language's SDK beside it,
/// and `plugins/build.sh` — the one build script of both — as `build.sh` (it finds the SDK in the
/// folder and the WIT in `.nereus/wit`).
fn interpreted(entry: &str, source: &str, sdk: &str, sdk_source: &str) -> Vec<File> {
    vec![
        File::new(entry, source),
        File::new(sdk, sdk_source),
        File::script("build.sh", include_str!("../../../plugins/build.sh")),
    ]
}

/// The C toolchain script and helpers of `plugins/c/`, copied under `.nereus/c/`, and the example
/// `add_sub.c` as `<name>.c`.
fn c(name: &str) -> Vec<File> {
    vec![
        File::new(&format!("{name}.c"), include_str!("../../../plugins/c/add_sub/add_sub.c")),
        File::new(".nereus/c/toolchain.sh", include_str!("../../../plugins/c/toolchain.sh")),
        File::new(".nereus/c/common/nereus.h", include_str!("../../../plugins/c/common/nereus.h")),
        File::new(".nereus/c/common/nereus.c", include_str!("../../../plugins/c/common/nereus.c")),
        File::script(
            "build.sh",
            format!(
                r#"#!/usr/bin/env bash
# Builds this C plugin into a WebAssembly component: ./build.sh [OUT.wasm] (default: {name}.wasm in
# this folder, where the server finds the model's backend). The toolchain (zig, wit-bindgen,
# wasm-tools, the WASI adapter) is installed once into ${{NEREUS_TOOLCHAINS:-~/.cache/nereus/toolchains}}/c
# by .nereus/c/toolchain.sh; add more sources after {name}.c.
here=$(cd "$(dirname "$0")" && pwd)
export NEREUS_WIT=${{NEREUS_WIT:-$here/.nereus/wit}}
source "$here/.nereus/c/toolchain.sh"
nereus_c_build {name} "${{1:-$here/{name}.wasm}}" {name}.c
"#
            ),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        assert!(check_name("my_plugin2").is_ok());
        for bad in ["", "2x", "a-b", "a b", "../x", "é"] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
    }

    /// A Rust plugin carries its own copy of the SDK: a source file added to `sdk/src` and not here
    /// breaks every new plugin's build (`tests/plugin.rs` builds one, with cargo, much later).
    #[test]
    fn a_new_rust_plugin_carries_every_source_file_of_the_sdk() {
        let files = rust("my_plugin");
        let sdk = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../sdk/src");
        for entry in std::fs::read_dir(&sdk).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_str().unwrap();
            let carried = files.iter().find(|f| f.path == format!(".nereus/sdk/src/{name}"));
            let carried = carried.unwrap_or_else(|| panic!("sdk/src/{name} is not in a new Rust plugin"));
            assert_eq!(carried.text, std::fs::read_to_string(&path).unwrap(), "{name}");
        }
        let manifest = files.iter().find(|f| f.path == ".nereus/sdk/Cargo.toml").unwrap();
        let features = std::fs::read_to_string(sdk.join("../Cargo.toml")).unwrap();
        let features = features.split("[features]").nth(1).and_then(|f| f.split("\n\n").next()).unwrap();
        assert!(manifest.text.contains(features.trim()), "the SDK's features: {features}");
    }
}
