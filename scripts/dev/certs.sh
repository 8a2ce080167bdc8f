#!/usr/bin/env bash
# Creates the local CA and certificates of a secured stack (make certs), under
# ${TRIBUTARY_CERTS_DIR:-run/certs}:
#   ca.pem, ca-key.pem                  the local CA (keep ca-key.pem private)
#   <service>.pem, <service>-key.pem    one per service, CN = the service's name (which
#                                       storage-core and the coordinator give every right),
#                                       usable as server and client certificate, valid for
#                                       the service name, localhost and 127.0.0.1
#   admin.pem, admin-key.pem            a client certificate for grpcurl (CN admin: every right)
#   credentials                         storage-core's and the coordinator's --auth-credentials-file:
#                                       an admin token and a read-only token (read:kafka. read:gcp.)
#   admin.token, reader.token           those tokens, one per file (grpcurl -H "authorization: Bearer $(cat ...)")
#   kafka-users, kafka-admin.password   kafka-gateway's --sasl-users-file with the SASL user admin, and its password
# Files that exist are kept (run it again to add what is missing, or to reissue the
# certificates the CA no longer verifies); remove the directory to start over. Needs openssl.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
DIR=${TRIBUTARY_CERTS_DIR:-$RUN_DIR/certs}
DAYS=${TRIBUTARY_CERTS_DAYS:-825}
command -v openssl >/dev/null || { echo "error: openssl is needed (apt-get install openssl)" >&2; exit 1; }
mkdir -p "$DIR"
chmod 700 "$DIR"
umask 077

if [[ ! -f $DIR/ca.pem ]]; then
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days "$DAYS" \
    -subj "/O=tributary/CN=tributary local CA" -keyout "$DIR/ca-key.pem" -out "$DIR/ca.pem" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
  echo "created $DIR/ca.pem"
fi

# issue NAME: NAME.pem / NAME-key.pem signed by the CA, CN and DNS name NAME. One that
# exists is kept while the CA verifies it (a new CA, or an expired certificate, reissues it).
issue() {
  local name=$1
  [[ -f $DIR/$name.pem ]] && openssl verify -CAfile "$DIR/ca.pem" "$DIR/$name.pem" >/dev/null 2>&1 && return 0
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/O=tributary/CN=$name" \
    -keyout "$DIR/$name-key.pem" -out "$DIR/$name.csr" 2>/dev/null
  openssl x509 -req -in "$DIR/$name.csr" -CA "$DIR/ca.pem" -CAkey "$DIR/ca-key.pem" -CAcreateserial \
    -days "$DAYS" -out "$DIR/$name.pem" -extfile <(printf '%s\n' \
      "basicConstraints=CA:FALSE" "keyUsage=critical,digitalSignature,keyEncipherment" \
      "extendedKeyUsage=serverAuth,clientAuth" \
      "subjectAltName=DNS:$name,DNS:$name.tributary,DNS:localhost,IP:127.0.0.1,IP:::1") 2>/dev/null
  rm -f "$DIR/$name.csr"
  echo "created $DIR/$name.pem"
}

for s in storage-core coordinator kafka-gateway pubsub-gateway mqtt-bridge admin; do issue "$s"; done

if [[ ! -f $DIR/credentials ]]; then
  admin=$(openssl rand -hex 24)
  reader=$(openssl rand -hex 24)
  printf '%s\n' "$admin" >"$DIR/admin.token"
  printf '%s\n' "$reader" >"$DIR/reader.token"
  cat >"$DIR/credentials" <<CREDS
# storage-core and coordinator --auth-credentials-file (see libs/grpcx LoadCredentials).
# token SECRET PRINCIPAL RIGHT...  /  cert COMMON-NAME RIGHT...; RIGHT = read|append|admin|*:PREFIX|*
token $admin admin *:*
token $reader reader read:kafka. read:gcp.
cert admin *:*
CREDS
  echo "created $DIR/credentials (tokens in admin.token, reader.token)"
fi
if [[ ! -f $DIR/kafka-users ]]; then
  kpass=$(openssl rand -hex 16)
  printf '%s\n' "$kpass" >"$DIR/kafka-admin.password"
  printf '# kafka-gateway --sasl-users-file: name:password a line (PLAIN and SCRAM-SHA-256/512)\nadmin:%s\n' "$kpass" >"$DIR/kafka-users"
  echo "created $DIR/kafka-users (SASL user admin, password in kafka-admin.password)"
fi
rm -f "$DIR/ca.srl"
