# Copyright: (c) 2026, mindverse infrastructure team
# Apache License 2.0, compatible with the GNU General Public License v3.0+ (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations


class ModuleDocFragment:
    """The Docker daemon option of the image modules (image_artifacts, image_overlay_commit, image_pull)."""

    DOCUMENTATION = r"""
options:
  docker_host:
    description:
      - Docker daemon to talk to, for example V(unix:///var/run/docker.sock) or V(tcp://host:2376).
      - Defaults to E(DOCKER_HOST) or the local socket.
    type: str
"""
