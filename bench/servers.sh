# shellcheck shell=bash disable=SC2154  # here, anchors, A and log come from the script that sources this
# Sourced by the benchmark scripts that run Nereus servers beside the bare-hyper ceiling on
# fixed ports (light_load.sh, quota.sh, run.sh, suite.sh). Expects $here (bench/), $anchors (../shared/anchors), $A
# (the anchors' cache) and $log (a scratch folder).

# nereus_start BINARY PORT FLAGS...: serves bench/model_repository (or $REPO) on PORT (gRPC PORT+1, metrics
# PORT+2), its log in $log/PORT.log; prints its pid.
nereus_start() {
  local b=$1 port=$2
  shift 2
  "$b" serve --model-repository "${REPO:-$here/model_repository}" --http-address 127.0.0.1 --http-port "$port" \
    --grpc-port $((port + 1)) --metrics-port $((port + 2)) "$@" >"$log/$port.log" 2>&1 &
  echo $!
}

# ceiling_start PORT: starts the bare-hyper ceiling; prints its pid.
ceiling_start() {
  "$anchors/limit.sh" start "$1" >/dev/null
  cat "$A/limit_probe-$1.pid"
}

# wait_ready PORT...: until each server answers /v2/health/ready (10 s at most each).
wait_ready() {
  local port
  for port; do
    for _ in $(seq 1 100); do curl -sf "localhost:$port/v2/health/ready" >/dev/null && break; sleep 0.1; done
  done
}

# ceiling_up PORT: the ceilings, bare hyper on PORT and bare tonic on PORT+1. Started from the probes
# ../shared/anchors/limit.sh built into $A/limit-target where they are (no cargo run at all), else by
# limit.sh itself (which builds them once). `limit.sh stop PORT` stops them either way (same pid files).
ceiling_up() {
  local port=$1 rel=$A/limit-target/release b p
  if [[ -x $rel/limit_probe && -x $rel/grpc_limit_probe ]]; then
    for b in limit_probe grpc_limit_probe; do
      p=$port; [[ $b == grpc_limit_probe ]] && p=$((port + 1))
      setsid "$rel/$b" "$p" >"$A/$b-$p.log" 2>&1 &
      echo $! >"$A/$b-$p.pid"
    done
    for _ in $(seq 1 40); do
      curl -sf "localhost:$port/v2/health/ready" >/dev/null && (exec 3<>"/dev/tcp/127.0.0.1/$((port + 1))") 2>/dev/null && return 0
      sleep 0.25
    done
    echo "the ceiling probes did not start (logs: $A/limit_probe-$port.log, $A/grpc_limit_probe-$((port + 1)).log)" >&2
    return 1
  fi
  "$anchors/limit.sh" start "$port" >/dev/null
}

# ports_free PORT...: exits with a message when something listens on one of them (never measure, or
# stop, a server another run started).
ports_free() {
  local p
  for p; do ! port_busy "$p" || { echo "port $p is in use: is another benchmark running?" >&2; exit 1; }; done
}

# port_busy PORT: true when something listens on it.
port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
