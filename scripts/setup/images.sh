#!/usr/bin/env bash
# Build the fleet node image and the test serving image, push the serving image to the
# local registry, and write its digest and checksums into the local inventory.
source "$(dirname "$0")/lib.sh"
BASE=$SGLANG_PD_BASE_IMAGE
NODE=$SGLANG_PD_NODE_IMAGE
ADDR=$(cat "$CACHE/registry/address")
REPO_NAME=${TEST_IMAGE_REPO:-$ADDR/mindverse/sglang}
PYVER=3.11
SITE=/opt/venv/lib/python$PYVER/site-packages
GENERATED=$REPO/inventories/local/group_vars/all/generated.yml

if ! image_exists "$NODE"; then
  log "building $NODE"
  docker build -q --build-arg BASE="$BASE" -t "$NODE" "$REPO/tests/images/node" >"$CACHE/node-build.log" 2>&1 \
    || { tail -n 30 "$CACHE/node-build.log"; exit 1; }
fi

# Build context of the test image: pinned router wheels (downloaded once) and the stand-in.
ctx=$CACHE/images/sglang
mkdir -p "$ctx/wheels"
cp "$REPO/tests/images/sglang/"{Dockerfile,requirements.txt,requirements-smg.txt,make_engine_fixture.py} "$ctx/"
# Downloaded again whenever the pinned requirements change (never a stale wheel).
wheels_for=$(cat "$ctx/requirements.txt" "$ctx/requirements-smg.txt" | sha256sum | cut -d' ' -f1)
if [ "$(cat "$ctx/wheels.sha256" 2>/dev/null)" != "$wheels_for" ]; then
  log "downloading the pinned router wheels (sglang-router and SMG)"
  rm -rf "$ctx/wheels" && mkdir -p "$ctx/wheels"
  pip download -q --only-binary=:all: -d "$ctx/wheels" -r "$ctx/requirements.txt"
  pip download -q --only-binary=:all: -d "$ctx/wheels" -r "$ctx/requirements-smg.txt"
  echo "$wheels_for" > "$ctx/wheels.sha256"
fi
rm -rf "$ctx/standin" && mkdir -p "$ctx/standin"
(cd "$REPO/tests/standin" && tar -ch --exclude=__pycache__ sglang) | tar -x -C "$ctx/standin"

login() {
  docker login -u sglang --password-stdin "$ADDR" < "$CACHE/registry/password" >/dev/null
}
login

# build_push TAG BUILD_ID: prints the pushed digest.
build_push() {
  local tag=$1 build_id=$2
  docker build -q --build-arg BASE="$BASE" --build-arg PYVER=$PYVER \
    --build-arg BUILD_ID="$build_id" -t "$REPO_NAME:$tag" "$ctx" >"$CACHE/image-build.log" 2>&1 \
    || { tail -n 30 "$CACHE/image-build.log" >&2; exit 1; }
  docker push -q "$REPO_NAME:$tag" >/dev/null
  docker image inspect --format '{{range .RepoDigests}}{{println .}}{{end}}' "$REPO_NAME:$tag" \
    | grep "^$REPO_NAME@" | head -n1 | cut -d@ -f2
}
log "building and pushing $REPO_NAME:v1 and :v2"
digest=$(build_push v1 1)
digest_v2=$(build_push v2 2)
engine_so=$SITE/mooncake/engine.cpython-310-x86_64-linux-gnu.so
docker build -q --build-arg SOURCE="$REPO_NAME:v1" --build-arg ENGINE="$engine_so" \
  -t "$REPO_NAME:tampered" "$REPO/tests/images/tampered" >"$CACHE/image-build.log" 2>&1 \
  || { tail -n 30 "$CACHE/image-build.log" >&2; exit 1; }
docker push -q "$REPO_NAME:tampered" >/dev/null
digest_tampered=$(docker image inspect --format '{{range .RepoDigests}}{{println .}}{{end}}' "$REPO_NAME:tampered" \
  | grep "^$REPO_NAME@" | head -n1 | cut -d@ -f2)

md5_in() {  # md5 of a file inside an image, read at set-up (the roles use image_artifacts)
  docker run --rm --entrypoint md5sum "$REPO_NAME@${2:-$digest}" "$1" | cut -d' ' -f1
}
router_so=$SITE/sglang_router/sglang_router_rs.abi3.so
smg_so=/opt/smg/lib/python$PYVER/site-packages/smg/smg_rs.abi3.so
# The fleet's secrets, each in a 0600 file: the router's API key (the local fleet runs with
# authentication on, as production does), the workers' admin key, and a model-hub token the
# workers are given only so the leak test has one more secret to look for, and the admin
# control-plane key of the scale scenario's router.
ROUTER_KEY_FILE=$CACHE/router-api-key
ADMIN_KEY_FILE=$CACHE/worker-admin-api-key
HUB_TOKEN_FILE=$CACHE/hub-token
ROUTER_ADMIN_KEY_FILE=$CACHE/router-control-plane-admin-key
for secret_file in "$ROUTER_KEY_FILE" "$ADMIN_KEY_FILE" "$HUB_TOKEN_FILE" "$ROUTER_ADMIN_KEY_FILE"; do
  [ -s "$secret_file" ] || (umask 077 && openssl rand -hex 24 > "$secret_file")
done
mkdir -p "$(dirname "$GENERATED")"
umask 077
cat > "$GENERATED" <<YAML
---
# Written by scripts/setup/images.sh: do not edit, do not commit.
sglang_pd_registry: "$ADDR"
sglang_pd_registry_username: sglang
sglang_pd_registry_password: "$(cat "$CACHE/registry/password")"
fleet_registry_ca_file: "$CACHE/registry/ca.crt"
sglang_pd_image_repository: "$REPO_NAME"
sglang_pd_image_digest: "$digest"
fleet_image_digest_next: "$digest_v2"
fleet_image_digest_tampered: "$digest_tampered"
sglang_pd_python_site_packages: "$SITE"
# The secrets, read from their 0600 files on the controller (never written here).
fleet_router_api_key_file: "$ROUTER_KEY_FILE"
# The admin control-plane key of the scale scenario's router (molecule/scale/inventory).
fleet_router_admin_key_file: "$ROUTER_ADMIN_KEY_FILE"
sglang_router_api_key: "{{ lookup('ansible.builtin.file', fleet_router_api_key_file) }}"
sglang_worker_admin_api_key: "{{ lookup('ansible.builtin.file', '$ADMIN_KEY_FILE') }}"
fleet_hub_token: "{{ lookup('ansible.builtin.file', '$HUB_TOKEN_FILE') }}"
fleet_node_image: "$NODE"
# How the controller reaches the nodes: over SSH as azureuser (inventories/local/hosts.yml),
# with the key pair, host key and known_hosts of scripts/setup/fleet_ssh.sh.
fleet_ssh_node_dir: "$CACHE/fleet-ssh/node"
ansible_ssh_private_key_file: "$CACHE/fleet-ssh/id_ed25519"
ansible_ssh_common_args: "-o UserKnownHostsFile=$CACHE/fleet-ssh/known_hosts -o StrictHostKeyChecking=yes"
# The stand-in model directories (tests/fleet/up.yml writes them; nodes mount them read-only).
fleet_models_dir: "$CACHE/models"
# The stand-in of AMD's apt repositories (tests/fixtures/amd_apt_repo.py; tests/fleet/up.yml builds
# it and nodes mount it read-only): site.yml installs the host stack from it.
fleet_amd_repo_dir: "$CACHE/amd-apt"
sglang_pd_image_artifacts:
  - path: "$router_so"
    md5: "$(md5_in "$router_so")"
  - path: "$smg_so"
    md5: "$(md5_in "$smg_so")"
  - path: "$engine_so"
    md5: "$(md5_in "$engine_so")"
  - path: "$SITE/sglang_router/router.py"
    text_count:
      - pattern: prefill_group_ids
        count: 0
YAML
cat >> "$GENERATED" <<YAML
# The manifest of the next image (for upgrade tests): its engine fixture differs.
fleet_image_artifacts_next:
  - path: "$router_so"
    md5: "$(md5_in "$router_so" "$digest_v2")"
  - path: "$smg_so"
    md5: "$(md5_in "$smg_so" "$digest_v2")"
  - path: "$engine_so"
    md5: "$(md5_in "$engine_so" "$digest_v2")"
YAML
log "wrote $GENERATED (digest $digest)"
