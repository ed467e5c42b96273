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
# A busy machine slows the tests down: mutmut then reports some mutants as "suspicious" (their
# tests ran much longer than without a mutant) instead of killed or survived. Run it on a quiet one.
targets=(
  "plugins/filter/upgrade_plan.py:tests/unit/plugins/filter/test_upgrade_plan.py"
  "plugins/filter/model_stage.py:tests/unit/plugins/filter/test_model_stage_plan.py"
  "plugins/filter/fleet_status.py:tests/unit/plugins/filter/test_fleet_status.py"
  "plugins/filter/topology.py:tests/unit/plugins/filter/test_topology.py tests/unit/plugins/filter/test_fabric_workers.py tests/unit/plugins/filter/test_fabric_check_filter.py"
  "plugins/plugin_utils/preflight/pairing.py:tests/unit/plugins/plugin_utils/test_shape_and_value_checks.py tests/unit/plugins/plugin_utils/test_sglang_rules.py"
)
cd "$repo"
for target in "${targets[@]}"; do
  path=${target%%:*} tests=${target#*:}
  # bash scripts/mutation.sh [FILE...]: only those files.
  if [ $# -gt 0 ] && ! printf '%s\n' "$@" | grep -qxF "$path"; then continue; fi
  rm -f .mutmut-cache
  echo "== $path"
  # mutmut exits non-zero when a mutant survives: the results below say which.
  "$tool/bin/mutmut" run --paths-to-mutate "$path" --no-progress \
    --runner "$venv/bin/python -m pytest -x -q -p no:cacheprovider $tests" >/dev/null || true
  # The counts from mutmut's own cache: killed, survived, suspicious, timed out.
  "$venv/bin/python" - <<'PY'
import sqlite3
counts = dict(sqlite3.connect(".mutmut-cache").execute("select status, count(*) from Mutant group by status").fetchall())
total = sum(counts.values())
killed = counts.get("ok_killed", 0)
print(f"{killed} of {total} mutants killed ({100 * killed / max(total, 1):.0f}%); survived {counts.get('bad_survived', 0)}, "
      f"suspicious {counts.get('ok_suspicious', 0)}, timed out {counts.get('bad_timeout', 0)}")
PY
  "$tool/bin/mutmut" results | sed -n '/Survived/,$p'
done
rm -f .mutmut-cache
git -C "$repo" diff --quiet -- plugins || { echo "a mutant was left on disk: git checkout plugins" >&2; exit 1; }
