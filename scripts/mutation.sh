#!/usr/bin/env bash
# make mutation: mutation testing of the code that decides what runs (not part of make test).
# mutmut changes one thing at a time in these files (an operator, a constant, a string), runs
# their unit tests against each change, and lists the changes no test noticed ("survived").
# The tool lives in a venv of its own (.cache/mutmut, tests/mutation/requirements.txt); the
# tests run in the project's venv. Results: docs/testing.md.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
venv=${VENV:-$repo/.venv}
tool=$repo/.cache/mutmut
if [ "$(cat "$tool/requirements.sha256" 2>/dev/null)" != "$(sha256sum < "$repo/tests/mutation/requirements.txt")" ]; then
  rm -rf "$tool" && python3 -m venv "$tool"
  "$tool/bin/pip" install -q -r "$repo/tests/mutation/requirements.txt"
  sha256sum < "$repo/tests/mutation/requirements.txt" > "$tool/requirements.sha256"
fi
# Each file with the tests that cover it.
targets=(
  "plugins/filter/upgrade_plan.py:tests/unit/plugins/filter/test_upgrade_plan.py"
  "plugins/filter/model_stage.py:tests/unit/plugins/filter/test_model_stage_plan.py"
  "plugins/filter/fleet_status.py:tests/unit/plugins/filter/test_fleet_status.py"
  "plugins/filter/topology.py:tests/unit/plugins/filter/test_topology.py"
  "plugins/plugin_utils/preflight/pairing.py:tests/unit/plugins/plugin_utils/test_shape_and_value_checks.py tests/unit/plugins/plugin_utils/test_sglang_rules.py"
)
cd "$repo"
for target in "${targets[@]}"; do
  path=${target%%:*} tests=${target#*:}
  rm -f .mutmut-cache
  echo "== $path"
  # mutmut exits non-zero when a mutant survives: the results below say which.
  "$tool/bin/mutmut" run --paths-to-mutate "$path" --no-progress \
    --runner "$venv/bin/python -m pytest -x -q -p no:cacheprovider $tests" >/dev/null || true
  "$tool/bin/mutmut" junitxml > ".cache/mutation-$(basename "$path" .py).xml"
  "$venv/bin/python" - ".cache/mutation-$(basename "$path" .py).xml" <<'PY'
import sys
import xml.etree.ElementTree as ET
suite = ET.parse(sys.argv[1]).getroot()
cases = suite.iter("testcase")
total = killed = 0
for case in cases:
    total += 1
    if case.find("failure") is None:
        killed += 1
print(f"{killed} of {total} mutants killed ({100 * killed / max(total, 1):.0f}%)")
PY
  "$tool/bin/mutmut" results | sed -n '/Survived/,$p'
done
rm -f .mutmut-cache
git -C "$repo" diff --quiet -- plugins || { echo "a mutant was left on disk: git checkout plugins" >&2; exit 1; }
