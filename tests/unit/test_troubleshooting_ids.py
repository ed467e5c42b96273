"""Every refusal the collection prints carries a message id, and docs/troubleshooting.md explains each id.

The scan reads the sources as code, not as text: Python through ``ast`` (``fail_json`` calls in
modules and module_utils, ``msg=`` of the action plugins' results, ``raise AnsibleFilterError`` /
``AnsibleError`` in plugins), YAML through the loader (``ansible.builtin.fail`` msg and
``ansible.builtin.assert`` fail_msg in roles and playbooks, blocks included). A ``fail_json`` that
takes its message from a dict (``**error``) is read with the function around it. Preflight problems
get their id by check, from one table (``CHECK_IDS``), in the preflight action's message.
"""

from __future__ import annotations

import ast
import os
import re

import yaml

from ansible_collections.mindverse.sglang_pd.plugins.plugin_utils.preflight.problems import CHECK_IDS
from ansible_collections.mindverse.sglang_pd.plugins.plugin_utils.preflight.runner import CHECKS

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
DOC = os.path.join(REPO, 'docs', 'troubleshooting.md')
MESSAGE_ID = re.compile(r'\bSGLPD-[A-Z]{3}-\d{3}\b')
DOC_ENTRY = re.compile(r'^### (SGLPD-[A-Z]{3}-\d{3})\b', re.MULTILINE)
RAISED = {'AnsibleFilterError', 'AnsibleError', 'AnsibleActionFail'}
# The preflight's checks build problem lines; the id of their check heads them (CHECK_IDS).
PREFLIGHT_RULES = os.path.join('plugins', 'plugin_utils', 'preflight')
# The production story's failures the collection does not print itself: each needs an entry.
SEED_SIGNATURES = (
    "Router.__new__() got an unexpected keyword argument 'prefill_group_ids'",
    'Tree cache initialized',
    'stride=[8]',
    'long request',
    'hipIpcOpenMemHandle failed',
    'USE_HIP_DMABUF',
    'input tensor and written-to tensor refer to a single memory location',
)


def _files(top, suffixes):
    for folder, _dirs, names in os.walk(os.path.join(REPO, top)):
        for name in sorted(names):
            if name.endswith(suffixes):
                yield os.path.join(folder, name)


def _python_sites():
    """(file:line, source of the call) for every place plugins hand an operator a failure message."""
    sites = []
    for path in _files('plugins', ('.py',)):
        text = open(path, encoding='utf-8').read()
        relative = os.path.relpath(path, REPO)
        if relative.startswith(PREFLIGHT_RULES):
            continue
        in_action = relative.startswith(os.path.join('plugins', 'action'))
        tree = ast.parse(text)
        around = {child: node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef) for child in ast.walk(node)}
        for node in ast.walk(tree):
            call = None
            if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
                func = node.exc.func
                name = func.id if isinstance(func, ast.Name) else getattr(func, 'attr', '')
                call = node.exc if name in RAISED else None
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                if node.func.attr == 'fail_json':
                    call = node
                elif in_action and any(keyword.arg == 'msg' for keyword in node.keywords):
                    call = node
            if call is None:
                continue
            source = ast.get_source_segment(text, call)
            if not any(keyword.arg == 'msg' for keyword in call.keywords) and call in around:
                source = ast.get_source_segment(text, around[call])
            sites.append((f'{relative}:{call.lineno}', source))
    return sites


def _tasks(items):
    for item in items or []:
        if not isinstance(item, dict):
            continue
        yield item
        for key in ('block', 'rescue', 'always', 'tasks', 'pre_tasks', 'post_tasks', 'handlers'):
            yield from _tasks(item.get(key))


def _yaml_sites():
    """(file:task name, message) for every fail and assert task in roles and playbooks."""
    sites = []
    for top in ('roles', 'playbooks'):
        for path in _files(top, ('.yml', '.yaml')):
            if f'{os.sep}meta{os.sep}' in path or f'{os.sep}defaults{os.sep}' in path or f'{os.sep}vars{os.sep}' in path:
                continue
            document = yaml.safe_load(open(path, encoding='utf-8'))
            if not isinstance(document, list):
                continue
            for task in _tasks(document):
                where = f"{os.path.relpath(path, REPO)}: {task.get('name', '?')}"
                if 'ansible.builtin.fail' in task:
                    sites.append((where, str((task['ansible.builtin.fail'] or {}).get('msg', ''))))
                elif 'ansible.builtin.assert' in task:
                    sites.append((where, str((task['ansible.builtin.assert'] or {}).get('fail_msg', ''))))
    return sites


def _doc_ids():
    return DOC_ENTRY.findall(open(DOC, encoding='utf-8').read())


def _source_ids():
    found = set(CHECK_IDS.values())
    for top in ('plugins', 'roles', 'playbooks'):
        for path in _files(top, ('.py', '.yml', '.yaml', '.j2')):
            found.update(MESSAGE_ID.findall(open(path, encoding='utf-8').read()))
    return found


def test_the_scan_finds_the_sites_it_is_about():
    python_sites, yaml_sites = _python_sites(), _yaml_sites()
    assert len(python_sites) >= 80, f'only {len(python_sites)} Python sites found: the scan is broken'
    assert len(yaml_sites) >= 50, f'only {len(yaml_sites)} fail/assert tasks found: the scan is broken'
    assert sum(1 for _where, source in python_sites if 'fail_json' in source) >= 50


def test_every_python_failure_message_carries_an_id():
    missing = [where for where, source in _python_sites()
               if not MESSAGE_ID.search(source) and 'CHECK_IDS[' not in source]
    assert not missing, 'failure messages without an SGLPD-AAA-NNN id: ' + ', '.join(missing)


def test_every_fail_and_assert_task_carries_an_id():
    # The preflight's assert shows the action's message, which carries the failed check's id.
    missing = [where for where, message in _yaml_sites()
               if not MESSAGE_ID.search(message) and '__sglang_pd_preflight.msg' not in message]
    assert not missing, 'fail/assert messages without an SGLPD-AAA-NNN id: ' + ', '.join(missing)


def test_every_preflight_check_has_its_own_id():
    assert set(CHECK_IDS) == set(CHECKS) | {'preflight'}
    assert len(set(CHECK_IDS.values())) == len(CHECK_IDS)


def test_every_id_has_an_entry_and_every_entry_an_id():
    documented, used = _doc_ids(), _source_ids()
    assert len(used) >= 50, f'only {len(used)} ids found in the sources: the scan is broken'
    duplicated = sorted({entry for entry in documented if documented.count(entry) > 1})
    assert not duplicated, f'ids with more than one entry in docs/troubleshooting.md: {duplicated}'
    assert not sorted(used - set(documented)), f'ids without an entry in docs/troubleshooting.md: {sorted(used - set(documented))}'
    assert not sorted(set(documented) - used), f'entries for ids no source prints: {sorted(set(documented) - used)}'


def test_every_seed_signature_has_an_entry():
    text = open(DOC, encoding='utf-8').read()
    section = text.split("\n## The production story's failures\n", 1)[-1].split('\n## ', 1)[0]
    entries = [' '.join(entry.split()) for entry in section.split('\n### Seed: ')[1:]]
    assert len(entries) >= len(SEED_SIGNATURES) - 1, f'only {len(entries)} seed entries found: the scan is broken'
    assert [signature for signature in SEED_SIGNATURES if not any(signature in entry for entry in entries)] == []
