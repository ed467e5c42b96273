# Copyright: (c) 2026, mindverse infrastructure team
# Apache License 2.0, compatible with the GNU General Public License v3.0+ (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""Samples of the Prometheus text exposition format (what ``GET /metrics`` answers).

Only what the modules need: one sample per line, ``name{label="value",...} value [timestamp]``;
comments (``# HELP``, ``# TYPE``) and blank lines are skipped.
"""

from __future__ import annotations

import re

_SAMPLE = re.compile(r'^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)(?:\s+\S+)?$')
_LABEL = re.compile(r'(?P<key>[A-Za-z_][A-Za-z0-9_]*)="(?P<value>(?:[^"\\]|\\.)*)"')


def samples(text, names=None):
    """Yield ``(name, labels, value)`` of each sample in TEXT (only NAMES when given).

    ``value`` is the raw text of the value (a float for Prometheus, but left to the caller).
    """
    wanted = set(names) if names is not None else None
    for line in (text or '').splitlines():
        line = line.strip()
        if not line or line.startswith('#'):
            continue
        match = _SAMPLE.match(line)
        if not match or (wanted is not None and match.group('name') not in wanted):
            continue
        labels = dict((m.group('key'), m.group('value').replace('\\"', '"').replace('\\\\', '\\'))
                      for m in _LABEL.finditer(match.group('labels') or ''))
        yield match.group('name'), labels, match.group('value')
