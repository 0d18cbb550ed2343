#!/usr/bin/env bash
# Builds the backend in the folder this script is called from into a WebAssembly component for the
# `nereus:backend` world. Each plugins/python/<name>/build.sh and plugins/js/<name>/build.sh is a link
# to this file; a copy in any folder does the same. The build contract every non-Rust plugin keeps
# (docs/authoring/python.md, docs/authoring/javascript.md):
#
#   <folder>/build.sh [OUT]    writes the component to OUT (default <folder>/build/<name>.wasm,
#                              <name> being the folder's name), saying what it does on stderr
#
# - the language is the entry module's: app.py (Python, built with componentize-py, the module
#   defining `class Lifecycle`) or app.js (JavaScript, an ES module exporting `lifecycle`, built with
#   `jco componentize`);
# - JavaScript's engine is NEREUS_JS_ENGINE: `quickjs` (the default: jco's QuickJS backend,
#   componentize-qjs, synchronous) or `starlingmonkey` (componentize-js, SpiderMonkey; WASI's http and
#   fetch-event features left out, as the host links no wasi:http; NEREUS_COMPONENTIZE_JS_ARGS adds
#   arguments, e.g. "--aot --weval-bin PATH"). docs/authoring/javascript.md says what each costs;
# - the toolchain is installed once, idempotently, outside the clone, in
#   ${NEREUS_TOOLCHAINS:-~/.cache/nereus/toolchains}: python/, a virtual environment with
#   componentize-py $PY (needs python3 with venv); js/, an npm prefix with @bytecodealliance/jco $JCO,
#   componentize-qjs $QJS (a dependency of jco's, pinned here) and @bytecodealliance/componentize-js
#   $CJS (needs Node 18+ with npm; jco inspects components: `jco wit <file>.wasm`);
# - the WIT folder is $NEREUS_WIT, else the folder's .nereus/wit (`nereus plugin new` writes it),
#   else the nearest wit/backend.wit above the folder;
# - the SDK (nereus_sdk.py, nereus_sdk.js) is $NEREUS_SDK/<python|js>, else the nearest
#   sdk/<python|js> above the folder, else a copy in the folder itself. Python imports it from
#   the import path (the folder and the SDK's); JavaScript imports './nereus_sdk.js', staged with the
#   folder's .js files in a temporary folder.
set -euo pipefail
PY=0.25.1 CJS=0.23.0 JCO=1.35.0 QJS=0.4.5
here=$(cd "$(dirname "$0")" && pwd)
name=$(basename "$here")
out=${1:-$here/build/$name.wasm}
tools=${NEREUS_TOOLCHAINS:-$HOME/.cache/nereus/toolchains}
say() { printf '%s: %s\n' "$name" "$*" >&2; }
find_up() { # the nearest folder above $here holding $1
  local dir=$here
  while [[ $dir != / ]]; do
    [[ -e $dir/$1 ]] && { echo "$dir"; return 0; }
    dir=$(dirname "$dir")
  done
  return 1
}
npm_version() { sed -n 's/^ *"version": *"\([^"]*\)".*/\1/p' "$tools/js/node_modules/$1/package.json" 2>/dev/null | head -1; }

if [[ -e $here/app.py ]]; then
  lang=python sdk_file=nereus_sdk.py
elif [[ -e $here/app.js ]]; then
  lang=js sdk_file=nereus_sdk.js
else
  say "no app.py or app.js in $here"; exit 1
fi

if [[ -n ${NEREUS_WIT:-} ]]; then
  wit=$NEREUS_WIT
elif [[ -f $here/.nereus/wit/backend.wit ]]; then
  wit=$here/.nereus/wit # a folder `nereus plugin new` wrote
else
  wit=$(find_up wit/backend.wit) || { say "no wit/backend.wit above $here: set NEREUS_WIT"; exit 1; }
  wit=$wit/wit
fi
if [[ -n ${NEREUS_SDK:-} ]]; then
  sdk=$NEREUS_SDK/$lang
elif sdk=$(find_up "sdk/$lang/$sdk_file"); then
  sdk=$sdk/sdk/$lang
elif [[ -e $here/$sdk_file ]]; then
  sdk=$here
else
  say "no sdk/$lang/$sdk_file above $here: set NEREUS_SDK"; exit 1
fi
mkdir -p "$(dirname "$out")"
# Absolute: the JavaScript build runs in a staging folder.
out=$(cd "$(dirname "$out")" && pwd)/$(basename "$out")
wit=$(cd "$wit" && pwd)

if [[ $lang == python ]]; then
  if [[ $("$tools/python/bin/componentize-py" --version 2>/dev/null) != "componentize-py $PY" ]]; then
    say "installing componentize-py $PY into $tools/python with pip (once)"
    command -v python3 >/dev/null || { say "missing python3 (3.9 or newer, with venv)"; exit 1; }
    python3 -m venv "$tools/python" >&2
    "$tools/python/bin/pip" install -q --disable-pip-version-check "componentize-py==$PY" >&2
  fi
  say "componentize-py $PY: $here/app.py with WIT $wit -> $out"
  "$tools/python/bin/componentize-py" -d "$wit" -w nereus:backend/backend@1.2.0 componentize \
    -p "$here" -p "$sdk" app -o "$out.tmp" >&2
else
  if [[ $(npm_version @bytecodealliance/componentize-js) != "$CJS" || $(npm_version @bytecodealliance/jco) != "$JCO" ||
        $(npm_version componentize-qjs) != "$QJS" ]]; then
    say "installing jco $JCO, componentize-qjs $QJS and componentize-js $CJS into $tools/js with npm (once)"
    command -v npm >/dev/null || { say "missing npm (Node 18 or newer)"; exit 1; }
    npm install -s --prefix "$tools/js" --no-audit --no-fund "@bytecodealliance/componentize-js@$CJS" \
      "@bytecodealliance/jco@$JCO" "componentize-qjs@$QJS" >&2
  fi
  stage=$(mktemp -d)
  trap 'rm -rf "$stage"' EXIT
  cp "$here"/*.js "$stage/"
  [[ -e $stage/$sdk_file ]] || cp "$sdk/$sdk_file" "$stage/"
  engine=${NEREUS_JS_ENGINE:-quickjs}
  # The SDK converts WIT's 64-bit integers to the engine's form (BigInt or Number) by this.
  printf "// Written by build.sh: the engine this component is built with.\nexport const engine = '%s';\n" \
    "$engine" >"$stage/nereus_engine.js"
  case $engine in
    quickjs)
      say "jco $JCO (QuickJS, componentize-qjs $QJS): $here/app.js with WIT $wit -> $out"
      # From the staging folder: jco resolves the entry file against the folder it runs in.
      (cd "$stage" && "$tools/js/node_modules/.bin/jco" componentize app.js --wit "$wit" --world-name backend \
        --backend quickjs --backend-qjs-disable-async -o "$out.tmp" >&2)
      ;;
    starlingmonkey)
      say "componentize-js $CJS (StarlingMonkey): $here/app.js with WIT $wit -> $out"
      "$tools/js/node_modules/.bin/componentize-js" "$stage/app.js" --wit "$wit" --world-name backend \
        --disable http fetch-event ${NEREUS_COMPONENTIZE_JS_ARGS:-} -o "$out.tmp" >&2
      ;;
    *) say "NEREUS_JS_ENGINE must be quickjs or starlingmonkey, not '$engine'"; exit 1 ;;
  esac
fi
mv "$out.tmp" "$out"
