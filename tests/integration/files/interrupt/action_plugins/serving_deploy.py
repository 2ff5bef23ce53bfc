# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpuhost.sglang.serving_deploy's own action (its interrupt handling, its result) over a fake host in memory whose
readiness wait and canary take real time, so that a test can send SIGINT to ansible-playbook mid-transaction
(tests/integration/test_deploy_interrupt.py). After every host operation the fake host's state (what serves, the
live unit, the record) is written to ``GPUHOST_INTERRUPT_STATE`` for the test to read, also when the worker dies;
a replica phase (``phase`` other than all) runs on a rank whose state lives in that directory instead."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import time

from ansible.utils.display import Display

from ansible_collections.gpuhost.sglang.plugins.action.serving_deploy import ActionModule as DeployAction
from ansible_collections.gpuhost.sglang.tests.harness.fake_deploy_host import FakeHost, unit_text

display = Display()
STEP = 0.1


class SlowHost(FakeHost):
    """A host serving ``old`` as last-known-good; the candidate's readiness takes ``ready_s``, the canary ``canary_s``,
    last-known-good's readiness after a restore ``restore_ready_s``."""

    def __init__(self, name, state_path, ready_s, canary_s, restore_ready_s=0.0):
        super(SlowHost, self).__init__()
        self.restore_ready_s = restore_ready_s
        self.inventory_name, self.state_path, self.ready_s, self.canary_s = name, state_path, ready_s, canary_s
        self.serve(unit_text("old", "ok"))
        self.dump()

    def dump(self):
        state = {"serving": dict((u, json.loads(v["started_from"])["name"]) for u, v in self.units.items()
                                 if v["state"] in ("active", "activating")),
                 "record": json.loads(self.record_meta()["unit_b64"])["name"], "ops": [o for o, _d in self.log]}
        tmp = self.state_path + ".tmp"
        with open(tmp, "w") as fh:
            json.dump(state, fh)
        os.rename(tmp, self.state_path)

    def _op(self, name, detail=""):
        self.dump()   # what the operations before this one left
        super(SlowHost, self)._op(name, detail)

    def _slow(self, seconds):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            time.sleep(STEP)

    def wait_ready(self, unit, health_url, since, timeout):
        self.dump()   # what the restart or restore before it left
        self._slow(self.ready_s if not self.calls.get("restore") else self.restore_ready_s)
        return super(SlowHost, self).wait_ready(unit, health_url, since, timeout)

    def canary(self, base_url):
        self._slow(self.canary_s if not self.calls.get("restore") else 0)
        return super(SlowHost, self).canary(base_url)

    def say(self, line):
        display.display("%s: %s" % (self.inventory_name, line))

    def monotonic(self):
        return time.monotonic()


PERSIST = ("files", "units", "starts", "pid", "clock", "calls", "log")


class SlowRank(FakeHost):
    """One rank of a fake replica whose hosts' state lives in files (``state_dir``/rank<N>.json: each phase runs in
    another worker process). Every rank starts serving ``old-r<N>`` as last-known-good; a rank >= 1 running the
    candidate ("new") takes ``join_s`` to report that it joined."""

    def __init__(self, name, rank, nnodes, state_dir, join_s):
        net = {"log": [], "hosts": []}
        super(SlowRank, self).__init__(net=net, rank=rank)
        net["hosts"] = [self if r == rank else FakeHost(net=net, rank=r) for r in range(nnodes)]
        self.inventory_name, self.state_dir, self.join_s = name, state_dir, join_s
        self.load()

    def _path(self, rank):
        return os.path.join(self.state_dir, "rank%d.json" % rank)

    def load(self):
        for r, h in enumerate(self.net["hosts"]):
            if not os.path.exists(self._path(r)):
                h.serve(unit_text("old-r%d" % r, "ok"))
                continue
            with open(self._path(r)) as fh:
                data = json.load(fh)
            for key in PERSIST:
                setattr(h, key, data[key])

    def dump(self):
        tmp = self._path(self.rank) + ".tmp"
        with open(tmp, "w") as fh:
            json.dump(dict((k, getattr(self, k)) for k in PERSIST), fh)
        os.rename(tmp, self._path(self.rank))

    def _op(self, name, detail=""):
        self.dump()   # what this rank's operations before this one left
        self.load()   # what the other ranks' left
        super(SlowRank, self)._op(name, detail)

    def rank_state(self, unit, state_file):
        if self.rank and json.loads(self.units.get(unit, {}).get("started_from", "{}")).get("name") == "new":
            end = time.monotonic() + self.join_s
            while time.monotonic() < end:
                time.sleep(STEP)
        return super(SlowRank, self).rank_state(unit, state_file)

    def say(self, line):
        display.display("%s: %s" % (self.inventory_name, line))


class ActionModule(DeployAction):
    fake = None

    def _deploy_host(self, task_vars, a):
        if a["phase"] != "all":
            self.fake = SlowRank(task_vars.get("inventory_hostname", ""), int(a["replica"]["rank"]), int(a["replica"]["nnodes"]),
                                 os.environ["GPUHOST_INTERRUPT_STATE"], float(os.environ.get("GPUHOST_INTERRUPT_JOIN_S", "0")))
            return self.fake
        self.fake = SlowHost(task_vars.get("inventory_hostname", ""), os.environ["GPUHOST_INTERRUPT_STATE"],
                             float(os.environ.get("GPUHOST_INTERRUPT_READY_S", "2")),
                             float(os.environ.get("GPUHOST_INTERRUPT_CANARY_S", "0")),
                             float(os.environ.get("GPUHOST_INTERRUPT_RESTORE_READY_S", "0")))
        return self.fake

    def run(self, tmp=None, task_vars=None):
        try:
            return super(ActionModule, self).run(tmp, task_vars)
        finally:
            if self.fake is not None:
                self.fake.dump()
