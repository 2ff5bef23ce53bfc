# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""tune_campaign in-process: plan -> begin -> record -> report over one state file, check mode writes nothing,
a bad campaign file fails naming the key; the tune filters."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

import pytest

from ansible_collections.gpuhost.sglang.plugins.filter.tune import tune_merge, tune_plan_line
from ansible_collections.gpuhost.sglang.plugins.modules import tune_campaign as mod
from ansible_collections.gpuhost.sglang.plugins.module_utils.tune.errors import CampaignError

CAMPAIGN = """
name: unit
space:
  cb-num-blocks: [512]
  device: [cuda]
workload: {concurrency: [1], trials: 1}
objective: {concurrency: 1}
"""


def params(**kw):
    p = {"action": None, "campaign": None, "base_options": {"device": "cpu"}, "profile_options": {}, "state_dir": None,
         "plan": None, "index": None, "stage": None, "failure": None, "levels": None, "parser": None, "note": "",
         "duration_s": 0.0, "plots": False, "gpu_health": None, "gpu_health_after": None}
    p.update(kw)
    return p


def level(tput):
    return {"failed": False, "failure_class": "", "results": [
        {"concurrency": 1, "output_throughput": tput, "ttft_ms": {"p99": 10.0}, "tpot_ms": {"p50": 1.0}}]}


def test_plan_begin_record_report(tmp_path):
    path = tmp_path / "c.yml"
    path.write_text(CAMPAIGN)
    sd = str(tmp_path / "state")
    dry = mod.run(params(action="plan", campaign=str(path), state_dir=sd), check_mode=True)
    assert not os.path.exists(dry["state_file"])  # check mode: nothing written
    out = mod.run(params(action="plan", campaign=str(path), state_dir=sd), check_mode=False)
    plan = out["plan"]
    assert [c["name"] for c in plan["candidates"]] == ["base", "cb-num-blocks=512", 'device="cuda"'] and out["done"] == []
    for i, stage, extra in [(0, "benched", {"levels": [level(100.0)]}), (1, "benched", {"levels": [level(99.0)]}),
                            (2, "gate_failed", {"failure": {"class": "startup_failure", "message": "no CUDA"}})]:
        assert mod.run(params(action="begin", state_dir=sd, plan=plan, index=i), False)["decision"] == "run"
        row = mod.run(params(action="record", state_dir=sd, plan=plan, index=i, stage=stage, **extra), False)["row"]
    assert row["status"] == "startup_failed"
    again = mod.run(params(action="record", state_dir=sd, plan=plan, index=2, stage="benched", levels=[]), False)
    assert again["changed"] is False and again["row"]["status"] == "startup_failed"  # a row is never replaced
    resumed = mod.run(params(action="plan", campaign=str(path), state_dir=sd), False)
    assert sorted(d["index"] for d in resumed["done"]) == [0, 1, 2] and resumed["interrupted"] == []
    assert mod.run(params(action="begin", state_dir=sd, plan=plan, index=1), False)["decision"] == "done"
    rep = mod.run(params(action="report", state_dir=sd, plan=plan), False)
    assert rep["winner"] is None and rep["snippet"] == ""
    assert os.path.isfile(rep["files"]["markdown"]) and os.path.isfile(rep["files"]["csv"])
    assert any("startup_failed (startup_failure)" in line for line in rep["table"])


def test_bad_campaign_file_names_the_key(tmp_path):
    path = tmp_path / "c.yml"
    path.write_text(CAMPAIGN.replace("trials: 1", "trials: 0"))
    with pytest.raises(CampaignError) as err:
        mod.run(params(action="plan", campaign=str(path), state_dir=str(tmp_path)), False)
    assert err.value.key == "workload.trials"
    with pytest.raises(CampaignError) as err:
        mod.run(params(action="plan", campaign=str(tmp_path / "missing.yml"), state_dir=str(tmp_path)), False)
    assert err.value.key == "campaign"
    with pytest.raises(CampaignError) as err:
        mod.run(params(action="begin", state_dir=str(tmp_path)), False)
    assert err.value.key == "plan"


def test_filters():
    assert tune_merge({"a": 2}, {"a": 1, "b": 1}, {"port": 1}) == {"a": 2, "b": 1, "port": 1}
    assert tune_plan_line([{"index": 0, "name": ""}, {"engine": "transformers", "engine_version": "5.24.0"}]) == \
        "0 base: accepted by transformers 5.24.0"
