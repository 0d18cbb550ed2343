#!/usr/bin/env bash
# Builds the example repository's plugins that are not Rust into model_repository/<model>/<backend>.wasm
# (gitignored), where the host finds them, and says what it does on standard error. Each plugin's
# build.sh installs its toolchain once (into ~/.cache/nereus/toolchains) and skips a build whose
# inputs have not changed, so a second run takes a moment. scripts/setup.sh runs this.
set -euo pipefail
cd "$(dirname "$0")/.."

# C (plugins/c; docs/authoring/c.md). plugin folder : model folder/backend name
for plugin in add_sub:simple_c/add_sub_c moving_average:moving_average_c/moving_average_c; do
  plugins/c/${plugin%%:*}/build.sh "model_repository/${plugin#*:}.wasm"
done
