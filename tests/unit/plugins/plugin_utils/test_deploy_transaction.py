# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The deploy transaction against a fake host: every order of pass and fail over 1-4 candidates, a crash after
a pass, an interrupt at each step, a damaged or missing record, a unit-name or port change, check mode."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import itertools
import json

import pytest

from ansible_collections.gpuhost.sglang.plugins.plugin_utils.deploy import DeployFailed, DeployTransaction
from ansible_collections.gpuhost.sglang.tests.harness.fake_deploy_host import FakeHost, unit_text

BEHAVIOURS = ("ok", "fail_start", "timeout", "incoherent")
FAIL_CLASS = {"fail_start": "startup_failure", "timeout": "timeout", "incoherent": "incoherent"}


def spec(host, behaves, unit=None, port=30000, **extra):
    unit = unit or host.unit
    cands = [{"options": {"n": i}, "argv": ["serve", "c%d-%s" % (i, b)], "unit_content": unit_text("c%d-%s" % (i, b), b, port)}
             for i, b in enumerate(behaves)]
    s = {"unit": unit, "unit_dir": host.unit_dir, "env_file": host.env_file, "lkg_dir": host.lkg_dir,
         "health_url": "http://127.0.0.1:%d/health" % port, "base_url": "http://127.0.0.1:%d" % port,
         "candidates": cands, "ready_timeout": 300, "probes": True, "lkg_update": True, "host": "h1",
         "meta": {"engine": "sglang", "engine_version": "0.5.17"}, "timeout_start_sec_min": 300}
    s.update(extra)
    return s


def run(host, s):
    try:
        return DeployTransaction(host, s).run(), None
    except DeployFailed as exc:
        return exc.result, str(exc)


def ops(host, name):
    return [d for o, d in host.log if o == name]


OLD = unit_text("old", "ok")


def orders():
    """Every order of pass and fail over 1-4 candidates; the failures take each failure class in turn."""
    for n in range(1, 5):
        for pattern in itertools.product((True, False), repeat=n):
            yield [("ok" if ok else BEHAVIOURS[1 + (i + n) % 3]) for i, ok in enumerate(pattern)]


@pytest.mark.parametrize("behaves", list(orders()), ids="-".join)
@pytest.mark.parametrize("has_lkg", [True, False])
def test_every_order_of_pass_and_fail(behaves, has_lkg):
    host = FakeHost()
    if has_lkg:
        host.serve(OLD)
    s = spec(host, behaves)
    result, failure = run(host, s)
    first = behaves.index("ok") if "ok" in behaves else None
    tried = len(behaves) if first is None else first + 1
    # a candidate is installed and restarted only when every earlier one failed; never after a pass
    assert ops(host, "install") == [c["unit_content"] for c in s["candidates"][:tried]]
    assert len(ops(host, "restart")) == tried
    assert [a["outcome"] for a in result["attempts"]] == (
        ["failed"] * tried if first is None else ["failed"] * first + ["passed"] + ["not tried"] * (len(behaves) - tried))
    for a, b in zip(result["attempts"], behaves[:tried]):
        if b != "ok":
            assert a["class"] == FAIL_CLASS[b]
    if first is not None:
        assert failure is None
        assert result["passed_candidate"] == first and result["gate_result"] == "candidate %d passed the gate" % first
        assert host.live() == s["candidates"][first]["unit_content"]
        assert host.serving() == {host.unit: "ok"}
        meta = host.record_meta()
        assert meta["argv"] == s["candidates"][first]["argv"] and meta["unit_b64"] == host.live()
        assert [f["argv"] for f in meta["failed_before"]] == [c["argv"] for c in s["candidates"][:first]]
        assert ops(host, "restore") == []
        # the rerun changes nothing: the earlier failures are remembered, the pass is not restarted
        again = FakeHost()
        again.files, again.units, again.starts = host.files, host.units, host.starts
        result2, failure2 = run(again, s)
        assert failure2 is None and result2["passed_candidate"] == first and result2["changed"] is False
        assert ops(again, "restart") == [] and again.starts[host.unit] == host.starts[host.unit]
        assert [a["outcome"] for a in result2["attempts"][:first]] == ["skipped"] * first
    else:
        assert result["passed_candidate"] is None and failure.startswith("No candidate passed the gate on h1.")
        for i, b in enumerate(behaves):
            assert "[candidate %d {'n': %d}: %s: " % (i, i, FAIL_CLASS[b]) in failure
        if has_lkg:
            assert host.live() == OLD and host.serving() == {host.unit: "ok"}
            assert "Rolled back to last-known-good sglang.service at http://127.0.0.1:30000: ready, canary passed." in failure
            assert json.loads(host.record_meta()["unit_b64"]) == json.loads(OLD)  # the record is untouched
        else:
            assert host.serving() == {} and "No last-known-good existed: the service was stopped." in failure


def test_no_restart_when_the_configuration_is_live():
    host = FakeHost()
    s = spec(host, ["ok", "fail_start"])
    host.serve(s["candidates"][0]["unit_content"], record=False)
    result, failure = run(host, s)
    # live already, not restarted; the missing record is written
    assert failure is None and result["changed"] is True and ops(host, "restart") == [] and host.record_meta()
    assert len(ops(host, "canary")) == 1  # the gate proves what serves before it is recorded
    result, failure = run(host, s)
    assert failure is None and result["changed"] is False and ops(host, "restart") == []
    assert [a["outcome"] for a in result["attempts"]] == ["passed", "not tried"]
    assert len(ops(host, "wait_ready")) == 2 and len(ops(host, "canary")) == 1  # the proven process: readiness only


def test_a_no_op_repeats_the_canary_for_another_process_or_when_asked():
    """The canary is skipped on a no-op only for the very process that passed it (its systemd invocation in the
    record): after a restart outside the deploy (a crash restart by systemd, a reboot) the canary runs again and the
    new process is recorded; sglang_noop_canary (spec noop_canary) repeats it always."""
    host = FakeHost()
    s = spec(host, ["ok"])
    run(host, s)
    assert len(ops(host, "canary")) == 1 and host.record_meta()["invocation"] == host.invocation() != ""
    result, failure = run(host, s)
    assert failure is None and result["changed"] is False and len(ops(host, "canary")) == 1
    assert any("same server process that passed the gate" in line for line in host.lines)
    host._start(host.unit)                        # systemd restarted it on its own: a new invocation
    records = len(ops(host, "record"))
    result, failure = run(host, s)
    assert failure is None and len(ops(host, "canary")) == 2 and len(ops(host, "restart")) == 1  # the deploy's own
    assert len(ops(host, "record")) == records + 1 and host.record_meta()["invocation"] == host.invocation()
    assert result["changed"] is False   # which process was proven is bookkeeping: a rollback's rerun stays changed=0
    result, failure = run(host, s)
    assert result["changed"] is False and len(ops(host, "canary")) == 2
    result, failure = run(host, dict(s, noop_canary=True))
    assert failure is None and len(ops(host, "canary")) == 3


def test_a_no_op_on_a_process_that_now_fails_the_canary_is_caught_when_it_was_restarted():
    """A process restarted since the record (not the one proven) that now answers garbage fails the gate on the
    no-op deploy: the canary is not skipped for it."""
    host = FakeHost()
    s = spec(host, ["ok"])
    run(host, s)
    text = json.loads(host.live())
    host.units[host.unit]["started_from"] = json.dumps(dict(text, behave="incoherent"))
    host.pid += 1
    host.units[host.unit]["pid"] = host.pid       # a new process (new invocation) behind the same unit files
    result, failure = run(host, s)
    assert failure and result["attempts"][0]["class"] == "incoherent"


def test_a_no_op_rerun_rewrites_no_record_but_a_stale_record_is_rewritten():
    """A no-op deploy (nothing restarted, the live files last-known-good's, the record the same) writes nothing:
    no record call, so no round trip; a record that says something else (another engine version) is rewritten."""
    host = FakeHost()
    s = spec(host, ["ok"])
    run(host, s)
    records = len(ops(host, "record"))
    result, failure = run(host, s)
    assert failure is None and result["changed"] is False and len(ops(host, "record")) == records
    s["meta"] = dict(s["meta"], engine_version="0.5.18")
    result, failure = run(host, s)
    assert len(ops(host, "record")) == records + 1 and host.record_meta()["engine_version"] == "0.5.18"


def test_a_failing_fallback_after_a_passing_base_is_never_installed():
    host = FakeHost()
    host.serve(OLD)
    s = spec(host, ["ok", "fail_start", "fail_start"])
    result, failure = run(host, s)
    assert failure is None and len(ops(host, "install")) == 1 and len(ops(host, "restart")) == 1
    assert host.serving() == {host.unit: "ok"} and host.live() == s["candidates"][0]["unit_content"]


def test_a_crash_after_a_pass_restarts_the_same_candidate_on_the_next_run():
    host = FakeHost()
    s = spec(host, ["ok"])
    run(host, s)
    host.units[host.unit]["state"] = "failed"   # the server crashed after the deploy
    result, failure = run(host, s)
    assert failure is None and result["changed"] is True and host.starts[host.unit] == 2
    assert result["attempts"][0]["restarted"] is True and host.serving() == {host.unit: "ok"}


def test_retry_failed_tries_a_remembered_failure_again():
    host = FakeHost()
    s = spec(host, ["fail_start", "ok"])
    run(host, s)
    result, _failure = run(host, dict(s, retry_failed=True))
    assert [a["outcome"] for a in result["attempts"]] == ["failed", "passed"]


def test_a_remembered_failure_is_tried_again_after_an_engine_upgrade():
    host = FakeHost()
    s = spec(host, ["fail_start", "ok"])
    run(host, s)
    result, _failure = run(host, dict(s, meta={"engine": "sglang", "engine_version": "0.5.23"}))
    assert result["attempts"][0]["outcome"] == "failed"


STEPS = ["inspect", "install", "restart", "wait_ready", "canary", "record"]
ROLLED_BACK = "Rolled back to last-known-good sglang.service at http://127.0.0.1:30000: ready, canary passed."


@pytest.mark.parametrize("step", STEPS)
@pytest.mark.parametrize("behaves", [["ok"], ["fail_start", "ok"]])
def test_an_interrupt_at_each_step_restores_last_known_good_and_fails_as_interrupted(step, behaves):
    host = FakeHost(interrupt=(step, len(behaves) if step in ("install", "restart", "wait_ready") else 1))
    host.serve(OLD)
    before = host.record_meta()
    s = spec(host, behaves)
    result, failure = run(host, s)   # a failure the play reports, not the interrupt itself
    assert failure and failure.startswith("No candidate passed the gate on h1."), failure
    assert result["interrupted"] is True and result["passed_candidate"] is None
    assert result["gate_result"] == "interrupted: no candidate passed the gate"
    in_flight = [a for a in result["attempts"] if a.get("class") == "interrupted"]
    if step == "inspect":
        assert in_flight == [] and "The live server was not touched." in failure
    else:
        assert [a["candidate"] for a in in_flight] == [len(behaves) - 1] and in_flight[0]["outcome"] == "failed"
        assert ": interrupted: interrupted (SIGINT to ansible-playbook) " in failure
    assert host.record_meta() == before, "the record changed although the interrupt came before it was written"
    if ops(host, "restart") or step == "restart":
        # the live unit was touched (or may have been: the restart was in flight): last-known-good serves again,
        # through the rollback's own code and proof
        assert ops(host, "restore") == ["sglang.service"] and host.live() == OLD
        assert ROLLED_BACK in failure and result["rollback"]["canary"] == "passed"
    else:
        assert ops(host, "restore") == [] and "The live server was not touched." in failure
    assert host.serving() == {host.unit: "ok"}
    assert "interrupted" in " ".join(host.lines)
    host.interrupt = None
    result, failure = run(host, s)
    assert failure is None and result["passed_candidate"] == len(behaves) - 1
    assert host.live() == s["candidates"][-1]["unit_content"] and host.record_meta()["unit_b64"] == host.live()


@pytest.mark.parametrize("second", [("restore", 1), ("wait_ready", 2), ("canary", 1)])
def test_a_second_interrupt_aborts_the_restore(second):
    host = FakeHost(interrupt=[("wait_ready", 1), second])
    host.serve(OLD)
    with pytest.raises(KeyboardInterrupt):
        DeployTransaction(host, spec(host, ["ok"])).run()
    assert len(ops(host, "restore")) <= 1


@pytest.mark.parametrize("step", [("restore", 1), ("wait_ready", 2), ("canary", 1)])
def test_an_interrupt_during_a_rollback_lets_it_finish(step):
    host = FakeHost(interrupt=step)
    host.serve(OLD)
    result, failure = run(host, spec(host, ["fail_start"]))
    assert result["attempts"][0]["class"] == "startup_failure" and ROLLED_BACK in failure
    assert host.live() == OLD and host.serving() == {host.unit: "ok"} and result["interrupted"] is True


@pytest.mark.parametrize("record", ["{not json", json.dumps({"argv": ["x"]}), json.dumps(["a list"])])
def test_a_damaged_record_is_no_last_known_good(record):
    host = FakeHost()
    host.serve(OLD, record=False)
    host.files[host.lkg_dir + "/meta.json"] = record
    result, failure = run(host, spec(host, ["fail_start"]))
    assert "No last-known-good existed: the service was stopped." in failure
    assert host.serving() == {}
    result, failure = run(host, spec(host, ["ok"]))
    assert failure is None and host.record_meta()["argv"] == ["serve", "c0-ok"]


def test_a_missing_record_with_a_passing_candidate_records_it():
    host = FakeHost()
    host.serve(OLD, record=False)
    result, failure = run(host, spec(host, ["ok"]))
    assert failure is None and host.record_meta()["unit"] == "sglang.service"


def renamed():
    """A host serving OLD as sglang.service, seen by a deploy of the unit renamed sglang-b.service."""
    host = FakeHost()
    host.serve(OLD)
    new = FakeHost(unit="sglang-b.service", env_file="/etc/sglang/sglang-b.env")
    new.files, new.units, new.starts = host.files, host.units, host.starts
    return new


def test_a_unit_name_change_that_passes_replaces_the_old_unit():
    new = renamed()
    result, failure = run(new, spec(new, ["ok"]))
    assert failure is None and new.serving() == {"sglang-b.service": "ok"}, new.log
    assert "/etc/systemd/system/sglang.service" not in new.files and "/etc/sglang/sglang.env" not in new.files
    assert new.record_meta()["unit"] == "sglang-b.service"


def test_a_unit_name_change_that_fails_rolls_back_to_the_old_unit():
    new = renamed()
    result, failure = run(new, spec(new, ["fail_start"]))
    assert "Rolled back to last-known-good sglang.service" in failure
    assert new.serving() == {"sglang.service": "ok"}
    assert "/etc/systemd/system/sglang-b.service" not in new.files and "/etc/sglang/sglang-b.env" not in new.files


def test_a_port_change_that_fails_is_rolled_back_to_the_old_port():
    host = FakeHost()
    host.serve(OLD)
    result, failure = run(host, spec(host, ["fail_start"], port=30001))
    assert "Rolled back to last-known-good sglang.service at http://127.0.0.1:30000: ready, canary passed." in failure
    assert ops(host, "canary")[-1] == "http://127.0.0.1:30000"


def test_a_rollback_that_fails_says_so():
    host = FakeHost()
    host.serve(unit_text("old", "ok"))
    meta = host.record_meta()
    meta["unit_b64"] = unit_text("old", "incoherent")   # what was recorded no longer answers (e.g. a changed model)
    host.files[host.lkg_dir + "/meta.json"] = json.dumps(meta)
    result, failure = run(host, spec(host, ["fail_start"]))
    assert "ready, canary FAILED: probe capital" in failure
    assert result["rollback"]["canary"].startswith("FAILED")


@pytest.mark.parametrize("live,expect", [
    (None, "check mode: candidate 0 would restart (unit file, environment file, not running changed); the gate was NOT run"),
    ("c0-ok", "check mode: candidate 0 would not restart; the gate was NOT run"),
])
def test_check_mode_reports_and_changes_nothing(live, expect):
    host = FakeHost()
    s = spec(host, ["ok", "fail_start"], check_mode=True)
    if live:
        host.serve(s["candidates"][0]["unit_content"])
    host.check_mode = True
    files = dict(host.files)
    result, failure = run(host, s)
    assert failure is None and result["gate_result"] == expect and result["msg"] == expect
    assert host.files == files and ops(host, "restart") == [] and ops(host, "canary") == []
    assert result["changed"] is (live is None)


def test_without_lkg_update_the_record_stays():
    host = FakeHost()
    host.serve(OLD)
    before = host.record_meta()
    result, failure = run(host, spec(host, ["ok"], lkg_update=False))
    assert failure is None and host.record_meta() == before and ops(host, "record") == []


def test_the_start_timeout_is_sized_from_the_measured_load():
    host = FakeHost()
    run(host, spec(host, ["ok"]))
    dropin = host.files["/etc/systemd/system/sglang.service.d/10-start-timeout.conf"]
    assert "(7 s)" in dropin and "TimeoutStartSec=300" in dropin   # 3 x 7 s is below the 300 s floor
    assert host.record_meta()["load_seconds"] == 7


def test_restore_only_puts_last_known_good_back_once():
    host = FakeHost()
    s = spec(host, ["ok"])
    run(host, s)
    tuned = spec(host, ["ok"], lkg_update=False)   # a campaign's candidate: gated, served, not recorded
    tuned["candidates"][0]["unit_content"] = unit_text("tuned", "ok")
    result, failure = run(host, tuned)
    assert failure is None and host.live() == unit_text("tuned", "ok")
    tx = DeployTransaction(host, s)
    out = tx.restore_only()
    assert out["gate_result"] == "last-known-good restored" and host.live() == s["candidates"][0]["unit_content"]
    assert host.serving() == {host.unit: "ok"}
    again = DeployTransaction(host, s).restore_only()
    assert again["gate_result"] == "last-known-good serves" and again["changed"] is False


def test_restore_only_without_a_record_fails_naming_it():
    host = FakeHost()
    host.serve(OLD, record=False)
    with pytest.raises(DeployFailed, match="No last-known-good record on h1"):
        DeployTransaction(host, spec(host, ["ok"])).restore_only()


# ---- the opt-in accuracy gate ------------------------------------------------------------------------------------
ACC = {"checks": ["score"]}


def test_accuracy_off_by_default_sends_nothing():
    host = FakeHost()
    host.serve(OLD)
    res, err = run(host, spec(host, ["inaccurate"]))
    assert err is None and res["passed_candidate"] == 0 and res["accuracy"] == []
    assert "accuracy" not in dict(host.log) and "accuracy" not in host.record_meta()


def test_first_deploy_with_accuracy_records_a_reference_with_last_known_good():
    host = FakeHost()
    s = spec(host, ["ok"], accuracy=ACC)
    res, err = run(host, s)
    assert err is None and ops(host, "accuracy") == ["measure score"]
    ref = host.record_meta()["accuracy"]
    assert ref["file"].startswith(host.lkg_dir + "/accuracy-") and ref["checks"] == ["score"]
    assert json.loads(host.files[ref["file"]])["measured_on"] == "c0-ok"
    assert ref["argv"] == s["candidates"][0]["argv"] and (ref["requests"], ref["seconds"]) == (624, 3.5)
    assert any("no accuracy reference recorded with last-known-good" in line for line in host.lines)


def test_candidate_that_changes_answers_fails_the_accuracy_gate_and_the_next_one_stays():
    host = FakeHost()
    run(host, spec(host, ["ok"], accuracy=ACC))
    first_ref = host.record_meta()["accuracy"]["file"]
    res, err = run(host, spec(host, ["inaccurate", "ok"], port=30000, accuracy=ACC))
    assert err is None and res["passed_candidate"] == 1
    assert res["attempts"][0]["outcome"] == "failed" and res["attempts"][0]["class"] == "accuracy_drop"
    assert "accuracy gate: FAILED: exact-match score 0.410" in res["attempts"][0]["message"]
    assert ops(host, "accuracy") == ["measure score", "gate score", "gate score", "measure score"]
    assert [(a["candidate"], a["action"], a["passed"]) for a in res["accuracy"]] == [
        (0, "gate", False), (1, "gate", True), (1, "measure", True)]
    meta = host.record_meta()
    assert meta["accuracy"]["file"] != first_ref and first_ref not in host.files  # the old reference removed
    assert meta["failed_before"] == [{"argv": ["serve", "c0-inaccurate"], "class": "accuracy_drop"}]


def test_only_candidate_failing_accuracy_rolls_back_to_last_known_good():
    host = FakeHost()
    run(host, spec(host, ["ok"], accuracy=ACC))
    res, err = run(host, spec(host, ["inaccurate"], accuracy=ACC))
    assert err and "accuracy_drop" in err and "Rolled back to last-known-good" in err
    assert host.serving() == {host.unit: "ok"} and json.loads(host.live())["name"] == "c0-ok"


def test_accuracy_unchanged_configuration_and_tuning_measure_nothing_new():
    host = FakeHost()
    run(host, spec(host, ["ok"], accuracy=ACC))
    before = list(host.log)
    res, err = run(host, spec(host, ["ok"], accuracy=ACC))  # the same command line: nothing to compare or measure
    assert err is None and [o for o, _d in host.log[len(before):] if o == "accuracy"] == []
    assert any("last-known-good's own command line" in line for line in host.lines)
    res, err = run(host, spec(host, ["ok", "ok"], accuracy={"checks": ["score"]}, lkg_update=False,
                              candidates=[{"options": {}, "argv": ["serve", "tuned"], "unit_content": unit_text("tuned")}]))
    assert err is None and ops(host, "accuracy")[-1] == "gate score" and ops(host, "accuracy").count("measure score") == 1


def test_accuracy_checks_the_reference_lacks_are_said_not_silently_passed():
    host = FakeHost()
    run(host, spec(host, ["ok"], accuracy=ACC))
    res, err = run(host, spec(host, ["inaccurate"], accuracy={"checks": ["greedy"]}))
    assert err is None and ops(host, "accuracy")[-1] == "measure greedy"
    assert any("has score, not greedy: no accuracy comparison" in line for line in host.lines)


def test_accuracy_reference_that_cannot_be_measured_fails_the_candidate():
    host = FakeHost()
    host.serve(OLD)

    def broken(base_url, action, checks, lkg_file):
        return {"failed": True, "class": "accuracy_error", "msg": "exact-match score: 400 of 528 requests failed"}

    host.accuracy = broken
    res, err = run(host, spec(host, ["ok"], accuracy=ACC))
    assert err and "accuracy_error: measuring the accuracy reference failed: exact-match score: 400 of 528" in err
    assert json.loads(host.live()) == json.loads(OLD)


ACTION_BASE = {"unit": "sglang.service", "env_file": "/e", "lkg_dir": "/l", "health_url": "h", "base_url": "b",
               "canary_python": "p", "env_content": "", "candidates": [{"argv": ["x"], "unit_content": "u"}]}


@pytest.mark.parametrize("acc,message", [
    ({"checks": []}, r"accuracy=\{'checks': \[\]\}: allowed \{\} \(off\) or \{checks: \[...\]\} with checks a non-empty "
                     r"list of score, greedy \(sglang_accuracy_checks\)"),
    ({"checks": ["scores"]}, r"accuracy=\{'checks': \['scores'\]\}: allowed"),
    ({"checks": "score"}, r"accuracy=\{'checks': 'score'\}: allowed"),
    ({"checks": ["score"], "alpha": 0.1}, r"accuracy=.*'alpha': 0.1.*: allowed"),
])
def test_the_action_names_a_bad_accuracy_option(acc, message):
    from ansible.errors import AnsibleActionFail
    from ansible_collections.gpuhost.sglang.plugins.action.serving_deploy import check_args
    with pytest.raises(AnsibleActionFail, match=message):
        check_args(dict(ACTION_BASE, accuracy=acc))
    with pytest.raises(AnsibleActionFail, match=r"accuracy is not run for a multi-node replica \(phase=stop\)"):
        replica = {"rank": 1, "nnodes": 2, "head_address": "a", "dist_port": 1, "state_file": "/s"}
        check_args(dict(ACTION_BASE, accuracy=ACC, phase="stop", replica=replica))
    assert check_args(dict(ACTION_BASE, accuracy={"checks": ["score", "greedy"]}))["accuracy"]["checks"] == ["score", "greedy"]
    assert check_args(dict(ACTION_BASE))["accuracy"] == {}
