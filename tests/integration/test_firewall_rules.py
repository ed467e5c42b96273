"""The firewall table the sglang_firewall role writes is one nft accepts, for each shape of plan.

The template is rendered with Jinja2 from plans the pd_firewall filter makes, then checked by
the real `nft --check` (it parses and resolves the table without loading it).
"""

from __future__ import annotations

import os
import shutil
import subprocess

import jinja2
import pytest

from ansible_collections.mindverse.sglang_pd.plugins.filter.firewall import pd_firewall

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
TEMPLATE = os.path.join(REPO, 'roles', 'sglang_firewall', 'templates', 'sglang_pd.nft.j2')
NFT = shutil.which('nft') or '/usr/sbin/nft'

pytestmark = pytest.mark.skipif(not os.path.exists(NFT) or os.geteuid() != 0,
                                reason='nft --check needs nftables and root (make setup installs it)')


def _render(plan):
    with open(TEMPLATE, encoding='utf-8') as handle:
        template = jinja2.Template(handle.read(), trim_blocks=True)
    return template.render(ansible_managed='test', __sglang_firewall_plan=plan)


def _fleet(clients):
    common = {'sglang_pd_cluster_cidr': '10.0.0.0/16', 'sglang_pd_client_cidrs': clients}
    hostvars = {'p0': dict(common, sglang_pd_service_address='10.0.0.1'),
                'd0': dict(common, sglang_pd_service_address='10.0.0.2')}
    groups = {'sglang_prefill': ['p0'], 'sglang_decode': ['d0'], 'sglang_router': ['d0']}
    return groups, hostvars


@pytest.mark.parametrize('host, clients', [
    ('p0', ['10.1.0.0/16']),
    ('d0', ['10.1.0.0/16']),
    ('d0', ['10.1.0.0/16', 'fd00::/64']),
    ('d0', ['fd00::/64']),
])
def test_nft_accepts_the_table(tmp_path, host, clients):
    groups, hostvars = _fleet(clients)
    plan = pd_firewall(host, groups, hostvars, {'sglang_router_prometheus_port': 29000})
    rules = tmp_path / 'firewall.nft'
    rules.write_text(_render(plan), encoding='utf-8')
    checked = subprocess.run([NFT, '--check', '--file', str(rules)], capture_output=True, text=True, check=False)
    assert checked.returncode == 0, checked.stderr + rules.read_text(encoding='utf-8')
    text = '\n'.join(line for line in rules.read_text(encoding='utf-8').splitlines() if not line.startswith('#'))
    # Only its own table is created, emptied and filled: nothing is flushed.
    assert 'flush' not in text and text.count('table inet sglang_pd') == 3
    for port in plan['clients']['ports'] + plan['cluster']['ports']:
        assert str(port) in text
