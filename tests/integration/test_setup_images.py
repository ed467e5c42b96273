"""Set-up builds every image it names (scripts/setup/image_names.sh), on this Docker engine."""

from __future__ import annotations

import subprocess

import pytest

from image_names import setup_image_names


def _docker_answers():
    try:
        return subprocess.run(['docker', 'info'], capture_output=True, check=False).returncode == 0
    except OSError:
        return False


pytestmark = [pytest.mark.docker,
              pytest.mark.skipif(not _docker_answers(), reason='no Docker engine answers')]


@pytest.mark.parametrize('variable', sorted(setup_image_names()))
def test_set_up_built_the_image(variable):
    image = setup_image_names()[variable]
    found = subprocess.run(['docker', 'image', 'inspect', '--format', '{{.Id}}', image],
                           capture_output=True, text=True, check=False)
    assert found.returncode == 0, '%s=%s is not on this engine: run make setup' % (variable, image)
