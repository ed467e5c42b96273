#!/usr/bin/env bash
# Build the Debian 12 base image with debootstrap from the mirror the machine's apt
# sources name. Reused when it already exists.
source "$(dirname "$0")/lib.sh"
IMAGE=$SGLANG_PD_BASE_IMAGE
if image_exists "$IMAGE"; then log "$IMAGE exists"; exit 0; fi
mirror=$(debian_mirror)
root=$(mktemp -d "$CACHE/rootfs.XXXX")
trap 'rm -rf "$root"' EXIT
log "debootstrap bookworm into $root"
debootstrap --variant=minbase \
  --include=python3,python3-venv,ca-certificates,iproute2,procps \
  bookworm "$root" "$mirror" >"$CACHE/debootstrap.log" 2>&1 \
  || { tail -n 30 "$CACHE/debootstrap.log"; exit 1; }
# Same mirror inside the image, so later images can apt-get from it.
printf 'deb %s bookworm main\ndeb %s bookworm-updates main\n' "$mirror" "$mirror" > "$root/etc/apt/sources.list"
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
tar -C "$root" -c . | docker import -c 'CMD ["/bin/bash"]' - "$IMAGE" >/dev/null
log "built $IMAGE"
