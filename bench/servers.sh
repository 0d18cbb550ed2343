# Sourced by the benchmark scripts that run two Nereus servers beside the bare-hyper ceiling on
# fixed ports (light_load.sh, quota.sh). Expects $here (bench/), $anchors (../shared/anchors), $A
# (the anchors' cache) and $log (a scratch folder).

# nereus_start BINARY PORT FLAGS...: serves bench/model_repository on PORT (gRPC PORT+1, metrics
# PORT+2), its log in $log/PORT.log; prints its pid.
nereus_start() {
  local b=$1 port=$2
  shift 2
  "$b" serve --model-repository "$here/model_repository" --http-address 127.0.0.1 --http-port "$port" \
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
