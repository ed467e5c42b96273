#!/usr/bin/env bash
# The names of the images that set-up builds: the one place they are written.
# Prints NAME=value lines. lib.sh reads them for the set-up scripts; the Makefile exports
# them to molecule and pytest; tests/unit/test_image_names.py fails when any other file
# names a sglang-pd-test/* image that is not one of these.
# Each tag is the hash of what the image is built from, so a changed recipe never reuses
# an image left from earlier work.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# The Debian 12 base (debootstrap), the parent of every other test image.
base_tag=$(sha256sum "$repo/scripts/setup/base_image.sh" | cut -c1-12)
echo "SGLANG_PD_BASE_IMAGE=sglang-pd-test/debian-base:$base_tag"
# The fleet node (systemd + Docker engine): its Dockerfile on that base.
node_tag=$({ cat "$repo/tests/images/node/Dockerfile"; echo "$base_tag"; } | sha256sum | cut -c1-12)
echo "SGLANG_PD_NODE_IMAGE=sglang-pd-test/node:$node_tag"
# The base of the execution environment (make ee): its Dockerfile on that base.
ee_base_tag=$({ cat "$repo/tests/images/ee-base/Dockerfile"; echo "$base_tag"; } | sha256sum | cut -c1-12)
echo "SGLANG_PD_EE_BASE_IMAGE=sglang-pd-test/ee-base:$ee_base_tag"
# The execution environment itself: rebuilt by every make ee (it holds the collection as built).
echo "SGLANG_PD_EE_IMAGE=sglang-pd-test/ee:$ee_base_tag"
