# Copyright: (c) 2026, mindverse infrastructure team
# SPDX-License-Identifier: Apache-2.0
"""Run a module's ``main()`` in-process the way Ansible would, and get its result."""

from __future__ import annotations

import json
from unittest import mock

import pytest

from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args


class AnsibleExitJson(Exception):
    def __init__(self, result):
        super().__init__(result)
        self.result = result


class AnsibleFailJson(Exception):
    def __init__(self, result):
        super().__init__(result)
        self.result = result


def _exit_json(self, **kwargs):
    kwargs.setdefault('changed', False)
    raise AnsibleExitJson(kwargs)


def _fail_json(self, msg, **kwargs):
    kwargs['failed'] = True
    kwargs['msg'] = msg
    raise AnsibleFailJson(kwargs)


def run_module(module, args, check_mode=False, diff=False):
    """Call ``module.main()`` with ``args``; return its result (``failed`` set on fail_json)."""
    args = dict(args)
    if check_mode:
        args['_ansible_check_mode'] = True
    if diff:
        args['_ansible_diff'] = True
    with patch_module_args(args), \
            mock.patch.object(basic.AnsibleModule, 'exit_json', _exit_json), \
            mock.patch.object(basic.AnsibleModule, 'fail_json', _fail_json):
        try:
            module.main()
        except AnsibleExitJson as exc:
            return exc.result
        except AnsibleFailJson as exc:
            return exc.result
    raise AssertionError('%s.main() returned without exit_json or fail_json' % module.__name__)


def run_module_stdout(module, args, capsys):
    """Run ``main()`` with the real exit_json/fail_json; return the JSON it printed (no_log applied)."""
    with patch_module_args(dict(args)):
        with pytest.raises(SystemExit):
            module.main()
    return json.loads(capsys.readouterr().out)
