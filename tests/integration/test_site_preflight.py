# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""site.yml refuses bad inventories in its preflight, before any host is contacted.

Each case writes a small inventory into tmp_path and runs the real site.yml through
ansible-runner. The hosts point at TEST-NET addresses over ssh (nothing answers there),
so contacting one would show as an unreachable host. Each case asserts that the run
failed, that the message names the host, the variable, the value and the fix, and that
every task that ran, ran on localhost (the controller) in the preflight play.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import copy
import os
import tempfile

import pytest
from playbook_runner import REPO, run_playbook
import yaml

pytest.importorskip('ansible_runner')

ROUTER_KEY = 'router-key-4c1e9b'
PREFLIGHT_PLAY = 'Validate the inventory before anything changes'
DIGEST = 'sha256:' + '5e' * 32
TASK_EVENTS = ('runner_on_ok', 'runner_on_failed', 'runner_on_skipped', 'runner_on_unreachable',
               'runner_item_on_ok', 'runner_item_on_failed')


def host(address, **extra):
    values = {
        'ansible_connection': 'ssh',
        # TEST-NET-1: nothing answers; a contact attempt would be reported unreachable.
        'ansible_host': '192.0.2.' + address.rsplit('.', 1)[1],
        'ansible_ssh_common_args': '-o ConnectTimeout=2 -o BatchMode=yes',
        'sglang_pd_service_address': address,
    }
    values.update(extra)
    return values


def base():
    """A valid production-shaped inventory: 1 prefill, 2 decode, the router on a decode node."""
    return {
        'all': {
            'vars': {
                'sglang_pd_image_repository': 'registry.example.com/mindverse/sglang',
                'sglang_pd_image_digest': DIGEST,
                'sglang_pd_model_path': '/models/glm-5.2-fp8',
                'sglang_pd_served_model_name': 'glm-5.2-fp8',
                'sglang_pd_cluster_cidr': '10.0.0.0/16',
                'sglang_pd_client_cidrs': ['10.1.0.0/16'],
                'sglang_router_api_key': "{{ lookup('ansible.builtin.env', 'SGLANG_ROUTER_API_KEY') }}",
            },
            'children': {
                'sglang_pd': {
                    'children': {
                        'sglang_router': {'hosts': {'d0': None}},
                        'sglang_prefill': {'hosts': {'p0': host('10.0.0.10')}},
                        'sglang_decode': {'hosts': {'d0': host('10.0.0.11'), 'd1': host('10.0.0.12')}},
                    },
                },
            },
        },
    }


class Run:
    def __init__(self, runner):
        self.rc = runner.rc
        self.stdout = runner.stdout.read()
        self.events = list(runner.events)

    def task_events(self):
        return [e for e in self.events if e['event'] in TASK_EVENTS]

    def count(self, task):
        return len([e for e in self.events if e['event'] == 'runner_on_ok' and e['event_data'].get('task') == task])


def run(tmp_path, inventory, extravars=None, cmdline=None, playbook='site.yml'):
    private = tmp_path / ('runner-%d' % len(list(tmp_path.glob('runner-*'))))
    private.mkdir()
    path = tmp_path / ('hosts-%d.yml' % len(list(tmp_path.glob('hosts-*.yml'))))
    path.write_text(yaml.safe_dump(inventory, sort_keys=False))
    runner = run_playbook(private, os.path.join(REPO, playbook), str(path), extravars, cmdline, project_dir=REPO,
                          # The example inventories read the router's key from the environment.
                          env={'SGLANG_ROUTER_API_KEY': ROUTER_KEY, 'ANSIBLE_HOST_KEY_CHECKING': 'false'})
    return Run(runner)


def hosts_of(inventory, group):
    return inventory['all']['children']['sglang_pd']['children'][group]['hosts']


def set_host(name, **values):
    def change(inventory):
        for group in ('sglang_prefill', 'sglang_decode', 'sglang_router'):
            found = hosts_of(inventory, group)
            if name in found and found[name]:
                found[name].update(values)
                return
    return change


def set_all(**values):
    def change(inventory):
        inventory['all']['vars'].update(values)
    return change


def empty_group(group):
    def change(inventory):
        inventory['all']['children']['sglang_pd']['children'][group]['hosts'] = {}
    return change


def manifest(text):
    """Set sglang_pd_model_manifest to a file on the controller that holds TEXT."""
    def change(inventory):
        handle, path = tempfile.mkstemp(prefix='sglang-pd-', suffix='.manifest')
        with os.fdopen(handle, 'w', encoding='utf-8') as out:
            out.write(text)
        atexit.register(os.remove, path)
        inventory['all']['vars']['sglang_pd_model_manifest'] = path
    return change


def failure_message(result):
    """The message of the failed preflight task: one problem per line."""
    failed = [e for e in result.events if e['event'] == 'runner_on_failed']
    assert len(failed) == 1, result.stdout
    msg = failed[0]['event_data']['res'].get('msg')
    return '\n'.join(msg) if isinstance(msg, list) else str(msg)


def assert_refused_before_any_host(result, fragments):
    assert result.rc != 0, result.stdout
    message = failure_message(result)
    for fragment in fragments:
        assert fragment in message, f'{fragment!r} not in:\n{message}'
    events = result.task_events()
    assert not [e for e in events if e['event'] == 'runner_on_unreachable'], 'a host was contacted'
    for event in events:
        data = event['event_data']
        assert data['host'] == 'localhost', f"task {data.get('task')!r} ran on {data['host']}"
        assert data['play'] == PREFLIGHT_PLAY, f"task {data.get('task')!r} of play {data['play']!r} ran"
    failed = [e for e in events if e['event'] == 'runner_on_failed']
    assert failed[0]['event_data']['task'].startswith('Assert')


# (id, change of the valid inventory, extra vars, fragments the message must contain)
CASES = [
    ('empty-decode-group', empty_group('sglang_decode'), None,
     ['group sglang_decode is empty', 'add at least one host to sglang_decode']),
    ('digest-prefix', set_all(sglang_pd_image_digest='sha256:2d7471420f60'), None,
     ['sglang_pd_image_digest = "sha256:2d7471420f60"', 'pinned by its full digest', 'all 64 hex characters']),
    ('repository-with-digest', set_all(sglang_pd_image_repository='registry.example.com/sglang@' + DIGEST), None,
     ['sglang_pd_image_repository', 'it holds a digest', 'digest in sglang_pd_image_digest']),
    # The manifest rule (image_artifacts'): whole, or a prefix of at least 8 hex characters; shorter is refused.
    ('md5-short-prefix', set_all(sglang_pd_image_artifacts=[{'path': '/opt/venv/x.so', 'md5': '84946b'}]), None,
     ['sglang_pd_image_artifacts[0].md5 = "84946b"', 'not an md5: the whole 32 hex characters, or a prefix of at least 8',
      'all 32 lowercase hex characters (md5sum /opt/venv/x.so)']),
    ('md5-not-hex', set_all(sglang_pd_image_artifacts=[{'path': '/opt/venv/x.so', 'md5': '84946bbz'}]), None,
     ['sglang_pd_image_artifacts[0].md5 = "84946bbz"', 'not an md5']),
    ('md5-var-prefix', set_all(unified_image_mooncake_engine_md5='0e1b8fdd'), None,
     ['unified_image_mooncake_engine_md5 = "0e1b8fdd"', 'not a whole md5']),
    ('string-boolean-inventory', set_all(sglang_worker_trust_remote_code='false'), None,
     ['sglang_worker_trust_remote_code = "false": a string, not a boolean',
      'write sglang_worker_trust_remote_code: false (a YAML boolean, unquoted)']),
    ('string-boolean-extra-vars', None, {'sglang_worker_enable_dp_attention': 'true'},
     ['sglang_worker_enable_dp_attention = "true": a string, not a boolean',
      '''-e '{"sglang_worker_enable_dp_attention": true}\'''']),
    ('router-without-key', set_all(sglang_router_api_key=''), None,
     ['d0: sglang_router_api_key = "": empty: anyone who reaches the router could send requests',
      'sglang_router_allow_unauthenticated: true']),
    ('old-digest-variable', None, {'sglang_image_digest': DIGEST},
     ['sglang_image_digest', 'this variable was removed or renamed',
      'ansible-playbook mindverse.sglang_pd.rolling_upgrade -e sglang_pd_image_digest=sha256:']),
    ('removed-variable', set_all(sglang_worker_env={'SGLANG_USE_AITER': '1'}), None,
     ['sglang_worker_env = {"SGLANG_USE_AITER": "1"}: this variable was removed or renamed',
      'write sglang_worker_rocm_env, sglang_worker_nccl_env']),
    ('unknown-role-variable', set_host('p0', sglang_worker_tensor_parallel_size=8), None,
     ['p0: sglang_worker_tensor_parallel_size = 8: no role or playbook of this collection reads this variable',
      'did you mean sglang_worker_tp_size?']),
    ('kv-cache-fp8-variable', set_all(sglang_worker_kv_cache_dtype='fp8'), None,
     ['sglang_worker_kv_cache_dtype = "fp8": not one of auto, fp8_e5m2, fp8_e4m3',
      'did you mean fp8_e4m3 or fp8_e5m2?']),
    ('kv-cache-fp8-option', set_host('d1', sglang_worker_decode_options={'kv_cache_dtype': 'fp8'}), None,
     ['d1: sglang_worker_decode_options: --kv-cache-dtype fp8: not a valid choice (SGLang 0.5.14, decode worker sglang-decode)',
      'did you mean fp8_e4m3 or fp8_e5m2?']),
    ('unknown-flag', set_all(sglang_worker_options={'tensor_paralel_size': 8}), None,
     ['sglang_worker_options: --tensor-paralel-size 8: no such flag (SGLang 0.5.14,',
      'did you mean --tensor-parallel-size?']),
    ('abbreviated-flag', set_all(sglang_worker_extra_args=['--tp', '8']), None,
     ['sglang_worker_extra_args: --tp 8: no such flag', 'write the whole flag --tp-size']),
    ('switch-given-a-string', set_all(sglang_worker_options={'enable_metrics': 'yes'}), None,
     ['sglang_worker_options: --enable-metrics yes: a switch, it takes no value', 'write enable_metrics: true (unquoted)']),
    ('deprecated-flag', set_all(sglang_worker_extra_args=['--stream-output']), None,
     ['sglang_worker_extra_args: --stream-output: deprecated (SGLang 0.5.14', 'use --incremental-streaming-output']),
    ('fixed-option-port', set_host('d1', sglang_worker_options={'port': 31000}), None,
     ['d1: sglang_worker_options = {"port": 31000}: port is set by the collection from the inventory',
      'set sglang_pd_<mode>_port, or port in sglang_pd_<mode>_workers']),
    ('bootstrap-in-extra-args', set_host('p0', sglang_worker_prefill_extra_args=['--disaggregation-bootstrap-port', '9000']), None,
     ['--disaggregation-bootstrap-port 9000', 'is already given by sglang_pd_bootstrap_port']),
    ('router-port-collision', set_host('d0', sglang_pd_decode_port=30000), None,
     ['d0: sglang_router_port = 30000: port 30000 on 10.0.0.11 is used by the router and by decode worker sglang-decode on d0']),
    ('two-workers-one-port', set_host('d1', sglang_pd_decode_workers=[{'port': 30200, 'gpus': [0, 1, 2, 3]},
                                                                      {'port': 30200, 'gpus': [4, 5, 6, 7]}]),
     {'sglang_worker_tp_size': 4},
     ['port 30200 on 10.0.0.12 is used by decode worker sglang-decode-1 and by decode worker sglang-decode on d1']),
    ('bootstrap-collision', set_host('p0', sglang_pd_prefill_workers=[{'gpus': '0-3', 'bootstrap_port': 9000},
                                                                      {'gpus': '4-7', 'bootstrap_port': 9000}]),
     {'sglang_worker_tp_size': 4},
     ['port 9000 on 10.0.0.10 is used by bootstrap server of sglang-prefill-1 and by bootstrap server of sglang-prefill']),
    ('decode-bootstrap-port', set_host('d1', sglang_pd_decode_workers=[{'bootstrap_port': 9000}]), None,
     ['d1: sglang_pd_decode_workers[0].bootstrap_port = 9000: the bootstrap server runs on prefill servers only']),
    ('worker-key-typo', set_host('d1', sglang_pd_decode_workers=[{'gpu': [0, 1, 2, 3, 4, 5, 6, 7]}]), None,
     ['d1: sglang_pd_decode_workers[0].gpu = [0, 1, 2, 3, 4, 5, 6, 7]: not a worker key', 'did you mean gpus?']),
    ('port-out-of-range', set_host('p0', sglang_pd_prefill_port=70000), None,
     ['p0: port of sglang-prefill (sglang_pd_prefill_port) = 70000: outside 1-65535']),
    ('tp-does-not-match-gpus', set_host('d1', sglang_pd_decode_workers=[{'gpus': '0,1,2,3'}]), None,
     ['d1: sglang_worker_tp_size = 8: the decode worker sglang-decode needs tp_size 8 x pp_size 1 x dp_size 1 = 8 GPUs',
      'but gets 4 GPUs (0, 1, 2, 3)', 'so the product is 4']),
    ('gpu-given-twice', set_host('d1', sglang_pd_decode_workers=[{'gpus': [0, 1, 2, 3]}, {'gpus': [3, 4, 5, 6]}]),
     {'sglang_worker_tp_size': 4},
     ['d1: sglang_pd_decode_workers[1].gpus = [3, 4, 5, 6]: GPU 3 is also given to decode worker sglang-decode']),
    ('gpu-beyond-host', set_host('d1', sglang_pd_decode_workers=[{'gpus': [8, 9, 10, 11]}]), {'sglang_worker_tp_size': 4},
     ['GPU ids [8, 9, 10, 11] do not exist on a host with sglang_pd_gpus_per_host 8']),
    ('gpus-malformed', set_host('d1', sglang_pd_decode_workers=[{'gpus': '0;1'}]), None,
     ['d1: sglang_pd_decode_workers[0].gpus = "0;1": \'0;1\' is not a GPU id', 'write GPU ids as a list']),
    ('base-gpu-id-not-consecutive', set_host('d1', sglang_pd_decode_workers=[{'gpus': [0, 2, 4, 6]}],
                                             sglang_worker_gpu_isolation='base_gpu_id'), {'sglang_worker_tp_size': 4},
     ['with sglang_worker_gpu_isolation base_gpu_id a worker needs consecutive GPUs']),
    ('dp-attention-dp-too-large', set_all(sglang_worker_enable_dp_attention=True, sglang_worker_dp_size=16), None,
     ['dp_size = 16 (sglang_worker_dp_size): SGLang 0.5.14 refuses this', 'under DP attention tp_size must be a multiple of dp_size',
      'make dp_size divide tp_size']),
    ('multi-node-needs-more-tp', set_all(sglang_pd_worker_group='decode-16'), None,
     ['needs tp_size 8 x pp_size 1 x dp_size 1 = 8 GPUs but gets 8 GPUs (all of the host\'s, sglang_pd_gpus_per_host 8) '
      'on each of 2 nodes = 16']),
    ('multi-node-ports-disagree', lambda inv: (set_host('d0', sglang_pd_worker_group='g')(inv),
                                               set_host('d1', sglang_pd_worker_group='g', sglang_pd_decode_port=30300)(inv)),
     {'sglang_worker_tp_size': 16},
     ['d1: sglang_pd_decode_port = 30300: the hosts of multi-node worker g must agree (d0 has 30200)']),
    ('ib-device-space', set_all(sglang_worker_ib_device='mlx5_0 mlx5_1'), None,
     ['sglang_worker_ib_device = "mlx5_0 mlx5_1": "mlx5_0 mlx5_1" is not a device name', 'write a list of device names']),
    ('ib-map-unknown-gpu', set_host('p0', sglang_worker_ib_device={0: ['mlx5_ib0'], 9: ['mlx5_ib9']}), None,
     ['p0: sglang_worker_ib_device', 'GPU 9 is not one of the worker\'s GPUs [0, 1, 2, 3, 4, 5, 6, 7]']),
    ('loopback-address', set_host('p0', sglang_pd_service_address='127.0.0.1'), None,
     ['p0: sglang_pd_service_address = "127.0.0.1": other nodes cannot reach a loopback or unspecified address']),
    ('address-outside-cidr', set_host('d1', sglang_pd_service_address='192.168.7.12'), None,
     ['d1: sglang_pd_service_address = "192.168.7.12": outside sglang_pd_cluster_cidr 10.0.0.0/16']),
    ('unresolvable-name', set_host('d1', sglang_pd_service_address='no-such-node.invalid'), None,
     ['d1: sglang_pd_service_address = "no-such-node.invalid": this name does not resolve on the controller']),
    ('no-address-in-cidr', set_host('d1', sglang_pd_service_address=None, sglang_pd_addresses=['192.168.7.12/24']), None,
     ['d1: sglang_pd_addresses', 'no address inside 10.0.0.0/16 in sglang_pd_addresses']),
    ('router-policy-typo', set_host('d0', sglang_router_policy='cache-aware'), None,
     ['d0: sglang_router_policy = "cache-aware": not one of cache_aware', 'did you mean cache_aware?']),
    ('api-key-as-option', set_host('d0', sglang_router_options={'api_key': 'hunter2'}), None,
     ['d0: sglang_router_options = {"api_key": "<redacted>"}: an API key given as an option ends up in the launch script',
      'write sglang_router_api_key instead']),
    ('control-plane-role', set_host('d0', sglang_router_control_plane_api_keys=[{'id': 'ops', 'name': 'Ops', 'role': 'root',
                                                                                 'key': 'hunter2'}]), None,
     ['d0: sglang_router_control_plane_api_keys[0].role = "root": not a control-plane role; write admin or user']),
    ('control-plane-without-admin', set_host('d0', sglang_router_control_plane_api_keys=[{'id': 'read', 'name': 'Reader',
                                                                                          'role': 'user', 'key': 'hunter2'}]),
     None, ['d0: sglang_router_control_plane_api_keys = <redacted>: with control-plane keys the router takes worker '
            'changes only from an admin key', 'add a key with role admin']),
    ('fake-backend-on-prefill', set_host('p0', sglang_worker_transfer_backend='fake'), None,
     ['p0: sglang_worker_transfer_backend = "fake": SGLang refuses the fake transfer backend on prefill servers']),
    ('unknown-sglang-version', set_all(sglang_pd_sglang_version='0.4.0'), None,
     ['sglang_pd_sglang_version = "0.4.0": the collection ships no flag list for this version',
      'run python scripts/gen_sglang_allowlist.py --version 0.4.0']),
    ('worker-key-not-the-routers', set_host('p0', sglang_worker_api_key='another-key-0001'), None,
     ['p0: sglang_worker_api_key = <redacted>: not the key of the router on d0',
      'the router forwards its clients\' key to the workers', 'leave sglang_worker_api_key unset']),
    ('worker-key-on-the-command-line', set_host('d1', sglang_worker_extra_args=['--api-key', 'key-in-argv-0002']), None,
     ['d1: sglang_worker_extra_args = "<redacted>": --api-key on the command line ends up in the launch script',
      'write sglang_worker_api_key / sglang_worker_admin_api_key instead']),
    ('worker-key-as-option', set_host('d1', sglang_worker_options={'admin_api_key': 'key-as-option-0003'}), None,
     ['d1: sglang_worker_options = {"admin_api_key": "<redacted>"}: admin_api_key is set by the collection',
      'sglang_worker_admin_api_key']),
    ('firewall-without-client-networks', set_all(sglang_pd_client_cidrs=None), None,
     ['sglang_pd_client_cidrs = null: the firewall admits the service ports only from the cluster network',
      'or sglang_firewall_enabled: false']),
    ('firewall-client-network-typo', set_all(sglang_pd_client_cidrs=['10.1.0.0/33']), None,
     ['the firewall cannot be built', "sglang_pd_client_cidrs: '10.1.0.0/33' is not a network"]),
    # Every prefix of the collection: a misspelt name is refused with the closest known one.
    ('misspelt-digest-extra-var', None, {'sglang_pd_imgae_digest': DIGEST},
     ['sglang_pd_imgae_digest = "sha256:', 'no role or playbook of this collection reads this variable',
      'did you mean sglang_pd_image_digest?']),
    ('misspelt-pd-port', set_host('d1', sglang_pd_decode_prot=30300), None,
     ['d1: sglang_pd_decode_prot = 30300: no role or playbook', 'did you mean sglang_pd_decode_port?']),
    ('misspelt-image-variable', set_all(sglang_image_keep_previos=2), None,
     ['sglang_image_keep_previos = 2: no role or playbook', 'did you mean sglang_image_keep_previous?']),
    ('misspelt-engine-variable', set_all(container_engine_data_rot='/mnt/nvme/docker'), None,
     ['container_engine_data_rot = "/mnt/nvme/docker": no role or playbook', 'did you mean container_engine_data_root?']),
    ('misspelt-rocm-variable', set_all(rocm_versoin='6.4.1'), None,
     ['rocm_versoin = "6.4.1": no role or playbook', 'did you mean rocm_version?']),
    ('misspelt-firewall-variable', set_all(sglang_firewall_enable=False), None,
     ['sglang_firewall_enable = false: no role or playbook', 'did you mean sglang_firewall_enabled?']),
    ('misspelt-secret-variable', None, {'sglang_pd_registry_pasword': 'hunter4'},
     ['sglang_pd_registry_pasword = <redacted>: no role or playbook', 'did you mean sglang_pd_registry_password?']),
    ('required-model-path', set_all(sglang_pd_model_path=None), None,
     ['sglang_pd_model_path = null: required, and not set', 'set sglang_pd_model_path for every PD host']),
    ('scale-in-switch-choice', None, {'sglang_pd_scale_in_workers': 'old'},
     ['sglang_pd_scale_in_workers = "old": not one of all, stale']),
    # Model weights: staging needs a manifest, which must be a whole file on the controller.
    ('model-stage-without-manifest', set_all(sglang_pd_model_stage=True), None,
     ['sglang_pd_model_manifest = null: sglang_pd_model_stage copies the files a manifest lists, and none is set',
      'or sglang_pd_model_stage: false']),
    ('model-manifest-missing', set_all(sglang_pd_model_manifest='/nonexistent/glm-5.2-fp8.manifest'), None,
     ['sglang_pd_model_manifest = "/nonexistent/glm-5.2-fp8.manifest": no such file on the controller']),
    ('model-manifest-malformed', manifest('# glm-5.2-fp8\n' + 'a1' * 32 + '  1234  config.json\n' + 'b2' * 32 + '  4.2G  model.safetensors\n'),
     None,
     ['sglang_pd_model_manifest = "/', ".manifest\": manifest line 3: the size must be a whole number of bytes, found '4.2G'",
      'write one file a line as SHA256  SIZE  NAME']),
    # Inventory shape.
    ('pd-group-beside-sglang-pd', lambda inv: inv['all']['children'].update(
        {'sglang_decode': inv['all']['children']['sglang_pd']['children'].pop('sglang_decode')}), None,
     ['d1: in group sglang_decode but not in sglang_pd', 'make sglang_decode a child of sglang_pd']),
    ('misspelt-pd-group', lambda inv: inv['all']['children']['sglang_pd']['children'].update(
        {'sglang_decod': {'hosts': {'d2': {'sglang_pd_service_address': '10.0.0.13'}}}}), None,
     ['d2: in group sglang_decod, which no play of this collection runs on', 'did you mean sglang_decode?']),
    # Workers nobody can reach.
    ('worker-on-loopback', set_host('p0', sglang_worker_host='127.0.0.1'), None,
     ['p0: sglang_worker_host = "127.0.0.1": the routers and the decode workers reach prefill worker sglang-prefill at '
      'http://10.0.0.10:30100: a server on a loopback address refuses every other node']),
    ('worker-on-another-address', set_host('d1', sglang_worker_decode_options={'host': '10.0.9.9'}), None,
     ['d1: sglang_worker_decode_options = "10.0.9.9"', 'it would listen on 10.0.9.9, not on its service address 10.0.0.12']),
    # Units and types.
    ('shm-size-without-unit', set_all(sglang_worker_shm_size=64), None,
     ['sglang_worker_shm_size = 64: a size without a unit is bytes to Docker (64 bytes)', 'write 64g']),
    ('shm-size-not-a-size', set_all(sglang_worker_shm_size='lots'), None,
     ['sglang_worker_shm_size = "lots": not a size']),
    ('env-value-list', set_all(sglang_worker_extra_env={'NCCL_IB_HCA': ['mlx5_0', 'mlx5_1']}), None,
     ['sglang_worker_extra_env.NCCL_IB_HCA = ["mlx5_0", "mlx5_1"]: an environment value must be a string or a number']),
    ('worker-env-value-map', set_host('d1', sglang_pd_decode_workers=[{'env': {'X': {'a': 1}}}]), None,
     ['d1: env of sglang-decode in sglang_pd_decode_workers.X = {"a": 1}: an environment value must be a string']),
    ('router-env-not-a-map', set_host('d0', sglang_router_env=['RUST_LOG=info']), None,
     ['sglang_router_env = ["RUST_LOG=info"]']),
    # Values SGLang refuses at start.
    ('mem-fraction-above-one', set_all(sglang_worker_mem_fraction_static=1.5), None,
     ['sglang_worker_mem_fraction_static = 1.5: it is the fraction of GPU memory', 'between 0 and 1']),
    ('mem-fraction-zero', set_host('p0', sglang_worker_prefill_options={'mem_fraction_static': 0}), None,
     ['p0: sglang_worker_prefill_options.mem_fraction_static = 0: it is the fraction of GPU memory']),
    ('negative-page-size', set_all(sglang_worker_page_size=-16), None,
     ['sglang_worker_page_size = -16: SGLang wants a page size of at least 1 token']),
    ('chunk-not-multiple-of-page', set_all(sglang_worker_page_size=64, sglang_worker_chunked_prefill_size=1000), None,
     ['chunked_prefill_size = 1000 (sglang_worker_chunked_prefill_size)', 'page_size = 64 (sglang_worker_page_size): '
      'SGLang 0.5.14 refuses this prefill worker', 'ServerArgs.check_server_args: self.chunked_prefill_size % self.page_size == 0',
      'such as 960']),
    ('served-name-with-colon', set_all(sglang_pd_served_model_name='glm:5.2'), None,
     ['served_model_name = "glm:5.2" (sglang_worker_served_model_name)', 'the served model name cannot hold a colon',
      "write the name without ':'"]),
    # Prefill and decode that cannot work together.
    ('kv-dtype-differs', set_host('d1', sglang_worker_decode_options={'kv_cache_dtype': 'auto'}), None,
     ['kv_cache_dtype: prefill and decode workers must agree on the KV cache\'s data type',
      'd1 decode worker sglang-decode (sglang_worker_decode_options) use "auto"']),
    ('transfer-backend-differs', set_host('p0', sglang_worker_transfer_backend='nixl'), None,
     ['disaggregation_transfer_backend: prefill and decode workers must agree on the KV transfer backend',
      'p0 prefill worker sglang-prefill (sglang_worker_transfer_backend) use "nixl"']),
    ('page-size-differs', set_host('d0', sglang_worker_page_size=32), None,
     ['page_size: prefill and decode workers must agree on the KV cache\'s page size']),
    ('model-differs', set_host('d1', sglang_pd_model_path='/models/other'), None,
     ['model_path: prefill and decode workers must agree on the model']),
    # SGLang's layouts (tp × dp × ep, context and MoE data parallelism) and scheduling, as ServerArgs asserts them.
    ('moe-dense-tp-size', set_all(sglang_worker_options={'moe_dense_tp_size': 2}), None,
     ['moe_dense_tp_size = 2 (sglang_worker_options), tp_size = 8 (sglang_worker_tp_size)',
      'moe_dense_tp_size can only be 1 or tp_size']),
    ('dp-lm-head-without-dp-attention', set_all(sglang_worker_tp_size=4, sglang_worker_dp_size=2,
                                                sglang_worker_options={'enable_dp_lm_head': True}), None,
     ['enable_dp_lm_head = true (sglang_worker_options)', 'enable_dp_lm_head needs DP attention']),
    ('chunk-per-dp-rank-not-multiple-of-page', set_all(sglang_worker_enable_dp_attention=True, sglang_worker_dp_size=8,
                                                       sglang_worker_page_size=512, sglang_worker_chunked_prefill_size=2048), None,
     ['chunked_prefill_size = 2048 (sglang_worker_chunked_prefill_size)', 'multiple of 512 × dp_size']),
    ('ep-times-moe-dp-not-tp', set_host('p0', sglang_worker_ep_size=2,
                                        sglang_worker_prefill_options={'moe_dp_size': 2, 'attn_cp_size': 2}), None,
     ['moe_dp_size = 2 (sglang_worker_prefill_options), ep_size = 2 (sglang_worker_ep_size), tp_size = 8',
      'with expert parallelism, ep_size × moe_dp_size must equal tp_size']),
    ('context-parallel-does-not-divide-tp', set_host('p0', sglang_worker_prefill_options={'attn_cp_size': 3}), None,
     ['p0: attn_cp_size = 3 (sglang_worker_prefill_options), tp_size = 8 (sglang_worker_tp_size)',
      'tp_size must be a multiple of attn_cp_size']),
    ('priority-scheduling-policy', set_all(sglang_worker_options={'enable_priority_scheduling': True, 'schedule_policy': 'lpm'}), None,
     ['schedule_policy = "lpm" (sglang_worker_options)', 'priority scheduling needs the fcfs or lof schedule policy']),
    ('negative-schedule-conservativeness', set_all(sglang_worker_options={'schedule_conservativeness': -0.5}), None,
     ['schedule_conservativeness = -0.5 (sglang_worker_options)', 'cannot be negative']),
    # Values of the wrong type, read as SGLang's and the router's parsers read them.
    ('page-size-not-a-number', set_all(sglang_worker_options={'page_size': 'sixty-four'}), None,
     ['sglang_worker_options: --page-size sixty-four: not a number (read as int)', 'write a whole number such as 8']),
    ('context-length-with-unit', set_host('d1', sglang_worker_decode_options={'context_length': '128k'}), None,
     ['d1: sglang_worker_decode_options: --context-length 128k: not a number']),
    ('router-log-level-choice', set_host('d0', sglang_router_log_level='verbose'), None,
     ['d0: sglang_router_log_level = "verbose": not a valid choice (sglang-router 0.3.2 or smg 1.13.0)',
      'write one of debug, info, warn, error']),
    ('router-policy-through-options', set_host('d0', sglang_router_options={'policy': 'random'}), None,
     ['d0: sglang_router_options.policy = "random": the collection sets --policy from sglang_router_policy',
      'write sglang_router_policy: random instead']),
    ('router-unknown-option', set_host('d0', sglang_router_options={'max_concurent_requests': 64}), None,
     ['sglang_router_options.max_concurent_requests = 64: sglang-router 0.3.2 has no flag --max-concurent-requests',
      'did you mean max_concurrent_requests?']),
    ('router-option-with-unit', set_host('d0', sglang_router_options={'max_concurrent_requests': '64k'}), None,
     ['d0: sglang_router_options.max_concurrent_requests = "64k": not a number (read as int)']),
    ('router-extra-arg-choice', set_host('d0', sglang_router_extra_args=['--history-backend', 'sqlite']), None,
     ['d0: sglang_router_extra_args: --history-backend sqlite: not a valid choice (sglang-router 0.3.2 or smg 1.13.0)']),
    # Decode layouts the prefill's KV sender cannot serve (SGLang checks them at the first request).
    ('decode-context-parallel', set_host('d1', sglang_worker_decode_options={'attn_cp_size': 2}), None,
     ['d1: sglang_worker_decode_options.attn_cp_size = 2: a decode worker receives the KV cache with context parallelism off',
      'sglang/srt/disaggregation/common/conn.py']),
    ('decode-pipeline-not-the-prefills', set_host('d1', sglang_worker_tp_size=4, sglang_worker_decode_options={'pp_size': 2}), None,
     ["d1: sglang_worker_decode_options.pp_size = 2: a decode worker's pp_size must be 1 or the prefill's",
      'write pp_size: 1 for the decode workers']),
    # Messages that name the cause.
    ('reversed-gpu-range', set_host('d1', sglang_pd_decode_workers=[{'gpus': '7-4'}]), None,
     ["d1: sglang_pd_decode_workers[0].gpus = \"7-4\": '7-4' is a reversed range: write 4-7"]),
    ('extra-flags-as-a-string', set_all(sglang_pd_sglang_extra_flags='--my-fork-flag'), None,
     ["sglang_pd_sglang_extra_flags = '--my-fork-flag': a string, not a list of flags"]),
    ('close-flag-keeps-the-allowlist-hint', set_all(sglang_worker_options={'enable_metrix': True}), None,
     ['--enable-metrix: no such flag', 'did you mean --enable-metrics? (or, if your SGLang build has --enable-metrix, '
      'list it in sglang_pd_sglang_extra_flags)']),
    ('duplicate-worker-name', set_host('d1', sglang_pd_decode_workers=[{'name': 'w', 'gpus': '0-3'}, {'name': 'w', 'gpus': '4-7'}]),
     {'sglang_worker_tp_size': 4},
     ['d1: name of decode worker 1 = "w": the decode worker 0 on this host already has this name']),
]


@pytest.fixture(scope='module')
def refused(tmp_path_factory):
    """Run every bad inventory through site.yml, a few at a time (each run is one ansible-playbook)."""
    # Folders first: tmp_path_factory is not thread-safe.
    folders = {case[0]: tmp_path_factory.mktemp(case[0]) for case in CASES}

    def one(case):
        name, change, extravars, _fragments = case
        inventory = copy.deepcopy(base())
        if change:
            change(inventory)
        return name, run(folders[name], inventory, extravars)

    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        return dict(pool.map(one, CASES))


@pytest.mark.parametrize('name, fragments', [(c[0], c[3]) for c in CASES], ids=[c[0] for c in CASES])
def test_bad_inventory_is_refused_before_any_host(refused, name, fragments):
    assert_refused_before_any_host(refused[name], fragments)


def test_secrets_are_not_echoed(tmp_path):
    inventory = copy.deepcopy(base())
    set_host('d0', sglang_router_options={'api_key': 'hunter2'},
             sglang_router_control_plane_api_keys=[{'id': 'ops', 'name': 'Ops', 'role': 'root', 'key': 'hunter2'}])(inventory)
    # A misspelt secret variable and an old one: refused by name, never by value.
    result = run(tmp_path, inventory, {'sglang_router_apikey': 'hunter2', 'sglang_router_api_keys': 'hunter2'})
    assert result.rc != 0
    message = failure_message(result)
    assert 'sglang_router_apikey = <redacted>: no role or playbook of this collection reads this variable' in message
    assert 'did you mean sglang_router_api_key?' in message
    assert 'sglang_router_api_keys = <redacted>: this variable was removed or renamed' in message
    assert 'hunter2' not in result.stdout
    assert 'hunter2' not in str(result.events)


def test_worker_keys_are_not_echoed(tmp_path):
    inventory = copy.deepcopy(base())
    set_host('p0', sglang_worker_api_key='hunter3', sglang_worker_extra_args=['--admin-api-key', 'hunter3'],
             sglang_worker_options={'api_key': 'hunter3'})(inventory)
    result = run(tmp_path, inventory, {'sglang_worker_admin_apikey': 'hunter3'})
    assert result.rc != 0
    assert 'sglang_worker_admin_apikey = <redacted>: no role or playbook of this collection reads this variable' in failure_message(result)
    assert 'hunter3' not in result.stdout and 'hunter3' not in str(result.events)
    result = run(tmp_path, inventory)
    assert result.rc != 0 and 'p0: ' in failure_message(result)
    assert 'hunter3' not in result.stdout and 'hunter3' not in str(result.events)


# Only the always-tagged plays run: the preflight, and the fleet lock, which is skipped here
# because it contacts the first router host (the inventory's hosts do not exist).
NOTHING_ELSE = '--tags sglang_pd_nothing_else --skip-tags sglang_pd_lock'


def test_a_router_without_key_passes_only_when_allowed_explicitly(tmp_path):
    inventory = copy.deepcopy(base())
    set_all(sglang_router_api_key='', sglang_router_allow_unauthenticated=True)(inventory)
    result = run(tmp_path, inventory, cmdline=NOTHING_ELSE)
    assert result.rc == 0, result.stdout


def test_valid_inventory_passes_and_is_checked_once_per_run(tmp_path):
    # Only the always-tagged preflight runs: nothing else is selected, no host is contacted.
    result = run(tmp_path, base(), cmdline=NOTHING_ELSE)
    assert result.rc == 0, result.stdout
    assert result.count('Run every inventory check on the controller') == 1
    assert result.count('Assert the inventory passes every check') == 1
    assert result.count('Remember that this run\'s inventory passed') == 1
    assert not [e for e in result.task_events() if e['event'] == 'runner_on_unreachable']
    # Besides the preflight on localhost only controller-side actions run for the hosts: the roles'
    # argument validation (tagged always by Ansible) and the host stack's grouping (group_by), none
    # of which connects.
    others = {e['event_data'].get('task_action') for e in result.task_events() if e['event_data']['host'] != 'localhost'}
    assert others <= {'ansible.builtin.validate_argument_spec', 'validate_argument_spec', 'ansible.builtin.group_by'}, others


# The run switches an operator types on the command line (docs/operations.md), each as the
# string -e NAME=VALUE passes: every word the bool filter reads is taken.
SWITCHES = ['sglang_pd_allow_serving_gap', 'sglang_pd_break_lock', 'sglang_pd_confirm', 'sglang_pd_scale_in_prune_image',
            'sglang_pd_scale_out_host_stack', 'sglang_pd_skip_settled', 'skip_confirmation', 'status_fail_on_drift']


# Every spelling the bool filter reads, spread over the switches: two runs cover them all.
@pytest.mark.parametrize('words', [('true', 'yes', 'on', '1', 'True', 'y', 't', 'TRUE'),
                                   ('false', 'no', 'off', '0', 'False', 'n', 'f', 'FALSE')])
def test_playbook_switches_typed_as_key_value_pass(tmp_path, words):
    typed = ' '.join('-e %s=%s' % pair for pair in zip(SWITCHES, words))
    result = run(tmp_path, base(), cmdline=typed + ' -e sglang_pd_drain_timeout=60 ' + NOTHING_ELSE)
    assert result.rc == 0, result.stdout


def test_a_switch_that_is_no_boolean_is_refused_with_what_to_type(tmp_path):
    result = run(tmp_path, base(), cmdline='-e sglang_pd_break_lock=maybe ' + NOTHING_ELSE)
    assert result.rc != 0
    message = failure_message(result)
    assert 'sglang_pd_break_lock = "maybe": not a boolean (write true or false)' in message, message
    assert 'write -e sglang_pd_break_lock=true or -e sglang_pd_break_lock=false' in message, message


def test_an_inventory_boolean_still_refuses_a_quoted_false(tmp_path):
    # Only run switches take strings: a quoted "false" in an inventory is truthy in Jinja, so it stays refused.
    inventory = copy.deepcopy(base())
    set_all(sglang_pd_model_stage='false')(inventory)
    result = run(tmp_path, inventory, cmdline=NOTHING_ELSE)
    assert result.rc != 0
    assert 'sglang_pd_model_stage = "false": a string, not a boolean' in failure_message(result)


@pytest.mark.parametrize('word, passes', [('true', True), ('yes', True), ('false', False)])
def test_the_roll_refusal_takes_the_switch_it_suggests_as_typed(tmp_path, word, passes):
    # The refusal says: mindverse.sglang_pd.rolling_upgrade -e sglang_pd_allow_serving_gap=true. Typed so, the batch check passes
    # (the run then goes on to the hosts, which do not answer here); typed false, it refuses as before.
    result = run(tmp_path, base(), cmdline='-e sglang_pd_image_digest=sha256:%s -e sglang_pd_allow_serving_gap=%s' % ('6f' * 32, word),
                 playbook='playbooks/rolling_upgrade.yml')
    check = 'Assert every batch leaves the routers a prefill and a decode worker'
    assert result.rc != 0  # the TEST-NET hosts never answer
    assert (result.count(check) == 1) is passes, result.stdout
    failed = [e['event_data']['task'] for e in result.events if e['event'] == 'runner_on_failed']
    assert (check in failed) is not passes, failed


def test_rolling_upgrade_of_a_one_prefill_fleet_refuses_before_anything_moves(tmp_path):
    # base() has one prefill host: its batch would leave the routers no prefill worker.
    result = run(tmp_path, base(), {'sglang_pd_image_digest': 'sha256:' + '6f' * 32}, playbook='playbooks/rolling_upgrade.yml')
    assert result.rc != 0
    failed = [e for e in result.events if e['event'] == 'runner_on_failed']
    assert len(failed) == 1 and failed[0]['event_data']['task'] == 'Assert every batch leaves the routers a prefill and a decode worker'
    message = '\n'.join(failed[0]['event_data']['res']['msg'])
    assert "batch 1 (p0) would take the fleet's only prefill host, p0, out of the routers at once" in message
    assert 'Add a second prefill host (mindverse.sglang_pd.scale_out)' in message
    assert not [e for e in result.task_events() if e['event'] == 'runner_on_unreachable'], 'a host was contacted'
    # Only actions that run on the controller ran: nothing was pulled, stopped or restarted.
    actions = {e['event_data'].get('task_action') for e in result.task_events()}
    assert actions <= {'ansible.builtin.assert', 'ansible.builtin.set_fact', 'ansible.builtin.include_role', 'ansible.builtin.include_tasks',
                       'ansible.builtin.validate_argument_spec', 'ansible.builtin.meta', 'ansible.builtin.debug',
                       'mindverse.sglang_pd.preflight'}, actions


def test_preflight_runs_under_limit(tmp_path):
    inventory = copy.deepcopy(base())
    set_host('p0', sglang_pd_prefill_port=70000)(inventory)
    result = run(tmp_path, inventory, cmdline='--limit d1')
    assert result.rc != 0
    assert 'p0: port of sglang-prefill (sglang_pd_prefill_port) = 70000: outside 1-65535' in failure_message(result)
    assert not [e for e in result.task_events() if e['event'] == 'runner_on_unreachable']
    assert {e['event_data'].get('delegated_host', e['event_data']['host']) for e in result.task_events()
            if e['event_data'].get('task', '').startswith('Assert')} <= {'localhost', 'd1'}


def test_at_least_95_bad_inputs():
    assert len(CASES) >= 95
