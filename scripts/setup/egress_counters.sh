#!/usr/bin/env bash
# Count, in the kernel, every packet the fleet network sends off the machine: forwarded
# from the fleet's bridge to an address outside its subnet. Chain SGLANG_PD_EGRESS, jumped to
# from DOCKER-USER (Docker evaluates it first and never flushes it):
#   - one rule per address of the Debian mirror the machine's apt sources name (the nodes'
#     base image installs its packages from there: counted apart, allowed);
#   - DNS to the machine's name servers (Docker's embedded resolver forwards the nodes' lookups
#     from their own addresses; apt resolves the mirror): counted apart, allowed. A lookup alone
#     reaches no host: a connection to what it resolved is counted below;
#   - a log line per packet that goes on (rate-limited; `dmesg | grep "sglang-pd egress"` names
#     its source, destination and port), then one rule that counts it ("outside the fleet"): 0 expected.
# Nothing is dropped or reset; each scenario marks the counters when it starts and its verify asserts
# on what was counted since (tests/fleet/egress_counters.py, tests/fleet/no_egress_packets.yml).
source "$(dirname "$0")/lib.sh"
NET=${FLEET_NETWORK:-sglang-pd}
SUBNET=${FLEET_SUBNET:-172.30.57.0/24}
CHAIN=SGLANG_PD_EGRESS
BRIDGE=br-$(docker network inspect --format '{{.Id}}' "$NET" | cut -c1-12)

mirror_host=$(debian_mirror | sed -E 's#^https?://([^/:]+).*#\1#')
mirror_addresses=$(getent ahostsv4 "$mirror_host" | awk '{print $1}' | sort -u)
[ -n "$mirror_addresses" ] || { log "the Debian mirror's name does not resolve"; exit 1; }

iptables -N "$CHAIN" 2>/dev/null || iptables -F "$CHAIN"
for address in $mirror_addresses; do
  iptables -A "$CHAIN" -d "$address" -m comment --comment "sglang-pd egress: package mirror" -j RETURN
done
for server in $(awk '$1 == "nameserver" && $2 ~ /^[0-9.]+$/ {print $2}' /etc/resolv.conf | sort -u); do
  for protocol in udp tcp; do
    iptables -A "$CHAIN" -d "$server" -p "$protocol" --dport 53 -m comment --comment "sglang-pd egress: name server" -j RETURN
  done
done
iptables -A "$CHAIN" -m limit --limit 20/min --limit-burst 20 -j LOG --log-prefix "sglang-pd egress: "
iptables -A "$CHAIN" -m comment --comment "sglang-pd egress: outside the fleet" -j RETURN
jump=(DOCKER-USER -i "$BRIDGE" ! -o "$BRIDGE" ! -d "$SUBNET" -j "$CHAIN")
iptables -C "${jump[@]}" 2>/dev/null || iptables -I "${jump[@]}"
log "egress counters on $BRIDGE ($NET): chain $CHAIN, $(wc -w <<<"$mirror_addresses") mirror address(es) apart"
