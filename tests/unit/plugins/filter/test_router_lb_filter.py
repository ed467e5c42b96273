# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where the router balancer listens and the routers it sends to (plugins/filter/router_lb.py)."""

from __future__ import annotations

from ansible_collections.mindverse.sglang_pd.plugins.filter import router_lb


def test_each_router_is_its_service_address_and_router_port_ipv6_in_brackets():
    hostvars = {"r0": {"sglang_pd_service_address": "10.0.0.5", "sglang_pd_router_port": 30000},
                "r1": {"sglang_pd_service_address": "fd00:57::6", "sglang_router_port": 31000}}
    assert router_lb.router_lb_servers(["r0", "r1"], hostvars) == [
        {"name": "r0", "address": "10.0.0.5:30000"}, {"name": "r1", "address": "[fd00:57::6]:31000"}]


def test_the_frontend_defaults_to_the_service_address_and_the_routers_port():
    one = {"sglang_pd_service_address": "fd00:57::9", "sglang_pd_router_port": 30001}
    assert router_lb.router_lb_bind(one, "lb0") == "[fd00:57::9]:30001"
    assert router_lb.router_lb_bind(one, "lb0", "10.9.0.1", 8405) == "10.9.0.1:8405"
