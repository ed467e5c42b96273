# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The progress callback: a line per batch of a rolling play, a line per host of a tagged task."""
from __future__ import annotations

from types import SimpleNamespace

from ansible_collections.mindverse.sglang_pd.plugins.callback import progress

HOSTS = ["d0", "d1", "d2", "d3"]


class Inventory:
    """The batch restriction of a serial play, as Ansible's InventoryManager applies it."""

    def __init__(self):
        self.batch = HOSTS

    def get_hosts(self, pattern, ignore_restrictions=False):
        return [SimpleNamespace(name=h) for h in (HOSTS if ignore_restrictions else self.batch)]


def play(inventory, name="Restart the decode worker hosts in batches", serial=(1,)):
    manager = SimpleNamespace(_inventory=inventory)
    return SimpleNamespace(hosts="sglang_roll_decode", serial=list(serial), get_name=lambda: name,
                           get_variable_manager=lambda: manager)


def callback(times):
    module = progress.CallbackModule()
    lines = []
    module._display = SimpleNamespace(display=lines.append)
    clock = iter(times)
    module._clock = lambda: next(clock)
    return module, lines


def test_each_batch_says_hosts_done_elapsed_and_time_left_then_the_total():
    inventory = Inventory()
    module, lines = callback([0, 0, 60, 120, 180])
    for batch in (["d0"], ["d1"], ["d2", "d3"]):
        inventory.batch = batch
        module.v2_playbook_on_play_start(play(inventory))
    module.v2_playbook_on_stats(None)
    assert lines == [
        "[progress] Restart the decode worker hosts in batches, batch 1 (d0) starts: 0/4 hosts done, 0 s elapsed",
        "[progress] Restart the decode worker hosts in batches, batch 2 (d1) starts: 1/4 hosts done, 1 min 00 s elapsed,"
        " about 3 min 00 s left",
        "[progress] Restart the decode worker hosts in batches, batch 3 (d2, d3) starts: 2/4 hosts done, 2 min 00 s elapsed,"
        " about 2 min 00 s left",
        "[progress] Restart the decode worker hosts in batches, after batch 3: 4/4 hosts done, 3 min 00 s elapsed",
    ]


def test_a_play_without_batches_prints_nothing_and_ends_the_rolling_one():
    inventory = Inventory()
    module, lines = callback([0, 0, 30])
    inventory.batch = ["d0"]
    module.v2_playbook_on_play_start(play(inventory))
    module.v2_playbook_on_play_start(play(Inventory(), name="Start the router", serial=()))
    assert lines[-1] == "[progress] Restart the decode worker hosts in batches, after batch 1: 1/4 hosts done, 30 s elapsed"
    assert len(lines) == 2


def test_a_batched_play_with_no_host_in_this_run_prints_nothing():
    """scale_out.yml -l NEW: the Docker daemon roll matches no host of the limit."""
    inventory = Inventory()
    inventory.batch = []
    module, lines = callback([0, 0])
    module.v2_playbook_on_play_start(play(inventory, name="Restart the Docker daemon under workers in batches"))
    module.v2_playbook_on_stats(None)
    assert lines == []


def test_a_tagged_task_says_each_host_done():
    module, lines = callback([0, 10, 20, 30, 40])
    module.v2_playbook_on_play_start(play(Inventory(), name="Stage the image", serial=()))
    task = SimpleNamespace(tags=["sglang_pd_progress"], _uuid="t1", get_name=lambda: "Pull the image by digest")
    module.v2_playbook_on_task_start(task, False)
    result = SimpleNamespace(_task=task)
    module.v2_runner_on_ok(result)
    module.v2_runner_on_failed(result)
    assert lines == ["[progress] Pull the image by digest: 1/4 hosts done, 10 s elapsed, about 30 s left",
                     "[progress] Pull the image by digest: 2/4 hosts done, 20 s elapsed, about 20 s left"]
    other = SimpleNamespace(tags=["sglang_worker_run"], _uuid="t2", get_name=lambda: "Write the unit")
    module.v2_playbook_on_task_start(other, False)
    module.v2_runner_on_ok(SimpleNamespace(_task=other))
    assert len(lines) == 2


def test_durations_read_as_people_write_them():
    assert [progress._duration(s) for s in (5, 65, 3725)] == ["5 s", "1 min 05 s", "1 h 02 min"]
