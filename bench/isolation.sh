#!/usr/bin/env bash
# Isolation under attack: a healthy model's latency while a hostile plugin is hammered.
# One nereus serves `simple` (healthy) and `hostile` (the test_faults plugin, one instance, a 300 ms
# deadline and a 48 MiB memory cap). perf_analyzer measures `simple` over HTTP at concurrency 4,
# alternating rounds without and with two clients that keep sending the hostile model endless loops
# and memory bombs (each is cut off by its limit and the instance rebuilt).
#   bench/isolation.sh [ROUNDS]     (default 3)
# Prints a markdown table with the p99 ratio and appends it to bench/results/<UTC date>-isolation.md.
# Not a test.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
anchors=$(cd "$root/../shared/anchors" && pwd)
rounds=${1:-3}
A=${ANCHORS_HOME:-$HOME/.cache/anchors}
[[ -x $A/bin/perf_analyzer ]] || "$anchors/setup.sh"
target=${CARGO_TARGET_DIR:-$root/target}
(cd "$root" && cargo build --release --locked -p nereus)
faults=$(find "$target/wasm-plugins" -name test_faults.wasm -path '*plugin/test_faults.wasm' | head -1)

repo=$(mktemp -d)
cp -r "$root/model_repository/simple" "$repo/"
mkdir -p "$repo/hostile/1"
cp "$faults" "$repo/hostile/test_faults.wasm"
cat >"$repo/hostile/config.pbtxt" <<'EOF'
name: "hostile"
backend: "test_faults"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ -1 ] } ]
parameters { key: "sandbox.execution_timeout_ms" value: { string_value: "300" } }
parameters { key: "sandbox.memory_limit_mb" value: { string_value: "48" } }
EOF
port=18500
"$target/release/nereus" serve --model-repository "$repo" --http-address 127.0.0.1 --http-port $port \
  --grpc-address 127.0.0.1 --grpc-port $((port + 1)) --allow-metrics=false >"$repo/nereus.log" 2>&1 &
pid=$!
attackers=()
stop_attack() { for a in "${attackers[@]}"; do kill "$a" 2>/dev/null || true; done; attackers=(); }
trap 'stop_attack; kill $pid 2>/dev/null || true; rm -rf "$repo"' EXIT
for _ in $(seq 1 100); do curl -sf localhost:$port/v2/health/ready >/dev/null && break; sleep 0.1; done

attack() {
  local fault=$1
  while true; do
    curl -s -o /dev/null localhost:$port/v2/models/hostile/infer \
      -d "{\"parameters\":{\"fault\":\"$fault\"},\"inputs\":[{\"name\":\"INPUT0\",\"shape\":[1],\"datatype\":\"INT32\",\"data\":[1]}]}"
  done
}

declare -a base_p99 attack_p99 base_tput attack_tput
for r in $(seq 1 "$rounds"); do
  line=$("$anchors/perf.sh" localhost:$port simple http 4)
  base_tput+=("$(sed -n 's/.*throughput=\([0-9.]*\).*/\1/p' <<<"$line")")
  base_p99+=("$(sed -n 's/.*p99_us=\([0-9]*\).*/\1/p' <<<"$line")")
  attack loop & attackers+=($!)
  attack oom & attackers+=($!)
  line=$("$anchors/perf.sh" localhost:$port simple http 4)
  attack_tput+=("$(sed -n 's/.*throughput=\([0-9.]*\).*/\1/p' <<<"$line")")
  attack_p99+=("$(sed -n 's/.*p99_us=\([0-9]*\).*/\1/p' <<<"$line")")
  stop_attack
done
failed=$(curl -s localhost:$port/v2/models/hostile/stats | python3 -c 'import json,sys; print(json.load(sys.stdin)["model_stats"][0]["inference_stats"]["fail"]["count"])')

median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
out=$(mktemp)
{
  echo
  echo "## Isolation under attack — $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores"
  echo
  echo "\`simple\` over HTTP at concurrency 4 (perf_analyzer), alone and while two clients hammer \`hostile\` with endless loops (300 ms deadline) and memory bombs (48 MiB cap); $rounds rounds, alternating. The hostile model failed $failed requests, each with its limit named."
  echo
  echo "| round | alone infer/s | alone p99 µs | under attack infer/s | under attack p99 µs | p99 ratio |"
  echo "|---|---|---|---|---|---|"
  for i in "${!base_p99[@]}"; do
    ratio=$(python3 -c "print(f'{${attack_p99[$i]}/${base_p99[$i]}:.2f}')")
    echo "| $((i + 1)) | ${base_tput[$i]} | ${base_p99[$i]} | ${attack_tput[$i]} | ${attack_p99[$i]} | ${ratio}× |"
  done
  mb=$(median "${base_p99[@]}") ma=$(median "${attack_p99[@]}")
  echo "| median | $(median "${base_tput[@]}") | $mb | $(median "${attack_tput[@]}") | $ma | $(python3 -c "print(f'{$ma/$mb:.2f}')")× |"
} >"$out"
cat "$out"
mkdir -p "$here/results"
cat "$out" >>"$here/results/$(date -u +%Y-%m-%d)-isolation.md"
