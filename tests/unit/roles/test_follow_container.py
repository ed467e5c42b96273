# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The follower the sglang_service units run (roles/sglang_service/files/follow-container).

It runs under /bin/sh with a stand-in ``docker`` (and ``sleep``) first on PATH: each call of the
stand-in takes the next answer of a plan and records its arguments, so every test states the
Docker answers and checks the follower's exit code, its messages and the calls it made.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

FOLLOWER = os.path.join(os.path.dirname(__file__), '..', '..', '..', 'roles', 'sglang_service', 'files',
                        'follow-container')
FAKE_DOCKER = f"""#!{sys.executable}
import json, os, sys
plan_path, calls = os.environ['FAKE_DOCKER_PLAN'], os.environ['FAKE_DOCKER_CALLS']
with open(plan_path, encoding='utf-8') as handle:
    plan = json.load(handle)
with open(calls, 'a', encoding='utf-8') as handle:
    handle.write(' '.join(sys.argv[1:2]) + '\\n')
if not plan:
    sys.stderr.write('the plan has no answer left\\n')
    sys.exit(99)
command, rc, out = plan.pop(0)
with open(plan_path, 'w', encoding='utf-8') as handle:
    json.dump(plan, handle)
if sys.argv[1] != command:
    sys.stderr.write('expected docker ' + command + ', got ' + ' '.join(sys.argv[1:]) + '\\n')
    sys.exit(98)
sys.stdout.write(out)
sys.exit(rc)
"""
FAKE_SLEEP = '#!/bin/sh\necho sleep >> "$FAKE_DOCKER_CALLS"\n'
DOWN = [['wait', 1, ''], ['container', 1, ''], ['version', 1, '']]


def follow(tmp_path, plan, *args):
    """Run the follower on PLAN; returns (exit code, stderr, calls)."""
    bin_dir = tmp_path / 'bin'
    bin_dir.mkdir()
    for name, text in (('docker', FAKE_DOCKER), ('sleep', FAKE_SLEEP)):
        (bin_dir / name).write_text(text, encoding='utf-8')
        (bin_dir / name).chmod(0o755)
    (tmp_path / 'plan.json').write_text(json.dumps(plan), encoding='utf-8')
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
               FAKE_DOCKER_PLAN=str(tmp_path / 'plan.json'), FAKE_DOCKER_CALLS=str(tmp_path / 'calls'))
    done = subprocess.run(['/bin/sh', FOLLOWER, *args], env=env, capture_output=True, text=True, timeout=30,
                          check=False)
    calls = (tmp_path / 'calls').read_text(encoding='utf-8').split() if (tmp_path / 'calls').exists() else []
    return done.returncode, done.stderr, calls


@pytest.mark.parametrize('code', ['0', '1', '137'])
def test_exits_with_the_code_of_the_stopped_container(tmp_path, code):
    rc, err, calls = follow(tmp_path, [['wait', 0, code + '\n']], 'sglang-decode')
    assert (rc, calls) == (int(code), ['wait'])
    assert f'sglang-decode: the container stopped with exit code {code}' in err


def test_follows_the_container_again_after_a_daemon_restart(tmp_path):
    plan = DOWN + DOWN + [['wait', 1, ''], ['container', 0, 'running 0'], ['wait', 0, '0']]
    rc, err, calls = follow(tmp_path, plan, 'sglang-decode')
    assert rc == 0
    assert calls == ['wait', 'container', 'version', 'sleep'] * 2 + ['wait', 'container', 'sleep', 'wait']
    # One line when the daemon goes away, one when it is back: not one a second.
    assert err.count('the Docker daemon does not answer') == 1
    assert err.count('the Docker daemon answers again and the container still runs') == 1


@pytest.mark.parametrize('state, code', [('exited 3', 3), ('removing 0', 0), ('dead 300', 1), ('created 0', 1)])
def test_exits_with_the_code_of_a_container_that_stopped_meanwhile(tmp_path, state, code):
    rc, err, calls = follow(tmp_path, DOWN + [['wait', 1, ''], ['container', 0, state]], 'sglang-router')
    assert rc == code
    assert calls == ['wait', 'container', 'version', 'sleep', 'wait', 'container']
    assert err.strip().splitlines()[-1].startswith('sglang-router: the container ')


def test_fails_clearly_when_the_container_is_gone(tmp_path):
    rc, err, _calls = follow(tmp_path, [['wait', 1, ''], ['container', 1, ''], ['version', 0, '27.5.1']],
                             'sglang-prefill')
    assert rc == 1
    assert 'sglang-prefill: the container is gone' in err


@pytest.mark.parametrize('args', [(), ('',), ('a', 'b')])
def test_needs_one_container_name(tmp_path, args):
    rc, err, calls = follow(tmp_path, [], *args)
    assert (rc, calls) == (2, [])
    assert 'usage: follow-container NAME' in err
