# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""SIGINT to a real ansible-playbook while the deploy transaction runs: serving_deploy's own action over a slow fake
host (tests/integration/files/interrupt/), no test host, a few seconds each.

Under ansible-core's linear strategy the worker used to die at once (ansible/executor/process/worker.py
``WorkerProcess._term``) and the controller exits without waiting for it: the candidate kept serving, unrecorded;
the action now restores all the same, unseen. Under gpuhost.sglang.interruptible_linear (playbooks/deploy.yml's) the candidate in flight fails as
``interrupted``, last-known-good is restored and proven, the play stops with a non-zero exit; a second SIGINT
aborts the restore."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from ansible_collections.gpuhost.sglang.tests import harness

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PLAYBOOK = os.path.join(ROOT, "tests", "integration", "files", "interrupt", "deploy.yml")
REPLICA_PLAYBOOK = os.path.join(ROOT, "tests", "integration", "files", "interrupt", "replica.yml")
ANSIBLE_PLAYBOOK = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
DEADLINE = 120   # the whole run, output or not: a hang fails


def sigint(delay=0):
    def send(proc):
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)
        return time.monotonic()
    return send


def play(tmp_path, strategy, faults, ready_s=30, canary_s=0, restore_ready_s=0, before_s=0, replica_join_s=None):
    """Run the playbook (the replica's with ``replica_join_s``); at each line matching ``faults[i][0]`` run
    ``faults[i][1]`` (sigint()), in order. Returns (rc, output with whitespace collapsed, the fake host's state or
    the replica's ranks' states, seconds from the first SIGINT to the exit)."""
    state = str(tmp_path / ("state.json" if replica_join_s is None else ""))
    env = harness.ansible_env(ANSIBLE_STRATEGY=strategy, GPUHOST_INTERRUPT_STATE=state, PYTHONUNBUFFERED="1",
                              GPUHOST_INTERRUPT_READY_S=str(ready_s), GPUHOST_INTERRUPT_CANARY_S=str(canary_s),
                              GPUHOST_INTERRUPT_RESTORE_READY_S=str(restore_ready_s),
                              GPUHOST_INTERRUPT_JOIN_S=str(replica_join_s or 0))
    cmd = [ANSIBLE_PLAYBOOK, "-i", "localhost,", "-c", "local", PLAYBOOK, "-e", "before_s=%d" % before_s] \
        if replica_join_s is None else [ANSIBLE_PLAYBOOK, "-i", "r0,r1,", "-c", "local", REPLICA_PLAYBOOK]
    proc = subprocess.Popen(cmd, cwd=str(tmp_path), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    text, sent = harness.watch_output(proc, faults, DEADLINE)
    took = time.monotonic() - sent[0] if sent else None
    assert len(sent) == len(faults), text[-3000:]
    if replica_join_s is not None:
        return proc.returncode, " ".join(text.split()), [rank_state(tmp_path, r) for r in (0, 1)], took
    with open(state) as fh:
        return proc.returncode, " ".join(text.split()), json.load(fh), took


def rank_state(tmp_path, rank):
    """What a fake rank serves and what its record holds (the candidate is "new", last-known-good "old-r<N>")."""
    with open(str(tmp_path / ("rank%d.json" % rank))) as fh:
        data = json.load(fh)
    meta = json.loads(data["files"]["/etc/sglang/last-known-good/meta.json"])
    return {"serving": dict((u, json.loads(v["started_from"])["name"]) for u, v in data["units"].items()
                            if v["state"] in ("active", "activating")),
            "record": json.loads(meta["unit_b64"])["name"], "ops": [op for op, _detail in data["log"]]}


RESTARTED = r"localhost: candidate 0: restarted \("
ROLLED_BACK = "Rolled back to last-known-good sglang.service at http://127.0.0.1:30000: ready, canary passed."


def test_under_ansible_s_own_strategy_the_controller_does_not_wait_but_the_restore_still_runs(tmp_path):
    # ansible-core's linear strategy: the controller raises KeyboardInterrupt and exits at once (rc 99) without the
    # task's result; the worker, whose first SIGINT the action turned into the interrupt, restores all the same
    rc, out, state, _took = play(tmp_path, "linear", [(RESTARTED, sigint())])
    assert rc == 99 and "User interrupted execution" in out and ROLLED_BACK not in out, out
    deadline = time.monotonic() + 20
    while state["serving"] != {"sglang.service": "old"} and time.monotonic() < deadline:
        time.sleep(0.2)
        with open(str(tmp_path / "state.json")) as fh:
            state = json.load(fh)
    assert state["serving"] == {"sglang.service": "old"} and state["record"] == "old", state


@pytest.mark.parametrize("when,ready_s,canary_s", [
    (RESTARTED, 30, 0),                                         # during the readiness wait
    (r"localhost: candidate 0: ready after .*coherence canary", 0, 30),   # during the canary
])
def test_an_interrupt_restores_last_known_good_and_fails_the_play(tmp_path, when, ready_s, canary_s):
    rc, out, state, took = play(tmp_path, "gpuhost.sglang.interruptible_linear", [(when, sigint())], ready_s, canary_s)
    assert rc not in (0, 99), out   # the play failed (not Ansible's own "User interrupted execution")
    assert "interrupted: no candidate passed the gate" in out or ": interrupted: interrupted (SIGINT to ansible-playbook)" in out, out
    assert "[candidate 0 {'n': 0}: interrupted: interrupted (SIGINT to ansible-playbook) before its gate decided]" in out, out
    assert ROLLED_BACK in out, out
    assert "the play went on" not in out, out   # the play stopped after the transaction
    assert state["serving"] == {"sglang.service": "old"} and state["record"] == "old", state
    assert state["ops"].count("restore") == 1
    assert took < 30, took   # the restore took its own readiness wait (here 0 s), not the candidate's


def test_a_second_interrupt_aborts_the_restore(tmp_path):
    # the restore's readiness wait takes as long as the candidate's (30 s): the second SIGINT ends it at once
    rc, out, state, took = play(tmp_path, "gpuhost.sglang.interruptible_linear",
                                [(RESTARTED, sigint()), (r"restoring last-known-good \(interrupt again to abort\)", sigint(2))],
                                restore_ready_s=30)
    assert rc != 0 and ROLLED_BACK not in out, out
    # aborted in the restore's readiness wait (old restarted, not yet proven); the record untouched
    assert state["ops"][-2:] == ["restart", "restore"] and state["record"] == "old" and took < 25, (state, took)
    assert "canary passed" not in out.rsplit("restoring last-known-good", maxsplit=1)[-1], out


def test_an_interrupt_before_the_deploy_stops_at_once(tmp_path):
    # no deploy in flight (here a 60 s task before it): ansible-core's own answer, nothing waits, nothing deployed
    with open(str(tmp_path / "state.json"), "w") as fh:
        json.dump({"ops": []}, fh)
    rc, out, state, took = play(tmp_path, "gpuhost.sglang.interruptible_linear", [(r"TASK \[Before the deploy\]", sigint(1))],
                                before_s=60)
    assert rc == 99 and "User interrupted execution" in out and took < 20, (out, took)
    assert state == {"ops": []}


def test_an_interrupt_in_a_replica_phase_rolls_every_rank_back_in_order(tmp_path):
    # SIGINT while rank 1 waits to join the candidate's rank 0: rank 1 fails as interrupted, the strategy runs the
    # replica's remaining phases (the gate fails as interrupted), which restore last-known-good on both ranks in order
    rc, out, ranks, took = play(tmp_path, "gpuhost.sglang.interruptible_linear",
                                [(r"TASK \[Deploy \| replica phase join\]", sigint(1))], replica_join_s=30)
    assert rc not in (0, 99), out
    assert "r1: rank 1: FAILED: interrupted: interrupted (SIGINT to ansible-playbook) in phase join" in out, out
    assert "the replica restarts in order" in out and "the play went on" not in out, out
    for r in (0, 1):
        assert "No candidate passed the gate on r%d (rank %d of 2). [candidate 0 {'n': 0}: interrupted: " % (r, r) in out, out
    assert out.count(ROLLED_BACK) >= 2, out   # each rank's failure names the rollback
    assert ranks[0]["serving"] == {"sglang.service": "old-r0"} and ranks[1]["serving"] == {"sglang.service": "old-r1"}, ranks
    assert [s["record"] for s in ranks] == ["old-r0", "old-r1"], ranks
    assert took < 30, took
