# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The roles' own variables (defaults/main.yml, vars/main.yml) under Ansible's templating.

What the worker and router roles compose from the layout: the router's URL on an IPv6 service
address is bracketed, and a non-default sglang_service_config_dir moves every file a service's
container reads (its env files and its secret mount) to where the sglang_service role writes them.
The role files are loaded as they are shipped and evaluated for each host of a small inventory.
"""

from __future__ import annotations

import os
import sys

import pytest
from playbook_runner import REPO, run_play

pytest.importorskip('ansible_runner')

ROLES = os.path.join(REPO, 'roles')
CONFIG_DIR = '/srv/pd/etc'
# The values of one docker run option (FLAG) among a plan's docker_args (PLANS: a list of plans).
OPTION_VALUES = ("{{{{ {plans} | map(attribute='docker_args') | flatten | zip(({plans} | map(attribute='docker_args') | flatten)[1:])"
                 " | selectattr('0', 'equalto', '{flag}') | map(attribute='1') | list }}}}")
# Every plan of this host's workers, with an API key (so that each mounts its secret file).
WORKER_PLANS = ("(__sglang_worker_here | map('mindverse.sglang_pd.sglang_worker_plan',"
                " __sglang_worker_vars | combine({'sglang_worker_api_key': 'k'})) | list)")
ROUTER_PLANS = "([__sglang_router_plan] if 'sglang_router' in group_names else [])"
# What each host reports: the URLs and the files its services' containers read (from their plans).
REPORT = {
    'router_url': "{{ __sglang_router_url if 'sglang_router' in group_names else '' }}",
    'router_env_files': OPTION_VALUES.format(plans=ROUTER_PLANS, flag='--env-file'),
    'worker_env_files': OPTION_VALUES.format(plans=WORKER_PLANS, flag='--env-file'),
    'worker_volumes': OPTION_VALUES.format(plans=WORKER_PLANS, flag='--volume'),
    # Every file the sglang_service role would write for this host's services, and their units.
    'file_paths': f"{{{{ ({WORKER_PLANS} + {ROUTER_PLANS}) | map(attribute='files') | flatten | map(attribute='path') | list }}}}",
    'units': (f"{{{{ ({WORKER_PLANS} + {ROUTER_PLANS}) | map(attribute='files') | flatten"
              " | selectattr('path', 'match', '/etc/systemd/') | map(attribute='content') | list }}"),
}


def _inventory(config_dir=None, service_vars=None):
    common = {'ansible_connection': 'local', 'ansible_become': False, 'ansible_python_interpreter': sys.executable,
              'sglang_pd_image_repository': 'registry.example/sglang', 'sglang_pd_image_digest': 'sha256:' + 'a' * 64,
              'sglang_pd_model_path': '/models/glm'}
    if config_dir:
        common['sglang_service_config_dir'] = config_dir
    common.update(service_vars or {})
    return {'all': {'vars': common, 'children': {
        'sglang_router': {'hosts': {'router_0': {'sglang_pd_service_address': 'fd00:57::10'}}},
        'sglang_prefill': {'hosts': {'prefill_0': {'sglang_pd_service_address': 'fd00:57::11'}}},
        'sglang_decode': {'hosts': {'decode_0': {'sglang_pd_service_address': '10.57.0.12'}}},
    }}}


def _report(tmp_path, config_dir=None, service_vars=None):
    role_files = [os.path.join(ROLES, role, kind, 'main.yml')
                  for role in ('sglang_worker', 'sglang_router') for kind in ('defaults', 'vars')]
    play = {
        'name': 'Evaluate the roles variables',
        'hosts': 'all',
        'gather_facts': False,
        'tasks': [
            {'name': 'Load the role files', 'ansible.builtin.include_vars': {'file': '{{ item }}'}, 'loop': role_files},
            {'name': 'Report', 'ansible.builtin.set_stats': {'data': {'{{ inventory_hostname }}': REPORT}, 'per_host': False}},
        ],
    }
    return run_play(tmp_path, play, _inventory(config_dir, service_vars), name='custom' if config_dir else 'default')


def test_the_router_url_of_an_ipv6_service_address_is_bracketed(tmp_path):
    report = _report(tmp_path)
    assert report['router_0']['router_url'] == 'http://[fd00:57::10]:30000'


def test_a_services_container_reads_its_files_from_the_configured_dir(tmp_path):
    default = _report(tmp_path)
    assert default['router_0']['router_env_files'] == ['/etc/sglang-pd/sglang-router.env', '/etc/sglang-pd/sglang-router.workers.env']
    assert default['decode_0']['worker_env_files'] == ['/etc/sglang-pd/sglang-decode.env']
    custom = _report(tmp_path, CONFIG_DIR)
    assert custom['router_0']['router_env_files'] == [f'{CONFIG_DIR}/sglang-router.env', f'{CONFIG_DIR}/sglang-router.workers.env']
    assert custom['prefill_0']['worker_env_files'] == [f'{CONFIG_DIR}/sglang-prefill.env']
    assert f'{CONFIG_DIR}/sglang-prefill.secret.json:/run/sglang-pd/secret.json:ro' in custom['prefill_0']['worker_volumes']


def test_every_file_of_a_service_is_planned_where_the_sglang_service_role_writes_it(tmp_path):
    custom = _report(tmp_path, CONFIG_DIR, {'sglang_service_follower_path': '/opt/pd/follow', 'sglang_service_restart_sec': 7})
    assert custom['router_0']['file_paths'] == [
        f'{CONFIG_DIR}/sglang-router.env', f'{CONFIG_DIR}/sglang-router.sh', '/opt/pd/follow',
        '/etc/systemd/system/sglang-router.service', '/opt/pd/open-when-ready', f'{CONFIG_DIR}/sglang-router.gate.nft']
    assert custom['decode_0']['file_paths'] == [
        f'{CONFIG_DIR}/sglang-decode.env', f'{CONFIG_DIR}/sglang-decode.sh', '/opt/pd/follow',
        '/etc/systemd/system/sglang-decode.service']
    # The inventory's unit settings reach the units; the router keeps its own restart wait.
    decode_unit, = custom['decode_0']['units']
    router_unit, = custom['router_0']['units']
    assert 'RestartSec=7\n' in decode_unit and f'ExecStartPre={CONFIG_DIR}/sglang-decode.sh\n' in decode_unit
    assert 'RestartSec=1\n' in router_unit and 'ExecStart=/opt/pd/follow sglang-router\n' in router_unit
