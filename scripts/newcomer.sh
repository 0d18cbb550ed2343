#!/usr/bin/env bash
# Does what a new user does, on this machine: takes away the Rust target a fresh machine lacks
# (wasm32-wasip2; rustup does not add it on its own where RUSTUP_AUTO_INSTALL=0), clones the
# repository afresh, runs the README's first command as written until the server is ready (and
# times it), stops it, then runs the README's second command in the clone. .ci/run runs this.
#
# The commands are read from README.md (the first ```sh block after "## Two commands"), so the
# README cannot drift from what is tested. The clone is of the committed HEAD: uncommitted changes
# are not in it. A cargo target folder named by CARGO_TARGET_DIR is used as it is (.ci/run points it
# at a cache when one exists); without one the clone builds everything from scratch.
#
#   scripts/newcomer.sh                       all of the above
#   NEREUS_NEWCOMER_KEEP_TARGET=1 scripts/newcomer.sh   leave the installed Rust targets alone
set -euo pipefail
cd "$(dirname "$0")/.."
# Each step is announced with the time since the script started, so that a slow CI run says where
# its time went.
phase() { echo "== [${SECONDS} s] $*"; }
src=$PWD

commands=$(awk '/^## Two commands/ {s = 1} s && /^```sh/ {b = 1; next} b && /^```/ {exit} b' README.md |
  grep -v '^[[:space:]]*#' | grep -v '^[[:space:]]*$' || true)
serve=$(sed -n 1p <<<"$commands")
test_command=$(sed -n 2p <<<"$commands")
if [[ -z $serve || -z $test_command || $(wc -l <<<"$commands") -ne 2 ]]; then
  echo "README.md: expected two commands in the first sh block after '## Two commands', found:" >&2
  echo "$commands" >&2
  exit 1
fi
phase "README command 1: $serve"
phase "README command 2: $test_command"

if [[ -n $(git status --porcelain --untracked-files=no) ]]; then
  echo "note: uncommitted changes are not in the fresh clone; it tests HEAD ($(git rev-parse --short HEAD))"
fi

if [[ ${NEREUS_NEWCOMER_KEEP_TARGET:-} == 1 ]]; then
  phase "keeping the installed Rust targets (NEREUS_NEWCOMER_KEEP_TARGET=1)"
elif command -v rustup >/dev/null 2>&1; then
  phase "rustup target remove wasm32-wasip2 (a fresh machine lacks it)"
  if rustup target list --installed | grep -qx wasm32-wasip2; then
    rustup target remove wasm32-wasip2
  fi
else
  phase "no rustup here: the Rust targets stay as they are"
fi

work=$(mktemp -d)
group=
cleanup() {
  [[ -n $group ]] && kill -TERM -- "-$group" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
clone=$work/nereus
phase "git clone $src $clone"
git clone -q "$src" "$clone"
cd "$clone"

# The README's address: HTTP on 8000. Something else there would answer for us.
if curl -s -o /dev/null --max-time 2 localhost:8000/v2/health/live; then
  echo "something already listens on port 8000: stop it first" >&2
  exit 1
fi

phase "README command 1, until the server is ready (GET /v2/health/ready answers 200)"
started=$(date +%s)
setsid bash -c "$serve" >"$work/serve.log" 2>&1 &
group=$!
until [[ $(curl -s -o /dev/null -w '%{http_code}' --max-time 2 localhost:8000/v2/health/ready || true) == 200 ]]; do
  if ! kill -0 "$group" 2>/dev/null; then
    echo "README command 1 stopped before the server was ready:" >&2
    tail -50 "$work/serve.log" >&2
    exit 1
  fi
  # The models have loaded (the server says how many are READY) and yet it is not ready: one of
  # the example models failed, which waiting will not mend.
  if grep -q 'Nereus is ready: ' "$work/serve.log"; then
    sleep 2 # readiness follows the ready line at once; a moment for a slow machine
    if [[ $(curl -s -o /dev/null -w '%{http_code}' --max-time 2 localhost:8000/v2/health/ready || true) != 200 ]]; then
      echo "README command 1: the models loaded but the server is not ready; the example repository's models:" >&2
      curl -s -X POST --max-time 5 localhost:8000/v2/repository/index >&2 || true
      echo >&2
      tail -50 "$work/serve.log" >&2
      kill -- -"$group" 2>/dev/null || true
      exit 1
    fi
  fi
  if (($(date +%s) - started > 2700)); then
    echo "README command 1: not ready after 45 minutes" >&2
    tail -50 "$work/serve.log" >&2
    exit 1
  fi
  sleep 1
done
ready=$(($(date +%s) - started))
grep -m1 'Nereus is ready' "$work/serve.log" || { echo "no ready line in the log" >&2; exit 1; }
# The README's first request, as a new user would send it.
answer=$(curl -s localhost:8000/v2/models/simple/infer -d '{"inputs":[
  {"name":"INPUT0","shape":[1,16],"datatype":"INT32","data":[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15]},
  {"name":"INPUT1","shape":[1,16],"datatype":"INT32","data":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]}]}')
grep -q '"data":\[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16\]' <<<"$answer" || { echo "wrong answer: $answer" >&2; exit 1; }
phase "ready ${ready} s after README command 1 started (build included); the first request answered"
kill -TERM -- "-$group"
while kill -0 "$group" 2>/dev/null; do sleep 0.2; done
group=

phase "README command 2"
# The clone sits in a temporary folder, so the conformance step would not find Triton's qa folder
# beside it: point it at the one beside the checkout it came from, where there is one.
if [[ -z ${NEREUS_TRITON_QA:-} && -d $src/../shared/triton_server/qa ]]; then
  export NEREUS_TRITON_QA=$src/../shared/triton_server
fi
bash -c "$test_command"
phase "newcomer check passed: ready in ${ready} s, then every test"
