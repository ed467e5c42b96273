# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The preflight's problem: ``Problem(host, text)``, written the house way, merged into one line per text naming every host."""
from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from typing import NamedTuple

from ansible_collections.mindverse.sglang_pd.plugins.plugin_utils.service_plan import REDACTED, SECRET_NAME


# The message id of each check's refusal (docs/troubleshooting.md explains each); "preflight" is the
# preflight's own failure. One id per check: the problem lines under it name host, variable and fix.
CHECK_IDS = {
    "evaluation": "SGLPD-PRE-001",
    "groups": "SGLPD-PRE-002",
    "variables": "SGLPD-PRE-003",
    "worker_specs": "SGLPD-PRE-004",
    "image": "SGLPD-PRE-005",
    "model_weights": "SGLPD-PRE-006",
    "build": "SGLPD-PRE-007",
    "names": "SGLPD-PRE-008",
    "container": "SGLPD-PRE-009",
    "addresses": "SGLPD-PRE-010",
    "reachability": "SGLPD-PRE-011",
    "ports": "SGLPD-PRE-012",
    "gpus": "SGLPD-PRE-013",
    "ib_devices": "SGLPD-PRE-014",
    "flags": "SGLPD-PRE-015",
    "sglang_values": "SGLPD-PRE-016",
    "pairing": "SGLPD-PRE-017",
    "router": "SGLPD-PRE-018",
    "firewall": "SGLPD-PRE-019",
    "preflight": "SGLPD-PRE-099",
}


class Problem(NamedTuple):
    """One thing a check refuses, on one host (``host`` may name the inventory as a whole)."""

    host: str
    text: str


def suggest(value, candidates):
    """' (did you mean X?)' for the closest candidates, or ''."""
    value = str(value)
    candidates = [str(c) for c in candidates]
    close = sorted(c for c in candidates if c.startswith(value) and c != value)[:2]
    if not close:
        close = difflib.get_close_matches(value, candidates, n=1, cutoff=0.5)
    return f" (did you mean {' or '.join(close)}?)" if close else ""


def show_value(value):
    """A value as the user would write it in YAML/JSON (a string through json's shared encoder, the common and fast case)."""
    if isinstance(value, str):
        return json.dumps(value)
    try:
        return json.dumps(value, sort_keys=True, default=str)
    except (TypeError, ValueError):
        return repr(value)


def variable_problem(host, variable, value, issue, fix):
    """``VARIABLE = VALUE: ISSUE; FIX`` on HOST, the value as YAML/JSON writes it, a secret's redacted."""
    field = str(variable).rsplit(".", 1)[-1]
    # A mapping is shown as given: its callers redact the secret parts (control-plane keys).
    secret = SECRET_NAME.search(field) and not isinstance(value, Mapping) and value not in (None, "")
    shown = REDACTED if secret else show_value(value)
    return Problem(host, f"{variable} = {shown}: {issue}; {fix}")


def merge_problems(problems):
    """Merge (host, text) pairs with the same text into one line naming every host."""
    merged = {}
    for host, text in problems:
        hosts = merged.setdefault(text, [])
        if host not in hosts:
            hosts.append(host)
    return [f"{', '.join(hosts)}: {text}" for text, hosts in merged.items()]
