# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible's own templar for unit tests of the preflight, as the preflight action uses it.

The roles' defaults are loaded as trusted templates (as the action loads them), and
``resolver`` gives ``model.pd_model`` what each role gets on a host.
"""

from __future__ import annotations

import os

from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template
from ansible_collections.mindverse.sglang_pd.plugins.plugin_utils.preflight.inputs import role_variables

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
# The templar finds the collection's filters (mindverse.sglang_pd.image_reference, ...) through
# Ansible's collection loader, which tests/unit/conftest.py installs.
LOADER = DataLoader()
TEMPLAR = Templar(loader=LOADER)
DEFAULTS = {role: LOADER.load_from_file(os.path.join(REPO, 'roles', role, 'defaults', 'main.yml'), trusted_as_template=True)
            for role in ('sglang_worker', 'sglang_router')}


def trusted(value):
    """VALUE with its strings trusted as templates, as the action loads the roles' defaults."""
    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, dict):
        return {key: trusted(item) for key, item in value.items()}
    if isinstance(value, list):
        return [trusted(item) for item in value]
    return value


def resolver(defaults=None):
    """A ``role_variables(host, variables, role)`` for model.pd_model: DEFAULTS templated per host."""
    defaults = DEFAULTS if defaults is None else defaults

    def resolve(host, variables, role):
        return role_variables(TEMPLAR, variables, defaults.get(role) or {}, role + '_', host)
    return resolve
