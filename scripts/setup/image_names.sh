#!/usr/bin/env bash
# The names of the images that set-up builds: the one place they are written.
# Prints NAME=value lines. lib.sh reads them for the set-up scripts; the Makefile exports
# them to molecule and pytest; tests/unit/test_image_names.py fails when any other file
# names a sglang-pd-test/* image that is not one of these.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# The Debian 12 base (debootstrap), the parent of every other test image.
echo "SGLANG_PD_BASE_IMAGE=sglang-pd-test/debian-base:12"
# The fleet node (systemd + Docker engine), tagged by its Dockerfile's content.
echo "SGLANG_PD_NODE_IMAGE=sglang-pd-test/node:$(sha256sum "$repo/tests/images/node/Dockerfile" | cut -c1-12)"
