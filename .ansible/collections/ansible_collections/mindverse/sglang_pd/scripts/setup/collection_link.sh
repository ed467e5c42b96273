#!/usr/bin/env bash
# Make the repo resolvable as mindverse.sglang_pd (ansible.cfg's collections_path).
source "$(dirname "$0")/lib.sh"
mkdir -p "$CACHE/collections/ansible_collections/mindverse"
ln -sfn "$REPO" "$CACHE/collections/ansible_collections/mindverse/sglang_pd"
