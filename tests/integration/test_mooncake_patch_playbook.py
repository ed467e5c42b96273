"""playbooks/mooncake_patch.yml through ansible-runner against Mooncake-shaped fixture trees.

A real engine build needs a ROCm toolchain, which is not here: the build part is
tested by rendering build-engine.sh.j2 through the role (mooncake_patch_render_only)
and running the rendered script against a stub `cmake`. Running a build in a builder
container is tested in test_mooncake_build_container.py (the hook is
mooncake_patch_build_script: any template whose script leaves one engine*.so in
the output directory).
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess

import pytest
from playbook_runner import REPO, run_playbook

pytest.importorskip('ansible_runner')

PLAYBOOK = os.path.join(REPO, 'playbooks', 'mooncake_patch.yml')
FIXTURES = os.path.join(REPO, 'tests', 'unit', 'fixtures', 'mooncake')

PATCH_TASK = 'Apply the HIP-transport and dmabuf fixes to the Mooncake source'
IMPL = 'mooncake-transfer-engine/src/transfer_engine_impl.cpp'
MULTI = 'mooncake-transfer-engine/src/multi_transport.cpp'
RDMA_CMAKE = 'mooncake-transfer-engine/src/transport/rdma_transport/CMakeLists.txt'
DMABUF_LINE = 'target_compile_definitions(rdma_transport PRIVATE USE_HIP_DMABUF)'
PRIORITY_BEFORE = {
    'older': '            if (p == "hip") return 4;\n',
    'conditional': '            if (p == "hip") return std::getenv("MC_DISABLE_HIP") ? 0 : 4;\n',
}
PRIORITY_AFTER = '            if (p == "hip") return 0;\n'
PRODUCTION_FLAGS = ['-DUSE_HIP=ON', '-DUSE_ETCD=ON', '-DENABLE_MULTI_PROTOCOL=ON', '-DWITH_STORE=ON',
                    '-DBUILD_UNIT_TESTS=OFF']


class Run:
    def __init__(self, runner):
        self.rc = runner.rc
        self.status = runner.status
        self.stdout = runner.stdout.read()
        self.events = list(runner.events)
        self.stats = runner.stats or {}

    def task_results(self, event_name):
        return [(e['event_data'].get('task'), e['event_data'].get('res', {}))
                for e in self.events if e['event'] == event_name]

    @property
    def changed_tasks(self):
        return sorted({task for task, res in self.task_results('runner_on_ok') if res.get('changed')})

    @property
    def failed(self):
        return self.task_results('runner_on_failed')


def play(tmp_path, extravars, cmdline=None):
    private = tmp_path / ('runner-%d' % len(list(tmp_path.glob('runner-*'))))
    private.mkdir()
    inventory = tmp_path / 'inventory.ini'
    inventory.write_text('# empty: the play runs on the implicit localhost\n')
    runner = run_playbook(private, PLAYBOOK, str(inventory), extravars, cmdline, project_dir=REPO,
                          env={'ANSIBLE_INVENTORY_UNPARSED_WARNING': 'false'})
    return Run(runner)


def tree(tmp_path, style):
    root = tmp_path / ('Mooncake-' + style)
    shutil.copytree(os.path.join(FIXTURES, style), str(root))
    return root


def read(root, rel):
    with open(os.path.join(str(root), rel), 'rb') as handle:
        return handle.read().decode('utf-8')


def snapshot(root):
    state = {}
    for dirpath, dummy, filenames in os.walk(str(root)):
        for name in filenames:
            path = os.path.join(dirpath, name)
            with open(path, 'rb') as handle:
                state[os.path.relpath(path, str(root))] = (handle.read(), os.stat(path).st_mtime_ns)
    return state


@pytest.mark.parametrize('style', ['older', 'conditional'])
def test_apply_then_second_run_changes_nothing(tmp_path, style):
    root = tree(tmp_path, style)
    impl, multi, rdma = read(root, IMPL), read(root, MULTI), read(root, RDMA_CMAKE)

    first = play(tmp_path, dict(mooncake_src=str(root)))
    assert first.rc == 0, first.stdout
    assert first.changed_tasks == [PATCH_TASK]
    assert read(root, IMPL) == impl.replace('#ifdef USE_HIP\n        // HIP transport handles',
                                            '#ifdef USE_HIP_DISABLED\n        // HIP transport handles')
    assert read(root, MULTI) == multi.replace(PRIORITY_BEFORE[style], PRIORITY_AFTER)
    assert read(root, RDMA_CMAKE) == rdma + DMABUF_LINE + '\n'
    results = dict(first.task_results('runner_on_ok'))[PATCH_TASK]
    assert [fix['status'] for fix in results['fixes']] == ['applied'] * 3
    after_first = snapshot(root)

    second = play(tmp_path, dict(mooncake_src=str(root)))
    assert second.rc == 0, second.stdout
    assert second.changed_tasks == []
    assert second.stats['changed'] == {}
    results = dict(second.task_results('runner_on_ok'))[PATCH_TASK]
    assert [fix['status'] for fix in results['fixes']] == ['already_present'] * 3
    assert snapshot(root) == after_first


@pytest.mark.parametrize('style', ['older', 'conditional'])
def test_check_diff_on_fresh_tree_writes_nothing(tmp_path, style):
    root = tree(tmp_path, style)
    before = snapshot(root)

    run = play(tmp_path, dict(mooncake_src=str(root)), cmdline='--check --diff')

    assert run.rc == 0, run.stdout
    assert snapshot(root) == before
    assert run.changed_tasks == [PATCH_TASK]
    res = dict(run.task_results('runner_on_ok'))[PATCH_TASK]
    assert sorted(entry['before_header'] for entry in res['diff']) == sorted([IMPL, MULTI, RDMA_CMAKE])
    # The exact edits show in the --diff output.
    assert '\n-' + PRIORITY_BEFORE[style] in run.stdout
    assert '\n+' + PRIORITY_AFTER in run.stdout
    assert '\n-#ifdef USE_HIP\n+#ifdef USE_HIP_DISABLED\n' in run.stdout
    assert '\n+' + DMABUF_LINE + '\n' in run.stdout


def test_unknown_layout_fails_and_writes_nothing(tmp_path):
    root = tree(tmp_path, 'older')
    path = root / MULTI
    path.write_text(path.read_text().replace('if (p == "hip") return 4;', 'if (p == "hip") return HIP_PRIO;'))
    before = snapshot(root)

    run = play(tmp_path, dict(mooncake_src=str(root)))

    assert run.rc != 0
    assert snapshot(root) == before
    (task, res), = run.failed
    assert task == PATCH_TASK
    assert MULTI in res['msg'] and 'No file was written' in res['msg']


@pytest.mark.parametrize('extravars, message', [
    (dict(), 'Give the Mooncake source tree'),
    # -e mooncake_build=true is taken as typed; a word the bool filter does not read is refused.
    (dict(mooncake_src='/nonexistent', mooncake_build='maybe'), 'must be a boolean'),
])
def test_extra_vars_are_checked(tmp_path, extravars, message):
    run = play(tmp_path, extravars)
    assert run.rc != 0
    (task, res), = run.failed
    assert message in res['msg']


@pytest.mark.parametrize('build', [True, 'true'])  # JSON, or typed as -e mooncake_build=true
def test_build_script_renders_and_builds_with_stub_cmake(tmp_path, build):
    root = tree(tmp_path, 'older')
    flags = PRODUCTION_FLAGS + ['-DCMAKE_HIP_ARCHITECTURES=gfx942;gfx950']

    run = play(tmp_path, dict(mooncake_src=str(root), mooncake_build=build, mooncake_patch_render_only=True,
                              mooncake_patch_cmake_flags=flags, mooncake_patch_build_jobs=3))

    assert run.rc == 0, run.stdout
    assert 'Run the build script in a container from the builder image' not in [t for t, dummy in run.task_results('runner_on_ok')]
    out = root / 'build' / 'mooncake_patch_out'
    script = out / 'build-engine.sh'
    text = script.read_text()
    assert stat.S_IMODE(script.stat().st_mode) == 0o755
    for flag in PRODUCTION_FLAGS:
        assert '  %s' % flag in text
    subprocess.run(['sh', '-n', str(script)], check=True)

    # Run the rendered script on the host with a stub cmake: it must configure with
    # exactly the flags, build with the jobs, and copy the engine to the output dir.
    stub = tmp_path / 'stub'
    stub.mkdir()
    log = tmp_path / 'cmake.log'
    (stub / 'cmake').write_text(
        '#!/bin/sh\n'
        'printf "%s\\n" "$*" >> "$CMAKE_LOG"\n'
        'if [ "$1" = "--build" ]; then\n'
        '  mkdir -p "$2/mooncake-integration"\n'
        '  echo engine > "$2/mooncake-integration/engine.cpython-310-x86_64-linux-gnu.so"\n'
        'fi\n')
    (stub / 'cmake').chmod(0o755)
    (out / 'engine.cpython-39-x86_64-linux-gnu.so').write_text('stale')
    env = dict(os.environ, PATH=str(stub) + os.pathsep + os.environ['PATH'], CMAKE_LOG=str(log))
    subprocess.run(['sh', str(script)], check=True, env=env, capture_output=True)

    configure, build = log.read_text().splitlines()
    assert configure.split(' ') == ['-S', str(root), '-B', str(root / 'build')] + flags
    assert build == '--build %s -j 3' % (root / 'build')
    assert sorted(p.name for p in out.iterdir()) == ['build-engine.sh', 'engine.cpython-310-x86_64-linux-gnu.so']
