# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible's linear strategy, with an interrupt that lets a deploy transaction in flight put last-known-good back."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: interruptible_linear
short_description: Ansible's linear strategy; an interrupt lets a deploy transaction in flight restore last-known-good
version_added: "0.1.0"
author:
  - gpuhost.sglang contributors (@gpuhost)
description:
  - The linear strategy of ansible-core (ansible/plugins/strategy/linear.py), with another answer to the first
    SIGINT (Ctrl-C) of ansible-playbook.
  - "ansible-core's own answer (ansible/executor/task_queue_manager.py, C(TaskQueueManager._signal_handler)): send
    SIGINT to every worker and raise KeyboardInterrupt in the controller at once; its clean-up terminates the
    workers without waiting (C(_cleanup_processes)), and each worker ends itself and its process group with the
    signal's default action (ansible/executor/process/worker.py, C(WorkerProcess._term)). A deploy transaction
    (M(gpuhost.sglang.serving_deploy)) cut there leaves a restarted, unproven candidate serving, unrecorded."
  - "Here the first SIGINT while a deploy transaction is in flight is passed on only to the workers running
    M(gpuhost.sglang.serving_deploy), which fail their candidate with class C(interrupted) and restore
    last-known-good (plugins/action/serving_deploy.py); the other tasks running finish. The play then stops
    before its next task, except that the phases of a multi-node
    replica whose deploy is between phases go on (with C(__sglang_interrupted) set, so that each fails as
    interrupted and the replica is rolled back in order), and so does a failed host's rescue section
    (playbooks/deploy.yml puts the host back behind its router there). The run ends non-zero."
  - The second SIGINT is ansible-core's own answer again, every worker and the controller end at once (abort). So is
    the first one when no deploy transaction is in flight (a long model copy stops at once, as before).
options: {}
notes:
  - playbooks/deploy.yml runs the serving role with it (C(strategy) of the rolling play).
  - ansible-core 2.19 warns that strategy plugins outside ansible.builtin are deprecated. Under another strategy
    the action still restores last-known-good after the first SIGINT, but the controller exits without waiting,
    so its result and the exit status of the restore are not shown.
"""

import os
import signal

from ansible.executor.play_iterator import IteratingStates
from ansible.plugins.strategy.linear import StrategyModule as LinearStrategy
from ansible.utils.display import Display

display = Display()

DEPLOY_ACTIONS = frozenset(("gpuhost.sglang.serving_deploy", "serving_deploy"))
INTERRUPTED_VAR = "__sglang_interrupted"


def in_rescue(state):
    """The host runs a block's rescue or always section, at any depth of nested blocks."""
    while state is not None:
        if state.run_state in (IteratingStates.RESCUE, IteratingStates.ALWAYS):
            return True
        state = state.tasks_child_state or state.rescue_child_state or state.always_child_state
    return False


def is_deploy(task):
    return task is not None and getattr(task, "action", None) in DEPLOY_ACTIONS


class StrategyModule(LinearStrategy):

    def __init__(self, tqm):
        super(StrategyModule, self).__init__(tqm)
        self._interrupted = False
        self._in_flight = {}   # host name -> its multi-node replica's deploy is between phases

    def run(self, iterator, play_context):  # pylint: disable=arguments-differ
        ansible_handler = signal.getsignal(signal.SIGINT)

        def first_interrupt(signum, frame):
            # once: the next SIGINT is ansible-core's own (abort); so is the first when no deploy is in flight
            signal.signal(signal.SIGINT, ansible_handler)
            if not callable(ansible_handler):
                raise KeyboardInterrupt()
            if not self.interrupt():
                ansible_handler(signum, frame)

        signal.signal(signal.SIGINT, first_interrupt)
        try:
            result = super(StrategyModule, self).run(iterator, play_context)
        finally:
            if signal.getsignal(signal.SIGINT) is first_interrupt:
                signal.signal(signal.SIGINT, ansible_handler)
        if self._interrupted:
            display.error("Interrupted: the play stopped after the deploy transaction in flight finished (see its result).")
            result = int(result) | int(self._tqm.RUN_FAILED_BREAK_PLAY) | int(self._tqm.RUN_FAILED_HOSTS)
        return result

    def interrupt(self):
        """The first SIGINT: the deploy transactions in flight roll back, the other tasks in flight finish. Returns
        False when no deploy is in flight (nothing to wait for: ansible-core's own answer then)."""
        deploying = [w for w in self._tqm._workers
                     if w is not None and w.is_alive() and is_deploy(getattr(w, "_task", None))]
        if not deploying and not any(self._in_flight.values()):
            return False
        self._interrupted = True
        display.warning("Interrupted: the deploy transaction in flight restores last-known-good; no new task starts. "
                        "Interrupt again to abort at once.")
        for worker in deploying:
            try:
                os.kill(worker.pid, signal.SIGINT)
            except OSError:
                pass   # it ended meanwhile
        for host, flying in self._in_flight.items():
            if flying:
                self._variable_manager.set_host_variable(host, INTERRUPTED_VAR, True)
        return True

    def _get_next_task_lockstep(self, hosts, iterator):
        """After an interrupt, only the phases of a replica deploy between phases run on (to its rollback or its
        proof), and a failed host's rescue and always sections (playbooks/deploy.yml puts it back behind the
        router on last-known-good there); every other task is dropped."""
        if self._interrupted and not any(self._in_flight.values()):
            host_tasks = super(StrategyModule, self)._get_next_task_lockstep(hosts, iterator)
            return [(h, t) for h, t in host_tasks if t is not None and in_rescue(iterator.get_state_for_host(h.name))]
        return super(StrategyModule, self)._get_next_task_lockstep(hosts, iterator)

    def _process_pending_results(self, iterator, one_pass=False, max_passes=None):
        results = super(StrategyModule, self)._process_pending_results(iterator, one_pass=one_pass, max_passes=max_passes)
        for res in results:
            if is_deploy(res.task):
                # a replica phase before its report (which alone returns gate_result) leaves the deploy in flight
                data = getattr(res, "_return_data", None) or {}
                self._in_flight[res.host.name] = isinstance(data.get("replica"), dict) and "gate_result" not in data \
                    and not data.get("failed")
                if self._interrupted and self._in_flight[res.host.name]:
                    self._variable_manager.set_host_variable(res.host.name, INTERRUPTED_VAR, True)
        return results
