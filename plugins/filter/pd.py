# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The topology: which PD workers run where (names, ports, GPUs, NICs, node ranks), and the routers' URLs.

The roles, the dry-run render (playbooks/render.yml) and the preflight checks all use
these filters, so what is rendered and checked is what runs. What each worker and router
runs (command line, container, launch script) is its plan: plugins/plugin_utils/service_plan.py.

Everything here reads inventory variables only (``hostvars`` as the inventory and
extra vars define them), never gathered facts: a run with ``--limit`` sees the same
workers, addresses and ports as a full run.
"""
from __future__ import annotations

import ipaddress
import posixpath
import re
from collections.abc import Mapping

from ansible.errors import AnsibleFilterError

from ansible_collections.mindverse.sglang_pd.plugins.module_utils._layout import WORKER_MODES, http_url, url_host


MODES = WORKER_MODES
# Production ports (seed deployment); each can be set per host or group in inventory.
DEFAULT_PORTS = {"prefill": 30100, "decode": 30200}
DEFAULT_BOOTSTRAP_PORT = 8998
DEFAULT_DIST_INIT_PORT = 20000
DEFAULT_ROUTER_PORT = 30000
DEFAULT_GPUS_PER_HOST = 8
WORKER_SPEC_KEYS = ("name", "port", "bootstrap_port", "gpus", "args", "env", "ib_device")


def _ip(value):
    """The IP address in ``value`` (``10.0.0.4`` or ``10.0.0.4/24``), or None."""
    try:
        return ipaddress.ip_interface(str(value).strip()).ip
    except ValueError:
        return None


def address_candidates(hostvars_one):
    """Addresses listed in inventory for a host (``sglang_pd_addresses``), interface first."""
    listed = hostvars_one.get("sglang_pd_addresses")
    interface = hostvars_one.get("sglang_pd_service_interface")
    if isinstance(listed, Mapping):
        if interface:
            values = listed.get(interface) or []
        else:
            values = [a for v in listed.values() for a in (v if isinstance(v, (list, tuple)) else [v])]
    else:
        values = listed or []
    if isinstance(values, str):
        values = [values]
    return list(values)


def resolve_service_address(hostvars_one, host):
    """Return (address, source, problem) for one host, from inventory variables only.

    Order: ``sglang_pd_service_address``; else the first address of
    ``sglang_pd_addresses`` (of ``sglang_pd_service_interface`` when set) that lies in
    ``sglang_pd_cluster_cidr`` (when set); else ``ansible_host``; else the host name.
    """
    explicit = hostvars_one.get("sglang_pd_service_address")
    if explicit:
        return str(explicit), "sglang_pd_service_address", None
    interface = hostvars_one.get("sglang_pd_service_interface")
    listed = hostvars_one.get("sglang_pd_addresses")
    if interface or listed:
        source = "sglang_pd_addresses" + (f"[{interface}]" if interface else "")
        cidr = hostvars_one.get("sglang_pd_cluster_cidr")
        network = None
        if cidr:
            try:
                network = ipaddress.ip_network(str(cidr), strict=False)
            except ValueError:
                return None, source, f"sglang_pd_cluster_cidr {cidr!r} is not a network"
        for candidate in address_candidates(hostvars_one):
            ip = _ip(candidate)
            if ip is not None and (network is None or ip in network):
                return str(ip), source, None
        where = f" inside {cidr}" if cidr else ""
        return None, source, f"no address{where} in {source}"
    ansible_host = hostvars_one.get("ansible_host")
    if ansible_host:
        return str(ansible_host), "ansible_host", None
    return host, "inventory_hostname", None


def service_address(hostvars_one, host: str) -> str:
    """The address other nodes reach this host at: inventory first, never gathered facts."""
    address, source, problem = resolve_service_address(hostvars_one, host)
    if problem:
        raise AnsibleFilterError(
            f"{host}: {problem}; set sglang_pd_service_address, or list the host's addresses in "
            f"sglang_pd_addresses (source: {source}) [SGLPD-INV-001]")
    return address


def parse_gpus(value):
    """GPU ids from ``"0,1,2,3"``, ``[0, 1, 2, 3]`` or ``"0-3"``; None when not given.

    Raises ValueError on anything else.
    """
    if value is None or value == "" or value == []:
        return None
    if isinstance(value, bool):
        raise ValueError("a boolean is not a GPU list")
    if isinstance(value, str):
        ids = []
        for part in value.split(","):
            part = part.strip()
            match = re.fullmatch(r"(\d+)-(\d+)", part)
            if match and int(match.group(1)) > int(match.group(2)):
                raise ValueError(f"{part!r} is a reversed range: write {match.group(2)}-{match.group(1)}")
            if match:
                ids.extend(range(int(match.group(1)), int(match.group(2)) + 1))
            elif part.isdigit():
                ids.append(int(part))
            else:
                raise ValueError(f"{part!r} is not a GPU id")
        return ids
    if isinstance(value, (list, tuple)):
        ids = []
        for part in value:
            if isinstance(part, bool) or not str(part).strip().isdigit():
                raise ValueError(f"{part!r} is not a GPU id")
            ids.append(int(part))
        return ids
    raise ValueError(f"{value!r} is neither a list nor a comma-separated string of GPU ids")


def _int(value, default):
    if value is None or value == "":
        return default
    return int(value)


def pd_workers(hosts, hostvars, mode, ranks="serving"):
    """Every worker of one mode on the given hosts, from inventory variables only.

    A host runs one worker per entry of ``sglang_pd_<mode>_workers`` (a list of
    dicts with optional ``name``, ``port``, ``bootstrap_port``, ``gpus``, ``args``,
    ``env``, ``ib_device``); without that list it runs one worker on
    ``sglang_pd_<mode>_port`` (30100 for prefill, 30200 for decode) and
    ``sglang_pd_bootstrap_port`` (8998).

    Hosts of the mode's group that share ``sglang_pd_worker_group`` run ONE worker
    that spans them: node rank is the host's position in the group, and
    ``--dist-init-addr`` is the first host's service address with
    ``sglang_pd_dist_init_port`` (20000). Only rank 0 serves HTTP, so only rank 0 is
    returned unless ``ranks='all'`` (what the worker role runs on each host).
    """
    if mode not in MODES:
        raise AnsibleFilterError(f"mode must be one of {MODES}, got {mode!r} [SGLPD-DEF-001]")
    if ranks not in ("serving", "all"):
        raise AnsibleFilterError(f"ranks must be 'serving' or 'all', got {ranks!r} [SGLPD-DEF-001]")
    workers = []
    for host in hosts:
        one = hostvars[host]
        address = service_address(one, host)
        specs = one.get(f"sglang_pd_{mode}_workers") or [{}]
        group = one.get("sglang_pd_worker_group") or None
        default_port = _int(one.get(f"sglang_pd_{mode}_port"), DEFAULT_PORTS[mode])
        default_bootstrap_port = _int(one.get("sglang_pd_bootstrap_port"), DEFAULT_BOOTSTRAP_PORT)
        for index, spec in enumerate(specs):
            spec = spec or {}
            port = _int(spec.get("port"), default_port + index)
            bootstrap = _int(spec.get("bootstrap_port"), default_bootstrap_port + index)
            name = spec.get("name") or (f"sglang-{mode}" if index == 0 else f"sglang-{mode}-{index}")
            try:
                gpus = parse_gpus(spec.get("gpus"))
            except ValueError:
                gpus = None
            workers.append({
                "host": host,
                "name": name,
                "mode": mode,
                "index": index,
                "address": address,
                # Where the server listens: its service address, all interfaces only when asked.
                "listen": "0.0.0.0" if one.get("sglang_pd_listen_all") is True else address,
                "port": port,
                "bootstrap_port": bootstrap if mode == "prefill" else None,
                "url": http_url(address, port),
                "gpus": gpus,
                "gpus_per_host": _int(one.get("sglang_pd_gpus_per_host"), DEFAULT_GPUS_PER_HOST),
                "args": dict(spec.get("args") or {}),
                "env": dict(spec.get("env") or {}),
                "ib_device": spec.get("ib_device"),
                "group": group if len(specs) == 1 else None,
                "dist_init_port": _int(one.get("sglang_pd_dist_init_port"), DEFAULT_DIST_INIT_PORT),
                "nnodes": 1,
                "node_rank": 0,
                "dist_init_addr": None,
                "serves_http": True,
            })
    groups = {}
    for worker in workers:
        if worker["group"]:
            groups.setdefault(worker["group"], []).append(worker)
    for members in groups.values():
        first = members[0]
        for rank, worker in enumerate(members):
            worker.update({
                "nnodes": len(members),
                "node_rank": rank,
                "dist_init_addr": f"{url_host(first['address'])}:{first['dist_init_port']}",
                "serves_http": rank == 0,
            })
    if ranks == "serving":
        return [w for w in workers if w["serves_http"]]
    return workers


def worker_gpu_keys(worker, role_vars):
    """(key, physical GPU) of each GPU a worker uses, keyed as its per-GPU IB map counts them.

    With ``visible_devices`` isolation a worker given ``gpus`` sees them as 0..n-1; with
    ``base_gpu_id`` (or without ``gpus``) the keys are the node's GPU ordinals.
    """
    gpus = worker.get("gpus")
    if not gpus:
        return [(gpu, gpu) for gpu in range(worker.get("gpus_per_host") or DEFAULT_GPUS_PER_HOST)]
    if _value(role_vars, "sglang_worker_gpu_isolation", "visible_devices") == "base_gpu_id":
        return [(gpu, gpu) for gpu in gpus]
    return list(enumerate(gpus))


def auto_ib_device_map(worker, role_vars):
    """``sglang_worker_ib_device: auto``: GPU key -> its nearest NIC, from the node's pairing.

    The pairing is ``sglang_worker_fabric.pairs`` (gpu_nic_affinity over the node's sysfs,
    read by the role's tasks/fabric.yml). None when it is not known (the render without
    node facts) or the node has no RDMA device: SGLang's Mooncake then picks the devices.
    """
    pairs = (role_vars.get("sglang_worker_fabric") or {}).get("pairs") or []
    nic_of = dict((pair["gpu"], pair["nic"]) for pair in pairs)
    mapped = dict((key, nic_of[gpu]) for key, gpu in worker_gpu_keys(worker, role_vars) if gpu in nic_of)
    return mapped or None


def worker_ib_device(worker, role_vars):
    """The ``--disaggregation-ib-device`` setting of one worker and the variable it comes from.

    A worker's own ``ib_device`` wins over ``sglang_worker_ib_device``; ``auto`` is resolved
    to the per-GPU map of the node's GPU-NIC pairing (auto_ib_device_map).
    """
    if worker.get("ib_device"):
        value, origin = worker["ib_device"], "ib_device in sglang_pd_%s_workers" % worker["mode"]
    else:
        value, origin = role_vars.get("sglang_worker_ib_device"), "sglang_worker_ib_device"
    if value == "auto":
        return auto_ib_device_map(worker, role_vars), origin + ": auto (the node's GPU-NIC pairing)"
    return value, origin


def worker_nics(worker, role_vars):
    """The RDMA devices a worker's ``--disaggregation-ib-device`` names; None when not known.

    Unknown: unset (Mooncake picks), or a JSON string or file the collection does not read.
    """
    value = worker_ib_device(worker, role_vars)[0]
    if isinstance(value, Mapping):
        names = []
        for devices in value.values():
            names.extend(devices if isinstance(devices, (list, tuple)) else str(devices).split(","))
    elif isinstance(value, (list, tuple)):
        names = list(value)
    elif isinstance(value, str) and value and not value.lstrip().startswith(("{", "/")):
        names = value.split(",")
    else:
        return None
    return sorted(set(str(name).strip() for name in names))


def worker_gid_index(worker, role_vars):
    """``MC_GID_INDEX`` for a worker: the routable RoCE v2 GID index its NICs share, else None.

    The indexes come from ``sglang_worker_fabric.gid_index`` (NIC -> index, RoCE ports with a
    RoCE v2 GID in sglang_pd_cluster_cidr); NICs that disagree give None (the fabric check
    refuses that map).
    """
    known = (role_vars.get("sglang_worker_fabric") or {}).get("gid_index") or {}
    indexes = set(known.get(nic) for nic in worker_nics(worker, role_vars) or [])
    indexes.discard(None)
    return indexes.pop() if len(indexes) == 1 else None


def _value(role_vars, name, default=None):
    """The variable NAME of ROLE_VARS, DEFAULT when unset or null."""
    value = role_vars.get(name)
    return default if value is None else value


def router_worker_spec(worker):
    """A ``pd_workers`` item as the router's worker API takes it: ``{url, worker_type, bootstrap_port}``."""
    try:
        mode, url = worker["mode"], worker["url"]
    except (KeyError, TypeError) as exc:
        raise AnsibleFilterError(f"expected a worker with 'mode' and 'url' (pd_workers filter), got {worker!r} [SGLPD-DEF-001]") from exc
    spec = {"url": url, "worker_type": mode}
    if mode == "prefill" and worker.get("bootstrap_port") is not None:
        spec["bootstrap_port"] = int(worker["bootstrap_port"])
    return spec


def router_port(role_vars, hostvars_one=None):
    """The router's port: sglang_router_port, else sglang_pd_router_port, else 30000."""
    for value in (role_vars.get("sglang_router_port"), (hostvars_one or {}).get("sglang_pd_router_port")):
        if value not in (None, ""):
            return int(value)
    return DEFAULT_ROUTER_PORT


def router_url(hostvars_one, host):
    """The URL of the router on HOST, from the inventory: its service address and router port."""
    return http_url(service_address(hostvars_one, host), router_port(hostvars_one, hostvars_one))


def router_admin_key(hostvars_one):
    """The key the collection changes a router's workers with, from that router host's variables.

    With control-plane keys the router takes worker changes (and, for sglang-router, worker
    lists) only from one of them, with the admin role: the first such key of
    sglang_router_control_plane_api_keys; without them sglang_router_api_key ("" for none).
    """
    admin = first_admin_key(hostvars_one.get("sglang_router_control_plane_api_keys"))
    return str(admin["key"]) if admin else str(hostvars_one.get("sglang_router_api_key") or "")


def first_admin_key(control_plane_keys):
    """The first entry of sglang_router_control_plane_api_keys with the admin role and a key, or None."""
    for key in control_plane_keys or []:
        if isinstance(key, Mapping) and key.get("role") == "admin" and key.get("key"):
            return key
    return None


def router_metrics_url(hostvars_one, host, router_defaults=None):
    """The URL of the Prometheus endpoint of the router on HOST, or "" when it exports none.

    Its port is sglang_router_prometheus_port (ROUTER_DEFAULTS: the sglang_router role's
    defaults, read as data); its address sglang_router_prometheus_host unless that is a
    wildcard, else the host's service address.
    """
    port = hostvars_one.get("sglang_router_prometheus_port", (router_defaults or {}).get("sglang_router_prometheus_port"))
    if port in (None, "", 0):
        return ""
    address = hostvars_one.get("sglang_router_prometheus_host")
    if address in (None, "", "0.0.0.0", "::"):
        address = service_address(hostvars_one, host)
    return http_url(address, port)


def _holding_volume(container_path, volumes):
    """``(volume, source, target)`` of the bind mount that holds CONTAINER_PATH (the deepest), or None."""
    if not container_path:
        return None
    path = posixpath.normpath(str(container_path))
    best = None
    for volume in volumes or []:
        parts = str(volume).split(":")
        if len(parts) < 2 or not parts[0].startswith("/"):
            continue
        source, target = posixpath.normpath(parts[0]), posixpath.normpath(parts[1])
        if path == target or path.startswith(target.rstrip("/") + "/"):
            if best is None or len(target) > len(best[2]):
                best = (str(volume), source, target)
    return best


def volume_host_path(container_path, volumes):
    """Where CONTAINER_PATH lies on the host, through Docker ``--volume`` values ``SRC:DST[:OPTS]``.

    None when no bind mount (a SRC that starts with ``/``) holds the path: it is then in
    the image or on a named volume, and cannot be checked on the host.
    """
    found = _holding_volume(container_path, volumes)
    if found is None:
        return None
    rest = posixpath.relpath(posixpath.normpath(str(container_path)), found[2])
    return found[1] if rest == "." else posixpath.join(found[1], rest)


def volumes_holding(volumes, container_path):
    """The one bind mount of VOLUMES that holds CONTAINER_PATH, as a list (empty when none)."""
    found = _holding_volume(container_path, volumes)
    return [found[0]] if found else []


class FilterModule:
    """PD topology filters."""

    def filters(self):
        return {
            "pd_workers": pd_workers,
            "service_address": service_address,
            "router_url": router_url,
            "router_metrics_url": router_metrics_url,
            "router_admin_key": router_admin_key,
            "router_worker_spec": router_worker_spec,
            "volume_host_path": volume_host_path,
            "volumes_holding": volumes_holding,
        }
