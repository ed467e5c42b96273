# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The live fleet, read from the fleet: which SGLang services a host runs, from Docker.

Every container the roles start carries labels (``pd_service_labels``): its service name,
mode (prefill, decode or router), port and bootstrap port. ``pd_live_services`` turns the
containers Docker reports (``community.docker.docker_host_info``) back into services,
so the day-2 playbooks learn what runs from Docker itself, never from files they wrote.
"""
from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.mindverse.sglang_pd.plugins.module_utils._layout import SERVICE_MODES, http_url

LABEL_PREFIX = "org.mindverse.sglang_pd."
SERVICE_LABEL = LABEL_PREFIX + "service"
MODES = SERVICE_MODES


def pd_service_labels(service):
    """Docker ``--label`` values of one service: ``{name, mode, port[, bootstrap_port]}``."""
    try:
        name, mode, port = service["name"], service["mode"], service["port"]
    except (KeyError, TypeError) as exc:
        raise AnsibleFilterError(f"expected a service with name, mode and port, got {service!r} [SGLPD-DEF-001]") from exc
    if mode not in MODES:
        raise AnsibleFilterError(f"mode must be one of {MODES}, got {mode!r} [SGLPD-DEF-001]")
    labels = [f"{SERVICE_LABEL}={name}", f"{LABEL_PREFIX}mode={mode}", f"{LABEL_PREFIX}port={int(port)}"]
    if mode == "prefill" and service.get("bootstrap_port") is not None:
        labels.append(f"{LABEL_PREFIX}bootstrap_port={int(service['bootstrap_port'])}")
    return labels


def pd_live_services(containers, address, mode=None):
    """The services a host runs, from the containers Docker lists there.

    ``containers`` is ``docker_host_info``'s ``containers`` (any state); ``address`` is the
    host's service address (for the URL). Returns ``[{name, mode, port, bootstrap_port,
    image, url, state, container}]`` sorted by name, only ``mode`` when given.
    """
    if not isinstance(containers, list):
        raise AnsibleFilterError(f"expected the containers list of docker_host_info, got {type(containers).__name__} [SGLPD-DEF-001]")
    services = []
    for container in containers:
        labels = container.get("Labels") or {}
        name = labels.get(SERVICE_LABEL)
        if not name:
            continue
        kind = labels.get(LABEL_PREFIX + "mode")
        if mode is not None and kind != mode:
            continue
        try:
            port = int(labels.get(LABEL_PREFIX + "port"))
        except (TypeError, ValueError):
            port = None
        bootstrap = labels.get(LABEL_PREFIX + "bootstrap_port")
        services.append({
            "name": name,
            "mode": kind,
            "port": port,
            "bootstrap_port": int(bootstrap) if bootstrap else None,
            "image": container.get("Image", ""),
            "url": http_url(address, port) if port else None,
            "state": container.get("State", ""),
            "container": (container.get("Names") or [""])[0].lstrip("/"),
        })
    return sorted(services, key=lambda s: s["name"])


class FilterModule:
    """Live-fleet filters."""

    def filters(self):
        return {"pd_live_services": pd_live_services}
