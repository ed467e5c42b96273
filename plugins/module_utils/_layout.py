# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where the collection keeps things on a node, and how it spells an address in a URL.

One module for every path and URL pattern the roles, filters and modules share: the
filters expose it to YAML (``mindverse.sglang_pd.pd_service_files``,
``mindverse.sglang_pd.pd_http_url``), so no role or playbook composes these by hand.
"""
from __future__ import annotations

import re

# The collection's roles; each one's variables start with its name, the inventory-wide ones with
# sglang_pd_ (tests/unit/plugins/filter/test_layout.py holds ROLES to the roles/ folder).
ROLES = ("apt_lists", "container_engine", "mooncake_patch", "rdma", "rocm", "sglang_firewall", "sglang_image",
         "sglang_model", "sglang_monitoring", "sglang_roll", "sglang_router", "sglang_router_lb", "sglang_service",
         "sglang_worker", "unified_image")
VARIABLE_PREFIXES = ("sglang_pd_",) + tuple(f"{role}_" for role in ROLES)
# The kinds of worker (each an inventory group sglang_MODE), and of service (the router too).
WORKER_MODES = ("prefill", "decode")
SERVICE_MODES = WORKER_MODES + ("router",)
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


# An image repository as Docker's reference grammar reads one (distribution/reference,
# regexp.go): [DOMAIN[:PORT]/]PATH, the domain any case, each PATH component lowercase
# alphanumerics joined by '.', '_', '__' or dashes. No scheme, no space, no tag or digest here.
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[0-9a-fA-F:.]+\])(?::[0-9]+)?"
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
REPOSITORY_RE = re.compile(rf"(?:{_DOMAIN}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*")


def repository_problem(repository):
    """Why Docker would refuse REPOSITORY as the name part of an image reference ('' when it takes it)."""
    text = str(repository)
    if text != text.strip() or any(c.isspace() for c in text):
        return "it holds whitespace (a stray space or newline)"
    if "://" in text:
        return "it starts with a URL scheme; Docker names a registry without one"
    if "@" in text:
        return "it holds a digest; the digest goes in sglang_pd_image_digest"
    if len(text) > 255:
        return "it is longer than the 255 characters Docker allows"
    if not REPOSITORY_RE.fullmatch(text):
        domain, slash, _path = text.partition("/")
        path = _path if slash and re.search(r"[.:]|^localhost$|[A-Z]", domain) else text
        if path != path.lower():
            return "a repository path is lowercase in Docker's reference grammar"
        if ":" in path:
            return "it holds a tag; an image is pinned by sglang_pd_image_digest only"
        return "Docker's reference grammar refuses it"
    return ""


def endpoint_problem(path):
    """Why PATH is not the path of an HTTP endpoint on a server ('' when it is one: ``/health_generate``)."""
    text = str(path)
    if "://" in text:
        return "a URL; the collection puts its own address and port in front of it"
    if not text.startswith("/") or text.startswith("//"):
        return "not a path: it must start with one /"
    if re.search(r"[\s\x00-\x1f\x7f#]", text):
        return "holds whitespace, a control character or a fragment (#)"
    return ""


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
