# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""inventories/azure-vmss: the pd_role tag decides the groups, private addresses the service address.

Azure is not reachable from a test, so the azure_rm config's own keyed_groups and
hostvar_expressions are applied by the `constructed` inventory plugin to hosts shaped like
the ones azure_rm returns (tags, private_ipv4_addresses), and the preflight then checks the
result. The plugin options used are the constructed ones azure_rm extends.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
CONFIG = os.path.join(REPO, 'inventories', 'azure-vmss', 'inventory.azure_rm.yml')
VENV_BIN = os.path.dirname(sys.executable)


def azure_like_hosts():
    def vm(name, role, *addresses):
        return {'tags': {'pd_role': role}, 'private_ipv4_addresses': list(addresses), 'powerstate': 'running',
                'ansible_connection': 'ssh', 'ansible_ssh_common_args': '-o ConnectTimeout=2 -o BatchMode=yes'}
    return {
        'mindverse-pd_0': vm('mindverse-pd_0', 'prefill', '10.0.0.4'),
        'mindverse-pd_1': vm('mindverse-pd_1', 'decode, router', '172.17.0.1', '10.0.0.5'),
        'mindverse-pd_2': vm('mindverse-pd_2', 'decode', '10.0.0.6'),
    }


def write_inventory(tmp_path):
    with open(CONFIG, encoding='utf-8') as handle:
        config = yaml.safe_load(handle)
    assert config['plugin'] == 'azure.azcollection.azure_rm'
    folder = tmp_path / 'inventory'
    (folder / 'group_vars').mkdir(parents=True)
    os.symlink(os.path.join(REPO, 'inventories', 'azure-vmss', 'group_vars', 'all'), folder / 'group_vars' / 'all')
    (folder / '00-hosts.yml').write_text(yaml.safe_dump({'all': {'hosts': azure_like_hosts()}}))
    constructed = {
        'plugin': 'ansible.builtin.constructed',
        'strict': True,
        'keyed_groups': config['keyed_groups'],
        'compose': config['hostvar_expressions'],
    }
    (folder / '10-azure.config.yml').write_text(yaml.safe_dump(constructed))
    return folder


def run(args):
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, 'ansible.cfg'), ANSIBLE_NOCOLOR='true',
               SGLANG_ROUTER_API_KEY='router-key-4c1e9b',
               ANSIBLE_INVENTORY_ENABLED='ansible.builtin.yaml,ansible.builtin.constructed',
               PATH=VENV_BIN + os.pathsep + os.environ.get('PATH', ''))
    return subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, check=False)


def test_groups_come_from_the_pd_role_tag(tmp_path):
    folder = write_inventory(tmp_path)
    result = run(['ansible-inventory', '-i', str(folder), '--list'])
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert sorted(data['sglang_pd']['children']) == ['sglang_decode', 'sglang_prefill', 'sglang_router']
    assert data['sglang_prefill']['hosts'] == ['mindverse-pd_0']
    assert sorted(data['sglang_decode']['hosts']) == ['mindverse-pd_1', 'mindverse-pd_2']
    assert data['sglang_router']['hosts'] == ['mindverse-pd_1']
    hostvars = data['_meta']['hostvars']['mindverse-pd_1']
    assert hostvars['ansible_host'] == '172.17.0.1'
    assert hostvars['sglang_pd_addresses'] == ['172.17.0.1', '10.0.0.5']


def test_preflight_takes_the_address_inside_the_cluster_cidr(tmp_path):
    folder = write_inventory(tmp_path)
    render_dir = tmp_path / 'render'
    result = run(['ansible-playbook', 'playbooks/render.yml', '-i', str(folder), '-e', 'render_dir=' + str(render_dir)])
    assert result.returncode == 0, result.stdout + result.stderr
    with open(render_dir / 'mindverse-pd_1' / 'sglang-router.json', encoding='utf-8') as handle:
        router = json.load(handle)
    workers, argv = router['workers'], router['argv']
    assert workers[workers.index('--prefill') + 1:workers.index('--prefill') + 3] == ['http://10.0.0.4:30100', '8998']
    assert sorted(workers[i + 1] for i, token in enumerate(workers) if token == '--decode') == [
        'http://10.0.0.5:30200', 'http://10.0.0.6:30200']
    assert argv[argv.index('--prometheus-host') + 1] == '10.0.0.5'
