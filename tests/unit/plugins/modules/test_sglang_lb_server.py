# Copyright: (c) 2026, mindverse infrastructure team
# SPDX-License-Identifier: Apache-2.0
"""Module sglang_lb_server: HAProxy's runtime answers as it reads them, and the module against a stand-in socket.

The answers below are HAProxy 2.6's own (Debian 12), trimmed to the fields read. The real HAProxy
runs the module in tests/integration/test_router_lb.py.
"""

from __future__ import annotations

import re
import socketserver
import threading

import pytest

from ansible_collections.mindverse.sglang_pd.plugins.module_utils import _haproxy_runtime as runtime
from ansible_collections.mindverse.sglang_pd.plugins.modules import sglang_lb_server
from module_runner import run_module

SHOW_STAT = """# pxname,svname,qcur,qmax,scur,smax,slim,stot,status,weight
sglang_router_lb,FRONTEND,,,3,5,9984,40,OPEN,
sglang_router,router-0,0,0,2,4,,20,UP,1
sglang_router,router-1,0,0,{router_1},3,,20,{status},1
sglang_router,BACKEND,0,0,3,5,999,40,UP,2
"""
STATE_HEADER = ("1\n# be_id be_name srv_id srv_name srv_addr srv_op_state srv_admin_state srv_uweight srv_iweight "
                "srv_time_since_last_change srv_check_status\n")
STATE_LINE = "4 sglang_router {id} {name} 10.0.0.{id} 2 {admin} 1 1 12 6\n"


def servers_state(admin_1, admin_0=0):
    return STATE_HEADER + STATE_LINE.format(id=1, name="router-0", admin=admin_0) + STATE_LINE.format(id=2, name="router-1", admin=admin_1)


def test_show_stat_gives_each_servers_current_sessions():
    rows = runtime.parse_stat(SHOW_STAT.format(router_1=1, status="DRAIN"))
    assert runtime.server_sessions(rows, "sglang_router", "router-0") == 2
    assert runtime.server_sessions(rows, "sglang_router", "router-1") == 1
    assert runtime.server_sessions(rows, "sglang_router", "router-9") is None
    assert runtime.server_sessions(rows, "other", "router-0") is None


def test_an_answer_that_is_not_show_stat_csv_is_refused():
    with pytest.raises(runtime.HAProxyRuntimeError, match="show stat CSV"):
        runtime.parse_stat("Unknown command.\n")


@pytest.mark.parametrize("flags, state", [
    (0x00, "ready"), (0x08, "drain"), (0x01, "maint"),
    (0x09, "maint"),  # forced maintenance wins over drain
    (0x02, "ready"),  # maintenance inherited from a tracked server: not the operator's
    (0x10, "ready"),  # drain inherited from a tracked server
])
def test_the_operators_state_comes_from_the_forced_admin_flags(flags, state):
    fields = runtime.parse_servers_state(servers_state(flags))["router-1"]
    assert (fields["be_name"], fields["srv_addr"]) == ("sglang_router", "10.0.0.2")
    assert runtime.admin_state(fields) == state


class OneCommand(socketserver.StreamRequestHandler):
    """Reads one command line, writes the server's answer, closes: as HAProxy's runtime API does."""

    def handle(self):
        command = self.rfile.readline().decode().strip()
        self.server.commands.append(command)
        self.wfile.write(self.server.answer(command).encode())


class FakeHAProxy(socketserver.ThreadingUnixStreamServer):
    """The runtime API of one backend with router-0 and router-1."""

    daemon_threads = True

    def __init__(self, path, sessions):
        self.admin, self.sessions, self.commands = 0, list(sessions), []
        super().__init__(path, OneCommand)

    def answer(self, command):
        if command == "show servers state sglang_router":
            return servers_state(self.admin)
        if command == "show stat":
            now = self.sessions.pop(0) if len(self.sessions) > 1 else self.sessions[0]
            return SHOW_STAT.format(router_1=now, status="UP")
        flags = {"set server sglang_router/router-1 state drain": 0x08, "set server sglang_router/router-1 state maint": 0x01,
                 "set server sglang_router/router-1 state ready": 0x00}
        if command in flags:
            self.admin = flags[command]
            return "\n"
        return "No such server.\n\n"


@pytest.fixture
def haproxy(tmp_path):
    def start(sessions=(0,)):
        server = FakeHAProxy(str(tmp_path / "admin.sock"), sessions)
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        started.append(server)
        return server
    started = []
    yield start
    for server in started:
        server.shutdown()
        server.server_close()


def _run(fake, check_mode=False, **args):
    return run_module(sglang_lb_server, dict({"socket": fake.server_address, "server": "router-1"}, **args), check_mode=check_mode)


def test_drain_waits_until_the_sessions_end_and_a_second_run_changes_nothing(haproxy):
    server = haproxy(sessions=[2, 1, 0])
    result = _run(server, state="drain", wait_idle=True, timeout=30)
    assert (result["changed"], result["state_before"], result["state_after"]) == (True, "ready", "drain")
    assert (result["idle"], result["sessions"], result["sessions_seen"]) == (True, 0, [2, 1, 0])
    assert "set server sglang_router/router-1 state drain" in server.commands
    again = _run(server, state="drain", wait_idle=True, timeout=30)
    assert (again["changed"], again["state_before"], again["state_after"]) == (False, "drain", "drain")
    assert server.commands.count("set server sglang_router/router-1 state drain") == 1


def test_check_mode_reports_the_change_and_sets_nothing(haproxy):
    server = haproxy(sessions=[3])
    result = _run(server, check_mode=True, state="maint", wait_idle=True, timeout=30)
    assert (result["changed"], result["state_before"], result["state_after"], result["sessions"]) == (True, "ready", "maint", 3)
    assert not [command for command in server.commands if command.startswith("set ")]
    assert server.admin == 0


def test_sessions_that_do_not_end_fail_after_the_timeout(haproxy):
    server = haproxy(sessions=[1])
    result = _run(server, state="drain", wait_idle=True, timeout=0.3)
    assert result["failed"] and result["sessions"] == 1
    assert "still holds 1 sessions" in result["msg"]


def test_ready_readmits_a_drained_server_without_waiting(haproxy):
    server = haproxy(sessions=[4])
    server.admin = 0x08
    result = _run(server, state="ready", wait_idle=True)
    assert (result["changed"], result["state_before"], result["state_after"], result["sessions_seen"]) == (True, "drain", "ready", [4])


@pytest.mark.parametrize("args, message", [
    ({"server": "router-9", "state": "drain"}, "has no server sglang_router/router-9 \\(servers of that backend: router-0, router-1"),
    ({"backend": "other", "state": "drain"}, "has no server other/router-1"),
])
def test_an_unknown_server_or_backend_is_named(haproxy, args, message):
    result = _run(haproxy(), **args)
    assert result["failed"]
    assert result["msg"].startswith("HAProxy") and re.search(message, result["msg"])


def test_a_socket_nobody_listens_on_says_what_to_check(tmp_path):
    result = run_module(sglang_lb_server, {"socket": str(tmp_path / "none.sock"), "server": "router-1", "state": "drain"})
    assert result["failed"] and "is HAProxy running" in result["msg"]
