#!/usr/bin/env bash
# Installs (Debian packages) and starts what the tests need when it is missing:
# PostgreSQL on 127.0.0.1:5432 with trust auth for user postgres, NATS with JetStream on
# 127.0.0.1:4222, kcat, Debian's python3-confluent-kafka (librdkafka's transactional
# producer), Node.js with npm, and Mosquitto (broker and clients) on
# 127.0.0.1:1883 for the mqtt-bridge tests. Idempotent: what already runs is left alone.
set -euo pipefail

port_open() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }
wait_port() {
  local i
  for ((i = 0; i < 150; i++)); do port_open "$1" "$2" && return 0; sleep 0.2; done
  echo "error: nothing listens on $1:$2 after 30s" >&2
  return 1
}

SUDO=""
[[ $(id -u) -eq 0 ]] || SUDO=sudo
apt_updated=""
apt_install() {
  if [[ -z $apt_updated ]]; then
    $SUDO apt-get update -qq
    apt_updated=1
  fi
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "$@" >/dev/null
}

# PostgreSQL
if ! port_open 127.0.0.1 5432; then
  if ! command -v pg_ctlcluster >/dev/null || [[ ! -d /etc/postgresql ]]; then
    echo "installing postgresql"
    apt_install postgresql
  fi
  ver=$(ls /etc/postgresql | sort -V | tail -n1)
  hba=/etc/postgresql/$ver/main/pg_hba.conf
  if ! grep -q '^host all all 127.0.0.1/32 trust' "$hba"; then
    $SUDO sed -i '1i host all all 127.0.0.1/32 trust\nlocal all all trust' "$hba"
  fi
  echo "starting postgresql $ver"
  $SUDO pg_ctlcluster --skip-systemctl-redirect "$ver" main start || true
  wait_port 127.0.0.1 5432
fi

# NATS with JetStream
if ! port_open 127.0.0.1 4222; then
  command -v nats-server >/dev/null || { echo "installing nats-server"; apt_install nats-server; }
  mkdir -p /tmp/tributary-ci-nats
  echo "starting nats-server with JetStream"
  nohup nats-server -a 127.0.0.1 -p 4222 -js -sd /tmp/tributary-ci-nats >/tmp/tributary-ci-nats.log 2>&1 &
  wait_port 127.0.0.1 4222
fi

# kcat (librdkafka) for the end-to-end tests
if ! command -v kcat >/dev/null; then
  echo "installing kcat"
  apt_install kcat
fi

# librdkafka's transactional producer for TestTxnLibrdkafka, through Debian's python
# binding (npm's @confluentinc/kafka-javascript downloads a prebuilt binary, or zlib,
# OpenSSL and zstd for its source build, from outside the package registries)
if ! /usr/bin/python3 -c 'import confluent_kafka' 2>/dev/null; then
  echo "installing python3-confluent-kafka"
  apt_install python3-confluent-kafka
fi

# Node.js and npm for the kafkajs end-to-end test (it installs kafkajs from npm)
if ! command -v npm >/dev/null; then
  echo "installing nodejs and npm"
  apt_install nodejs npm
fi

# Mosquitto on 127.0.0.1:1883 (anonymous) and mosquitto_pub/mosquitto_sub for the
# mqtt-bridge end-to-end tests
command -v mosquitto_sub >/dev/null || { echo "installing mosquitto-clients"; apt_install mosquitto-clients; }
if ! port_open 127.0.0.1 1883; then
  if ! command -v mosquitto >/dev/null && [[ ! -x /usr/sbin/mosquitto ]]; then
    echo "installing mosquitto"
    apt_install mosquitto
  fi
  mkdir -p /tmp/tributary-ci-mosquitto
  printf 'listener 1883 127.0.0.1\nallow_anonymous true\n' >/tmp/tributary-ci-mosquitto/mosquitto.conf
  echo "starting mosquitto"
  nohup "$(command -v mosquitto || echo /usr/sbin/mosquitto)" -c /tmp/tributary-ci-mosquitto/mosquitto.conf \
    >/tmp/tributary-ci-mosquitto.log 2>&1 &
  wait_port 127.0.0.1 1883
fi

# curl for the dev scripts' readiness polls
command -v curl >/dev/null || apt_install curl
echo "services ready: postgres 127.0.0.1:5432, nats 127.0.0.1:4222, mosquitto 127.0.0.1:1883, kcat, node $(node --version)"
