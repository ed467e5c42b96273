# Copyright: (c) 2026, mindverse infrastructure team
# SPDX-License-Identifier: Apache-2.0
"""The one decision about free space every run makes (module_utils/_free_space.py), and the measure."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

from ansible_collections.mindverse.sglang_pd.plugins.module_utils import _free_space

GIB = 1024 ** 3


@pytest.mark.parametrize('free, threshold, low', [
    (10 * GIB - 1, 10 * GIB, True),
    (10 * GIB, 10 * GIB, False),
    (80 * 1024 ** 2, 121474836480, True),
    (500 * GIB, 121474836480, False),
    (0, 0, False),           # a threshold of 0 never warns
    (None, 10 * GIB, False),  # not measured (a remote daemon's data-root): nothing to say
], ids=['one-byte-short', 'exactly-the-threshold', 'nearly-full', 'plenty', 'threshold-off', 'not-measured'])
def test_below_the_threshold_is_low(free, threshold, low):
    assert _free_space.is_low(free, threshold) is low
    warning = _free_space.low_space_warning('the model directory', '/models/glm', free, threshold, 'sglang_model_free_warn_bytes',
                                            'staging will be refused')
    assert (warning is not None) is low


def test_the_warning_names_the_place_the_figures_and_the_setting():
    warning = _free_space.low_space_warning("Docker's data-root", '/var/lib/docker', 80 * 1024 ** 2, 121474836480,
                                            'sglang_image_free_warn_bytes', 'the next pull will be refused')
    assert warning.startswith("Docker's data-root /var/lib/docker has 80.0 MiB free (83886080 bytes), below "
                              "sglang_image_free_warn_bytes (113.1 GiB, 121474836480 bytes): the next pull will be refused.")


def test_a_folder_not_created_yet_is_measured_at_its_nearest_parent(tmp_path, monkeypatch):
    measured = []

    def statvfs(path):
        measured.append(path)
        return SimpleNamespace(f_bavail=3, f_frsize=4096)

    monkeypatch.setattr(_free_space.os, 'statvfs', statvfs)
    assert _free_space.free_bytes_at(str(tmp_path / 'models' / 'glm')) == 3 * 4096
    assert measured == [str(tmp_path)]
    assert _free_space.nearest_existing(str(tmp_path / 'a' / 'b')) == str(tmp_path)
    assert _free_space.nearest_existing(str(tmp_path)) == str(tmp_path)


def test_the_measure_is_what_an_unprivileged_writer_may_use(tmp_path):
    stats = os.statvfs(tmp_path)
    assert _free_space.free_bytes_at(str(tmp_path)) == pytest.approx(stats.f_bavail * stats.f_frsize, rel=0.01)
