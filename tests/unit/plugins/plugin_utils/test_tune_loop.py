# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The tune loop end to end against a stand-in engine (tests/harness/fake_engine: the parser the server_args probe
reads, and a launch_server that replays the real 0.5.17's recorded failures or becomes the fake server): the
parser's rejection, the real fa3 startup failure classified, a winner over the base, the report files, a campaign
cut off (between candidates, and killed in the middle of one) and resumed, last-known-good serving at the end.
The loop's control flow without an engine (crash memory across campaigns, adoption or restore, resume through the
playbook's steps): tests/unit/plugins/action/test_tune_step.py."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import subprocess
import sys
import time
import urllib.request

import pytest

from ansible_collections.gpuhost.sglang.plugins.module_utils.tune.state import CampaignState, state_path
from ansible_collections.gpuhost.sglang.plugins.plugin_utils import tune_loop

# the fake server and the load client need aiohttp (ansible-test's collect-only venv has none)
pytest.importorskip("aiohttp")
from ansible_collections.gpuhost.sglang.tests.integration.fakeserver import free_port  # noqa: E402  pylint: disable=wrong-import-position

HERE = os.path.dirname(os.path.abspath(__file__))
FAKE_ENGINE = os.path.abspath(os.path.join(HERE, "..", "..", "..", "harness", "fake_engine"))
BASE = {"attention-backend": "triton", "disable-cuda-graph": True, "mem-fraction-static": 0.3}
WORKLOAD = {"concurrency": [1, 4], "input_len": 8, "output_len": 8, "trials": 2, "warmup": 1, "num_prompts": 8}


def campaign(name, space):
    return {"name": name, "base": BASE, "space": space, "workload": WORKLOAD, "objective": {"concurrency": 4},
            "adopt": {"min_improvement": 0.05, "max_regression": 0.5}}


FIRST = campaign("first", {"disable-cuda-graph": [False], "max-running-requests": ["many"],
                           "attention-backend": ["fa3"]})


@pytest.fixture(name="engine")
def engine_fixture(tmp_path):
    port = free_port()
    env = dict(os.environ, PYTHONPATH=FAKE_ENGINE, FAKE_ENGINE_ITL="0.008", FAKE_ENGINE_TTFT="0.01")
    hosts = []

    def make(doc, lines=None, **kw):
        lines = [] if lines is None else lines
        host = tune_loop.LauncherHost(str(tmp_path / "work"), lkg_dir=str(tmp_path / "state" / "last-known-good"),
                                      env=env, say=lines.append, stop_grace=3.0, interval=0.1)
        hosts.append(host)
        parser = tune_loop.EngineParser(sys.executable, env={"PYTHONPATH": FAKE_ENGINE}, timeout=60)
        loop = tune_loop.CampaignLoop(doc, str(tmp_path / "state"), host, [sys.executable, "-m", "sglang.launch_server"],
                                      parser, "http://127.0.0.1:%d" % port, say=lines.append, ready_timeout=30,
                                      managed={"model-path": "/models/tiny", "served-model-name": "tiny",
                                               "port": port, "enable-metrics": True},
                                      bench={"min_duration_s": 0, "min_requests": 1}, plots=False, **kw)
        return loop, host, lines

    yield make
    for host in hosts:
        host.stop(tune_loop.UNIT)


def rows(tmp_path, name):
    return dict((r["index"], r) for r in CampaignState(state_path(str(tmp_path / "state"), name)).rows().values())


def started(host):
    out = []
    for path in host.logs:
        with open(path) as f:
            out.append(json.loads(f.readline()[2:]))
    return out


def health(loop):
    with urllib.request.urlopen(loop.base_url + "/health", timeout=5) as r:
        return r.status


# the winner must beat the noise and pass the latency gates (c=1 TTFT p99 of two short trials): under the parallel
# run's load that p99 moved by 419% (2026-12-03), so it runs with the timing tests, alone
@pytest.mark.timing
def test_campaign_rejects_classifies_picks_a_winner_and_ends_on_last_known_good(engine, tmp_path):
    loop, host, lines = engine(FIRST)
    out = loop.run()
    r = rows(tmp_path, "first")
    assert r[0]["status"] == "ok" and r[1]["status"] == "ok"
    assert r[2]["status"] == "rejected" and "--max-running-requests" in r[2]["message"]
    assert (r[3]["status"], r[3]["class"]) == ("startup_failed", "unsupported_arch")
    assert "Can not import FA3 in sgl_kernel" in r[3]["message"]
    # the winner: CUDA graphs on, over the measured noise
    assert (out["report"]["winner"] or {}).get("index") == 1, "\n".join(out["report"]["table"])
    assert "beats the base" in out["report"]["reason"]
    # exactly the argv the parser accepted was started; the rejected one never was
    commands = started(host)
    assert [c[3:] for c in commands[:2]] == [["--attention-backend", "triton", "--disable-cuda-graph", "--enable-metrics",
                                              "--mem-fraction-static", "0.3", "--model-path", "/models/tiny",
                                              "--port", str(loop.managed["port"]), "--served-model-name", "tiny"],
                                             commands[1][3:]]
    assert "--disable-cuda-graph" not in commands[1] and not any("many" in c for c in commands)
    assert ["fa3" in c for c in commands] == [False, False, True, False]  # the last: last-known-good restored
    assert out["restored"] and host.inspect()["live_is_lkg"] and health(loop) == 200
    files = os.listdir(str(tmp_path / "state" / "first"))
    assert {"results.md", "results.json", "results.csv", "winner.yml", "state.jsonl"} <= set(files)


def test_the_winner_is_adopted_through_the_deploy_gate_or_last_known_good_stays(engine, tmp_path):
    """adopt: the winner deployed again through the gate and recorded as last-known-good (an ``adopt`` event in the
    state); a winner that fails the gate is not adopted and the transaction's rollback leaves last-known-good
    serving. run() adopts only when the campaign enables it and found a winner."""
    loop, host, lines = engine(dict(FIRST, adopt={"enabled": False, "min_improvement": 0.05, "max_regression": 0.5}))
    out = loop.run()
    assert out["adopted"] is None and host.inspect()["lkg"]["argv"] == loop.units[0][0]  # disabled: base restored
    res = loop.adopt({"index": 1, "name": "disable-cuda-graph=False"})
    assert res["adopted"] is True and res["index"] == 1, res
    assert host.inspect()["lkg"]["argv"] == loop.units[1][0] and host.inspect()["live_is_lkg"] and health(loop) == 200
    events = [json.loads(line) for line in open(state_path(str(tmp_path / "state"), "first"))]
    assert [e["index"] for e in events if e.get("event") == "adopt"] == [1]
    res = loop.adopt({"index": 3, "name": "attention-backend=fa3"})  # fails to start: rolled back
    assert res["adopted"] is False and "winner 3 not adopted" in res["message"], res
    assert host.inspect()["lkg"]["argv"] == loop.units[1][0] and health(loop) == 200
    # run() adopting a winner instead of restoring: tests/unit/plugins/action/test_tune_step.py (the same loop)


def test_cut_off_between_candidates_resumes_where_it_stopped(engine, tmp_path):
    def cut_after_base(candidate, base_url, plan):
        if candidate["index"] == 0:
            loop.deadline = time.monotonic()  # the time left is spent: the next candidate does not start

    loop, host, lines = engine(FIRST, gates=[cut_after_base])
    out = loop.run()
    assert out["cut_off"].startswith("cut off before candidate 1")
    assert sorted(rows(tmp_path, "first")) == [0, 2]  # the base and the parser's rejection
    assert any(line.startswith("cut off before candidate 1") for line in lines)
    loop2, host2, lines2 = engine(FIRST)
    out2 = loop2.run()
    assert sorted(rows(tmp_path, "first")) == [0, 1, 2, 3] and out2["cut_off"] is None
    assert any("done before: [0, 2]; interrupted (run again): []" in line for line in lines2)
    # the base was not measured again: the resumed run started candidate 1, fa3, then last-known-good
    assert [("fa3" in c, "--disable-cuda-graph" in c) for c in started(host2)] == [(False, False), (True, True), (False, True)]


def test_killed_inside_a_candidate_runs_that_candidate_again(engine, tmp_path):
    def killed_at_one(candidate, base_url, plan):
        if candidate["index"] == 1:
            raise SystemExit("killed")  # the device's time limit, inside candidate 1

    loop, host, lines = engine(FIRST, gates=[killed_at_one])
    with pytest.raises(SystemExit):
        loop.run()
    assert sorted(rows(tmp_path, "first")) == [0, 2]
    leftover = host.proc.pid
    assert host.alive()  # the cut-off run left its server running
    loop2, host2, lines2 = engine(FIRST)
    assert any("stopped the server a cut-off run left (pid %d)" % leftover in line for line in lines2)
    loop2.run()
    assert any("done before: [0, 2]; interrupted (run again): [1]" in line for line in lines2)
    r = rows(tmp_path, "first")
    assert r[1]["status"] == "ok" and CampaignState(state_path(str(tmp_path / "state"), "first")).interrupted() == []


def test_a_gate_that_fails_records_its_class_and_the_campaign_goes_on(engine, tmp_path):
    """The hook an accuracy gate uses: its failure is the candidate's row (incoherent for a wrong answer)."""
    def wrong_answers(candidate, base_url, plan):
        if candidate["index"] == 1:
            return {"class": "wrong_answer", "message": "exact match 0.41 < last-known-good 0.93 - 0.05", "score": 0.41}
        return {"score": 0.93} if candidate["index"] == 0 else None

    loop, host, lines = engine(FIRST, gates=[wrong_answers])
    out = loop.run()
    r = rows(tmp_path, "first")
    assert (r[1]["status"], r[1]["class"]) == ("incoherent", "wrong_answer") and "0.41" in r[1]["message"]
    assert out["report"]["winner"] is None and r[3]["class"] == "unsupported_arch"
    gates = [(e["index"], e["gate"], e["result"]["score"]) for e in CampaignState(
        state_path(str(tmp_path / "state"), "first")).events if e["event"] == "gate"]
    assert gates == [(0, "wrong_answers", 0.93), (1, "wrong_answers", 0.41)]


ACCURATE = dict(campaign("acc", {"schedule-conservativeness": [0.5], "kv-cache-dtype": ["fp8_e4m3"]}),
                accuracy={"enabled": True, "limit": 110, "greedy_prompts": 22})


def test_accuracy_gate_fails_a_candidate_that_changes_answers_and_passes_one_that_does_not(engine, tmp_path):
    """tune_candidate.yml's accuracy steps in the loop: the base measures last-known-good once (both checks: the
    candidates need greedy and score), the scheduling candidate passes greedy equivalence, the numerics candidate
    (the stand-in's fp8_e4m3: answers changed, the canary still right) is ``inaccurate`` with both scores, and
    never the winner; what changed is kept beside the state."""
    loop, host, lines = engine(ACCURATE)
    out = loop.run()
    r = rows(tmp_path, "acc")
    assert r[0]["status"] == "ok" and r[0]["accuracy"]["lkg"] and r[0]["accuracy"]["checks"] == ["score", "greedy"]
    assert r[1]["status"] == "ok" and r[1]["accuracy"]["passed"] and list(r[1]["accuracy"]["checks"]) == ["greedy"]
    assert r[1]["accuracy"]["checks"]["greedy"]["identical"] == 22
    assert (r[2]["status"], r[2]["class"]) == ("inaccurate", "accuracy_drop"), r[2]
    score = r[2]["accuracy"]["checks"]["score"]
    assert score["lkg_score"] == 1.0 and score["candidate_score"] < 0.95 and score["p_value"] < 1e-3
    assert "exact-match score" in r[2]["message"] and (out["report"]["winner"] or {}).get("index") != 2
    state = str(tmp_path / "state" / "acc")
    with open(os.path.join(state, "accuracy-2-%s.json" % r[2]["id"])) as f:
        detail = json.load(f)
    assert detail["differences"]["score"]["lost"] and not detail["differences"]["score"]["gained"]
    assert os.path.isfile(os.path.join(state, "accuracy-lkg.json"))
    assert any(line.startswith("  accuracy score: {") for line in lines)
    assert any("accuracy" in line and "FAIL" in line for line in out["report"]["table"]), out["report"]["table"]


def test_accuracy_gate_without_a_reference_is_an_error_row_not_a_crash(engine, tmp_path):
    """A candidate gated when last-known-good's measurement is missing (the base was measured before the campaign
    enabled the gate): its row says why, the campaign goes on."""
    loop, host, lines = engine(ACCURATE)
    loop.plan = loop.tune("plan", campaign=ACCURATE)["plan"]
    res = loop.accuracy(loop.plan["candidates"][1])
    assert res["class"] == "accuracy_error" and "accuracy-lkg.json cannot be read" in res["message"]
    assert loop.accuracy(dict(loop.plan["candidates"][1], accuracy_checks=[])) is None


def test_bad_bench_option_and_base_rejected_are_clear_errors(engine, tmp_path):
    with pytest.raises(tune_loop.LoopError, match=r"bench options \['nope'\] are not serving_bench options"):
        tune_loop.bench_params(nope=1)
    loop, host, lines = engine(dict(FIRST, base=dict(BASE, **{"attention-backend": "nonesuch"})))
    with pytest.raises(tune_loop.LoopError, match="the base configuration fails the engine's parser: .*nonesuch"):
        loop.run()
    assert host.starts == 0


def test_device_entry_point_cut_off_then_restaged_on_a_fresh_machine(tmp_path):
    """benchmarks/gpu/sglang/tune.py: a run cut off by its deadline leaves OUT/tune-state.tgz; the next run, on a
    machine whose /tmp was lost (a fresh --state-dir), unpacks it with --restage and finishes the campaign."""
    import subprocess  # pylint: disable=import-outside-toplevel
    import tarfile  # pylint: disable=import-outside-toplevel
    import yaml  # pylint: disable=import-outside-toplevel
    root = os.path.abspath(os.path.join(HERE, "..", "..", "..", ".."))
    doc = tmp_path / "c.yml"
    doc.write_text(yaml.safe_dump(dict(FIRST, space={"disable-cuda-graph": [False], "attention-backend": ["fa3"]}), sort_keys=False))
    env = dict(os.environ, PYTHONPATH=FAKE_ENGINE, FAKE_ENGINE_ITL="0.008", FAKE_ENGINE_TTFT="0.01")

    def tune(out, state, *extra):
        cmd = [sys.executable, os.path.join(root, "benchmarks", "gpu", "sglang", "tune.py"), "--out", str(out),
               "--state-dir", str(state), "--model", "/models/tiny", "--port", str(free_port()), "--min-duration-s", "0",
               "--ready-timeout", "30"] + list(extra) + [str(doc)]
        return subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                              timeout=240, check=False)

    first = tune(tmp_path / "out1", tmp_path / "m1" / "tune", "--deadline-s", "6", "--estimate-s", "0")
    assert first.returncode == 0, first.stdout[-3000:]
    assert "cut off before candidate" in first.stdout
    with tarfile.open(str(tmp_path / "out1" / "tune-state.tgz")) as t:
        assert "tune/first/state.jsonl" in t.getnames()
    second = tune(tmp_path / "out2", tmp_path / "m2" / "tune", "--restage", str(tmp_path / "out1" / "tune-state.tgz"))
    assert second.returncode == 0, second.stdout[-3000:]
    assert "state re-staged from" in second.stdout and "cut off" not in second.stdout
    r = dict((row["index"], row) for row in CampaignState(str(tmp_path / "m2" / "tune" / "first" / "state.jsonl")).rows().values())
    assert sorted(r) == [0, 1, 2] and r[2]["class"] == "unsupported_arch"
    assert {"tune.log", "tune-state.tgz", "first-results.md", "first-results.json"} <= set(os.listdir(str(tmp_path / "out2")))
    bad = tune(tmp_path / "out3", tmp_path / "m3" / "tune", "--restage", str(tmp_path / "nonesuch.tgz"))
    assert bad.returncode == 2 and "--restage %s: no such file" % (tmp_path / "nonesuch.tgz") in bad.stdout


def test_device_entry_point_campaign_model_and_accuracy_files(tmp_path):
    """tune.py --campaign-model (the accuracy experiment's damaged copies): model-path comes from the campaign, each
    candidate's server started on its own; the accuracy gate's reference and per-candidate files land in the state
    that OUT/tune-state.tgz carries, the differing outputs in tune.log."""
    import subprocess  # pylint: disable=import-outside-toplevel
    import tarfile  # pylint: disable=import-outside-toplevel
    import yaml  # pylint: disable=import-outside-toplevel
    root = os.path.abspath(os.path.join(HERE, "..", "..", "..", ".."))
    doc = tmp_path / "acc.yml"
    doc.write_text(yaml.safe_dump(dict(campaign("acc", {"model-path": ["/models/damaged"], "kv-cache-dtype": ["fp8_e4m3"]}),
                                       base=dict(BASE, **{"model-path": "/models/tiny"}),
                                       accuracy={"enabled": True, "checks": ["score", "greedy"], "limit": 44,
                                                 "greedy_prompts": 11}), sort_keys=False))
    env = dict(os.environ, PYTHONPATH=FAKE_ENGINE, FAKE_ENGINE_ITL="0.004", FAKE_ENGINE_TTFT="0.01")
    cmd = [sys.executable, os.path.join(root, "benchmarks", "gpu", "sglang", "tune.py"), "--out", str(tmp_path / "out"),
           "--state-dir", str(tmp_path / "m" / "tune"), "--campaign-model", "--port", str(free_port()),
           "--min-duration-s", "0", "--ready-timeout", "30", "--no-restore", str(doc)]
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                       timeout=240, check=False)
    assert p.returncode == 0, p.stdout[-3000:]
    logs = sorted(f for f in os.listdir(str(tmp_path / "m" / "tune" / "launcher")) if f.startswith("server-"))
    heads = []
    for name in logs:
        with open(str(tmp_path / "m" / "tune" / "launcher" / name)) as f:
            heads.append(json.loads(f.readline()[2:]))
    assert [h[h.index("--model-path") + 1] for h in heads] == ["/models/tiny", "/models/damaged", "/models/tiny"]
    r = dict((row["index"], row) for row in CampaignState(str(tmp_path / "m" / "tune" / "acc" / "state.jsonl")).rows().values())
    assert r[1]["status"] == "ok" and r[2]["status"] == "inaccurate", (r[1]["status"], r[2]["status"])
    with tarfile.open(str(tmp_path / "out" / "tune-state.tgz")) as t:
        names = t.getnames()
    assert "tune/acc/accuracy-lkg.json" in names and "tune/acc/accuracy-2-%s.json" % r[2]["id"] in names
    assert "accuracy greedy: {\"differing\": " in p.stdout and "accuracy gate FAILED" in p.stdout


def test_every_level_of_the_ladder_is_warmed_up(monkeypatch, tmp_path):
    # serving_bench warms each level up at its own concurrency; 0 turns that off, so a ladder that passed 0 after its
    # first level measured every later level's ramp
    seen = []

    class Recorder(object):
        def __init__(self, params):
            seen.append((params["concurrency"], params["warmup"]))

        def execute(self):
            return type("Res", (), {"msg": "ok", "out": {}, "failed": False})()

    monkeypatch.setattr(tune_loop, "BenchRun", Recorder)
    loop = tune_loop.CampaignLoop(FIRST, str(tmp_path), None, ["true"], None, "http://127.0.0.1:9", say=lambda m: None)
    loop.plan = {"name": "first", "workload": dict(WORKLOAD, api="completions")}
    for conc in WORKLOAD["concurrency"]:
        loop.level({"index": 0, "id": "base"}, conc)
    assert seen == [(1, 1), (4, 1)], seen


def test_a_leftover_server_that_already_exited_is_not_waited_for(monkeypatch, tmp_path):
    # the pid file names a server of a loop cut off in this same process, which has exited but nobody reaped: the
    # zombie kept its process group alive for killpg(pid, 0), so stopping it waited out the grace and the SIGKILL
    # wait (8 s per resumed campaign in these tests) before the leftover was reaped
    proc = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # until it has exited: a zombie (state Z, proc(5))
        with open("/proc/%d/stat" % proc.pid) as f:
            if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                break
        time.sleep(0.01)
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / (tune_loop.UNIT + ".pid")).write_text("%d\n" % proc.pid)
    naps, lines = [], []
    monkeypatch.setattr(tune_loop.time, "sleep", naps.append)
    tune_loop.LauncherHost(str(tmp_path / "work"), say=lines.append, stop_grace=30.0)
    assert naps == [] and lines == ["stopped the server a cut-off run left (pid %d)" % proc.pid]
    assert not (tmp_path / "work" / (tune_loop.UNIT + ".pid")).exists()
