# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Run an entry point inside the built execution environment, as AWX and AAP run a job.

ansible-runner with process isolation starts the EE image `make ee` built (docker), with the
job's private data folder at /runner and a copy of the local fleet's inventory in it, and runs
`ansible-playbook mindverse.sglang_pd.site` there: the collection, Ansible and every library
come from the image, nothing from this checkout. The set-up's controller files the inventory
names (SSH key, known_hosts, registry CA, secrets, model manifest) are mounted read-only where
the inventory says they are, as a credential or a project file would be in AWX. The job uses
the host's network, from which the fleet's nodes are reached over SSH.

Usage: ee_run.py REPO INVENTORY_DIR IMAGE
Exit 0 when the job succeeded on every node of the inventory.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile

import ansible_runner

PLAYBOOK = 'mindverse.sglang_pd.site'


def main(repo, inventory, image):
    cache = os.path.join(os.path.abspath(repo), '.cache')
    work = tempfile.mkdtemp(prefix='sglang-pd-ee-')
    try:
        shutil.copytree(inventory, os.path.join(work, 'inventory'), symlinks=False)
        os.mkdir(os.path.join(work, 'project'))
        job = ansible_runner.run(
            private_data_dir=work, playbook=PLAYBOOK,
            process_isolation=True, process_isolation_executable='docker', container_image=image,
            container_volume_mounts=['%s:%s:ro' % (cache, cache)], container_options=['--network=host'],
            envvars={'ANSIBLE_NOCOLOR': 'true'}, quiet=True)
        print(job.stdout.read(), flush=True)
        stats = next((e['event_data'] for e in job.events if e['event'] == 'playbook_on_stats'), {})
        reached = set(stats.get('ok', {})) - {'localhost'}
        failed = set(stats.get('failures', {})) | set(stats.get('dark', {}))
        if job.rc != 0 or job.status != 'successful' or failed:
            sys.exit('[ee] %s in %s: %s (rc %s), failed or unreachable: %s'
                     % (PLAYBOOK, image, job.status, job.rc, sorted(failed)))
        if not reached:
            sys.exit('[ee] %s in %s reached no node' % (PLAYBOOK, image))
        print('[ee] %s ran in %s and reached %s' % (PLAYBOOK, image, ', '.join(sorted(reached))))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == '__main__':
    main(*sys.argv[1:4])
