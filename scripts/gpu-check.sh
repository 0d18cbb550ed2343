#!/usr/bin/env bash
# The tests that need an NVIDIA GPU, prepared on a machine without one and run on a machine with one
# that has no network (the `device` machine): nothing is built there.
#
#   scripts/gpu-check.sh pack [TARBALL]   (here) builds the server, its library's unit tests and the
#       integration tests (release), strips them and packs them with the paths they were built at
#       into TARBALL (default: target/gpu-check.tar.gz, about 25 MB)
#   scripts/gpu-check.sh run [TARBALL]    (on the GPU machine, in a copy of this repository) puts the
#       binaries back at those paths (the tests find the server, the example repository and their
#       scratch folder by them; a symbolic link stands in for the repository's path when it differs),
#       then runs the GPU tests with NEREUS_REQUIRE_GPU=1, so a machine without a usable GPU fails
#       instead of skipping: the library's `gpu` and `shm::cuda` tests, then tests/cuda_shm.rs,
#       tests/shm.rs and the KIND_GPU test of tests/onnx.rs (these two ONNX ones need
#       NEREUS_ONNXRUNTIME_LIB set to an onnxruntime-gpu library, scripts/setup-onnxruntime.sh --gpu,
#       with CUDA 13's libraries on the loader's path)
#
# CI never has a GPU: there these tests skip with a message, and this script is not run.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cmd=${1:-}
tarball=${2:-${CARGO_TARGET_DIR:-$root/target}/gpu-check.tar.gz}

case $cmd in
  pack)
    cd "$root"
    target=${CARGO_TARGET_DIR:-$root/target}
    json=$(cargo test --release --locked -p nereus --lib --test integration --no-run --message-format=json 2>/dev/null)
    cargo build --release --locked -p nereus
    exes=$(python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        print(m["target"]["kind"][0], m["executable"])' <<<"$json")
    stage=$(mktemp -d)
    trap 'rm -rf "$stage"' EXIT
    while read -r kind exe; do
      name=lib-tests; [[ $kind == test ]] && name=integration
      strip -o "$stage/$name" "$exe"
    done <<<"$exes"
    strip -o "$stage/nereus" "$target/release/nereus"
    [[ -x $stage/lib-tests && -x $stage/integration ]] || { echo "the test binaries were not built" >&2; exit 1; }
    # The paths the test binaries were compiled with (env! in tests/common).
    {
      echo "built_root=$root"
      echo "built_bin=$target/release/nereus"
      echo "built_tmp=$target/tmp"
      echo "commit=$(git describe --always --dirty)"
    } >"$stage/paths.env"
    mkdir -p "$(dirname "$tarball")"
    tar -C "$stage" -czf "$tarball" .
    echo "packed $(du -h "$tarball" | cut -f1) into $tarball ($(sed -n 's/^commit=//p' "$stage/paths.env"))"
    ;;
  run)
    cd "$root"
    stage=$(mktemp -d)
    tar -C "$stage" -xzf "$tarball"
    recorded() { sed -n "s/^$1=//p" "$stage/paths.env"; }
    built_root=$(recorded built_root) built_bin=$(recorded built_bin) built_tmp=$(recorded built_tmp)
    commit=$(recorded commit)
    echo "binaries of $commit; GPUs: $(nvidia-smi -L 2>/dev/null | wc -l)"
    if [[ $built_root != "$root" ]]; then
      [[ -e $built_root ]] || { mkdir -p "$(dirname "$built_root")"; ln -s "$root" "$built_root"; }
    fi
    mkdir -p "$(dirname "$built_bin")" "$built_tmp"
    cp "$stage/nereus" "$built_bin"
    export NEREUS_REQUIRE_GPU=1
    status=0
    "$stage/lib-tests" --test-threads 1 gpu:: shm:: || status=1
    # shm's test of a region too large to copy needs the kernel's heuristic overcommit, which CI
    # has and GPU machines may not (it says so rather than pass untested): CI runs it.
    "$stage/integration" --test-threads 1 cuda_shm:: shm:: onnx::gpu_ \
      --skip shm::an_input_too_large_to_copy_out_of_an_unmapped_region || status=1
    exit $status
    ;;
  *)
    sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'
    exit 2
    ;;
esac
