# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""make unit hands the long test files out first (tests/conftest.py, LONG_FILES).

A renamed or removed file would leave its name in the list and the order would go stale
without a failure: each name must be a test file of tests/integration, and the run order must
put the long files first, the other integration tests next and the unit tests last.
"""

from __future__ import annotations

import pathlib
import types

from tests import conftest  # pylint: disable=import-error

INTEGRATION = pathlib.Path(__file__).resolve().parents[1] / "integration"


def test_every_long_file_is_an_integration_test_file_once():
    assert len(set(conftest.LONG_FILES)) == len(conftest.LONG_FILES)
    missing = [name for name in conftest.LONG_FILES if not (INTEGRATION / name).is_file()]
    assert not missing, f"LONG_FILES names files tests/integration does not hold: {missing}"


def test_long_files_run_first_then_integration_then_unit():
    def item(path):
        return types.SimpleNamespace(path=pathlib.Path(path))

    collected = [item("tests/unit/test_a.py"), item("tests/integration/test_zz.py"),
                 item("tests/integration/" + conftest.LONG_FILES[1]), item("tests/unit/test_b.py"),
                 item("tests/integration/" + conftest.LONG_FILES[0])]
    conftest.pytest_collection_modifyitems(None, None, collected)
    assert [str(i.path) for i in collected] == [
        "tests/integration/" + conftest.LONG_FILES[0], "tests/integration/" + conftest.LONG_FILES[1],
        "tests/integration/test_zz.py", "tests/unit/test_a.py", "tests/unit/test_b.py"]
