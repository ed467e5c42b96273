"""The stand-in prints the lines Mooncake's transfer engine logs for the transport it chose.

The HCAs are the RDMA devices the node's sysfs holds (a fixture tree written by
tests/unit/sysfs_fixtures.py, as the fleet nodes hold one), not the flag alone. The lines are
checked against the collection's own reader (plugins/filter/transport.py), so the stand-in and
the worker role's transport check agree on every setting.
"""

from __future__ import annotations

import importlib.util
import io
import json
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest

from ansible_collections.mindverse.sglang_pd.plugins.filter.transport import mooncake_transport
from ansible_collections.mindverse.sglang_pd.tests.unit import sysfs_fixtures as fx
from test_standin import STANDIN_DIR, command, free_port, standin_env

pytestmark = pytest.mark.skipif(sys.version_info < (3, 10), reason="the stand-in needs Python 3.10 or later")


def _load() -> ModuleType:
    # By path: putting tests/standin on sys.path would make every later ``import sglang`` the stand-in.
    spec = importlib.util.spec_from_file_location("standin_transport", STANDIN_DIR / "sglang" / "_standin" / "transport.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


transport = _load()


@pytest.mark.parametrize("value, devices", [
    (None, []),
    ("", []),
    ("mlx5_0", ["mlx5_0"]),
    ("mlx5_0, mlx5_1,", ["mlx5_0", "mlx5_1"]),
    ('{"0": "mlx5_0,mlx5_1", "1": "mlx5_2", "2": "mlx5_0"}', ["mlx5_0", "mlx5_1", "mlx5_2"]),
])
def test_the_devices_of_disaggregation_ib_device(value, devices):
    assert transport.ib_devices(value) == devices


def test_a_json_file_of_devices_is_read(tmp_path: Path):
    path = tmp_path / "ib.json"
    path.write_text(json.dumps({"0": "mlx5_ib0", "1": "mlx5_ib1"}), encoding="utf-8")
    assert transport.ib_devices(str(path)) == ["mlx5_ib0", "mlx5_ib1"]


@pytest.fixture(name="sysfs", scope="module")
def fixture_sysfs(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A node's sysfs (the fleet nodes' fixture) with the RDMA devices mlx5_0 and mlx5_1."""
    root = tmp_path_factory.mktemp("node")
    for device in ("mlx5_0", "mlx5_1"):
        fx.add_ib_device(str(root), device)
    return str(root / "sys")


@pytest.fixture(name="bare_sysfs", scope="module")
def fixture_bare_sysfs(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A node's sysfs without any RDMA device."""
    root = tmp_path_factory.mktemp("bare") / "sys"
    (root / "class").mkdir(parents=True)
    return str(root)


FOUND_2 = ["Topology discovery complete. Found 2 HCAs.", "installTransport, type=rdma"]
FOUND_0 = ["Topology discovery complete. Found 0 HCAs."]
NO_DEVICES = "No RDMA devices found, check your device installation"


@pytest.mark.parametrize("environ, ib_device, messages, found", [
    ({}, "mlx5_0,mlx5_1", FOUND_2, "rdma"),
    # Mooncake keeps every device of the node when the flag names none.
    ({}, None, FOUND_2, "rdma"),
    ({}, "mlx5_1,mlx5_7", ["Topology discovery complete. Found 1 HCAs.", "installTransport, type=rdma"], "rdma"),
    # Devices the node does not have: left out without a line, TCP without one either.
    ({}, "mlx5_ib0,mlx5_ib1", FOUND_0, "tcp"),
    ({"MC_FORCE_TCP": "1"}, "mlx5_0", ["MC_FORCE_TCP is set, using TCP transport only"], "tcp"),
    # Mooncake tests getenv() != nullptr: an empty value forces TCP too.
    ({"MC_FORCE_TCP": ""}, "mlx5_0", ["MC_FORCE_TCP is set, using TCP transport only"], "tcp"),
    ({"MC_FORCE_TCP": "1", "SGLANG_STANDIN_TRANSPORT": "rdma"}, "mlx5_0", ["MC_FORCE_TCP is set, using TCP transport only"], "tcp"),
    ({"SGLANG_STANDIN_TRANSPORT": "tcp"}, "mlx5_0", FOUND_0, "tcp"),
    ({"SGLANG_STANDIN_TRANSPORT": "rdma"}, "mlx5_0,mlx5_1", FOUND_2, "rdma"),
    ({"SGLANG_STANDIN_TRANSPORT": "hip_ipc"}, "mlx5_0",
     ["Topology discovery complete. Found 0 HCAs.", "HIP transport installed for intra-node GPU P2P"], "hip_ipc"),
], ids=["rdma-named-and-present", "rdma-every-device", "one-of-two-present", "named-devices-absent", "forced-tcp",
        "forced-tcp-empty", "forced-tcp-wins", "tcp-setting", "rdma-setting", "hip-ipc-setting"])
def test_the_lines_for_each_setting_and_what_the_role_reads_in_them(environ, ib_device, messages, found, sysfs):
    environ = {**environ, "SGLANG_STANDIN_SYSFS_ROOT": sysfs}
    for mode in ("prefill", "decode"):
        assert [message for _severity, _file, message in transport.engine_lines(mode, "mooncake", ib_device, environ)] == messages
    stream = io.StringIO()
    printed = transport.print_engine_lines("decode", "mooncake", ib_device, environ, stream)
    assert stream.getvalue() == "".join(line + "\n" for line in printed)
    assert all(" transfer_engine_impl.cpp] " in line and line.startswith("I") for line in printed)
    assert mooncake_transport(stream.getvalue())["transport"] == found


@pytest.mark.parametrize("ib_device", ["mlx5_0,mlx5_1", None])
def test_a_node_without_rdma_devices_warns_and_finds_none(ib_device, bare_sysfs):
    lines = transport.engine_lines("prefill", "mooncake", ib_device, {"SGLANG_STANDIN_SYSFS_ROOT": bare_sysfs})
    assert lines == [("W", "topology.cpp", NO_DEVICES), ("I", "transfer_engine_impl.cpp", FOUND_0[0])]
    stream = io.StringIO()
    printed = transport.print_engine_lines("prefill", "mooncake", ib_device, {"SGLANG_STANDIN_SYSFS_ROOT": bare_sysfs}, stream)
    assert printed[0].startswith("W") and printed[0].endswith(f" topology.cpp] {NO_DEVICES}")
    assert mooncake_transport(stream.getvalue())["transport"] == "tcp"


@pytest.mark.parametrize("mode, backend", [("null", "mooncake"), ("prefill", "nixl"), ("decode", "fake"), ("decode", "mooncake_tcp")])
def test_only_a_mooncake_pd_worker_prints_them(mode, backend):
    assert not transport.engine_lines(mode, backend, "mlx5_0", {"MC_FORCE_TCP": "1"})


def test_an_unknown_setting_is_refused():
    with pytest.raises(ValueError, match="SGLANG_STANDIN_TRANSPORT must be one of rdma, tcp, hip_ipc, got 'ucx'"):
        transport.chosen({"SGLANG_STANDIN_TRANSPORT": "ucx"})


def test_glog_shape():
    line = transport.glog("installTransport, type=rdma", now=0.25, pid=4242)
    assert line.endswith(".250000   4242 transfer_engine_impl.cpp] installTransport, type=rdma")


def _run(tmp_path: Path, model_dir: Path, mode: str, env: dict[str, str], *extra: str) -> str:
    """Start the stand-in of model_dir, wait until it listens, stop it; return what it printed."""
    port = free_port()
    log_path = tmp_path / f"{mode}.log"
    with log_path.open("wb") as out:
        proc = subprocess.Popen(command(mode, port, free_port(), *extra, model_path=model_dir), stdout=out,
                                stderr=subprocess.STDOUT, env={**standin_env(), **env})
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)
    finally:
        if proc.poll() is None:
            proc.terminate()
        proc.wait(10)
    return log_path.read_text(encoding="utf-8")


def test_the_server_prints_them_at_start(tmp_path: Path, standin_model_dir: Path, sysfs: str, bare_sysfs: str):
    # The roles' flags carry --disaggregation-ib-device mlx5_0,mlx5_1: RDMA where the node has them.
    rdma = _run(tmp_path, standin_model_dir, "prefill", {"SGLANG_STANDIN_SYSFS_ROOT": sysfs})
    assert "Topology discovery complete. Found 2 HCAs." in rdma and mooncake_transport(rdma)["transport"] == "rdma"
    assert rdma.index("installTransport, type=rdma") < rdma.index("SGLang stand-in")
    bare = _run(tmp_path, standin_model_dir, "decode", {"SGLANG_STANDIN_SYSFS_ROOT": bare_sysfs})
    assert NO_DEVICES in bare and mooncake_transport(bare)["transport"] == "tcp"
    forced = _run(tmp_path, standin_model_dir, "decode", {"MC_FORCE_TCP": "1"})
    assert mooncake_transport(forced)["line"].endswith("transfer_engine_impl.cpp] MC_FORCE_TCP is set, using TCP transport only")
    assert mooncake_transport(_run(tmp_path, standin_model_dir, "null", {"MC_FORCE_TCP": "1"}))["transport"] == "unknown"


def test_the_server_refuses_an_unknown_setting(standin_model_dir: Path):
    proc = subprocess.run(command("decode", free_port(), free_port(), model_path=standin_model_dir), capture_output=True, text=True,
                          timeout=30, env={**standin_env(), "SGLANG_STANDIN_TRANSPORT": "ucx"}, check=False)
    assert proc.returncode == 2
    assert "SGLANG_STANDIN_TRANSPORT must be one of rdma, tcp, hip_ipc, got 'ucx'" in proc.stdout
