#!/usr/bin/env bash
# make ee: build the execution environment of execution-environment.yml with ansible-builder,
# from a base made here and wheels fetched by this machine's pip (nothing is pulled, and the
# build reaches no index). Needs set-up's base image and `make build`'s tarball.
source "$(dirname "$0")/lib.sh"
version=$(python -c 'import yaml,sys; print(yaml.safe_load(open(sys.argv[1]))["version"])' "$REPO/galaxy.yml")
tarball=$CACHE/dist/mindverse-sglang_pd-$version.tar.gz
[ -s "$tarball" ] || { log "no $tarball: run make build first"; exit 1; }
if ! image_exists "$SGLANG_PD_EE_BASE_IMAGE"; then
  log "building $SGLANG_PD_EE_BASE_IMAGE"
  docker build -q --build-arg BASE="$SGLANG_PD_BASE_IMAGE" -t "$SGLANG_PD_EE_BASE_IMAGE" "$REPO/tests/images/ee-base" \
    >"$CACHE/ee-base-build.log" 2>&1 || { tail -n 30 "$CACHE/ee-base-build.log"; exit 1; }
fi
ee=$CACHE/ee
mkdir -p "$ee/wheels" "$ee/collection"
# What the build installs with pip: the ansible bundle and ansible-runner, the collection's
# requirements, and what ansible-builder's own steps install (bindep, pyyaml, packaging, and the
# container's init, ansible-builder's default).
init=dumb-init==1.2.5
wants=$({ cat "$REPO/requirements.txt"; echo "$init"; } | sha256sum | cut -d' ' -f1)
if [ "$(cat "$ee/wheels.sha256" 2>/dev/null)" != "$wants" ]; then
  log "downloading the wheels of the execution environment"
  rm -rf "$ee/wheels" && mkdir -p "$ee/wheels"
  pip download -q --only-binary=:all: -d "$ee/wheels" -r "$REPO/requirements.txt" bindep pyyaml packaging "$init"
  echo "$wants" > "$ee/wheels.sha256"
fi
cp "$tarball" "$ee/collection/mindverse-sglang_pd.tar.gz"
log "building $SGLANG_PD_EE_IMAGE with ansible-builder"
ansible-builder build -f "$REPO/execution-environment.yml" -c "$ee/context" -t "$SGLANG_PD_EE_IMAGE" \
  --container-runtime docker --build-arg EE_BASE_IMAGE="$SGLANG_PD_EE_BASE_IMAGE" -v 1 >"$CACHE/ee-build.log" 2>&1 \
  || { tail -n 40 "$CACHE/ee-build.log"; exit 1; }
log "built $SGLANG_PD_EE_IMAGE"
