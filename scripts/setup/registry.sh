#!/usr/bin/env bash
# A local registry like Azure Container Registry: TLS from a CA made here, htpasswd
# login. It listens on the gateway of the fleet's Docker network so nodes reach it.
source "$(dirname "$0")/lib.sh"
NET=${FLEET_NETWORK:-sglang-pd}
SUBNET=${FLEET_SUBNET:-172.30.57.0/24}
GATEWAY=${FLEET_GATEWAY:-172.30.57.1}
PORT=${REGISTRY_PORT:-5443}
DIR=$CACHE/registry
ADDR=$GATEWAY:$PORT
mkdir -p "$DIR/data"

docker network inspect "$NET" >/dev/null 2>&1 \
  || docker network create --subnet "$SUBNET" --gateway "$GATEWAY" "$NET" >/dev/null
# Containers on the fleet network must see each other's own addresses (each node's firewall
# decides by them): no NAT rule may rewrite the subnet's traffic on its own bridge.
BRIDGE=br-$(docker network inspect --format '{{.Id}}' "$NET" | cut -c1-12)
if rewriting=$(iptables -t nat -S POSTROUTING | grep -E -- "-s $SUBNET .*-j (MASQUERADE|SNAT)" \
               | grep -v -- "! -o $BRIDGE "); then
  log "a NAT rule rewrites the source of traffic on $NET ($BRIDGE), so nodes would see each other as $GATEWAY:"
  log "$rewriting"
  log "remove it (scripts/setup/docker_leftovers.sh removes those of networks Docker no longer has)"
  exit 1
fi

if [ ! -s "$DIR/ca.crt" ]; then
  log "generating CA and server certificate for $ADDR"
  openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=sglang-pd test CA" \
    -keyout "$DIR/ca.key" -out "$DIR/ca.crt" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj "/CN=$GATEWAY" \
    -keyout "$DIR/server.key" -out "$DIR/server.csr" 2>/dev/null
  printf 'subjectAltName=IP:%s,IP:127.0.0.1,DNS:localhost\n' "$GATEWAY" > "$DIR/san.ext"
  openssl x509 -req -in "$DIR/server.csr" -CA "$DIR/ca.crt" -CAkey "$DIR/ca.key" \
    -CAcreateserial -days 3650 -extfile "$DIR/san.ext" -out "$DIR/server.crt" 2>/dev/null
fi
if [ ! -s "$DIR/password" ]; then
  openssl rand -hex 16 > "$DIR/password"
  htpasswd -Bbn sglang "$(cat "$DIR/password")" > "$DIR/htpasswd"
fi
cat > "$DIR/config.yml" <<YAML
version: 0.1
log: {level: warn}
storage:
  filesystem: {rootdirectory: $DIR/data}
  delete: {enabled: true}
http:
  addr: $ADDR
  tls: {certificate: $DIR/server.crt, key: $DIR/server.key}
auth:
  htpasswd: {realm: sglang-pd, path: $DIR/htpasswd}
YAML
# The controller's Docker engine trusts the CA too (it pushes the test images).
mkdir -p "/etc/docker/certs.d/$ADDR"
cp "$DIR/ca.crt" "/etc/docker/certs.d/$ADDR/ca.crt"

# Ours answers 200 to our credentials; another checkout's registry answers 401.
answers() {
  curl -s -o /dev/null -w '%{http_code}' --cacert "$DIR/ca.crt" -u "sglang:$(cat "$DIR/password")" \
    "https://$ADDR/v2/" 2>/dev/null | grep -q 200
}
if ! answers; then
  if [ -s "$DIR/pid" ] && kill -0 "$(cat "$DIR/pid")" 2>/dev/null; then kill "$(cat "$DIR/pid")"; fi
  # A registry of another checkout holding the address is stopped: one per address.
  holder=$(ss -Hltnp "sport = :$PORT" 2>/dev/null | grep -o 'docker-registry",pid=[0-9]*' | grep -o '[0-9]*$' || true)
  [ -z "$holder" ] || echo "$holder" | xargs kill
  sleep 1
  log "starting the registry on $ADDR"
  nohup docker-registry serve "$DIR/config.yml" >"$DIR/registry.log" 2>&1 &
  echo $! > "$DIR/pid"
  for _ in $(seq 1 30); do answers && break; sleep 0.5; done
fi
answers || { log "registry did not answer on $ADDR: see $DIR/registry.log"; exit 1; }
echo "$ADDR" > "$DIR/address"
log "registry answers on https://$ADDR (login required)"
