#!/usr/bin/env bash
# The pinned Python environment; rebuilt only when a requirements file changed.
source "$(dirname "$0")/lib.sh"
stamp=$VENV/.requirements.sha256
want=$(cat "$REPO/requirements.txt" "$REPO/requirements-test.txt" | sha256sum | cut -d' ' -f1)
if [ -x "$VENV/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
  log "venv up to date"; exit 0
fi
log "installing the pinned Python requirements into $VENV"
python3 -m venv "$VENV"
"$VENV/bin/pip" install -q -r "$REPO/requirements-test.txt"
echo "$want" > "$stamp"
