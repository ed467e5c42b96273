"""Fixtures shared by every test directory (unit and integration)."""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest


@pytest.fixture(name="standin_model_dir", scope="session")
def fixture_standin_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model directory for ``--model-path`` of the SGLang stand-in (tests/standin).

    Like SGLang, the stand-in refuses to start unless the model path is a directory
    holding config.json; it reads nothing else there, so config.json is all this holds.
    """
    model_dir = tmp_path_factory.mktemp("models") / "glm"
    model_dir.mkdir()
    (model_dir / "config.json").write_text(
        json.dumps({"architectures": ["StandinForCausalLM"], "model_type": "standin"}, indent=2), encoding="utf-8")
    return model_dir


# No silent skips: `make test` fails on any skip whose reason matches none of these, each
# entry saying why that skip may happen in a run that still proves what it claims. Empty:
# every test runs on the machine set-up prepares (make setup installs what they need).
ALLOWED_SKIPS: dict[str, str] = {}


def _unallowed_skips(terminal_reporter) -> list:
    skipped = terminal_reporter.stats.get("skipped", []) if terminal_reporter else []
    return [report for report in skipped
            if not any(reason in str(report.longrepr) for reason in ALLOWED_SKIPS)]


def pytest_terminal_summary(terminalreporter, exitstatus, config):  # pylint: disable=unused-argument
    """Name every skip outside ALLOWED_SKIPS, with its reason."""
    for report in _unallowed_skips(terminalreporter):
        terminalreporter.write_line(f"SKIP NOT ALLOWED: {report.nodeid}: {report.longrepr}", red=True)


def pytest_sessionfinish(session, exitstatus):
    """Fail a run that skipped a test outside ALLOWED_SKIPS (tests/conftest.py)."""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if exitstatus == 0 and _unallowed_skips(reporter):
        session.exitstatus = 1


# The files that kept one worker busy for a minute or more (pytest --durations=60, -n 4, 2026-12-07),
# longest first. make unit runs a file's tests in one process (--dist loadfile) and hands the
# files out in collection order: these go first, then the other integration tests, then the unit
# tests, so that no worker picks up a long file when the others are nearly done. Order only: a
# name missing here costs time, never a test.
LONG_FILES = ("test_site_preflight.py", "test_support_bundle_playbook.py", "test_monitoring_render.py",
              "test_fabric_check.py", "test_probe_gate.py", "test_model_stage_outside.py",
              "test_unified_image_engine.py", "test_worker_transport_check.py", "test_smg_router.py",
              "test_pd_watch_real_router.py")


def _run_order(item) -> tuple[int, int]:
    name = item.path.name
    if name in LONG_FILES:
        return 0, LONG_FILES.index(name)
    return (1 if "integration" in item.path.parts else 2), 0


def pytest_collection_modifyitems(session, config, items):  # pylint: disable=unused-argument
    """Long files first, then the other integration tests, then the unit tests (LONG_FILES)."""
    items.sort(key=_run_order)  # stable: each file's tests keep their order


def _sysfs_fixtures() -> ModuleType:
    """tests/unit/sysfs_fixtures.py, by path (this file loads before the collection is importable)."""
    spec = importlib.util.spec_from_file_location("standin_sysfs_fixtures", Path(__file__).parent / "unit" / "sysfs_fixtures.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(name="standin_environment", scope="session", autouse=True)
def fixture_standin_environment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """What every SGLang stand-in a test starts sees, unless the test says otherwise.

    - The sysfs of a fleet node (tests/unit/sysfs_fixtures.py: the RDMA devices mlx5_ib0..7), as
      the fleet's nodes hold it: the stand-in's Mooncake lines report the devices found there.
    - Decode retries a prefill's bootstrap server every 0.05 s, not every 1 s: it gives up after
      SGLang's 15 tries either way (tests/standin/sglang/_standin/receiver.py), and at 1 s apart
      a test of an unreachable prefill would wait 14 s for each request.
    """
    node = tmp_path_factory.mktemp("standin-node")
    fixtures = _sysfs_fixtures()
    for device in fixtures.IB_DEVICES:
        fixtures.add_ib_device(str(node), device)
    patch = pytest.MonkeyPatch()
    patch.setenv("SGLANG_STANDIN_SYSFS_ROOT", str(node / "sys"))
    patch.setenv("SGLANG_STANDIN_BOOTSTRAP_RETRY_SECS", "0.05")
    yield
    patch.undo()
