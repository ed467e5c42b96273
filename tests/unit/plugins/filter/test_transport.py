"""mooncake_transport / mooncake_transport_problem: the transport Mooncake chose, from a worker's log."""

from __future__ import annotations

import re

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.mindverse.sglang_pd.plugins.filter.transport import (FilterModule, MARKER_PATTERN, mooncake_transport,
                                                                              mooncake_transport_problem)

# glog lines as Mooncake writes them (severity, date, time, thread, file:line] message).
FORCED_TCP = 'I1130 10:00:01.000001  4242 transfer_engine_impl.cpp:233] MC_FORCE_TCP is set, using TCP transport only'
ZERO_HCAS = 'I1130 10:00:01.000002  4242 transfer_engine_impl.cpp:320] Topology discovery complete. Found 0 HCAs.'
EIGHT_HCAS = 'I1130 10:00:01.000002  4242 transfer_engine_impl.cpp:320] Topology discovery complete. Found 8 HCAs.'
RDMA = 'I1130 10:00:01.000003  4242 transfer_engine_impl.cpp:441] installTransport, type=rdma'
NVLINK_BUILD_RDMA = 'I1130 10:00:01.000003  4242 transfer_engine_impl.cpp:412] Using RDMA transport (RoCE/iWARP)'
NVLINK_BUILD_TCP = 'I1130 10:00:01.000003  4242 transfer_engine_impl.cpp:420] Using TCP transport (no HCA detected)'
HIP = 'I1130 10:00:01.000004  4242 transfer_engine_impl.cpp:466] HIP transport installed for intra-node GPU P2P'
HIP_CROSS_NODE = ('E1130 10:05:00.000000  4242 hip_transport.cpp:70] HipTransport: hipIpcOpenMemHandle failed '
                  '(Error code: 17 - invalid device pointer)')
NOISE = ['[2026-11-30 10:00:00] server_args=ServerArgs(model_path=/models/glm, disaggregation_mode=prefill)',
         'Loading safetensors checkpoint shards: 100% Completed | 93/93',
         'I1130 10:00:01.000000  4242 transfer_engine_impl.cpp:190] Transfer Engine RPC using P2P handshake, listening on 10.0.0.4:16680']


def log(*lines):
    return '\n'.join(NOISE + list(lines) + ['The server is fired up and ready to roll!'])


@pytest.mark.parametrize('lines, transport, line', [
    ((EIGHT_HCAS, RDMA), 'rdma', RDMA),
    ((NVLINK_BUILD_RDMA,), 'rdma', NVLINK_BUILD_RDMA),
    ((FORCED_TCP,), 'tcp', FORCED_TCP),
    ((NVLINK_BUILD_TCP,), 'tcp', NVLINK_BUILD_TCP),
    # The silent fallback: no HCA, TCP installed without a line of its own.
    ((ZERO_HCAS,), 'tcp', ZERO_HCAS),
    # No HCA but HIP IPC: HIP outranks the silent TCP, a cross-node peer gets HIP IPC.
    ((ZERO_HCAS, HIP), 'hip_ipc', HIP),
    ((), 'unknown', ''),
], ids=['rdma', 'rdma-nvlink-build', 'forced-tcp', 'tcp-nvlink-build', 'silent-tcp', 'hip-without-rdma', 'no-line'])
def test_the_transport_and_its_line(lines, transport, line):
    found = mooncake_transport(log(*lines))
    assert (found['transport'], found['line']) == (transport, line)


def test_rdma_beside_hip_ipc_is_rdma_and_says_hip_is_installed():
    found = mooncake_transport(log(EIGHT_HCAS, RDMA, HIP))
    assert found == {'transport': 'rdma', 'line': RDMA, 'lines': [EIGHT_HCAS, RDMA, HIP], 'engines': 1, 'hip_ipc_installed': True}


def test_a_cross_node_hip_failure_wins_over_rdma():
    found = mooncake_transport(log(EIGHT_HCAS, RDMA, HIP, 'Prefill transfer failed', HIP_CROSS_NODE, HIP_CROSS_NODE))
    assert (found['transport'], found['line']) == ('hip_ipc', HIP_CROSS_NODE)


def test_one_tp_rank_on_tcp_makes_the_worker_tcp():
    ranks = [EIGHT_HCAS, RDMA] * 3 + [ZERO_HCAS] + [EIGHT_HCAS, RDMA] * 4
    found = mooncake_transport(log(*ranks))
    assert (found['transport'], found['line'], found['engines']) == ('tcp', ZERO_HCAS, 8)


def test_mc_force_hca_installs_rdma_without_hcas():
    assert mooncake_transport(log(ZERO_HCAS, RDMA))['transport'] == 'rdma'


def test_an_install_line_without_its_discovery_line_still_counts():
    assert mooncake_transport([RDMA])['transport'] == 'rdma'
    assert mooncake_transport([HIP])['transport'] == 'hip_ipc'


def test_another_installed_type_is_unknown_with_its_line():
    line = 'I1130 10:00:01.000003  4242 transfer_engine_impl.cpp:441] installTransport, type=ubshmem'
    assert mooncake_transport(log(EIGHT_HCAS, line)) == {'transport': 'unknown', 'line': line, 'lines': [EIGHT_HCAS, line],
                                                         'engines': 1, 'hip_ipc_installed': False}


def test_lines_and_none_are_read_too():
    assert mooncake_transport([FORCED_TCP])['transport'] == 'tcp'
    assert mooncake_transport(None)['transport'] == 'unknown'
    with pytest.raises(AnsibleFilterError, match='a log as text or a list of lines, got int'):
        mooncake_transport(3)


@pytest.mark.parametrize('line', [FORCED_TCP, ZERO_HCAS, EIGHT_HCAS, RDMA, NVLINK_BUILD_RDMA, NVLINK_BUILD_TCP, HIP, HIP_CROSS_NODE])
def test_the_grep_pattern_finds_every_line_the_filter_reads(line):
    assert re.search(MARKER_PATTERN, line)
    assert FilterModule().filters()['mooncake_transport_pattern']() == MARKER_PATTERN


@pytest.mark.parametrize('line', NOISE)
def test_the_grep_pattern_leaves_other_lines(line):
    assert not re.search(MARKER_PATTERN, line)


def test_rdma_is_no_problem():
    assert mooncake_transport_problem(mooncake_transport(log(EIGHT_HCAS, RDMA)), 'pd-node-1', 'sglang-prefill') == ''


@pytest.mark.parametrize('lines, words', [
    ((FORCED_TCP,), ['transport tcp, Mooncake moves the KV cache over TCP', f'its log says "{FORCED_TCP}"', 'unset MC_FORCE_TCP',
                     '--disaggregation-ib-device']),
    ((ZERO_HCAS,), ['transport tcp', f'its log says "{ZERO_HCAS}"', '/dev/infiniband']),
    ((EIGHT_HCAS, RDMA, HIP_CROSS_NODE), ['transport hip_ipc', 'HIP IPC (intra-node only)', HIP_CROSS_NODE, 'MC_DISABLE_HIP=1']),
    ((), ['transport unknown', 'its log has no Mooncake transport line', '--disaggregation-transfer-backend mooncake']),
], ids=['forced-tcp', 'silent-tcp', 'hip-cross-node', 'no-line'])
def test_the_problem_names_host_worker_transport_line_and_fix(lines, words):
    problem = mooncake_transport_problem(mooncake_transport(log(*lines)), 'pd-node-2', 'sglang-decode')
    assert problem.startswith('pd-node-2: worker sglang-decode: ')
    for word in words:
        assert word in problem
    assert 'Fix: ' in problem


def test_the_problem_wants_a_finding():
    with pytest.raises(AnsibleFilterError, match='wants the result of mooncake_transport'):
        mooncake_transport_problem({'transport': 'carrier-pigeon'}, 'pd-node-2', 'sglang-decode')
