# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""playbooks/stages/fabric.yml (the first step of site.yml that reads the nodes) on fixture sysfs trees.

Three inventory hosts run on the controller (local connection), each reading its own ND
MI300X v5 style tree (tests/unit/sysfs_fixtures.py: 8 GPUs, 8 RoCE NICs, two NUMA nodes)
through sglang_pd_sysfs_root. A healthy fleet passes, in check mode too; a DOWN port, RoCE
with only link-local GIDs and mixed MTUs are refused, naming host, GPU, NIC and the fix.
"""

from __future__ import annotations

import os

import pytest

from ansible_collections.mindverse.sglang_pd.tests.unit import sysfs_fixtures as fx
from test_site_preflight import failure_message, run

ADDRESSES = {'p0': '10.0.0.10', 'd0': '10.0.0.11', 'd1': '10.0.0.12'}


def fleet(tmp_path, spoil=None):
    """The inventory, with each host's fixture tree written; spoil(host, root) changes one."""
    hosts = {}
    for name, address in ADDRESSES.items():
        root = str(tmp_path / name)
        fx.roce_node(root, address)
        if spoil:
            spoil(name, root)
        hosts[name] = {'ansible_connection': 'local', 'ansible_become': False, 'ansible_python_interpreter': '{{ ansible_playbook_python }}',
                       'sglang_pd_service_address': address, 'sglang_pd_sysfs_root': root}
    return {'all': {
        'vars': {'sglang_pd_cluster_cidr': '10.0.0.0/24', 'sglang_pd_image_repository': 'registry.example.com/mindverse/sglang',
                 'sglang_pd_image_digest': 'sha256:' + '5e' * 32, 'sglang_pd_model_path': '/models/glm-5.2-fp8'},
        'children': {'sglang_pd': {'children': {
            'sglang_prefill': {'hosts': {'p0': hosts['p0']}},
            'sglang_decode': {'hosts': {'d0': hosts['d0'], 'd1': dict(hosts['d1'], sglang_pd_decode_workers=[
                {'port': 30200, 'gpus': '0,1,2,3'}, {'port': 30201, 'gpus': '4,5,6,7'}])}},
        }}},
    }}


def fabric_run(tmp_path, inventory, cmdline=None):
    return run(tmp_path, inventory, playbook='playbooks/stages/fabric.yml', cmdline=cmdline)


@pytest.mark.parametrize('cmdline', [None, '--check'])
def test_a_healthy_fleet_passes_and_every_node_is_paired(tmp_path, cmdline):
    result = fabric_run(tmp_path, fleet(tmp_path), cmdline)
    assert result.rc == 0, result.stdout
    facts = [e['event_data']['res']['ansible_facts']['sglang_pd_fabric'] for e in result.events
             if e['event'] == 'runner_on_ok' and e['event_data'].get('task') == 'Pair each GPU with its nearest NIC']
    assert len(facts) == 3
    for fabric in facts:
        assert [(p['gpu'], p['nic'], p['via']) for p in fabric['pairs']] == [(i, 'mlx5_ib%d' % i, 'pcie_switch') for i in range(8)]
        assert fabric['gid_index'] == dict(('mlx5_ib%d' % i, 3) for i in range(8))


def down(host, nic):
    def spoil(name, root):
        if name == host:
            fx.add_ib_port(root, nic, state='1: DOWN', phys_state='3: Disabled', link_layer='Ethernet')
    return spoil


def test_a_down_port_is_refused_naming_host_gpu_and_nic(tmp_path):
    result = fabric_run(tmp_path, fleet(tmp_path, down('d1', 'mlx5_ib6')))
    assert result.rc != 0
    message = failure_message(result)
    assert 'd1: NIC mlx5_ib6 port 1 (GPU 6) is DOWN (physical state Disabled), not ACTIVE' in message
    assert 'ibstat mlx5_ib6' in message


def test_link_local_gids_only_are_refused(tmp_path):
    def spoil(name, root):
        if name == 'p0':
            for nic in fx.IB_DEVICES:
                for index in (2, 3):
                    os.remove(os.path.join(root, 'sys/class/infiniband', nic, 'ports/1/gids', str(index)))
    result = fabric_run(tmp_path, fleet(tmp_path, spoil))
    assert result.rc != 0
    message = failure_message(result)
    assert 'p0: NIC mlx5_ib0 port 1 (GPU 0) is RoCE without a RoCE v2 GID in 10.0.0.0/24' in message
    assert 'Give its network device eth0 an address in 10.0.0.0/24' in message


def test_mixed_mtus_across_the_fleet_are_refused(tmp_path):
    def spoil(name, root):
        if name == 'd0':
            fx.write(os.path.join(root, 'sys/class/net/eth3/mtu'), '4200\n')
    result = fabric_run(tmp_path, fleet(tmp_path, spoil))
    assert result.rc != 0
    message = failure_message(result)
    assert 'RoCE ports differ in MTU: 4200 on d0 mlx5_ib3; 9000 on' in message
