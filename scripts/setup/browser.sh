#!/usr/bin/env bash
# The headless browser the tests load the status page in (Debian's chromium-headless-shell).
source "$(dirname "$0")/lib.sh"
if ! command -v chromium-headless-shell >/dev/null; then
  log "installing chromium-headless-shell"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium-headless-shell >/dev/null
fi
log "headless browser: $(chromium-headless-shell --version 2>/dev/null | head -n1)"
