# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where the collection keeps things on a node, and how it spells an address in a URL.

One module for every path and URL pattern the roles, filters and modules share: the
filters expose it to YAML (``mindverse.sglang_pd.pd_service_files``,
``mindverse.sglang_pd.pd_http_url``), so no role or playbook composes these by hand.
"""
from __future__ import annotations

# The service files (sglang_service_config_dir's default): launch script, env, secret, gate.
CONFIG_DIR = "/etc/sglang-pd"
UNIT_DIR = "/etc/systemd/system"
# Where a service's secret file is mounted inside its container (read-only).
SECRET_MOUNT = "/run/sglang-pd/secret.json"


def service_files(name, config_dir=None):
    """The files of service NAME: launch script, env, workers env, secret, ready gate, unit.

    ``config_dir`` is sglang_service_config_dir (``None`` or ``''``: the default, CONFIG_DIR).
    Raises ValueError for a name that is not a plain file name or a config dir that is not absolute.
    """
    name = str(name or "")
    if not name or "/" in name or name in (".", ".."):
        raise ValueError(f"expected a service name, got {name!r}")
    config_dir = str(config_dir or CONFIG_DIR).rstrip("/") or "/"
    if not config_dir.startswith("/"):
        raise ValueError(f"sglang_service_config_dir must be an absolute path, got {config_dir!r}")
    base = f"{config_dir}/{name}"
    return {"config_dir": config_dir, "env": f"{base}.env", "workers_env": f"{base}.workers.env",
            "secret": f"{base}.secret.json", "script": f"{base}.sh", "gate": f"{base}.gate.nft",
            "unit": f"{UNIT_DIR}/{name}.service"}


def image_reference(repository, digest):
    """``REPOSITORY@sha256:DIGEST``: the one place an image reference is built (ValueError without both)."""
    if not repository or not digest:
        raise ValueError("an image reference needs sglang_pd_image_repository and sglang_pd_image_digest")
    return f"{repository}@{digest}"


def image_digest(reference, repository=None):
    """The digest of ``REPOSITORY@DIGEST`` ('' without one, or when it names another REPOSITORY)."""
    name, found, digest = str(reference or "").rpartition("@")
    if not found or (repository is not None and name != repository):
        return ""
    return digest


def url_host(address):
    """ADDRESS as the host part of a URL: an IPv6 address in brackets."""
    address = str(address)
    return f"[{address}]" if ":" in address and not address.startswith("[") else address


def http_url(address, port):
    """``http://ADDRESS:PORT``, an IPv6 ADDRESS in brackets."""
    return f"http://{url_host(address)}:{int(port)}"
