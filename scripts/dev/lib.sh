# Shared helpers for the dev scripts. Sourced, not run.
# Ports and addresses are the services' defaults (README.md lists them).

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
RUN_DIR=${TRIBUTARY_RUN_DIR:-$ROOT/run}
PG_HOST=${TRIBUTARY_PG_HOST:-127.0.0.1}
PG_PORT=${TRIBUTARY_PG_PORT:-5432}
NATS_URL=${TRIBUTARY_NATS_URL:-nats://127.0.0.1:4222}

# port_open HOST PORT: true when something accepts TCP connections there.
port_open() {
  (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null
}

# wait_ready NAME URL SECONDS: poll URL until it answers 200, or fail.
wait_ready() {
  local name=$1 url=$2 secs=$3 i
  for ((i = 0; i < secs * 10; i++)); do
    if curl -fsS -o /dev/null "$url" 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  echo "error: $name did not become ready at $url within ${secs}s; last answer:" >&2
  curl -sS "$url" >&2 || true
  return 1
}
