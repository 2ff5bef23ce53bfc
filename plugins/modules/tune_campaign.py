#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: tune_campaign
short_description: State, crash memory and decision of a serving-flag tuning campaign (controller side)
version_added: "0.2.0"
description:
  - The bookkeeping of a tuning campaign. C(playbooks/tune.yml) calls it to plan; the campaign's loop
    (M(gpuhost.sglang.tune_step), C(plugins/plugin_utils/tune_loop.py)) calls the other actions. Runs on the
    controller (C(delegate_to=localhost)).
  - "O(action=plan): validates the campaign (a bad one fails naming the one wrong key, before anything starts) and
    expands its search space (strategies C(one_at_a_time), C(grid), C(tiers) as in sglang.auto_benchmark, capped
    by C(max_candidates)) into candidates, the base first; reports which already have a result (resume)."
  - "O(action=begin): what to do with one candidate: C(run), C(done) (a finished row exists: never run again),
    C(ruled_out) (crash memory: a failed row's class rules it out, this campaign's or an earlier campaign's in the
    same O(state_dir); the row is recorded with the row that ruled it out) or C(budget) (the campaign's C(time_budget_s) is spent)."
  - "O(action=record): appends the candidate's result row (status C(ok), C(rejected), C(startup_failed),
    C(incoherent), C(inaccurate), C(bench_failed), C(slo_violation), C(error), C(gpu_degraded)) with its evidence and
    GPU health to the append-only state."
  - "O(action=report): decides (the winner beats the base by more than max(min_improvement, measured noise) and
    regresses no gate metric) and writes C(results.md), C(results.csv), C(results.json), C(pareto.png) and
    C(winner.yml) (the winner's inventory snippet)."
  - "O(action=adopted): records that the winner was deployed as last-known-good."
author:
  - gpuhost.sglang contributors (@gpuhost)
requirements:
  - python >= 3.10
  - PyYAML (for a campaign given as a path)
  - matplotlib (optional, for the Pareto plot)
options:
  action:
    description: What to do.
    type: str
    choices: [plan, begin, record, report, adopted]
    required: true
  campaign:
    description: The campaign, a mapping or the path of a YAML file (O(action=plan)).
    type: raw
  base_options:
    description: The host's current C(sglang_options), the campaign's base unless it sets C(base).
    type: dict
    default: {}
  profile_options:
    description:
      - The serving role's profile options for this host (merged under the candidates' as the role does), so that a
        candidate equal to the base once merged is not run twice.
    type: dict
    default: {}
  state_dir:
    description: Controller directory of campaign state; the state file is C(<state_dir>/<name>/state.jsonl).
    type: path
    required: true
  plan:
    description: The RV(plan) returned by O(action=plan) (every other action).
    type: dict
  index:
    description: Candidate index in the plan's C(candidates) (O(action=begin), O(action=record), O(action=adopted)).
    type: int
  stage:
    description: How far the candidate got (O(action=record)).
    type: str
    choices: [rejected, gate_failed, benched, error]
  failure:
    description: The serving role's failure record of the candidate (class, message, journal_tail), for C(gate_failed).
    type: dict
  levels:
    description: The M(gpuhost.sglang.serving_bench) results of each ladder level, for C(benched).
    type: list
    elements: dict
  parser:
    description: The M(gpuhost.sglang.server_args) result, for C(rejected).
    type: dict
  gpu_health:
    description:
      - "For C(benched): GPU health read before the candidate's ladder (M(gpuhost.sglang.gpu_facts)' C(health)).
        The row carries its comparable state; a verdict between the base and a candidate measured in another
        health state is C(refused) with both states. A reading whose state is C(unknown) (no NVML) judges nothing."
    type: dict
  gpu_health_after:
    description:
      - "For C(benched): GPU health read after the ladder. When the GPUs were degraded before the ladder or got worse
        during it, the row is C(gpu_degraded) (the candidate runs again when the campaign resumes) and the campaign
        has no winner until it has none."
    type: dict
  accuracy:
    description:
      - The M(gpuhost.sglang.serving_accuracy) result of the candidate (C(action=gate)) or of the base
        (C(action=measure)), for C(benched). A candidate whose gate failed gets status C(inaccurate) and is never
        the winner; the table, CSV and plot show it beside the throughput.
    type: dict
  note:
    description: Free text kept with the row (the failed task's message).
    type: str
    default: ""
  duration_s:
    description: Seconds the candidate took.
    type: float
    default: 0
  plots:
    description: Write the Pareto plot (O(action=report)).
    type: bool
    default: true
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    description: Plans and reports without writing anything.
  diff_mode:
    support: none
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: Plan
  gpuhost.sglang.tune_campaign:
    action: plan
    campaign: campaigns/sandbox-cpu.yml
    base_options: "{{ sglang_options }}"
    state_dir: "{{ playbook_dir }}/../reports/tune"
  delegate_to: localhost
  register: tune_plan
"""

RETURN = r"""
plan:
  description: The validated campaign with its candidates (id, index, name, tier, delta, options).
  returned: action=plan
  type: dict
done:
  description: Candidates that already have a result row (index, name, status), from earlier runs.
  returned: action=plan
  type: list
  elements: dict
interrupted:
  description: Indexes of candidates that started and never got a row (they run again).
  returned: action=plan
  type: list
  elements: int
decision:
  description: C(run), C(done), C(ruled_out) or C(budget).
  returned: action=begin
  type: str
row:
  description: The result row recorded or found.
  returned: action=begin, record
  type: dict
table:
  description: Markdown table lines of every candidate.
  returned: action=report
  type: list
  elements: str
winner:
  description: The winning row, or null.
  returned: action=report
  type: dict
snippet:
  description: The winner's C(sglang_options) as a ready-to-paste inventory snippet (empty without a winner).
  returned: action=report
  type: str
reason:
  description: Why this winner, or why none.
  returned: action=report
  type: str
files:
  description: Report files written.
  returned: action=report
  type: dict
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuhost.sglang.plugins.module_utils.tune import campaign as tune_campaign
from ansible_collections.gpuhost.sglang.plugins.module_utils.tune import decide as tune_decide
from ansible_collections.gpuhost.sglang.plugins.module_utils.tune import report as tune_report
from ansible_collections.gpuhost.sglang.plugins.module_utils.tune.errors import CampaignError
from ansible_collections.gpuhost.sglang.plugins.module_utils.tune.state import CampaignState, earlier_failures, state_path

try:
    import yaml
except ImportError:  # pragma: no cover
    yaml = None

REQUIRED = {"begin": ("plan", "index"), "record": ("plan", "index", "stage"), "report": ("plan",), "adopted": ("plan", "index"),
            "plan": ("campaign",)}


def load_campaign(value):
    if isinstance(value, str):
        if yaml is None:
            raise CampaignError("campaign", value, "PyYAML is needed to read a campaign file")
        if not os.path.isfile(value):
            raise CampaignError("campaign", value, "the path of an existing YAML file")
        with open(value) as f:
            try:
                return yaml.safe_load(f)
            except yaml.YAMLError as e:
                raise CampaignError("campaign", value, "valid YAML (%s)" % str(e).splitlines()[0])
    return value


def run(p, check_mode):
    for key in REQUIRED[p["action"]]:
        if p.get(key) is None:
            raise CampaignError(key, None, "required with action=%s" % p["action"])
    if p["action"] == "plan":
        plan = tune_campaign.load(load_campaign(p["campaign"]), p["base_options"], p["profile_options"])
        st = CampaignState(state_path(p["state_dir"], plan["name"]))
        rows = st.rows()
        by_id = dict((c["id"], c) for c in plan["candidates"])
        if not check_mode:
            st.append("plan", candidates=[dict((k, c[k]) for k in ("id", "index", "name")) for c in plan["candidates"]])
        return {"changed": not check_mode, "plan": plan, "state_file": st.path,
                "done": [{"index": by_id[i]["index"], "name": by_id[i]["name"], "status": r["status"]}
                         for i, r in rows.items() if i in by_id],
                "interrupted": [by_id[i]["index"] for i in st.interrupted() if i in by_id]}
    plan = p["plan"]
    st = CampaignState(state_path(p["state_dir"], plan["name"]))
    if p["action"] == "report":
        rows = st.rows()
        decision = tune_decide.decide(plan["candidates"], rows, plan["objective"], plan["adopt"])
        if check_mode:
            return {"changed": False, "table": tune_report.markdown(plan, rows, decision), "winner": decision["winner"],
                    "reason": decision["reason"], "snippet": tune_report.snippet(decision["winner"]), "files": {}}
        out_dir = os.path.dirname(st.path)
        table, files, snip = tune_report.write_all(out_dir, plan, rows, decision, make_plot=p["plots"])
        return {"changed": True, "table": table, "winner": decision["winner"], "reason": decision["reason"],
                "snippet": snip, "files": files}
    if not 0 <= p["index"] < len(plan["candidates"]):
        raise CampaignError("index", p["index"], "0..%d" % (len(plan["candidates"]) - 1))
    cand = plan["candidates"][p["index"]]
    if check_mode:
        return {"changed": False, "decision": "run", "row": None}
    if p["action"] == "begin":
        res = st.begin(cand, plan["crash_rules"], plan["time_budget_s"],
                       earlier=earlier_failures(p["state_dir"], plan["name"]))
        return {"changed": True, "decision": res["action"], "row": res["row"], "rerun": res.get("rerun", False),
                "message": res.get("message") or (res["row"] or {}).get("message", "")}
    if p["action"] == "adopted":
        st.append("adopt", id=cand["id"], index=cand["index"], options=cand["options"])
        return {"changed": True}
    existing = st.final(cand["id"])
    if existing:
        return {"changed": False, "row": existing, "msg": "candidate %d already has a row (kept)" % cand["index"]}
    for name in ("gpu_health", "gpu_health_after"):
        if p.get(name) and p[name].get("state") not in ("ok", "degraded", "unknown"):
            raise CampaignError(name, p[name].get("state"), "gpu_facts' health result (its state ok, degraded or unknown)")
    row = tune_decide.row_from(cand, p["stage"], plan["objective"], failure=p["failure"], levels=p["levels"],
                               parser=p["parser"], message=p["note"], gpu_health=p.get("gpu_health"),
                               gpu_health_after=p.get("gpu_health_after"), accuracy=p.get("accuracy"))
    row["duration_s"] = round(p["duration_s"], 1)
    return {"changed": True, "row": st.append("row", **row)}


def main():
    module = AnsibleModule(
        argument_spec=dict(
            action=dict(type="str", required=True, choices=["plan", "begin", "record", "report", "adopted"]),
            campaign=dict(type="raw"),
            base_options=dict(type="dict", default={}),
            profile_options=dict(type="dict", default={}),
            state_dir=dict(type="path", required=True),
            plan=dict(type="dict"),
            index=dict(type="int"),
            stage=dict(type="str", choices=["rejected", "gate_failed", "benched", "error"]),
            failure=dict(type="dict"),
            levels=dict(type="list", elements="dict"),
            parser=dict(type="dict"),
            gpu_health=dict(type="dict"),
            gpu_health_after=dict(type="dict"),
            accuracy=dict(type="dict"),
            note=dict(type="str", default=""),
            duration_s=dict(type="float", default=0),
            plots=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    try:
        module.exit_json(**run(module.params, module.check_mode))
    except CampaignError as e:
        module.fail_json(msg=str(e), key=e.key)
    except (OSError, ValueError) as e:
        module.fail_json(msg="tune_campaign %s failed: %s" % (module.params["action"], e))


if __name__ == "__main__":
    main()
