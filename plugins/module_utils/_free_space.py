# Copyright: (c) 2026, mindverse infrastructure team
# Apache License 2.0, compatible with the GNU General Public License v3.0+ (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""Free space on a node, and the one decision every run makes about it.

``free_bytes_at`` measures (as ``df --output=avail``: what an unprivileged writer may still
use); ``low_space_warning`` decides: the warning a run prints when a place holds less than
its threshold, else None. image_pull (Docker's data-root), free_space (the model directory)
and model_stage (before it copies) measure with the same function.
"""

from __future__ import annotations

import os


def nearest_existing(path):
    """PATH, or its nearest existing parent (where PATH will be created)."""
    probe = os.path.abspath(path)
    while not os.path.exists(probe):
        probe = os.path.dirname(probe)
    return probe


def free_bytes_at(path):
    """Bytes free for an unprivileged writer on the file system of PATH, or of its nearest existing parent."""
    stats = os.statvfs(nearest_existing(path))
    return stats.f_bavail * stats.f_frsize


def is_low(free_bytes, threshold_bytes):
    """Whether FREE_BYTES (None: not measured) is below THRESHOLD_BYTES (0 or less: never)."""
    return free_bytes is not None and threshold_bytes is not None and threshold_bytes > 0 and free_bytes < threshold_bytes


def _size(count):
    """COUNT bytes for a person: 1 decimal in the largest binary unit that keeps it at least 1."""
    value = float(count)
    for unit in ('B', 'KiB', 'MiB', 'GiB', 'TiB'):
        if value < 1024 or unit == 'TiB':
            return ('%d %s' % (value, unit)) if unit == 'B' else ('%.1f %s' % (value, unit))
        value /= 1024
    return '%d B' % count  # not reached


def low_space_warning(place, path, free_bytes, threshold_bytes, setting, consequence):
    """The warning for PLACE at PATH when FREE_BYTES is below THRESHOLD_BYTES (named SETTING), else None.

    CONSEQUENCE says what will fail when nothing is done (the next pull, the next copy).
    """
    if not is_low(free_bytes, threshold_bytes):
        return None
    return ('%s %s has %s free (%d bytes), below %s (%s, %d bytes): %s. Free space there before then '
            '(docs/operations.md, "Free space").'
            % (place, path, _size(free_bytes), free_bytes, setting, _size(threshold_bytes), threshold_bytes, consequence))
