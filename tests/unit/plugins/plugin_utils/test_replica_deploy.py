# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A multi-node replica's deploy, phase by phase (plugins/plugin_utils/deploy.py ReplicaRank), against fake ranks
driven the way the play drives them: each phase on every rank, with every rank's state after the last phase.
Shown: the restart order (ranks >= 1 stop first, rank 0 restarts, the others start once its dist-init port
answers), the gate through rank 0, a rerun that changes nothing, a rollback of every rank when any fails."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

import pytest

from ansible_collections.gpuhost.sglang.plugins.plugin_utils.deploy import REPLICA_PHASES, DeployFailed, ReplicaRank
from ansible_collections.gpuhost.sglang.tests.harness.fake_deploy_host import ranks, unit_text


def rspec(host, rank, n, behave, name="c0", **extra):
    s = {"unit": host.unit, "unit_dir": host.unit_dir, "env_file": host.env_file, "lkg_dir": host.lkg_dir,
         "health_url": "http://127.0.0.1:30000/health", "base_url": "http://127.0.0.1:30000",
         "candidates": [{"options": {"tp-size": 2}, "argv": ["serve", "%s-r%d" % (name, rank)],
                         "unit_content": unit_text("%s-r%d" % (name, rank), behave)}],
         "ready_timeout": 300, "probes": True, "lkg_update": True, "host": "a%d" % rank,
         "meta": {"engine": "sglang", "engine_version": "0.5.23"}, "timeout_start_sec_min": 300,
         "replica": {"rank": rank, "nnodes": n, "head_address": "10.0.0.10", "dist_port": 5757,
                     "state_file": "/var/lib/sglang/replica.json"}}
    s.update(extra)
    return s


def drive(hosts, behaves, interrupt_at=None, **extra):
    """Every phase on every rank in order; returns (report results, failure messages, changed per phase).
    ``interrupt_at``: the index of the phase in which the play is interrupted: each rank's first host operation in
    it raises KeyboardInterrupt (the action plugin's SIGINT), and the phases after it run with interrupted=true
    (what the strategy passes on, plugins/strategy/interruptible_linear.py)."""
    n = len(hosts)
    states, changed = [{} for _host in hosts], []
    results, failures = [None] * n, [None] * n
    for index, phase in enumerate(REPLICA_PHASES):
        new, flags = [], []
        for h in hosts:
            h.interrupt_next = index == interrupt_at
        if interrupt_at is not None and index > interrupt_at:
            extra["interrupted"] = True
        for r, h in enumerate(hosts):
            rank = ReplicaRank(h, rspec(h, r, n, behaves[r], **extra), states)
            if phase == "report":
                try:
                    results[r] = rank.phase(phase)[0]
                except DeployFailed as exc:
                    results[r], failures[r] = exc.result, str(exc)
                new.append(states[r])
                continue
            st, ch = rank.phase(phase)
            new.append(st)
            flags.append(ch)
        states = new
        changed.append((phase, any(flags)))
    return results, failures, changed


def net_ops(hosts, *names):
    return [(r, o, d) for r, o, d in hosts[0].net["log"] if o in names]


OLD = "old"


def serving_old(n):
    hosts = ranks(n)
    for r, h in enumerate(hosts):
        h.serve(unit_text("%s-r%d" % (OLD, r), "ok"))
    return hosts


def assert_order(hosts):
    """ranks >= 1 stop before rank 0 restarts; each starts after rank 0's restart and its dist-init port answered."""
    log = net_ops(hosts, "stop", "restart", "wait_port")
    head_restart = [i for i, (r, o, _d) in enumerate(log) if r == 0 and o == "restart"]
    assert len(head_restart) == 1, log
    for rank in range(1, len(hosts)):
        mine = [(i, o) for i, (r, o, _d) in enumerate(log) if r == rank]
        assert [o for _i, o in mine] == ["stop", "wait_port", "restart"], log
        assert mine[0][0] < head_restart[0] < mine[1][0] < mine[2][0], log


@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("has_lkg", [True, False])
def test_a_replica_restarts_in_rank_order_and_a_rerun_changes_nothing(n, has_lkg):
    hosts = serving_old(n) if has_lkg else ranks(n)
    results, failures, changed = drive(hosts, ["ok"] * n)
    assert failures == [None] * n
    assert_order(hosts)
    assert [r["gate_result"] for r in results] == ["candidate 0 passed the gate"] * n
    for r, h in enumerate(hosts):
        assert h.serving() == {h.unit: "ok"} and h.live() == unit_text("c0-r%d" % r, "ok")
        assert h.record_meta()["argv"] == ["serve", "c0-r%d" % r] and h.record_meta()["unit_b64"] == h.live()
    # only rank 0 serves the API: the canary runs there
    assert [r for r, _o, _d in net_ops(hosts, "canary")] == [0]
    for h in hosts:
        del h.log[:]
    del hosts[0].net["log"][:]
    results, failures, changed = drive(hosts, ["ok"] * n)
    assert failures == [None] * n and not any(c for _p, c in changed), changed
    assert net_ops(hosts, "stop", "restart", "reload", "record", "restore") == [(r, "record", 0) for r in range(n)]
    assert results[0]["attempts"][0]["restarted"] is False and net_ops(hosts, "canary")


def test_one_changed_rank_restarts_the_whole_replica():
    hosts = ranks(2)
    drive(hosts, ["ok", "ok"])
    del hosts[0].net["log"][:]
    hosts[1].env = "HOME=/var/lib/sglang\nNCCL_DEBUG=INFO\n"   # only rank 1's environment changes
    results, failures, _changed = drive(hosts, ["ok", "ok"])
    assert failures == [None, None]
    assert_order(hosts)
    assert "rank 1: environment file" in " ".join(hosts[1].lines)


def test_a_crashed_rank_restarts_the_replica_on_the_next_run():
    hosts = ranks(2)
    drive(hosts, ["ok", "ok"])
    hosts[1].units[hosts[1].unit]["state"] = "failed"
    del hosts[0].net["log"][:]
    _results, failures, _changed = drive(hosts, ["ok", "ok"])
    assert failures == [None, None]
    assert_order(hosts)
    assert all(h.serving() == {h.unit: "ok"} for h in hosts)


FAIL_CLASS = {"fail_start": "startup_failure", "timeout": "timeout", "incoherent": "incoherent"}


def failing_cases():
    for n in (2, 3):
        for rank in range(n):
            for behave in ("fail_start", "timeout", "incoherent"):
                if rank and behave == "incoherent":
                    continue   # only rank 0 answers the canary
                yield n, rank, behave


@pytest.mark.parametrize("n,bad,behave", list(failing_cases()))
def test_a_failing_rank_rolls_every_rank_back_to_last_known_good(n, bad, behave):
    hosts = serving_old(n)
    before = [h.record_meta() for h in hosts]
    behaves = ["ok"] * n
    behaves[bad] = behave
    results, failures, _changed = drive(hosts, behaves)
    assert all(failures), failures
    cls = FAIL_CLASS[behave] if bad == 0 or behave != "timeout" else "timeout"
    attempt = results[0]["attempts"][0]
    assert attempt["outcome"] == "failed" and attempt["class"] == cls, attempt
    if bad:
        assert attempt["message"].startswith("rank %d: " % bad)
    assert "Rolled back to last-known-good sglang.service at http://127.0.0.1:30000: ready, canary passed." in failures[0]
    for r, h in enumerate(hosts):
        assert h.live() == unit_text("old-r%d" % r, "ok") and h.serving() == {h.unit: "ok"}
        assert h.record_meta() == before[r]
    # the rollback restarted in the same order, after the candidate's round
    log = net_ops(hosts, "restore", "stop", "restart", "wait_port")
    rollback = log[[i for i, (_r, o, _d) in enumerate(log) if o == "restore"][0]:]
    assert sorted(r for r, o, _d in rollback if o == "restore") == list(range(n))
    assert [r for r, o, _d in rollback if o == "restart"][0] == 0


@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("at", range(REPLICA_PHASES.index("settle")), ids=lambda i: REPLICA_PHASES[i])
def test_an_interrupt_in_each_phase_fails_as_interrupted_and_leaves_last_known_good_serving(n, at):
    hosts = serving_old(n)
    before = [h.record_meta() for h in hosts]
    results, failures, _changed = drive(hosts, ["ok"] * n, interrupt_at=at)
    assert all(failures), failures
    attempt = results[0]["attempts"][0]
    assert attempt["outcome"] == "failed" and attempt["class"] == "interrupted", attempt
    assert "interrupted (SIGINT to ansible-playbook)" in attempt["message"]
    touched = at >= REPLICA_PHASES.index("stop") and any(o in ("stop", "restart") for _r, o, _d in hosts[0].net["log"])
    if touched:
        assert "Rolled back to last-known-good sglang.service at http://127.0.0.1:30000: ready, canary passed." in failures[0]
    else:
        assert "The live server was not touched." in failures[0] and net_ops(hosts, "restart", "restore") == []
    for r, h in enumerate(hosts):
        assert h.serving() == {h.unit: "ok"} and h.record_meta() == before[r]
        assert json.loads(h.units[h.unit]["started_from"])["name"] == "old-r%d" % r   # the old server serves
    # a rerun converges: the candidate passes and is recorded on every rank
    results, failures, _changed = drive(hosts, ["ok"] * n)
    assert failures == [None] * n
    assert all(h.record_meta()["unit_b64"] == h.live() == unit_text("c0-r%d" % r, "ok") for r, h in enumerate(hosts))


@pytest.mark.parametrize("at", [REPLICA_PHASES.index("settle")] + [i for i, p in enumerate(REPLICA_PHASES) if i > 5 and p != "report"],
                         ids=lambda i: "%s%s" % (REPLICA_PHASES[i], "-rollback" if i > 5 else ""))
def test_an_interrupt_in_settle_or_the_rollback_round_lets_it_finish(at):
    hosts = serving_old(2)
    behaves = ["incoherent", "ok"] if at > 5 else ["ok", "ok"]
    results, failures, _changed = drive(hosts, behaves, interrupt_at=at)
    for r, h in enumerate(hosts):
        assert h.serving() == {h.unit: "ok"}
        if at > 5:   # rolled back all the same
            assert h.live() == unit_text("old-r%d" % r, "ok"), h.log
        else:        # the pass was proven: recorded all the same
            assert h.record_meta()["unit_b64"] == h.live() == unit_text("c0-r%d" % r, "ok")
    if at == 5:
        assert failures == [None, None]
    else:
        assert all(f and f.endswith("Rolled back to last-known-good sglang.service at http://127.0.0.1:30000: ready, canary passed.")
                   for f in failures), failures


def test_a_failing_replica_without_a_record_is_stopped_on_every_rank():
    hosts = ranks(2)
    results, failures, _changed = drive(hosts, ["fail_start", "ok"])
    assert all("No last-known-good existed: the service was stopped." in f for f in failures)
    assert all(h.serving() == {} for h in hosts)
    assert results[1]["rollback"]["state"] == "stopped"


def test_a_rank_0_that_does_not_start_fails_the_ranks_waiting_for_its_port():
    hosts = serving_old(2)
    results, failures, _changed = drive(hosts, ["fail_start", "ok"])
    assert results[0]["attempts"][0]["class"] == "startup_failure"
    # rank 1 never started the candidate: rank 0's port did not answer
    assert [(o, d) for r, o, d in net_ops(hosts, "restart", "wait_port") if r == 1][:2] == [
        ("wait_port", "10.0.0.10:5757"), ("wait_port", "10.0.0.10:5757")]
    assert all(h.serving() == {h.unit: "ok"} for h in hosts)


@pytest.mark.parametrize("live", [False, True])
def test_check_mode_changes_nothing_and_says_what_would_restart(live):
    hosts = ranks(2)
    if live:
        drive(hosts, ["ok", "ok"])
    files = [dict(h.files) for h in hosts]
    for h in hosts:
        h.check_mode = True
        del h.log[:]
    results, failures, _changed = drive(hosts, ["ok", "ok"], check_mode=True)
    assert failures == [None, None]
    assert [h.files for h in hosts] == files
    assert not [o for h in hosts for o, _d in h.log if o not in ("inspect", "install")]
    expect = ("check mode: candidate 0 would not restart; the gate was NOT run" if live else
              "check mode: candidate 0 would restart the replica (rank 0: unit file, rank 0: environment file, "
              "rank 0: not running, rank 1: unit file, rank 1: environment file, rank 1: not running changed); "
              "the gate was NOT run")
    assert results[0]["gate_result"] == expect


def test_without_lkg_update_no_rank_records():
    hosts = serving_old(2)
    before = [h.record_meta() for h in hosts]
    _results, failures, _changed = drive(hosts, ["ok", "ok"], lkg_update=False)
    assert failures == [None, None] and [h.record_meta() for h in hosts] == before


def test_an_unknown_phase_is_named():
    hosts = ranks(2)
    with pytest.raises(ValueError, match=r"phase='jion': allowed values gate, join, prepare, report, restart, settle, stop"):
        ReplicaRank(hosts[0], rspec(hosts[0], 0, 2, "ok"), [{}, {}]).phase("jion")


# the role runs REPLICA_PHASES itself, through the sglang_replica_phases filter: test_deploy_host.py


BASE = {"unit": "sglang.service", "env_file": "/e", "lkg_dir": "/l", "health_url": "h", "base_url": "b", "canary_python": "p",
        "env_content": "", "candidates": [{"argv": ["x"], "unit_content": "u"}]}
REPLICA = {"rank": 1, "nnodes": 2, "head_address": "10.0.0.10", "dist_port": 5757, "state_file": "/var/lib/sglang/replica.json"}


@pytest.mark.parametrize("extra,message", [
    ({"phase": "jion", "replica": REPLICA}, r"phase='jion': allowed values all, gate, join, prepare, report, restart, settle, stop"),
    ({"phase": "stop", "replica": dict(REPLICA, state_file="")}, r"phase=stop needs replica with .* \(missing state_file\)"),
    ({"phase": "stop", "replica": REPLICA, "candidates": BASE["candidates"] * 2}, r"a multi-node replica deploys one candidate, got 2"),
])
def test_the_action_names_a_bad_phase_option(extra, message):
    from ansible.errors import AnsibleActionFail
    from ansible_collections.gpuhost.sglang.plugins.action.serving_deploy import check_args
    with pytest.raises(AnsibleActionFail, match=message):
        check_args(dict(BASE, **extra))
    assert check_args(dict(BASE, phase="stop", replica=REPLICA))["phase"] == "stop"
