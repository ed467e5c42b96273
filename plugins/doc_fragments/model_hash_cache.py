# Copyright: (c) 2026, mindverse infrastructure team
# Apache License 2.0, compatible with the GNU General Public License v3.0+ (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations


class ModuleDocFragment:
    """The hash cache option of the model modules (model_weights, model_stage)."""

    DOCUMENTATION = r"""
options:
  cache:
    description:
      - JSON file on the node that caches the sha256 of files by path, size and modification time.
      - An empty string turns caching off. When the cache cannot be written, the module warns and carries on.
    type: path
    default: /var/cache/sglang-pd/model-hashes.json
"""
