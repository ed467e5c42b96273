# Shared helpers for the set-up scripts (sourced, not run).
# shellcheck shell=bash
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
CACHE=${SGLANG_PD_CACHE:-$REPO/.cache}
VENV=${VENV:-$REPO/.venv}
export PATH=$VENV/bin:$PATH
mkdir -p "$CACHE"
# SGLANG_PD_BASE_IMAGE and SGLANG_PD_NODE_IMAGE (one place: image_names.sh).
while IFS= read -r __name; do export "${__name?}"; done < <(bash "$REPO/scripts/setup/image_names.sh")

log() { printf '[setup] %s\n' "$*" >&2; }

# The Debian mirror this machine's apt sources already name (never written into the repo).
debian_mirror() {
  local uri
  uri=$(grep -hE '^(URIs:|deb )' /etc/apt/sources.list /etc/apt/sources.list.d/*.list \
        /etc/apt/sources.list.d/*.sources 2>/dev/null \
        | grep -v -- '-security' | grep -oE 'https?://[^ ]+/debian/?' | head -n1 || true)
  [ -n "$uri" ] || { log "no Debian mirror found in /etc/apt/sources*"; return 1; }
  printf '%s\n' "${uri%/}"
}

image_exists() { docker image inspect "$1" >/dev/null 2>&1; }
