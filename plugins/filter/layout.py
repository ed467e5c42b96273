# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The collection's layout on a node (plugins/module_utils/_layout.py), for YAML."""
from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.mindverse.sglang_pd.plugins.module_utils import _layout


def pd_service_files(name, config_dir=None):
    """The files of service NAME under CONFIG_DIR (sglang_service_config_dir; default /etc/sglang-pd).

    Returns ``{config_dir, script, env, workers_env, secret, gate, unit}``.
    """
    try:
        return _layout.service_files(name, config_dir)
    except ValueError as exc:
        raise AnsibleFilterError(f"pd_service_files: {exc} [SGLPD-DEF-001]") from exc


def image_reference(repository, digest):
    """``REPOSITORY@sha256:DIGEST``: the one place an image reference is built."""
    try:
        return _layout.image_reference(repository, digest)
    except ValueError as exc:
        raise AnsibleFilterError(f"{exc} [SGLPD-IMG-020]") from exc


def image_digest(reference, repository=None):
    """The digest of an image reference ``REPOSITORY@DIGEST``; '' without one or, with REPOSITORY, of another repository."""
    return _layout.image_digest(reference, repository)


def pd_http_url(address, port):
    """``http://ADDRESS:PORT``, an IPv6 ADDRESS in brackets."""
    try:
        return _layout.http_url(address, port)
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"pd_http_url: expected an address and a port, got {address!r}, {port!r} [SGLPD-DEF-001]") from exc


class FilterModule:
    """Paths and URLs of the collection's layout."""

    def filters(self):
        return {"pd_service_files": pd_service_files, "pd_http_url": pd_http_url,
                "image_reference": image_reference, "image_digest": image_digest}
