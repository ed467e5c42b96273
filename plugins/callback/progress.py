# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Progress lines for the long operations: each batch of a rolling play, each host of a long task."""
from __future__ import annotations

DOCUMENTATION = r"""
name: progress
type: notification
short_description: A progress line per batch of a rolling play and per host of a long task
description:
  - Before each batch of a play that runs in batches (C(serial)), such as the worker restarts of
    C(site.yml) and C(playbooks/rolling_upgrade.yml) or the Docker daemon restarts, prints one line
    with the batch's hosts, the hosts done of the play's total, the time elapsed and an estimate of
    the time left (elapsed time per host done, times the hosts left); after the last batch, the total.
  - For a task tagged C(sglang_pd_progress) (the image pull, a scale-in drain, a new worker's health
    wait in C(playbooks/scale_out.yml)), prints one line each time a host finishes it.
  - Works with any stdout callback, with C(ansible-playbook), ansible-runner and AWX alike. Enabled by
    the collection's C(ansible.cfg) (C(callbacks_enabled = mindverse.sglang_pd.progress)).
author:
  - mindverse infrastructure team (@mindverse)
requirements:
  - Enabled in C(callbacks_enabled).
"""

import time

from ansible.plugins.callback import CallbackBase

PROGRESS_TAG = "sglang_pd_progress"


def _duration(seconds):
    """``42 s``, ``3 min 05 s`` or ``1 h 02 min``."""
    seconds = int(round(seconds))
    if seconds < 60:
        return "%d s" % seconds
    if seconds < 3600:
        return "%d min %02d s" % (seconds // 60, seconds % 60)
    return "%d h %02d min" % (seconds // 3600, seconds % 3600 // 60)


def progress_line(what, done, total, elapsed, estimate=True):
    """``WHAT: 3/8 hosts done, 2 min 10 s elapsed, about 3 min 37 s left``."""
    line = "%s: %d/%d hosts done, %s elapsed" % (what, done, total, _duration(elapsed))
    if estimate and 0 < done < total:
        line += ", about %s left" % _duration(elapsed / done * (total - done))
    return line


class CallbackModule(CallbackBase):
    """Progress of batched plays and of tasks tagged sglang_pd_progress."""

    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "notification"
    CALLBACK_NAME = "mindverse.sglang_pd.progress"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._clock = time.monotonic
        self._rolling = None   # the batched play running now: name, total, started, done, last batch
        self._tasks = {}       # task uuid -> {name, total, started, done}
        self._batch_size = 0

    def _say(self, text):
        self._display.display("[progress] " + text)

    def _finish_rolling(self):
        rolling, self._rolling = self._rolling, None
        if rolling:
            done = rolling["done"] + rolling["batch"]
            self._say(progress_line("%s, after batch %d" % (rolling["name"], rolling["batches"]), done, rolling["total"],
                                    self._clock() - rolling["started"], estimate=False))

    def v2_playbook_on_play_start(self, play):
        inventory = play.get_variable_manager()._inventory
        batch = [host.name for host in inventory.get_hosts(play.hosts)]
        self._batch_size = len(batch)
        name = play.get_name()
        if not play.serial:
            self._finish_rolling()
            return
        if not batch:  # a batched play with no host in this run (outside --limit): nothing to say
            return
        total = len(inventory.get_hosts(play.hosts, ignore_restrictions=True))
        if self._rolling is None or self._rolling["name"] != name:
            self._finish_rolling()
            self._rolling = {"name": name, "total": total, "started": self._clock(), "done": 0, "batch": 0, "batches": 0}
        rolling = self._rolling
        rolling["done"] += rolling["batch"]
        rolling["batch"] = len(batch)
        rolling["batches"] += 1
        self._say(progress_line("%s, batch %d (%s) starts" % (name, rolling["batches"], ", ".join(batch)), rolling["done"], total,
                                self._clock() - rolling["started"]))

    def v2_playbook_on_task_start(self, task, is_conditional):
        if PROGRESS_TAG in (task.tags or []):
            self._tasks[task._uuid] = {"name": task.get_name(), "total": self._batch_size, "started": self._clock(), "done": 0}

    def _host_done(self, result):
        tracked = self._tasks.get(result._task._uuid)
        if tracked:
            tracked["done"] += 1
            self._say(progress_line(tracked["name"], tracked["done"], tracked["total"], self._clock() - tracked["started"]))

    def v2_runner_on_ok(self, result):
        self._host_done(result)

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._host_done(result)

    def v2_runner_on_unreachable(self, result):
        self._host_done(result)

    def v2_runner_on_skipped(self, result):
        self._host_done(result)

    def v2_playbook_on_stats(self, stats):
        self._finish_rolling()
