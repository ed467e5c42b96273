# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Run docs/quickstart.md's commands literally, as an operator with the release would.

In a fresh folder outside the checkout: the collection tarball that `ansible-galaxy
collection build` makes of this checkout, a HOME of its own (no ~/.ansible, no ~/.cache),
no ANSIBLE_* variable, no ansible.cfg, no venv of the checkout on PATH. Each ```sh block of
the page runs as written, in order, with `bash -euo pipefail`; the only thing the test
supplies is `inventory/`, a copy of the local fleet's inventory (the page shows a production
one). One worker of the fleet is stopped by hand first, so the release's site.yml has
something to converge: the run must bring it back (changed on that node, failed nowhere).

Usage: quickstart.py REPO INVENTORY_DIR NODE UNIT
Exit 0 when every block passed and the checks hold; the output of every block goes to stdout.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile

import yaml

BLOCK = re.compile(r'^```sh\n(.*?)^```$', re.M | re.S)
RECAP = re.compile(r'^(\S+)\s+: ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)', re.M)


def sh_blocks(page):
    return [block.strip() for block in BLOCK.findall(page)]


def operator_env(home):
    """The environment of an operator's shell: nothing of the checkout's test harness."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(('ANSIBLE_', 'MOLECULE_', 'VIRTUAL_ENV', 'PYTHON', 'SGLANG_PD_'))}
    env['HOME'] = home
    env['PATH'] = os.pathsep.join(p for p in env.get('PATH', '').split(os.pathsep) if '.venv' not in p)
    env['ANSIBLE_NOCOLOR'] = 'true'  # the recap is read below
    return env


def main(repo, inventory, node, unit):
    page = open(os.path.join(repo, 'docs', 'quickstart.md'), encoding='utf-8').read()
    version = yaml.safe_load(open(os.path.join(repo, 'galaxy.yml'), encoding='utf-8'))['version']
    tarball = 'mindverse-sglang_pd-%s.tar.gz' % version
    blocks = sh_blocks(page)
    if not blocks or tarball not in blocks[0]:
        sys.exit('docs/quickstart.md does not install %s (galaxy.yml says version %s)' % (tarball, version))
    work = tempfile.mkdtemp(prefix='sglang-pd-quickstart-')
    try:
        # The release is made with the harness's tools; the operator's side below uses none of them.
        subprocess.run([os.path.join(os.path.dirname(sys.executable), 'ansible-galaxy'), 'collection', 'build', '--output-path', work, repo],
                       check=True, stdout=subprocess.DEVNULL)
        shutil.copytree(inventory, os.path.join(work, 'inventory'), symlinks=False)
        home = os.path.join(work, 'home')
        os.mkdir(home)
        # The drift the release's site.yml must converge.
        subprocess.run(['docker', 'exec', node, 'systemctl', 'stop', unit], check=True)
        outputs = []
        for number, block in enumerate(blocks, 1):
            print('[quickstart] block %d:\n%s' % (number, block), flush=True)
            done = subprocess.run(['bash', '-euo', 'pipefail', '-c', block], cwd=work, env=operator_env(home),
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)
            print(done.stdout, flush=True)
            if done.returncode:
                sys.exit('[quickstart] block %d failed (exit %d)' % (number, done.returncode))
            outputs.append(done.stdout)
        site = next(out for block, out in zip(blocks, outputs) if 'mindverse.sglang_pd.site ' in block)
        recap = {host: dict(zip(('ok', 'changed', 'unreachable', 'failed'), map(int, counts)))
                 for host, *counts in RECAP.findall(site)}
        if any(r['failed'] or r['unreachable'] for r in recap.values()):
            sys.exit('[quickstart] site failed somewhere: %s' % recap)
        if recap.get(node, {}).get('changed', 0) == 0:
            sys.exit('[quickstart] site changed nothing on %s, whose %s was stopped: %s' % (node, unit, recap))
        active = subprocess.run(['docker', 'exec', node, 'systemctl', 'is-active', unit], stdout=subprocess.PIPE, text=True,
                                check=False)
        if active.stdout.strip() != 'active':
            sys.exit('[quickstart] %s on %s is %s after site' % (unit, node, active.stdout.strip()))
        if not os.path.isfile(os.path.join(work, 'status', 'fleet.json')):
            sys.exit('[quickstart] status wrote no status/fleet.json')
        print('[quickstart] %d blocks passed; site converged %s (%s) and verified the fleet' % (len(blocks), node, recap[node]))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == '__main__':
    main(*sys.argv[1:5])
