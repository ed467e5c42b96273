#!/usr/bin/env bash
# Make the repo resolvable as mindverse.sglang_pd (ansible.cfg's collections_path).
source "$(dirname "$0")/lib.sh"
mkdir -p "$CACHE/collections/ansible_collections/mindverse"
ln -sfn "$REPO" "$CACHE/collections/ansible_collections/mindverse/sglang_pd"
# The scale scenario's own inventory shares the local fleet's group variables
# (generated.yml included); the link is made here, not committed.
ln -sfn ../../../../inventories/local/group_vars/all "$REPO/molecule/scale/inventory/group_vars/all"
