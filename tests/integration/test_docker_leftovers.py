"""Set-up removes what an earlier Docker daemon left in the kernel, and refuses a NAT rule that
would make every node see its peers as the gateway (scripts/setup/docker_leftovers.sh,
scripts/setup/registry.sh). Runs on this machine's real iptables and Docker engine."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
SETUP = os.path.join(REPO, 'scripts', 'setup')
FLEET_NETWORK = 'sglang-pd'
FLEET_SUBNET = '172.30.57.0/24'


def _run(*argv):
    return subprocess.run(list(argv), capture_output=True, text=True, check=False)


def _can_run():
    if os.geteuid() != 0 or shutil.which('iptables') is None or shutil.which('docker') is None:
        return False
    return _run('docker', 'network', 'inspect', FLEET_NETWORK).returncode == 0


pytestmark = [pytest.mark.docker,
              pytest.mark.skipif(not _can_run(), reason='needs root, iptables and the fleet network of make setup')]


def _live_ids():
    return _run('docker', 'network', 'ls', '--no-trunc', '--quiet').stdout.split()


def _gone_bridge():
    """br-<12 hex digits> that no network of the running daemon has."""
    while True:
        digits = secrets.token_hex(6)
        if not any(i.startswith(digits) for i in _live_ids()):
            return 'br-' + digits


def _rules(table):
    return _run('iptables', '-t', table, '-S').stdout.splitlines()


@pytest.fixture
def leftover():
    """A bridge and rules as a killed daemon leaves them; removed afterwards whatever happened."""
    bridge = _gone_bridge()
    rules = [('nat', ['POSTROUTING', '-s', '10.255.254.0/24', '!', '-o', bridge, '-j', 'MASQUERADE']),
             ('filter', ['FORWARD', '-o', bridge, '-j', 'ACCEPT'])]
    assert _run('ip', 'link', 'add', bridge, 'type', 'bridge').returncode == 0
    for table, rule in rules:
        assert _run('iptables', '-t', table, '-A', *rule).returncode == 0
    yield bridge
    for table, rule in rules:
        while _run('iptables', '-t', table, '-D', *rule).returncode == 0:
            pass
    _run('ip', 'link', 'delete', bridge)


def test_the_bridge_and_rules_of_a_network_docker_no_longer_has_are_removed(leftover):
    live = 'br-' + _run('docker', 'network', 'inspect', '--format', '{{.Id}}', FLEET_NETWORK).stdout.strip()[:12]
    live_rules = [r for t in ('nat', 'filter') for r in _rules(t) if live in r]
    assert live_rules, 'the fleet network has no iptables rules to keep'

    done = _run('bash', os.path.join(SETUP, 'docker_leftovers.sh'))

    assert done.returncode == 0, done.stderr
    assert 'removed what an earlier Docker daemon left' in done.stderr
    assert not [r for t in ('nat', 'filter') for r in _rules(t) if leftover in r]
    assert _run('ip', 'link', 'show', leftover).returncode != 0
    # The live network keeps every rule and its bridge.
    assert [r for t in ('nat', 'filter') for r in _rules(t) if live in r] == live_rules
    assert _run('ip', 'link', 'show', live).returncode == 0


def test_set_up_refuses_a_nat_rule_that_rewrites_the_fleet_networks_own_traffic():
    rule = ['POSTROUTING', '-s', FLEET_SUBNET, '!', '-o', _gone_bridge(), '-j', 'MASQUERADE']
    assert _run('iptables', '-t', 'nat', '-A', *rule).returncode == 0
    try:
        refused = _run('bash', os.path.join(SETUP, 'registry.sh'))
    finally:
        _run('iptables', '-t', 'nat', '-D', *rule)

    assert refused.returncode == 1
    assert 'rewrites the source of traffic on %s' % FLEET_NETWORK in refused.stderr
    assert ' '.join(rule) in refused.stderr
