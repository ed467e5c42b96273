# Copyright: (c) 2026, mindverse infrastructure team
# Apache License 2.0, compatible with the GNU General Public License v3.0+ (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations


class ModuleDocFragment:
    """The HTTP options of the modules that talk to SGLang servers and routers (module_utils/_http.py: HTTP_ARGUMENT_SPEC)."""

    DOCUMENTATION = r"""
options:
  api_key:
    description:
      - "API key sent as C(Authorization: Bearer <api_key>): the C(--api-key) of the server or router the URL names."
      - Never logged, and never returned.
    type: str
  validate_certs:
    description:
      - Verify the TLS certificate of an HTTPS URL.
    type: bool
    default: true
"""
