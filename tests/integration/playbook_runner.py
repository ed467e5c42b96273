"""Run one play of a test with ansible-runner, against the collection in this checkout.

`run_playbook` runs a playbook with the repository's ansible.cfg and collection path and this
venv first on PATH, and returns ansible-runner's result. `run_play` writes one play, runs it, asserts
it passed (showing Ansible's output when not) and returns what the play reported with
`ansible.builtin.set_stats` (per_host: false). `run_play_recap` returns the whole recap: each
counter by host (`ok`, `changed`, `failures`, ...), that report (`artifact_data`), the names of
the tasks that changed by host (`changed_tasks`) and the output (`stdout`).
"""

from __future__ import annotations

import os
import sys

import yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))


def run_play(tmp_path, play, inventory, name='play'):
    return run_play_recap(tmp_path, play, inventory, name)['artifact_data']


def environment(**more):
    """The environment of a run: the repository's ansible.cfg and collection path, this venv first on PATH."""
    return {'ANSIBLE_CONFIG': os.path.join(REPO, 'ansible.cfg'),
            'ANSIBLE_COLLECTIONS_PATH': os.path.join(REPO, '.cache', 'collections'),
            'ANSIBLE_NOCOLOR': 'true', 'ANSIBLE_LOCALHOST_WARNING': 'false',
            'PATH': os.path.dirname(sys.executable) + os.pathsep + os.environ.get('PATH', ''), **more}


def run_playbook(private, playbook, inventory, extravars=None, cmdline=None, project_dir=None, env=None):
    """ansible-runner's run of PLAYBOOK in the private data folder PRIVATE (not asserted); ENV adds variables."""
    import ansible_runner  # the tests that call this skip when it is missing

    return ansible_runner.run(
        private_data_dir=str(private), project_dir=project_dir, playbook=str(playbook), inventory=inventory,
        extravars=extravars or {}, cmdline=cmdline, envvars=environment(**(env or {})), quiet=True)


def run_play_recap(tmp_path, play, inventory, name='play', extravars=None, cmdline=None):
    """The play's recap; EXTRAVARS as -e gives them, CMDLINE more options (--check)."""
    playbook = tmp_path / (name + '.yml')
    playbook.write_text(yaml.safe_dump([play]))
    private = tmp_path / ('runner-' + name)
    private.mkdir()
    runner = run_playbook(private, playbook, inventory, extravars, cmdline)
    stdout = runner.stdout.read()
    assert runner.rc == 0, stdout
    stats = [e['event_data'] for e in runner.events if e['event'] == 'playbook_on_stats']
    changed_tasks = {}
    for event in runner.events:
        if event['event'] == 'runner_on_ok' and event['event_data']['res'].get('changed'):
            changed_tasks.setdefault(event['event_data']['host'], []).append(event['event_data']['task'])
    return dict(stats[0], changed_tasks=changed_tasks, stdout=stdout)
