# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The settled guard of site.yml is one group, made in one play (playbooks/stages/settled.yml).

When the fleet holds what the last verified run left, settled.yml puts every node into
sglang_pd_settled, and each play between the comparison and the verification names its hosts
without that group's: it has none left. ``ansible-playbook --list-hosts`` evaluates every
play's hosts against an inventory that holds the group (a settled run) or not (a run that
converges, or a stage playbook run on its own), without contacting a host.
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import pytest
import yaml

REPO = pathlib.Path(__file__).resolve().parents[2]
PLAY = re.compile(r'^  play #\d+ \((.*)\): (.*?)\tTAGS: .*\n    pattern: .*\n    hosts \((\d+)\):', re.M)
COMPARISON = 'Find whether every node still holds what the last verified run left there'
VERIFICATION = 'Probe every planned prefill and decode pair the way the router sends requests'
PREFLIGHT = 'Validate the inventory before anything changes'
# The fabric measurement runs when asked for (sglang_pd_fabric_check), settled or not.
FABRIC_CHECK = [play['name'] for play in yaml.safe_load((REPO / 'playbooks' / 'fabric_check.yml').read_text())
                if 'hosts' in play]
# The free space of every node is measured, and warned, in every run: settled or not (docs/operations.md).
FREE_SPACE = "Measure the free space at Docker's data-root and the model directory"


def _inventory(settled):
    node = {'ansible_connection': 'local', 'ansible_python_interpreter': sys.executable}
    groups = {
        'sglang_pd': {'children': {
            'sglang_router': {'hosts': {'r0': {**node, 'sglang_pd_service_address': '10.0.0.9'}}},
            'sglang_prefill': {'hosts': {'p0': {**node, 'sglang_pd_service_address': '10.0.0.10'},
                                         'p1': {**node, 'sglang_pd_service_address': '10.0.0.11'}}},
            'sglang_decode': {'hosts': {'d0': {**node, 'sglang_pd_service_address': '10.0.0.12'},
                                        'd1': {**node, 'sglang_pd_service_address': '10.0.0.13'}}},
        }},
        'sglang_monitoring': {'hosts': {'m0': {**node, 'sglang_pd_service_address': '10.0.0.20'}}},
    }
    if settled:
        # What playbooks/stages/settled.yml makes of a settled fleet: every node of the run in the group.
        groups['sglang_pd_settled'] = {'children': {'sglang_pd': {}, 'sglang_monitoring': {}}}
    return {'all': {'vars': {'sglang_pd_image_repository': 'registry.example/sglang',
                             'sglang_pd_image_digest': 'sha256:' + 'a' * 64, 'sglang_pd_model_path': '/models/glm'},
                    'children': groups}}


def _plays(tmp_path, playbook, settled):
    """(name, hosts) of every play of PLAYBOOK, in order, as Ansible evaluates them."""
    inventory = tmp_path / ('settled.yml' if settled else 'converging.yml')
    inventory.write_text(yaml.safe_dump(_inventory(settled)))
    done = subprocess.run([os.path.join(os.path.dirname(sys.executable), 'ansible-playbook'), str(REPO / playbook),
                           '-i', str(inventory), '--list-hosts'],
                          capture_output=True, text=True, cwd=str(REPO), check=False,
                          env=dict(os.environ, ANSIBLE_CONFIG=str(REPO / 'ansible.cfg'), ANSIBLE_NOCOLOR='1',
                                   ANSIBLE_COLLECTIONS_PATH=str(REPO / '.cache' / 'collections')))
    assert done.returncode == 0, done.stdout + done.stderr
    assert 'Could not match supplied host pattern' not in done.stderr, done.stderr
    return [(name, int(count)) for _pattern, name, count in PLAY.findall(done.stdout)]


def _stages(plays):
    """The plays site.yml runs between the comparison and the verification (not the preflight's)."""
    names = [name for name, _count in plays]
    start, end = names.index(COMPARISON), names.index(VERIFICATION)
    return [(name, count) for name, count in plays[start + 1:end] if name != PREFLIGHT]


@pytest.fixture(scope='module')
def site(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp('settled')
    return {settled: _plays(tmp_path, 'site.yml', settled) for settled in (True, False)}


def test_a_settled_fleet_leaves_every_stage_without_hosts(site):
    stages = _stages(site[True])
    assert len(stages) >= 25, stages
    assert [(name, count) for name, count in stages if count and name not in FABRIC_CHECK + [FREE_SPACE]] == []
    assert dict(stages)[FREE_SPACE] == 5


def test_a_fleet_that_converges_runs_the_stages_on_their_hosts(site):
    hosts = dict(_stages(site[False]))
    # The plays that name an inventory group; the others name a group a play before them makes.
    assert hosts['Read and check each worker node\'s fabric before anything changes'] == 4
    assert hosts['Group the hosts by the host stack they manage'] == 5
    assert hosts['Decide which running Docker daemons must restart under workers, before anything changes'] == 5
    assert hosts['Install and configure the container engine'] == 5
    assert hosts[FREE_SPACE] == 5
    assert hosts['Start pulling the image where it is missing'] == 5
    assert hosts['Admit the service ports only from the cluster and client networks'] == 5
    assert hosts['Verify the model weights on every worker node, and stage them where missing'] == 4
    assert hosts['Pull the unified image by digest and verify it'] == 5
    assert hosts['Decide which running workers must restart, before anything changes'] == 4
    assert hosts['Start the workers that do not run yet, leave the changed ones for their batch'] == 4
    assert hosts['Run the router, one at a time, drained at the balancers when it restarts'] == 1
    assert hosts['Run a node exporter on every PD node and balancer host'] == 5
    assert hosts['Run Prometheus on the monitoring hosts'] == 1
    assert hosts['Record the images that run healthy'] == 5


def test_the_verification_and_the_record_run_on_a_settled_fleet(site):
    names = [name for name, _count in site[True]]
    after = dict(site[True][names.index(VERIFICATION):])
    assert after[VERIFICATION] == 1
    assert after['Record what every node holds, now that the fleet is verified'] == 6


# A stage playbook run on its own, or imported by scale_out.yml, never meets the group.
@pytest.mark.parametrize('playbook, play, count', [
    ('playbooks/stages/workers.yml', 'Start the workers that do not run yet, leave the changed ones for their batch', 4),
    ('playbooks/scale_out.yml', 'Install and configure the container engine', 5),
])
def test_a_stage_outside_site_yml_runs_on_its_hosts(tmp_path, playbook, play, count):
    assert dict(_plays(tmp_path, playbook, settled=False))[play] == count


def test_no_playbook_carries_its_own_copy_of_the_guard():
    # The comparison's fact is read where it is decided and where the record is written, nowhere else:
    # a stage that ends its play (or skips its tasks) on it is a second copy of the rule.
    fact = re.compile(r"__sglang_pd_settled\b")
    readers = sorted(str(path.relative_to(REPO)) for path in REPO.glob('playbooks/**/*.yml') if fact.search(path.read_text()))
    assert readers == ['playbooks/stages/record_settled.yml', 'playbooks/stages/settled.yml']
