#!/usr/bin/env bash
# Stops the processes `make up` started (SIGTERM, then SIGKILL after 10 s). Data is kept.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

stop_pid() {
  local name=$1 pidfile=$2 pid i
  [[ -f $pidfile ]] || return 0
  pid=$(cat "$pidfile")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then
      echo "$name did not stop in 10s; killing" >&2
      kill -KILL "$pid" 2>/dev/null || true
    fi
    echo "stopped $name"
  fi
  rm -f "$pidfile"
}

for s in mqtt-bridge pubsub-gateway kafka-gateway coordinator storage-core; do
  stop_pid "$s" "$RUN_DIR/pids/$s.pid"
done
stop_pid nats-server "$RUN_DIR/nats.pid"
rm -f "$RUN_DIR/pids/mode"
