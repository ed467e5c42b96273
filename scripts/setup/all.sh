#!/usr/bin/env bash
# Everything the demo and the tests need, reused when already there.
source "$(dirname "$0")/lib.sh"
dir=$(dirname "$0")
bash "$dir/docker.sh"
bash "$dir/docker_leftovers.sh"
bash "$dir/test_tools.sh"
bash "$dir/venv.sh"
bash "$dir/sources.sh"
bash "$dir/collection_link.sh"
bash "$dir/base_image.sh"
bash "$dir/fleet_ssh.sh"
bash "$dir/registry.sh"
bash "$dir/egress_counters.sh"
bash "$dir/images.sh"
