#!/usr/bin/env bash
# Tools the tests run on the controller: the headless browser the status page is loaded in
# (Debian's chromium-headless-shell), and promtool (Debian's prometheus) that checks the
# monitoring role's rendered configuration and rules, and rsync (the model staging tests run
# a real rsync daemon as a peer), the SSH client the controller reaches the fleet's nodes with,
# nftables, HAProxy and gpg.
source "$(dirname "$0")/lib.sh"
if ! command -v chromium-headless-shell >/dev/null; then
  log "installing chromium-headless-shell"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium-headless-shell >/dev/null
fi
log "headless browser: $(chromium-headless-shell --version 2>/dev/null | head -n1)"
if ! command -v promtool >/dev/null; then
  log "installing prometheus (promtool)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null
fi
log "promtool: $(promtool --version 2>&1 | head -n1)"
if ! command -v rsync >/dev/null; then
  log "installing rsync"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends rsync >/dev/null
fi
log "rsync: $(rsync --version | head -n1)"
if ! command -v ssh >/dev/null || ! command -v ssh-keygen >/dev/null; then
  log "installing openssh-client"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends openssh-client >/dev/null
fi
log "ssh: $(ssh -V 2>&1 | head -n1)"
# nft --check proves the firewall role's table (tests/integration/test_firewall_rules.py); HAProxy
# runs the router balancer's configuration (tests/integration/test_router_lb.py); gpg and
# dpkg-deb build the stand-in of AMD's apt repositories (tests/fixtures/amd_apt_repo.py).
for tool in nft:nftables haproxy:haproxy gpg:gpg gpg-agent:gpg-agent; do
  if ! command -v "${tool%%:*}" >/dev/null && ! [ -x "/usr/sbin/${tool%%:*}" ]; then
    log "installing ${tool#*:}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${tool#*:}" >/dev/null
  fi
done
log "nft: $(/usr/sbin/nft --version 2>/dev/null || nft --version)"
log "haproxy: $(/usr/sbin/haproxy -v | head -n1)"
log "gpg: $(gpg --version | head -n1)"
