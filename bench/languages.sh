#!/usr/bin/env bash
# Triton's `simple` (add_sub) written in each language Nereus plugins come in, next to Triton's
# python backend serving the same model: throughput and p50 with perf_analyzer at concurrency 1 and 4,
# load time (cold: compiling the component into an empty cache; cached: a new server process on the
# filled cache), and memory per instance (the server's RSS with the model loaded with 5 instances less
# its RSS with it loaded with 1, over 4; the compiled code stays mapped between the two).
#   bench/languages.sh [ROUNDS]     (default 3; rounds alternate the servers' order, medians are reported)
#   PROTO=grpc (default http), PERF_INTERVAL_MS (default 2000), NEREUS or NEREUS_BIN (default the release build)
#   SUITE_CSV=file appends each throughput measurement to the suite's CSV (bench/csv.sh's columns; scenario
#   lang_<language>, Triton's python `simple` repeated under each), as bench/suite.sh's HOOKS="languages" does.
# Models: simple (Rust), simple_py, simple_js (QuickJS), simple_js_sm (the same plugin built with
# StarlingMonkey), and simple_c where model_repository has it; and the floor
# of each interpreter, echo_py and echo_js (bench/floor/: an execute with no SDK answering each request
# with its inputs, what the toolchain's bindings cost before any plugin code runs). Builds the plugins
# first (scripts/build-plugins.sh, and the floor's build.sh). Prints a markdown table. Not a test.
#   Smoke run: PERF_INTERVAL_MS=500 bench/languages.sh 1
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
anchors=$(cd "$root/../shared/anchors" && pwd)
rounds=${1:-3} proto=${PROTO:-http}
export PERF_INTERVAL_MS=${PERF_INTERVAL_MS:-2000}
nereus=${NEREUS:-${NEREUS_BIN:-${CARGO_TARGET_DIR:-$root/target}/release/nereus}}
[[ -x $nereus ]] || { echo "no nereus at $nereus: cargo build --release, or set NEREUS" >&2; exit 1; }
port=18400 triton_port=18500

models=(simple simple_py simple_js)
[[ -d $root/model_repository/simple_c ]] && models+=(simple_c)
floors=(echo_py echo_js)
"$root/scripts/build-plugins.sh" "$root/model_repository" 2>/dev/null

work=$(mktemp -d)
pid=
cleanup() { [[ -n $pid ]] && kill "$pid" 2>/dev/null; "$anchors/triton.sh" stop $triton_port >/dev/null 2>&1 || true; rm -rf "$work"; }
trap cleanup EXIT
# The repository: each model as it is, and a twin with 5 instances (<model>_x5); each floor as a copy
# of simple_py's configuration naming its backend.
mkdir "$work/repo"
for m in "${floors[@]}"; do
  mkdir -p "$work/repo/$m/1"
  sed -e "s/^name: .*/name: \"$m\"/" -e "s/^backend: .*/backend: \"$m\"/" "$root/model_repository/simple_py/config.pbtxt" \
    >"$work/repo/$m/config.pbtxt"
  "$here/floor/$m/build.sh" "$work/repo/$m/$m.wasm" 2>/dev/null
done
models+=("${floors[@]}")
# add_sub_js built with StarlingMonkey too (componentize-js; plugins/build.sh's NEREUS_JS_ENGINE), beside
# the default QuickJS build that simple_js serves.
mkdir -p "$work/repo/simple_js_sm/1"
sed 's/^name: .*/name: "simple_js_sm"/' "$root/model_repository/simple_js/config.pbtxt" >"$work/repo/simple_js_sm/config.pbtxt"
NEREUS_JS_ENGINE=starlingmonkey "$root/plugins/js/add_sub_js/build.sh" "$work/repo/simple_js_sm/add_sub_js.wasm" 2>/dev/null
models+=(simple_js_sm)
for m in "${models[@]}"; do
  [[ -d $work/repo/$m ]] || cp -r "$root/model_repository/$m" "$work/repo/"
  cp -r "$work/repo/$m" "$work/repo/${m}_x5"
  sed -i -e "s/^name: .*/name: \"${m}_x5\"/" -e 's/count: 1/count: 5/' "$work/repo/${m}_x5/config.pbtxt"
done

serve() { # CACHE_DIR: starts nereus with nothing loaded
  "$nereus" serve --model-repository "$work/repo" --model-control-mode explicit --cache-directory "$1" \
    --http-address 127.0.0.1 --http-port $port --grpc-address 127.0.0.1 --grpc-port $((port + 1)) \
    --allow-metrics=false >"$work/nereus.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 300); do curl -sf "localhost:$port/v2/health/live" >/dev/null && return; sleep 0.1; done
  echo "nereus did not start" >&2; cat "$work/nereus.log" >&2; exit 1
}
stop() { kill "$pid"; wait "$pid" 2>/dev/null || true; pid=; }
load() { # MODEL: loads it, prints the seconds it took
  local t0 t1
  t0=$(date +%s.%N)
  curl -sf -X POST "localhost:$port/v2/repository/models/$1/load" >/dev/null || { echo "loading $1 failed" >&2; tail "$work/nereus.log" >&2; exit 1; }
  t1=$(date +%s.%N)
  awk "BEGIN { printf \"%.3f\", $t1 - $t0 }"
}
unload() { curl -sf -X POST "localhost:$port/v2/repository/models/$1/unload" >/dev/null; }
rss_kb() { awk '/^VmRSS/ {print $2}' "/proc/$pid/status"; }

out=$work/rows.txt
"$anchors/triton.sh" start "$anchors/triton_models" $triton_port >/dev/null
for r in $(seq 1 "$rounds"); do
  # Rotate the order round by round.
  order=("${models[@]:$((r % ${#models[@]}))}" "${models[@]:0:$((r % ${#models[@]}))}")
  # Load times and memory: a new, empty cache each round for the cold loads.
  cache=$(mktemp -d -p "$work")
  serve "$cache"
  for m in "${order[@]}"; do
    echo "$r $m cold_s=$(load "$m")" >>"$out"
    unload "$m"
  done
  stop
  serve "$cache"
  for m in "${order[@]}"; do
    echo "$r $m cached_s=$(load "$m")" >>"$out"
    one=$(rss_kb)
    unload "$m"
    load "${m}_x5" >/dev/null
    five=$(rss_kb)
    echo "$r $m instance_mb=$(awk "BEGIN { printf \"%.1f\", ($five - $one) / 4 / 1024 }")" >>"$out"
    unload "${m}_x5"
    load "$m" >/dev/null
  done
  # Throughput and p50, Triton's python backend in the rotation.
  offset=0; [[ $proto == grpc ]] && offset=1
  for c in 1 4; do
    for m in "${order[@]}" triton; do
      if [[ $m == triton ]]; then
        line=$("$anchors/perf.sh" "localhost:$((triton_port + offset))" simple "$proto" "$c")
      else
        line=$("$anchors/perf.sh" "localhost:$((port + offset))" "$m" "$proto" "$c")
      fi
      echo "$r $m c$c $line" >>"$out"
    done
  done
  stop
  echo "round $r of $rounds done" >&2
done

if [[ -n ${SUITE_CSV:-} ]]; then  # the suite's rows: one scenario per language, Triton's row under each
  # shellcheck source=SCRIPTDIR/csv.sh
  source "$here/csv.sh"
  declare -A lang=([simple]=rust [simple_py]=python [simple_js]=javascript [simple_c]=c
    [echo_py]=python_floor [echo_js]=javascript_floor [simple_js_sm]=javascript_starlingmonkey)
  while read -r r m cc line; do
    [[ $cc =~ ^c([0-9]+)$ ]] || continue
    conc=${BASH_REMATCH[1]}
    if [[ $m == triton ]]; then
      for x in "${models[@]}"; do csv_row "$SUITE_CSV" "lang_${lang[$x]:-$x}" simple triton "$proto" "$conc" "$r" "$line"; done
    else
      csv_row "$SUITE_CSV" "lang_${lang[$m]:-$m}" "$m" nereus "$proto" "$conc" "$r" "$line"
    fi
  done <"$out"
fi

python3 - "$out" "$proto" "$rounds" "${models[@]}" <<'PY'
import re, statistics as st, sys, collections
out, proto, rounds, models = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:] + ["triton"]
v = collections.defaultdict(list)
for line in open(out):
    r, m, rest = line.split(" ", 2)
    for key, value in re.findall(r"(cold_s|cached_s|instance_mb)=([\d.]+)", rest):
        v[m, key].append(float(value))
    c = re.match(r"c(\d) .*throughput=([\d.]+) p50_us=(\d+)", rest)
    if c:
        v[m, f"tput{c[1]}"].append(float(c[2]))
        v[m, f"p50{c[1]}"].append(float(c[3]))
def med(m, key, fmt):
    return fmt.format(st.median(v[m, key])) if v[m, key] else "-"
print(f"{proto}, medians of {rounds} round(s)\n")
print("| model | infer/s c=1 | p50 us c=1 | infer/s c=4 | p50 us c=4 | load cold s | load cached s | MB per instance |")
print("|---|---|---|---|---|---|---|---|")
for m in models:
    name = "simple (Triton, python backend)" if m == "triton" else m
    print(f"| {name} | {med(m, 'tput1', '{:.0f}')} | {med(m, 'p501', '{:.0f}')} | {med(m, 'tput4', '{:.0f}')} | "
          f"{med(m, 'p504', '{:.0f}')} | {med(m, 'cold_s', '{:.2f}')} | {med(m, 'cached_s', '{:.3f}')} | {med(m, 'instance_mb', '{:.1f}')} |")
PY
