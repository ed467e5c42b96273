"""Run one play of a test with ansible-runner, against the collection in this checkout.

`run_play` writes the play, runs it with the repository's ansible.cfg and collection path, asserts
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


def run_play_recap(tmp_path, play, inventory, name='play', extravars=None, cmdline=None):
    """The play's recap; EXTRAVARS as -e gives them, CMDLINE more options (--check)."""
    import ansible_runner  # the tests that call this skip when it is missing

    playbook = tmp_path / (name + '.yml')
    playbook.write_text(yaml.safe_dump([play]))
    private = tmp_path / ('runner-' + name)
    private.mkdir()
    runner = ansible_runner.run(
        private_data_dir=str(private), playbook=str(playbook), inventory=inventory, extravars=extravars, cmdline=cmdline,
        envvars={'ANSIBLE_CONFIG': os.path.join(REPO, 'ansible.cfg'),
                 'ANSIBLE_COLLECTIONS_PATH': os.path.join(REPO, '.cache', 'collections'), 'ANSIBLE_NOCOLOR': 'true',
                 'PATH': os.path.dirname(sys.executable) + os.pathsep + os.environ.get('PATH', '')},
        quiet=True,
    )
    stdout = runner.stdout.read()
    assert runner.rc == 0, stdout
    stats = [e['event_data'] for e in runner.events if e['event'] == 'playbook_on_stats']
    changed_tasks = {}
    for event in runner.events:
        if event['event'] == 'runner_on_ok' and event['event_data']['res'].get('changed'):
            changed_tasks.setdefault(event['event_data']['host'], []).append(event['event_data']['task'])
    return dict(stats[0], changed_tasks=changed_tasks, stdout=stdout)
