# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""playbooks/support_bundle.yml makes one archive on the controller, redacted, with a node down.

The real playbook runs through ansible-runner against two hosts: node-a on this machine (a local
connection; Docker is fake_docker.py with one SGLang container, systemctl is fake_systemctl.py,
`docker logs` a script that prints a log holding a registry password) and node-b, whose SSH port
refuses. Secrets are planted where a careless bundle would copy them: the
router's API key in node-a's env file, the registry password in its container log, a hub token
in its environment. The archive must list node-a's files, say node-b did not answer, and hold
none of the secrets; a --check run under --limit (which leaves localhost out of the plays) writes
the same archive and nothing on the node.
"""

from __future__ import annotations

import os
import socket
import sys
import tarfile

import fake_docker
import fake_systemctl
import pytest
import yaml

ansible_runner = pytest.importorskip('ansible_runner')

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
DIGEST = 'sha256:' + '5e' * 32
ROUTER_KEY = 'router-key-4f9c2a7be1d84c6a'
REGISTRY_PASSWORD = 'registry-pass-8d1e5b3c97a2'
HUB_TOKEN = 'hf_plantedHubToken0123456789'
SECRETS = (ROUTER_KEY, REGISTRY_PASSWORD, HUB_TOKEN)
SERVICE = 'sglang-decode'
LABEL = 'org.mindverse.sglang_pd.'
# docker logs prints a log with the registry password in it (a pull that echoed its login).
FAKE_DOCKER = f"""#!/bin/sh
case "$1" in
  logs) echo "2026-01-01T00:00:00Z pulling with password {REGISTRY_PASSWORD}"; echo "decode batch #token: 120";;
  *) echo "fake docker: $*" >&2; exit 1;;
esac
"""
NODE_FILES = {'docker.json', 'dmesg.txt', 'amd-smi.txt', 'rocm-smi.txt', 'ibstat.txt', 'rdma-link.txt', 'nftables.txt',
              'journal.txt', f'logs/{SERVICE}.log', f'files/{SERVICE}.env', f'files/{SERVICE}.sh',
              'router-workers.json', 'router-metrics.txt'}


def _local_address():
    """This machine's outward address: node-a's service address, where nothing listens (a refused connection is quick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(('198.51.100.1', 9))
        except OSError:
            pytest.skip('no outward IPv4 address on this machine')
        return probe.getsockname()[0]


def _inventory(root):
    local = {'ansible_connection': 'local', 'ansible_become': False, 'ansible_python_interpreter': sys.executable,
             'sglang_pd_service_address': _local_address()}
    # SSH to a closed port of this machine: refused at once, the node is unreachable.
    down = {'ansible_connection': 'ssh', 'ansible_host': '127.0.0.1', 'ansible_port': 9, 'sglang_pd_service_address': '198.51.100.7',
            'ansible_ssh_common_args': '-o ConnectTimeout=2 -o BatchMode=yes'}
    return {'all': {
        'vars': {
            'sglang_pd_image_repository': 'registry.example.com/mindverse/sglang',
            'sglang_pd_image_digest': DIGEST,
            'sglang_pd_model_path': '/models/glm-5.2-fp8',
            'sglang_pd_cluster_cidr': '0.0.0.0/0',
            'sglang_pd_client_cidrs': ['0.0.0.0/0'],
            'sglang_pd_registry_username': 'fleet',
            'sglang_pd_registry_password': REGISTRY_PASSWORD,
            'sglang_router_api_key': ROUTER_KEY,
            'sglang_worker_extra_env': {'HF_TOKEN': HUB_TOKEN},
            'sglang_service_config_dir': str(root / 'etc'),
            'sglang_pd_sysfs_root': str(root / 'sysfs'),
            'sglang_pd_validate_gpu_layout': False,
        },
        'children': {'sglang_pd': {'children': {
            'sglang_router': {'hosts': {'node-a': None}},
            'sglang_prefill': {'hosts': {'node-b': down}},
            'sglang_decode': {'hosts': {'node-a': local}},
        }}},
    }}


def _run(tmp_path, name, cmdline=None):
    root = tmp_path / name
    (root / 'etc').mkdir(parents=True)
    (root / 'sysfs').mkdir()
    # A careless env file: the API key in plain text (the role keeps it in the secret file).
    (root / 'etc' / f'{SERVICE}.env').write_text(f'SGLANG_STANDIN=1\nOPENAI_API_KEY={ROUTER_KEY}\n')
    (root / 'etc' / f'{SERVICE}.sh').write_text(f'#!/bin/sh\nexec docker run --detach --name {SERVICE} image\n')
    bin_dir = root / 'bin'
    fake_systemctl.install(bin_dir, root / 'systemctl.log')
    (bin_dir / 'docker').write_text(FAKE_DOCKER)
    (bin_dir / 'docker').chmod(0o755)
    containers = [{'Id': 'c0ffee', 'Names': [f'/{SERVICE}'], 'Image': 'sha256:' + 'ab' * 32, 'ImageID': 'sha256:' + 'ab' * 32,
                   'State': 'running', 'Status': 'Up 1 hour', 'Command': '', 'Created': 0, 'Ports': [],
                   'Labels': {LABEL + 'service': SERVICE, LABEL + 'mode': 'decode', LABEL + 'port': '30200'}}]
    daemon = fake_docker.serve(root / 'docker.sock', {'ServerVersion': '27.5.1'}, containers=containers)
    inventory = root / 'hosts.yml'
    inventory.write_text(yaml.safe_dump(_inventory(root), sort_keys=False))
    (root / 'runner').mkdir()
    try:
        runner = ansible_runner.run(
            private_data_dir=str(root / 'runner'), playbook=os.path.join(REPO, 'playbooks', 'support_bundle.yml'),
            inventory=str(inventory), cmdline=cmdline, quiet=True,
            extravars={'sglang_pd_support_bundle_dir': str(root / 'bundles'), 'sglang_pd_support_bundle_log_lines': 50},
            envvars={'ANSIBLE_CONFIG': os.path.join(REPO, 'ansible.cfg'),
                     'ANSIBLE_COLLECTIONS_PATH': os.path.join(REPO, '.cache', 'collections'),
                     'ANSIBLE_NOCOLOR': 'true', 'ANSIBLE_HOST_KEY_CHECKING': 'false', 'ANSIBLE_LOCALHOST_WARNING': 'false',
                     'DOCKER_HOST': f"unix://{root / 'docker.sock'}",
                     'PATH': f"{bin_dir}{os.pathsep}{os.path.dirname(sys.executable)}{os.pathsep}{os.environ['PATH']}"})
        stdout = runner.stdout.read()
    finally:
        daemon.shutdown()
    assert runner.rc == 0, stdout
    archives = sorted((root / 'bundles').glob('sglang-pd-support-*.tar.gz'))
    assert len(archives) == 1, (sorted(os.listdir(root / 'bundles')), stdout)
    with tarfile.open(archives[0]) as archive:
        members = {m.name: archive.extractfile(m).read().decode('utf-8', 'replace') for m in archive.getmembers() if m.isfile()}
    return root, archives[0], members, stdout


def _relative(members, archive):
    """Member names below the bundle's own folder (the archive's one top folder)."""
    top = archive.name[:-len('.tar.gz')]
    assert all(name.startswith(top + '/') for name in members), sorted(members)
    return {name[len(top) + 1:]: text for name, text in members.items()}


@pytest.mark.parametrize('cmdline', [None, '--check --limit node-a,node-b'], ids=['run', 'check-limit'])
def test_the_bundle_lists_each_node_says_which_did_not_answer_and_holds_no_secret(tmp_path, cmdline):
    root, archive, members, stdout = _run(tmp_path, 'check' if cmdline else 'run', cmdline)
    files = _relative(members, archive)
    assert NODE_FILES <= {name[len('node-a/'):] for name in files if name.startswith('node-a/')}, sorted(files)
    assert set(files) >= {'bundle.txt', 'unreachable.txt', 'status.json', 'node-b/UNREACHABLE.txt'}, sorted(files)
    assert files['unreachable.txt'] == 'node-b\n'
    # The status report (playbooks/status.yml, which writes none under --check or --limit) names node-b unreachable.
    assert ('"kind": "unreachable"' in files['status.json']) != bool(cmdline), files['status.json'][:2000]
    assert not any(name.startswith('node-b/') and name != 'node-b/UNREACHABLE.txt' for name in files), sorted(files)
    # A tool this machine lacks is said to be absent; the log and env file are there, redacted.
    assert 'not present on this node: amd-smi' in files['node-a/amd-smi.txt']
    assert 'pulling with password <redacted>' in files[f'node-a/logs/{SERVICE}.log']
    assert 'decode batch #token: 120' in files[f'node-a/logs/{SERVICE}.log']
    assert 'OPENAI_API_KEY=<redacted>' in files[f'node-a/files/{SERVICE}.env']
    leaks = sorted(name for name, text in members.items() for secret in SECRETS if secret in text)
    assert leaks == [], leaks
    # Nothing is left beside the archive (no staging folder, no unredacted status report).
    assert sorted(os.listdir(root / 'bundles')) == [archive.name]
    # Nothing was written on the node: its files are as they were, no systemctl call changed anything.
    assert sorted(os.listdir(root / 'etc')) == [f'{SERVICE}.env', f'{SERVICE}.sh']
    calls = (root / 'systemctl.log').read_text().splitlines() if (root / 'systemctl.log').exists() else []
    assert [call for call in calls if call.split()[0] != 'show'] == [], calls
