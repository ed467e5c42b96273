#!/usr/bin/env bash
# The keys the local fleet is reached with over SSH, as production nodes are: azureuser's
# key pair (the controller keeps the private key, 0600), the nodes' host key and the
# controller's known_hosts entry for the fleet network. tests/fleet/up.yml mounts node/
# read-only into every node container at /etc/ssh/fleet; the inventory's connection settings
# (generated.yml, written by images.sh) name the private key and the known_hosts file.
source "$(dirname "$0")/lib.sh"
dir=$CACHE/fleet-ssh
user=azureuser
# The fleet network's nodes (tests/fleet/up.yml, molecule inventories): 172.30.57.0/24.
hosts_pattern='172.30.57.*'
mkdir -p "$dir/node/authorized_keys"
chmod 0700 "$dir"
chmod 0755 "$dir/node" "$dir/node/authorized_keys"
if [ ! -s "$dir/id_ed25519" ]; then
  log "generating the fleet's SSH keys in $dir"
  ssh-keygen -q -t ed25519 -N '' -C "sglang-pd-controller" -f "$dir/id_ed25519"
  ssh-keygen -q -t ed25519 -N '' -C "sglang-pd-node" -f "$dir/node/ssh_host_ed25519_key"
fi
chmod 0600 "$dir/id_ed25519" "$dir/node/ssh_host_ed25519_key"
install -m 0644 "$dir/id_ed25519.pub" "$dir/node/authorized_keys/$user"
printf '%s %s\n' "$hosts_pattern" "$(cut -d' ' -f1,2 "$dir/node/ssh_host_ed25519_key.pub")" > "$dir/known_hosts"
chmod 0644 "$dir/known_hosts"
