"""The images that set-up builds, as scripts/setup/image_names.sh names them.

The Makefile exports them (SGLANG_PD_BASE_IMAGE, SGLANG_PD_NODE_IMAGE); run outside make,
the script is asked. No test writes an image name of its own.
"""

from __future__ import annotations

import os
import subprocess

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..'))
SCRIPT = os.path.join(REPO, 'scripts', 'setup', 'image_names.sh')


def setup_image_names():
    """Return {variable: image} exactly as set-up computes them."""
    out = subprocess.run(['bash', SCRIPT], capture_output=True, text=True, check=True).stdout
    return dict(line.split('=', 1) for line in out.splitlines() if '=' in line)


def setup_image(variable):
    """The image named by VARIABLE: the exported value, else set-up's own."""
    return os.environ.get(variable) or setup_image_names()[variable]


def image_exists(image):
    """Whether the local Docker engine holds IMAGE (False when no engine answers)."""
    try:
        return subprocess.run(['docker', 'image', 'inspect', image], capture_output=True, check=False).returncode == 0
    except OSError:
        return False
