"""playbooks/build_image.yml refuses a bad prebuilt Mooncake engine before building, and
builds from the SMG package with the files of its generation.

BASE and CA are the test images that set-up pushes (present locally after set-up,
so nothing is pulled); the engine overlay is a Git LFS pointer or a file with the
wrong md5, and the run must fail at the engine check, with no image built.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import yaml

ansible_runner = pytest.importorskip('ansible_runner')

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
GENERATED = os.path.join(REPO, 'inventories', 'local', 'group_vars', 'all', 'generated.yml')
TARGET = 'sglang-pd-scratch/unified:engine-check'  # never built: the test asserts it
LFS_POINTER = ('version https://git-lfs.github.com/spec/v1\n'
               'oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\n'
               'size 70254592\n')


def _repository():
    if not os.path.exists(GENERATED):
        return None
    with open(GENERATED, encoding='utf-8') as handle:
        repository = yaml.safe_load(handle)['sglang_pd_image_repository']
    found = subprocess.run(['docker', 'image', 'inspect', repository + ':v1', repository + ':v2'],
                           capture_output=True, check=False)
    return repository if found.returncode == 0 else None


REPOSITORY = _repository()
pytestmark = [pytest.mark.docker,
              pytest.mark.skipif(REPOSITORY is None, reason='the test images are made by scripts/setup (make setup)')]


def _build(tmp_path, engine):
    private = tmp_path / 'runner'
    private.mkdir()
    runner = ansible_runner.run(
        private_data_dir=str(private),
        project_dir=REPO,
        playbook=os.path.join(REPO, 'playbooks', 'build_image.yml'),
        extravars={'unified_image_base': REPOSITORY + ':v1', 'unified_image_ca': REPOSITORY + ':v2',
                   'unified_image_target': TARGET, 'unified_image_mooncake_engine_src': str(engine),
                   'unified_image_router_package_path': '/opt/venv/lib/python3.11/site-packages/sglang_router'},
        envvars={'ANSIBLE_CONFIG': os.path.join(REPO, 'ansible.cfg'),
                 'ANSIBLE_COLLECTIONS_PATH': os.path.join(REPO, '.cache', 'collections'),
                 'ANSIBLE_LOCALHOST_WARNING': 'false', 'ANSIBLE_NOCOLOR': 'true',
                 'PATH': os.path.dirname(sys.executable) + os.pathsep + os.environ.get('PATH', '')},
        quiet=True)
    failed = [(e['event_data'].get('task'), e['event_data'].get('res', {}).get('msg', ''))
              for e in runner.events if e['event'] == 'runner_on_failed']
    return runner.rc, failed


def _target_exists():
    return subprocess.run(['docker', 'image', 'inspect', TARGET], capture_output=True, check=False).returncode == 0


@pytest.mark.parametrize('content, expected', [
    (LFS_POINTER, 'git lfs pull'),
    ('not the engine\n', '0e1b8fdd2d39e007b58c3e1711ec398b'),
], ids=['lfs-pointer', 'wrong-md5'])
def test_a_bad_engine_is_refused_before_the_build(tmp_path, content, expected):
    engine = tmp_path / 'engine_v3.so'
    engine.write_text(content)

    rc, failed = _build(tmp_path, engine)

    assert rc != 0
    assert [task for task, _msg in failed] == ['Fetch and verify the prebuilt Mooncake engine']
    assert expected in failed[0][1] and str(engine) in failed[0][1]
    assert not _target_exists()


SMG_PACKAGE = '/opt/smg/lib/python3.11/site-packages/smg'
SMG_TARGET = 'sglang-pd-scratch/unified:smg'


def test_an_smg_build_compares_the_smg_package_with_the_ca_image(tmp_path):
    """The test images carry SMG in /opt/smg: a build that takes that package from the CA
    image compares SMG's files (no mini_lb.py, smg_rs.abi3.so), with no list given."""
    private = tmp_path / 'runner'
    private.mkdir()
    try:
        runner = ansible_runner.run(
            private_data_dir=str(private), project_dir=REPO,
            playbook=os.path.join(REPO, 'playbooks', 'build_image.yml'),
            extravars={'unified_image_base': REPOSITORY + ':v1', 'unified_image_ca': REPOSITORY + ':v2',
                       'unified_image_target': SMG_TARGET, 'unified_image_router_package_path': SMG_PACKAGE,
                       'unified_image_manifest': [], 'unified_image_push': False,
                       'unified_image_artifacts_cache_dir': str(tmp_path / 'artifacts')},
            envvars={'ANSIBLE_CONFIG': os.path.join(REPO, 'ansible.cfg'),
                     'ANSIBLE_COLLECTIONS_PATH': os.path.join(REPO, '.cache', 'collections'),
                     'ANSIBLE_LOCALHOST_WARNING': 'false', 'ANSIBLE_NOCOLOR': 'true',
                     'PATH': os.path.dirname(sys.executable) + os.pathsep + os.environ.get('PATH', '')},
            quiet=True)
        assert runner.rc == 0, [e['event_data'].get('res', {}).get('msg') for e in runner.events
                                if e['event'] == 'runner_on_failed']
        results = {e['event_data']['task']: e['event_data']['res'] for e in runner.events if e['event'] == 'runner_on_ok'}
        ca_files = results['Read the router package files of the CA image']['artifacts']
        assert [a['path'] for a in ca_files] == [SMG_PACKAGE + '/' + name for name in
                                                 ('router.py', 'launch_router.py', 'router_args.py', 'smg_rs.abi3.so')]
        built = results['Verify the built image against the manifest and the CA router package']['artifacts']
        assert {a['path']: a['md5'] for a in built} == {a['path']: a['md5'] for a in ca_files}
        assert all(len(a['md5']) == 32 for a in ca_files)
    finally:
        subprocess.run(['docker', 'image', 'rm', '-f', SMG_TARGET], capture_output=True, check=False)
