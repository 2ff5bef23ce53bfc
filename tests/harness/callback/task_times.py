# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where a play's time goes: the wall time of every task, for the CI budget and the no-op deploy.

Enable it beside the normal output (it prints nothing until the end):
    ANSIBLE_CALLBACK_PLUGINS=tests/harness/callback ANSIBLE_CALLBACKS_ENABLED=task_times \
    GPUHOST_TASK_TIMES=/tmp/times.jsonl ansible-playbook playbooks/deploy.yml
Each task is one JSON line appended to GPUHOST_TASK_TIMES (play, task, action, seconds from its start until the
last host's result, the hosts' statuses); at the end the slowest tasks and the count per status are printed.
The same idea as ansible.posix's profile_tasks (plugins/callback/profile_tasks.py), which ansible-core does not
ship, plus a machine-readable record and the split between tasks that ran and tasks that were skipped.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import time

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = """
name: task_times
type: aggregate
short_description: wall time of every task, as JSON lines and a summary
description: Test harness only; see the module docstring.
"""


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = 'aggregate'
    CALLBACK_NAME = 'task_times'
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, clock=time.monotonic, path=None):
        super(CallbackModule, self).__init__()
        self._clock = clock
        self._path = path if path is not None else os.environ.get('GPUHOST_TASK_TIMES', '')
        self._play = ''
        self._current = None
        self.records = []

    def _close(self):
        if self._current is not None:
            self.records.append(self._current)
            self._current = None

    def v2_playbook_on_play_start(self, play):
        self._close()
        self._play = play.get_name()

    def _start(self, task):
        self._close()
        self._current = {'play': self._play, 'task': task.get_name(), 'action': task.action,
                         'start': self._clock(), 'seconds': 0.0, 'statuses': {}}

    def v2_playbook_on_task_start(self, task, is_conditional):
        self._start(task)

    def v2_playbook_on_handler_task_start(self, task):
        self._start(task)

    def _result(self, status):
        if self._current is None:
            return
        self._current['seconds'] = round(self._clock() - self._current['start'], 3)
        self._current['statuses'][status] = self._current['statuses'].get(status, 0) + 1

    def v2_runner_on_ok(self, result):
        self._result('changed' if result._result.get('changed') else 'ok')

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._result('failed')

    def v2_runner_on_skipped(self, result):
        self._result('skipped')

    def v2_runner_on_unreachable(self, result):
        self._result('unreachable')

    def summary(self, top=15):
        """The lines printed at the end: totals per kind of task, then the slowest tasks."""
        ran = [r for r in self.records if set(r['statuses']) - {'skipped'}]
        skipped = [r for r in self.records if r['statuses'] and not set(r['statuses']) - {'skipped'}]
        lines = ['task_times: %d tasks, %d ran (%.1f s), %d only skipped (%.1f s)' % (
            len(self.records), len(ran), sum(r['seconds'] for r in ran),
            len(skipped), sum(r['seconds'] for r in skipped))]
        for record in sorted(self.records, key=lambda r: -r['seconds'])[:top]:
            lines.append('%8.2f s  %-24s %s' % (record['seconds'], record['action'][-24:], record['task']))
        return lines

    def v2_playbook_on_stats(self, stats):
        self._close()
        if self._path:
            with open(self._path, 'a') as out:
                for record in self.records:
                    out.write(json.dumps({k: v for k, v in record.items() if k != 'start'}, sort_keys=True) + '\n')
        for line in self.summary():
            self._display.display(line)
