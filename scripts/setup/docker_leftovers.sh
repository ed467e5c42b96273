#!/usr/bin/env bash
# Remove what an earlier Docker daemon left in the kernel: its bridges (br-<network id>) and
# their iptables rules, when the running daemon has no network of that id.
# A daemon stopped without removing its networks (killed, or its state directory wiped) leaves
# them behind, and a fresh daemon does not know them. One such rule,
#   -s <fleet subnet> ! -o br-<gone> -j MASQUERADE,
# rewrites the source of every packet between two containers on the fleet network to the
# gateway (bridged traffic passes iptables), so each node's firewall sees every peer as the
# gateway, an address of the cluster network: the tests of its refusals fail.
source "$(dirname "$0")/lib.sh"

live_ids=$(docker network ls --no-trunc --quiet --filter driver=bridge)

# br-<12 hex digits> is the bridge of a network whose id starts with those digits.
is_leftover() {
  local id=${1#br-}
  ! grep -q "^$id" <<<"$live_ids"
}

removed=0
for table in nat filter; do
  # Rules naming a bridge, from iptables' own listing; -A CHAIN ... becomes -D CHAIN ...
  while IFS= read -r rule; do
    bridge=$(grep -oE 'br-[0-9a-f]{12}' <<<"$rule" | head -n1)
    is_leftover "$bridge" || continue
    read -r -a words <<<"${rule/#-A /-D }"
    iptables -t "$table" "${words[@]}"
    removed=$((removed + 1))
  done < <(iptables -t "$table" -S | grep -E '^-A .*br-[0-9a-f]{12}\b' || true)
done

links=0
for bridge in $(ip -o link show type bridge | grep -oE 'br-[0-9a-f]{12}' | sort -u); do
  is_leftover "$bridge" || continue
  ip link delete "$bridge"
  links=$((links + 1))
done

if [ $((removed + links)) -gt 0 ]; then
  log "removed what an earlier Docker daemon left: $removed iptables rules, $links bridges of networks it no longer has"
fi
