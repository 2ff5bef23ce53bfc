# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""playbooks/tune.yml with campaigns/sandbox-cpu.yml on a real host with the real CPU engine.

In order, on one host: check mode prints the plan and changes nothing -> a campaign interrupted (SIGINT, like
Ctrl-C) after its second candidate -> the resumed run starts only what had not finished, ends on the
last-known-good configuration byte for byte and answers the probes -> results (table, CSV, JSON, Pareto plot) ->
adoption: a slow base (no continuous batching) loses to continuous batching, the winner becomes last-known-good
and deploy.yml with the snippet is changed=0 (which also leaves the host as the inventory describes it).

Stage 50 runs it on the sandbox (GPUHOST_ROLE_TEST_SANDBOX=1); otherwise it creates its own host (tag tt).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
import yaml

from ansible_collections.gpuhost.sglang.plugins.module_utils.gpu import health
from ansible_collections.gpuhost.sglang.tests import harness
from ansible_collections.gpuhost.sglang.tests.harness import fake_nvml

from test_serving_role import MODELS, ROOT, SANDBOX, TESTHOST, WHEELHOUSE, create_host, ssh

USE_SANDBOX = os.environ.get("GPUHOST_ROLE_TEST_SANDBOX") == "1"
# A host you deployed yourself: NAME:ADDRESS:INVENTORY (developers; as in test_serving_role.py)
OWN_HOST = os.environ.get("GPUHOST_ROLE_TEST_HOST", "")
NAME = "sandbox" if USE_SANDBOX else (OWN_HOST.split(":", 1)[0] if OWN_HOST else "tune")
# a developer's own tag (GPUHOST_TESTHOST_TAG) or the integration tests' tt (tests/stages/95-leaks.sh)
ENV = dict(os.environ, GPUHOST_TESTHOST_TAG=os.environ.get("GPUHOST_TESTHOST_TAG") or "tt")
CAMPAIGN = os.path.join(ROOT, "campaigns", "sandbox-cpu.yml")
CI_CAMPAIGN = os.path.join(ROOT, "campaigns", "sandbox-cpu-ci.yml")
SERVED = ["/etc/systemd/system/sglang.service", "/etc/sglang/sglang.env", "/etc/sglang/last-known-good/meta.json",
          "/etc/sglang/last-known-good/sglang.service", "/etc/sglang/last-known-good/env"]
DROP_IN = "/etc/systemd/system/sglang.service.d/10-start-timeout.conf"


def standin_gpu_facts(nvml):
    """A gpu_facts result with its health read from ``nvml`` as the module reads it (the host has no GPU): what
    tune.yml's tune_gpu_facts / tune_gpu_facts_after replay instead of reading NVML."""
    return {"gpu_count": 1, "health": health.read(nvml, kernel_log=([], None))}


def h200_recorded(which):
    """The nvidia-h200 machine's own NVML answers (tests/unit/plugins/module_utils/gpu/fixtures/
    h200_nvml_health_raw.json), at idle ("before") or after load ("after_load")."""
    with open(os.path.join(ROOT, "tests", "unit", "plugins", "module_utils", "gpu", "fixtures",
                           "h200_nvml_health_raw.json")) as fh:
        return standin_gpu_facts(fake_nvml.ReplayNVML(json.load(fh)[which]))


H200_STATE = {"state": "ok", "p2p": None, "gpus": [{"index": 0, "pcie_max": "gen5 x16", "pcie_width": 16,
                                                    "persistence_mode": True, "problems": []}]}

pytestmark = [pytest.mark.testhosts, pytest.mark.engine, pytest.mark.serving_role]

if not (os.path.isdir(WHEELHOUSE) and os.path.isfile(os.path.join(MODELS, "good", "config.json"))):
    pytestmark.append(pytest.mark.skip(reason="fixtures missing: run tests/stages/20-fixtures.sh (make fixtures)"))


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    state = str(tmp_path_factory.mktemp("tune-state"))
    if USE_SANDBOX:
        yield dict(SANDBOX, state=state)
        return
    if OWN_HOST:
        address, inventory = OWN_HOST.split(":", 2)[1:]
        yield dict(SANDBOX, name=NAME, address=address, inventory=inventory, state=state)
        return
    info = create_host(NAME, ENV, tmp_path_factory)
    info["state"] = state
    try:
        rc, out, _c = playbook(info, "deploy.yml")
        assert rc == 0, out[-3000:]
        yield info
    finally:
        subprocess.run([sys.executable, TESTHOST, "destroy", NAME], env=ENV, check=False, capture_output=True)


def _cmd(host, play, extra=None, check=False, inventories=()):
    cmd = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", host["inventory"]]
    for inv in inventories:
        cmd += ["-i", inv]
    cmd += [os.path.join(ROOT, "playbooks", play), "-e", json.dumps({"tune_state_dir": host["state"], "tune_plots": True})]
    if extra:
        cmd += ["-e", json.dumps(extra)]
    if check:
        cmd.append("--check")
    return cmd


def _env():
    return harness.ansible_env()


def _recap(out):
    recap = re.search(r"^%s\s+:\s+(.*)$" % NAME, out, re.M)
    return dict((k, int(v)) for k, v in re.findall(r"(\w+)=(\d+)", recap.group(1))) if recap else {}


def playbook(host, play, extra=None, check=False, inventories=()):
    proc = subprocess.run(_cmd(host, play, extra, check, inventories), cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=1500,
                          check=False)
    # the yaml callback folds long messages: compare with whitespace collapsed
    return proc.returncode, " ".join((proc.stdout + proc.stderr).split()), _recap(proc.stdout)


def served(host):
    return ssh(host, "sha256sum %s" % " ".join(SERVED)) + "\n" + ssh(host, "systemctl show -p MainPID --value sglang.service")


def events(host, name="sandbox-cpu"):
    path = os.path.join(host["state"], name, "state.jsonl")
    if not os.path.isfile(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip().endswith("}")]


def test_check_mode_prints_the_plan_and_changes_nothing(host):
    before = served(host)
    rc, out, counts = playbook(host, "tune.yml", {"campaign": CAMPAIGN}, check=True)
    assert rc == 0, out[-3000:]
    assert "0 base: accepted by transformers" in out
    assert re.search(r'2 cb-num-blocks="plenty": REJECTED by the parser \(--cb-num-blocks: invalid value', out), out[-3000:]
    assert '4 device="cuda": accepted' in out
    assert events(host) == []
    assert served(host) == before


def checksums(host, paths):
    """sha256 of each path; last-known-good's meta.json without its "invocation": which process was last proven is
    bookkeeping the record keeps (serving_unit record), and a campaign's restore starts a new process."""
    sums = dict(line.split()[::-1] for line in ssh(host, "sha256sum %s" % " ".join(paths)).splitlines())
    for path in paths:
        if path.endswith("/meta.json"):
            meta = json.loads(ssh(host, "cat %s" % path))
            meta.pop("invocation", None)
            sums[path] = hashlib.sha256(json.dumps(meta, sort_keys=True).encode()).hexdigest()
    return sums


def test_ci_campaign_rows_results_and_the_host_back_on_last_known_good(host):
    """campaigns/sandbox-cpu-ci.yml end to end: a candidate that serves but loses, one the parser rejects (never
    started), one that fails to start (rolled back by the role); no winner; results written; the served files are
    the same bytes afterwards and the server answers the probes."""
    before = checksums(host, SERVED + [DROP_IN])
    t0 = time.time()
    rc, out, counts = playbook(host, "tune.yml", {"campaign": CI_CAMPAIGN, "tune_gpu_facts": h200_recorded("before"),
                                                  "tune_gpu_facts_after": h200_recorded("after_load")})
    print("CI campaign: %.0f s, recap %s" % (time.time() - t0, counts))
    assert rc == 0 and counts.get("failed") == 0, out[-4000:]
    evs = events(host, "sandbox-cpu-ci")
    assert sorted(e["index"] for e in evs if e["event"] == "start") == [0, 1, 3]  # the rejected one never starts
    folder = os.path.join(host["state"], "sandbox-cpu-ci")
    with open(os.path.join(folder, "results.json")) as f:
        res = json.load(f)
    rows = dict((r["index"], r) for r in res["rows"])
    assert dict((i, r["status"]) for i, r in rows.items()) == {0: "ok", 1: "ok", 2: "rejected", 3: "startup_failed"}, rows
    assert "--cb-num-blocks" in rows[2]["message"] and "valid integer" in rows[2]["message"], rows[2]["message"]
    assert rows[3]["class"] and rows[3]["evidence"]["journal_tail"], rows[3]
    assert [lv["concurrency"] for lv in rows[0]["levels"]] == [8] and rows[0]["levels"][0]["output_throughput"] > 0
    # GPU health beside the results: the rows, and the fingerprint of each ladder's serving_bench run
    assert [(rows[i]["gpu_health"], rows[i]["gpu_degraded"]) for i in (0, 1)] == [(H200_STATE, [])] * 2, rows
    with open(os.path.join(folder, "bench", "runs", "sandbox-cpu-ci-0-%s.json" % rows[0]["id"])) as f:
        run0 = json.load(f)
    assert run0["fingerprint_gpu_health"] == H200_STATE and run0["levels"]["8"]["gpu_health"] == H200_STATE
    assert run0["gpu_health"]["after"]["gpus"][0]["clock_events"] == ["sw_power_cap"] and "gpu_degraded" not in run0
    assert res["decision"]["winner"] is None, res["decision"]
    assert res["decision"]["judgements"][rows[1]["id"]]["verdict"] in ("loses", "regresses"), res["decision"]
    with open(os.path.join(folder, "results.md")) as f:
        md = f.read()
    print(md)
    assert "| c=8 tok/s | c=8 TTFT p99 | c=8 TPOT p50 | note |" in md and "Decision: no candidate beat the base" in md
    assert "- ok, 1 GPU(s) gen5 x16 width x16: candidate(s) 0, 1" in md
    assert re.search(r"(?m)^\| 3 \| device=\"cuda\" \| startup_failed", md), md
    with open(os.path.join(folder, "results.csv")) as f:
        csv_rows = f.read().splitlines()
    assert csv_rows[0].startswith("index,id,name,status") and len(csv_rows) == 5, csv_rows
    with open(os.path.join(folder, "pareto.png"), "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    assert not os.path.exists(os.path.join(folder, "winner.yml"))
    # the failing candidate ran last: the role's rollback already put the base back, no restore restart was needed
    assert re.search(r"Restore \| last-known-good serves, restored and proven when it did not\] \**\s*ok:", out), out[-3000:]
    assert re.search(r"Verify \| byte-identical to before the campaign\] \**\s*ok:", out), out[-3000:]
    assert re.search(r"Verify \| the server answers the probes\] \**\s*ok:", out), out[-3000:]
    assert checksums(host, SERVED + [DROP_IN]) == before
    # the deploy's parser call lives in the serving_deploy action now (plugins/plugin_utils/candidates.py
    # needs_parser): no role task parses again; that it skips the base and the argvs tune.yml's single parser call
    # accepted is tested in tests/unit/plugins/plugin_utils/test_candidates.py and test_serving_deploy_build.py
    validate = r"validate every candidate with the engine's own parser before anything restarts"
    assert not re.findall(validate, out), re.findall(validate, out)
    assert ssh(host, "systemctl is-active sglang.service") == "active"


def test_gpus_that_degrade_during_the_ladder_leave_no_winner(host, tmp_path):
    """The base's ladder between a healthy reading and a thermal-throttled one (stand-ins: harness.fake_nvml's H200
    and its thermal throttle state): the row is gpu_degraded, its serving_bench run is marked, the campaign has no
    winner and says why, and the host ends on last-known-good. The only candidate is one the parser rejects, so
    nothing restarts."""
    before = checksums(host, SERVED + [DROP_IN])
    with open(CI_CAMPAIGN) as f:
        doc = yaml.safe_load(f)
    doc.update(name="sandbox-cpu-degraded", space={"cb-num-blocks": ["plenty"]}, max_candidates=1)
    doc["workload"]["trials"] = 1
    campaign = tmp_path / "degraded.yml"
    campaign.write_text(yaml.safe_dump(doc))
    t0 = time.time()
    rc, out, counts = playbook(host, "tune.yml", {
        "campaign": str(campaign), "tune_gpu_facts": standin_gpu_facts(fake_nvml.h200_box()),
        "tune_gpu_facts_after": standin_gpu_facts(fake_nvml.thermal_throttle_box())})
    print("degraded campaign: %.0f s, recap %s" % (time.time() - t0, counts))
    assert rc == 0 and counts.get("failed") == 0, out[-4000:]
    folder = os.path.join(host["state"], "sandbox-cpu-degraded")
    with open(os.path.join(folder, "results.json")) as f:
        res = json.load(f)
    base = res["rows"][0]
    assert (base["status"], base["class"]) == ("gpu_degraded", "gpu_degraded"), base
    assert base["gpu_degraded"] == [
        "during the ladder: gpu0: clock event reasons: sw_thermal_slowdown, hw_thermal_slowdown",
        "during the ladder: gpu0: thermal violation 12.5 s during the run"], base
    assert res["decision"]["winner"] is None
    assert res["decision"]["reason"].startswith("no winner: the GPUs were degraded while candidate(s) 0 ran"), res
    with open(os.path.join(folder, "bench", "runs", "sandbox-cpu-degraded-0-%s.json" % base["id"])) as f:
        run0 = json.load(f)
    assert run0["gpu_degraded"] == ["gpu0: clock event reasons: sw_thermal_slowdown, hw_thermal_slowdown",
                                    "gpu0: thermal violation 12.5 s during the run"]
    assert "no winner: the GPUs were degraded" in out and not os.path.exists(os.path.join(folder, "winner.yml"))
    assert checksums(host, SERVED + [DROP_IN]) == before
    assert ssh(host, "systemctl is-active sglang.service") == "active"


@pytest.mark.long
def test_interrupted_campaign_resumes_without_rerunning_finished_candidates(host):
    before = served(host)
    proc = subprocess.Popen(_cmd(host, "tune.yml", {"campaign": CAMPAIGN}), cwd=ROOT, env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    deadline = time.time() + 900
    while time.time() < deadline and proc.poll() is None:
        rows = [e for e in events(host) if e["event"] == "row"]
        if any(r["index"] == 1 for r in rows):
            break
        time.sleep(0.5)
    assert proc.poll() is None, proc.stdout.read()[-3000:]
    os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C
    proc.communicate(timeout=120)
    first = events(host)
    finished = set(e["index"] for e in first if e["event"] == "row")
    assert {0, 1, 2} <= finished  # base, the 512-block candidate, the rejected one
    n = len(first)

    rc, out, _counts = playbook(host, "tune.yml", {"campaign": CAMPAIGN})
    assert rc == 0, out[-4000:]
    second = events(host)[n:]
    started_again = sorted(e["index"] for e in second if e["event"] == "start")
    assert not set(started_again) & finished, (started_again, finished)
    assert set(started_again) <= {3, 4}
    rows = dict((e["index"], e) for e in events(host) if e["event"] == "row")
    assert sorted(rows) == [0, 1, 2, 3, 4]
    host["resume"] = {"finished_before": sorted(finished), "started_again": started_again}
    print("resume: finished before the interruption %s; started by the resumed run %s" % (sorted(finished), started_again))
    # The campaign ended on last-known-good, checked by the playbook against its own "before" (taken after the base
    # deploy). Against the state before the interrupted run: the unit and environment files are the same bytes;
    # meta.json and the start-timeout drop-in carry the load time the base deploy measured when it put the base
    # back after the interruption (the host was serving candidate 1 when it was interrupted).
    assert re.search(r"Verify \| byte-identical to before the campaign\] \**\s*ok:", out), out[-3000:]
    same = [0, 1, 3, 4]
    assert [served(host).split("\n")[i] for i in same] == [before.split("\n")[i] for i in same]


@pytest.mark.long
def test_results_table_and_plot(host):
    folder = os.path.join(host["state"], "sandbox-cpu")
    with open(os.path.join(folder, "results.json")) as f:
        res = json.load(f)
    status = dict((r["index"], r["status"]) for r in res["rows"])
    # serialized requests at c=8: p99 TTFT ~9 s at load 12-16, over the campaign's 10 s SLO at load 13-15 (measured
    # 2026-12-01): both are "serves but loses", the SLO row says which limit it broke
    assert status.get(3) in ("ok", "slo_violation"), status
    assert dict((i, st) for i, st in status.items() if i != 3) == {0: "ok", 1: "ok", 2: "rejected", 4: "startup_failed"}, status
    serial = [r for r in res["rows"] if r["index"] == 3][0]
    if serial["status"] == "ok":
        assert res["decision"]["judgements"][serial["id"]]["verdict"] in ("loses", "regresses")
    else:
        assert serial["status"] == "slo_violation" and "ttft_ms.p99" in serial["message"], serial
    with open(os.path.join(folder, "results.md")) as f:
        md = f.read()
    print(md)
    assert "| c=8 tok/s |" in md and "Decision:" in md
    assert open(os.path.join(folder, "pareto.png"), "rb").read(4) == b"\x89PNG"
    assert os.path.getsize(os.path.join(folder, "results.csv")) > 100


@pytest.mark.long
def test_adoption_the_winner_becomes_last_known_good_and_deploy_is_unchanged(host, tmp_path):
    """A base that is honestly worse (a batch cap of 16 tokens per step: a 32-token prompt takes two steps and eight
    streams share 16 tokens a step) against the inventory's 2048: the candidate wins by more than the noise on output
    throughput and TTFT p99, is adopted through the serving role, and deploy.yml with the snippet is changed=0. TPOT
    p50 is no gate metric here: eight streams decoding in one batch take longer per token than the base's trickle
    (measured worse by 89.8% and 227.4%, 2026-12-05, which made the default gates refuse the winner)."""
    with open(os.path.join(ROOT, "inventories", "sandbox", "group_vars", "sglang_servers.yml")) as fh:
        inventory_options = yaml.safe_load(fh)["sglang_options"]
    slow = dict(inventory_options, **{"cb-max-batch-tokens": 16})
    # the base comes from the inventory (an extra var would override every candidate): a second inventory source
    # gives the host the slow options; tune.yml deploys that base first, through the gate
    base_inv = tmp_path / "slow.yml"
    base_inv.write_text(yaml.safe_dump({"all": {"hosts": {NAME: {"sglang_options": slow}}}}))
    campaign = tmp_path / "adopt.yml"
    with open(CI_CAMPAIGN) as f:
        doc = yaml.safe_load(f)
    doc.update(name="sandbox-cpu-adopt", space={"cb-max-batch-tokens": [inventory_options["cb-max-batch-tokens"]]},
               max_candidates=1)
    # -e tune_adopt=true adopts
    doc["adopt"] = {"enabled": False, "min_improvement": 0.1, "gate_metrics": ["output_throughput", "ttft_ms.p99"]}
    campaign.write_text(yaml.safe_dump(doc))
    t0 = time.time()
    rc, out, _c = playbook(host, "tune.yml", {"campaign": str(campaign), "tune_adopt": True}, inventories=[str(base_inv)])
    took = time.time() - t0
    assert rc == 0, out[-4000:]
    folder = os.path.join(host["state"], "sandbox-cpu-adopt")
    with open(os.path.join(folder, "results.md")) as f:
        print(f.read())
    assert "Adopted" in out, out[-3000:]
    with open(os.path.join(folder, "results.json")) as f:
        res = json.load(f)
    rows = dict((r["index"], r) for r in res["rows"])
    judgement = res["decision"]["judgements"][rows[1]["id"]]
    assert res["decision"]["winner"] == rows[1]["id"] and judgement["verdict"] == "beats", res["decision"]
    assert judgement["improvement"] > max(0.1, judgement["noise"]) and not judgement["regressions"], judgement
    assert [e["index"] for e in events(host, "sandbox-cpu-adopt") if e["event"] == "adopt"] == [1]
    with open(os.path.join(folder, "winner.yml")) as f:
        adopted = yaml.safe_load(f)["sglang_options"]
    assert adopted == inventory_options
    meta = json.loads(ssh(host, "cat /etc/sglang/last-known-good/meta.json"))
    assert meta["argv"][meta["argv"].index("--cb-max-batch-tokens") + 1] == "2048", meta["argv"]
    t1 = time.time()
    rc, out, counts = playbook(host, "deploy.yml", {"sglang_options": adopted})
    print("adoption: campaign %.0f s (improvement %+.1f%%, noise %.1f%%), deploy.yml with the snippet %.0f s, recap %s" % (
        took, 100 * judgement["improvement"], 100 * judgement["noise"], time.time() - t1, counts))
    assert rc == 0 and counts.get("changed") == 0, out[-3000:]
