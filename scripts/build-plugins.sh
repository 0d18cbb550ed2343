#!/usr/bin/env bash
# Builds the backends written in languages other than Rust (plugins/<language>/<name>/, each with a
# build.sh keeping the build contract of docs/authoring/) into the model folders of REPOSITORY that
# serve them, as <model>/<name>.wasm (gitignored): a plugin is built when some model's config.pbtxt
# says `backend: "<name>"`, and only when its sources (its folder, the language's SDK, wit/) changed
# since its last build, which it keeps in <plugin>/build/ with a stamp. Says what it does on stderr.
#
#   scripts/build-plugins.sh [REPOSITORY]    default: model_repository
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
repo=${1:-model_repository}
say() { printf 'build-plugins: %s\n' "$*" >&2; }

# The model folders of $repo whose configuration names backend $1.
models_of() {
  { grep -lE "^[[:space:]]*backend:[[:space:]]*\"$1\"" "$repo"/*/config.pbtxt 2>/dev/null || true; } | xargs -r -n1 dirname
}

# Builds each plugin of plugins/$1 that a model of $repo serves, and places it in those models.
build_plugins() {
  local plugin name models stamp wasm hash
  for plugin in "$root/plugins/$1"/*/; do
    plugin=${plugin%/} name=$(basename "$plugin")
    [[ -x $plugin/build.sh ]] || continue
    models=$(models_of "$name")
    [[ -n $models ]] || continue
    wasm=$plugin/build/$name.wasm stamp=$plugin/build/$name.stamp
    # The sources, and the JavaScript engine chosen (plugins/build.sh's NEREUS_JS_ENGINE).
    hash=$({ find -L "plugins/$1/$name" "sdk/$1" wit -type f -not -path "plugins/$1/$name/build/*" 2>/dev/null |
      LC_ALL=C sort | xargs sha256sum; echo "engine ${NEREUS_JS_ENGINE:-}"; } | sha256sum | cut -d' ' -f1)
    if [[ -f $wasm && $(cat "$stamp" 2>/dev/null) == "$hash" ]]; then
      say "$1/$name: up to date"
    else
      say "$1/$name: building (its sources changed or it was never built)"
      "$plugin/build.sh" "$wasm"
      echo "$hash" >"$stamp"
    fi
    for model in $models; do
      cp "$wasm" "$model/$name.wasm"
      say "$1/$name -> $model/$name.wasm"
    done
  done
}

# One line per language.
build_plugins python
build_plugins js

# C (plugins/c; docs/authoring/c.md): plugin folder:backend. Each build.sh keeps its own stamp of its
# inputs (the plugin, plugins/c/common, wit/, the toolchain's versions) and only copies when unchanged.
for plugin in add_sub:add_sub_c moving_average:moving_average_c; do
  for model in $(models_of "${plugin#*:}"); do
    "plugins/c/${plugin%%:*}/build.sh" "$model/${plugin#*:}.wasm"
  done
done
