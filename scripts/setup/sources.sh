#!/usr/bin/env bash
# The releases of requirements-sources.txt, downloaded (never installed) to .cache/sources: the
# tests check the shipped flag tables and the preflight's rules against their own sources.
source "$(dirname "$0")/lib.sh"
dest=$CACHE/sources
stamp=$dest/.requirements.sha256
want=$(sha256sum "$REPO/requirements-sources.txt" | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
  log "pinned sources up to date"; exit 0
fi
log "downloading the pinned SGLang and router releases to $dest"
mkdir -p "$dest"
"$VENV/bin/pip" download -q --no-deps --disable-pip-version-check --dest "$dest" -r "$REPO/requirements-sources.txt"
echo "$want" > "$stamp"
