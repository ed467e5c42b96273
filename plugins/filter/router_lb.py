# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where the HAProxy balancer in front of the routers listens, and the routers it sends to.

The sglang_router_lb role writes these into haproxy.cfg. Each router is found where the other
roles find it (plugins/filter/pd.py: its service address and router port, from the inventory).
"""
from __future__ import annotations

from ansible_collections.mindverse.sglang_pd.plugins.filter.pd import router_port, service_address
from ansible_collections.mindverse.sglang_pd.plugins.module_utils._layout import url_host


def _endpoint(address, port):
    """``ADDRESS:PORT`` as HAProxy reads it, an IPv6 ADDRESS in brackets."""
    return f"{url_host(address)}:{int(port)}"


def router_lb_servers(routers, hostvars):
    """One ``{name, address}`` per router host of ROUTERS (in order): its inventory name and ``ADDRESS:PORT``."""
    return [{"name": host, "address": _endpoint(service_address(hostvars[host], host), router_port(hostvars[host], hostvars[host]))}
            for host in routers or []]


def router_lb_bind(hostvars_one, host, address=None, port=None):
    """``ADDRESS:PORT`` the balancer on HOST listens on: ADDRESS or the host's service address, PORT or the routers' port."""
    return _endpoint(address or service_address(hostvars_one, host), port or router_port(hostvars_one, hostvars_one))


class FilterModule:
    """Filters of the router balancer."""

    def filters(self):
        return {"router_lb_servers": router_lb_servers, "router_lb_bind": router_lb_bind}
