# Sourced by preprocess_sandbox.sh and preprocess_instructions.sh (with $here set to bench/): builds
# plugins/image_classify_preprocess/examples/preprocess_time.rs natively and for the sandbox, and the
# runner of the sandbox build (host/examples/wasm_command.rs), from the repository's root; sets $native,
# $wasm and $runner, makes a temporary folder $work (removed on exit) and the test images in $work/img.
root=$(cd "$here/.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
cd "$root"
cargo build -q --release -p nereus --example wasm_command
cargo build -q --release -p image_classify_preprocess --example preprocess_time
# A target directory of its own, as plugins/artifacts does: RUSTFLAGS would rebuild the host's crates.
RUSTFLAGS="-Ctarget-feature=+simd128" cargo build -q --profile plugin --target wasm32-wasip2 \
  --target-dir "$target/preprocess-sandbox" -p image_classify_preprocess --no-default-features --example preprocess_time
native=$target/release/examples/preprocess_time
wasm=$target/preprocess-sandbox/wasm32-wasip2/plugin/examples/preprocess_time.wasm
runner=$target/release/examples/wasm_command
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 "$here/preprocess_inputs.py" "$work/img" >/dev/null 2>&1 || {
  echo "preprocess_inputs.py needs numpy and Pillow (python3 -m pip install numpy Pillow)" >&2; exit 1; }
