#!/usr/bin/env bash
# Starts the local stack as separate processes: storage-core, coordinator, kafka-gateway,
# pubsub-gateway, mqtt-bridge (services/mqtt-bridge/config/sample.yaml: listener on 1884).
# Needs PostgreSQL (127.0.0.1:5432) and NATS with JetStream (127.0.0.1:4222): starts them
# when they are installed but stopped, and says how to install them when missing.
# Logs: run/logs/<service>.log; data: run/data; pids: run/pids. `make down` stops it.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$ROOT"

need_postgres() {
  port_open "$PG_HOST" "$PG_PORT" && return 0
  if command -v pg_ctlcluster >/dev/null && ls /etc/postgresql >/dev/null 2>&1; then
    echo "starting PostgreSQL..."
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start || true
  fi
  for _ in $(seq 50); do port_open "$PG_HOST" "$PG_PORT" && return 0; sleep 0.2; done
  cat >&2 <<MSG
error: PostgreSQL is not reachable at $PG_HOST:$PG_PORT.
  Install and start it (Debian/Ubuntu):  sudo apt-get install -y postgresql && sudo pg_ctlcluster 15 main start
  The coordinator connects as user postgres (trust auth) and creates database "tributary".
  Or point it elsewhere: TRIBUTARY_COORDINATOR_POSTGRES_URL=postgres://user@host:5432/tributary
MSG
  exit 1
}

need_nats() {
  local hostport=${NATS_URL#nats://}
  port_open "${hostport%:*}" "${hostport##*:}" && return 0
  if command -v nats-server >/dev/null; then
    echo "starting nats-server with JetStream..."
    mkdir -p "$RUN_DIR/nats" "$RUN_DIR/logs"
    nohup nats-server -a 127.0.0.1 -p "${hostport##*:}" -js -sd "$RUN_DIR/nats" \
      >"$RUN_DIR/logs/nats-server.log" 2>&1 &
    echo $! >"$RUN_DIR/nats.pid"
  fi
  for _ in $(seq 50); do port_open "${hostport%:*}" "${hostport##*:}" && return 0; sleep 0.2; done
  cat >&2 <<MSG
error: NATS is not reachable at $NATS_URL.
  Install it (Debian/Ubuntu): sudo apt-get install -y nats-server
  make up then starts it with JetStream, or run: nats-server -a 127.0.0.1 -p 4222 -js
MSG
  exit 1
}

# running NAME: whether this checkout's copy of NAME already runs.
running() {
  local pidfile="$RUN_DIR/pids/$1.pid"
  [[ -f $pidfile ]] && kill -0 "$(cat "$pidfile")" 2>/dev/null
}

# check_free NAME PORT...: fails unless NAME already runs here or all its ports are free
# (another stack, or another checkout's, may hold them). Every service is checked before
# any is started, so a taken port leaves nothing half started.
check_free() {
  local name=$1 p; shift
  running "$name" && return 0
  for p in "$@"; do
    if port_open 127.0.0.1 "$p"; then
      echo "error: port $p, which $name needs, is already in use (another Tributary stack? run 'make down' where it was started)" >&2
      exit 1
    fi
  done
}

# start NAME SECONDS PORT... -- ARGS: starts bin/NAME unless this checkout's copy already
# runs, then waits until its /readyz (on the last port) answers and it is still alive.
start() {
  local name=$1 secs=$2; shift 2
  local ports=()
  while [[ $1 != -- ]]; do ports+=("$1"); shift; done
  shift
  local pidfile="$RUN_DIR/pids/$name.pid"
  if running "$name"; then
    echo "$name already running (pid $(cat "$pidfile")); left as it is: TRIBUTARY_* settings apply after make down"
    return
  fi
  nohup "$ROOT/bin/$name" "$@" >>"$RUN_DIR/logs/$name.log" 2>&1 &
  local pid=$!
  echo "$pid" >"$pidfile"
  if ! wait_ready "$name" "http://127.0.0.1:${ports[-1]}/readyz" "$secs" || ! kill -0 "$pid" 2>/dev/null; then
    echo "error: $name did not start; the end of $RUN_DIR/logs/$name.log:" >&2
    tail -n 20 "$RUN_DIR/logs/$name.log" >&2
    rm -f "$pidfile"
    exit 1
  fi
}

# The stack that runs stays as it is (start leaves it alone), so asking for the other
# mode would report endpoints it does not serve: refuse, naming what runs.
mode=plain
[[ -n ${SECURE:-} && $SECURE != 0 ]] && mode=secure
for s in storage-core coordinator kafka-gateway pubsub-gateway mqtt-bridge; do
  running "$s" || continue
  have=$(cat "$RUN_DIR/pids/mode" 2>/dev/null || echo plain)
  if [[ $have != "$mode" ]]; then
    if [[ $have == secure ]]; then was="with SECURE=1"; else was="without SECURE=1"; fi
    echo "error: the stack already runs $was ($s, pid $(cat "$RUN_DIR/pids/$s.pid")); run 'make down' first" >&2
    exit 1
  fi
  break
done

check_free storage-core 7400 7401
check_free coordinator 7410 7411
if [[ -n ${SECURE:-} && $SECURE != 0 ]]; then check_free kafka-gateway 9092 9093 7421; else check_free kafka-gateway 9092 7421; fi
check_free pubsub-gateway 8085 7431
check_free mqtt-bridge 1884 9464
# Only now start PostgreSQL / NATS if needed: a taken port stops us before anything runs.
need_postgres
need_nats
mkdir -p "$RUN_DIR/logs" "$RUN_DIR/pids" "$RUN_DIR/data/storage"
echo "$mode" >"$RUN_DIR/pids/mode"

# SECURE=1: mTLS between every service (certificates from make certs, run/certs), callers
# of storage-core and the coordinator authenticated (certificate or token) and authorized,
# Pub/Sub on 8085 over TLS, Kafka SASL_SSL on 9093 (SCRAM or PLAIN, user admin) beside
# PLAINTEXT on 9092.
SECURE=${SECURE:-}
storage_sec=() coord_sec=() kafka_sec=() pubsub_sec=() mqtt_env=()
if [[ -n $SECURE && $SECURE != 0 ]]; then
  CERTS=${TRIBUTARY_CERTS_DIR:-$RUN_DIR/certs}
  "$ROOT/scripts/dev/certs.sh" >/dev/null
  # server NAME: the gRPC server flags of NAME with its certificate.
  server() { echo "--tls-cert=$CERTS/$1.pem --tls-key=$CERTS/$1-key.pem --tls-client-ca=$CERTS/ca.pem"; }
  # client NAME: the dial flags of NAME presenting its certificate.
  client() { echo "--tls-client-cert=$CERTS/$1.pem --tls-client-key=$CERTS/$1-key.pem"; }
  auth="--auth=required --auth-credentials-file=$CERTS/credentials"
  read -ra storage_sec <<<"$(server storage-core) $auth"
  read -ra coord_sec <<<"$(server coordinator) $auth $(client coordinator) --storage-tls-ca=$CERTS/ca.pem"
  read -ra kafka_sec <<<"$(client kafka-gateway) --storage-tls-ca=$CERTS/ca.pem --coordinator-tls-ca=$CERTS/ca.pem \
    --tls-cert=$CERTS/kafka-gateway.pem --tls-key=$CERTS/kafka-gateway-key.pem --sasl-users-file=$CERTS/kafka-users"
  read -ra pubsub_sec <<<"$(server pubsub-gateway) $(client pubsub-gateway) --storage-tls-ca=$CERTS/ca.pem --coordinator-tls-ca=$CERTS/ca.pem"
  mqtt_env=(
    "TRIBUTARY_MQTT_STORAGE_TLS_CA_FILE=$CERTS/ca.pem" "TRIBUTARY_MQTT_STORAGE_TLS_CERT_FILE=$CERTS/mqtt-bridge.pem"
    "TRIBUTARY_MQTT_STORAGE_TLS_KEY_FILE=$CERTS/mqtt-bridge-key.pem"
    "TRIBUTARY_MQTT_COORDINATOR_TLS_CA_FILE=$CERTS/ca.pem" "TRIBUTARY_MQTT_COORDINATOR_TLS_CERT_FILE=$CERTS/mqtt-bridge.pem"
    "TRIBUTARY_MQTT_COORDINATOR_TLS_KEY_FILE=$CERTS/mqtt-bridge-key.pem"
  )
fi

start storage-core 30 7400 7401 -- --data-dir "$RUN_DIR/data/storage" "${storage_sec[@]}"
start coordinator 60 7410 7411 -- --nats-url "$NATS_URL" "${coord_sec[@]}"
start kafka-gateway 30 9092 7421 -- --nats-url "$NATS_URL" "${kafka_sec[@]}"
start pubsub-gateway 30 8085 7431 -- --nats-url "$NATS_URL" "${pubsub_sec[@]}"
(
  for e in "${mqtt_env[@]}"; do export "${e?}"; done
  export TRIBUTARY_MQTT_LISTENER_SESSION_DIR="$RUN_DIR/data/mqtt-bridge/sessions"
  start mqtt-bridge 30 1884 9464 -- -C "$ROOT/services/mqtt-bridge/config/sample.yaml"
) || exit 1

kafka="127.0.0.1:9092     (kcat -b 127.0.0.1:9092 -L)"
pubsub="Pub/Sub emulator        127.0.0.1:8085     (export PUBSUB_EMULATOR_HOST=127.0.0.1:8085)"
grpc="127.0.0.1:7400     (make tools; bin/tools/grpcurl -plaintext 127.0.0.1:7400 list)"
if [[ -n ${CERTS:-} ]]; then
  kafka="127.0.0.1:9092     PLAINTEXT, no authentication (kcat -b 127.0.0.1:9092 -L)
  Kafka SASL_SSL          127.0.0.1:9093     user admin, password in $CERTS/kafka-admin.password:
                          kcat -b 127.0.0.1:9093 -X security.protocol=SASL_SSL -X sasl.mechanisms=SCRAM-SHA-512 \\
                            -X sasl.username=admin -X sasl.password=\$(cat $CERTS/kafka-admin.password) -X ssl.ca.location=$CERTS/ca.pem -L"
  pubsub="Pub/Sub over TLS        127.0.0.1:8085     CA $CERTS/ca.pem (PUBSUB_EMULATOR_HOST clients speak plaintext: they get no answer and time out)"
  grpc="127.0.0.1:7400     TLS; a client certificate or a bearer token is required (the coordinator's too):
                          bin/tools/grpcurl -cacert $CERTS/ca.pem -cert $CERTS/admin.pem -key $CERTS/admin-key.pem 127.0.0.1:7400 list
                          bin/tools/grpcurl -cacert $CERTS/ca.pem -H \"authorization: Bearer \$(cat $CERTS/reader.token)\" ..."
  echo "Secured (SECURE=1): mTLS between the services, certificates and tokens in $CERTS."
fi
cat <<MSG
Tributary is up.
  Kafka bootstrap         $kafka
  $pubsub
  storage-core gRPC       $grpc
  coordinator gRPC        127.0.0.1:7410
  MQTT (mqtt-bridge)      127.0.0.1:1884     (mosquitto_pub -p 1884 -i d1 -t devices/d1 -m hi → Kafka topic mqtt-devices, key d1)
  metrics/health          :7401 storage-core  :7411 coordinator  :7421 kafka-gateway  :7431 pubsub-gateway
                          :9464 mqtt-bridge   (/metrics /healthz /readyz)
  logs                    $RUN_DIR/logs
  data                    $RUN_DIR/data (kept across make down / make up)
Stop with: make down
MSG
