# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Crash memory: a failed candidate's class rules out the candidates the evidence already condemns.

A rule fires on a failed row of its ``class`` (the readiness classes of module_utils/serving/ready.py) and rules
out a pending candidate when
  - ``option`` / ``direction``: the candidate's value of that numeric option is at or above (or at or below)
    the failed row's value, and
  - ``same``: every listed option has the same value in both (absent = null), and
  - ``when``: the candidate's options match (option -> list of allowed values; null = absent), and
  - ``when_not``: none of the candidate's options has a listed value.
The answer names the row that ruled the candidate out. Rules are data: the campaign may replace the defaults.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

from ansible_collections.gpuhost.sglang.plugins.module_utils.tune.errors import CampaignError

ATTENTION_BACKENDS = ["attention-backend", "prefill-attention-backend", "decode-attention-backend",
                      "dsa-prefill-backend", "dsa-decode-backend"]

DEFAULT_RULES = [
    {"class": "out_of_memory", "option": "mem-fraction-static", "direction": "at_or_above",
     # the KV pool is mem-fraction-static of the GPU (SGLang docs advanced_features/hyperparameter_tuning.md:
     # "lower --mem-fraction-static on OOM"); more static memory cannot fit where less did not
     "evidence": "sglang docs advanced_features/hyperparameter_tuning.md"},
    {"class": "out_of_memory", "option": "max-running-requests", "direction": "at_or_above",
     "same": ["mem-fraction-static"],
     "evidence": "sglang docs advanced_features/hyperparameter_tuning.md (lower max-running-requests on OOM)"},
    {"class": "cuda_graph_capture", "same": ATTENTION_BACKENDS,
     # graphs on in the candidate: neither the deprecated switch nor 0.5.23's per-phase backends turn them off
     # (roles/sglang/vars/profiles.yml, no-cuda-graph fallbacks)
     "when_not": {"disable-cuda-graph": [True], "cuda-graph-backend-decode": ["disabled"]},
     # a capture failure is a property of the backend's kernels under graphs; unverified beyond the reference box
     "evidence": "unverified (the operators' SM120 capture failures, module_utils/serving/ready.py signature)"},
    {"class": "unsupported_arch", "same": ATTENTION_BACKENDS,
     "evidence": "unverified (no kernel image for the arch: the same backends fail the same way)"},
]

DIRECTIONS = ("at_or_above", "at_or_below")
RULE_KEYS = ("class", "option", "direction", "same", "when", "when_not", "evidence")


def load_rules(rules):
    """Validate rules (None = DEFAULT_RULES). Raises campaign.CampaignError-compatible ValueError naming the key."""
    if rules is None:
        return [dict(r) for r in DEFAULT_RULES]
    if not isinstance(rules, list):
        raise CampaignError("crash_rules", rules, "a list of {class, option, direction, same, when}")
    out = []
    for i, r in enumerate(rules):
        key = "crash_rules[%d]" % i
        if not isinstance(r, dict) or not isinstance(r.get("class"), str) or not r["class"]:
            raise CampaignError(key + ".class", r.get("class") if isinstance(r, dict) else r, "a failure class, e.g. out_of_memory")
        for k in r:
            if k not in RULE_KEYS:
                raise CampaignError("%s.%s" % (key, k), r[k], "unknown key; allowed: %s" % ", ".join(RULE_KEYS))
        if "option" in r and r.get("direction") not in DIRECTIONS:
            raise CampaignError(key + ".direction", r.get("direction"), "one of %s" % ", ".join(DIRECTIONS))
        if not isinstance(r.get("same", []), list):
            raise CampaignError(key + ".same", r["same"], "a list of option names")
        if not isinstance(r.get("when", {}), dict) or any(not isinstance(v, list) for v in r.get("when", {}).values()):
            raise CampaignError(key + ".when", r.get("when"), "a mapping of option -> list of values")
        if not isinstance(r.get("when_not", {}), dict) or any(not isinstance(v, list) for v in r.get("when_not", {}).values()):
            raise CampaignError(key + ".when_not", r.get("when_not"), "a mapping of option -> list of values")
        if "option" not in r and not r.get("same") and not r.get("when") and not r.get("when_not"):
            raise CampaignError(key, r, "needs option+direction, same or when (otherwise it would rule out everything)")
        out.append(dict(r))
    return out


def _number(v):
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v)


def _rule_matches(rule, failed, cand):
    if "option" in rule:
        fv, cv = _number(failed.get(rule["option"])), _number(cand.get(rule["option"]))
        if fv is None or cv is None:
            return False
        if rule["direction"] == "at_or_above" and cv < fv:
            return False
        if rule["direction"] == "at_or_below" and cv > fv:
            return False
    for opt in rule.get("same", []):
        if failed.get(opt) != cand.get(opt):
            return False
    for opt, allowed in rule.get("when", {}).items():
        if cand.get(opt) not in allowed:
            return False
    for opt, refused in rule.get("when_not", {}).items():
        if cand.get(opt) in refused:
            return False
    return True


def ruled_out(candidate, rows, rules):
    """The first failed row (and rule) that rules ``candidate`` out, or None.

    rows: result rows with ``status``/``class``, ``id`` and ``options``."""
    for row in rows:
        # the candidate's own row of this campaign; an earlier campaign's row of the same options does count
        if (row.get("id") == candidate["id"] and not row.get("campaign")) or row.get("status") in ("ok", "rejected", "ruled_out", "slo_violation", "loses"):
            continue
        for rule in rules:
            if rule["class"] != row.get("class"):
                continue
            if _rule_matches(rule, row.get("options") or {}, candidate["options"]):
                why = "after %s of candidate %s (%s)%s" % (row["class"], row.get("index"), row.get("name"),
                                                           (" of campaign %s" % row["campaign"]) if row.get("campaign") else "")
                if "option" in rule:
                    why += ": %s %s %s" % (rule["option"], "at or above" if rule["direction"] == "at_or_above" else "at or below",
                                           json.dumps(row["options"].get(rule["option"])))
                if rule.get("same"):
                    same = [o for o in rule["same"] if row["options"].get(o) is not None]
                    if same:
                        why += "; same %s" % ", ".join("%s=%s" % (o, json.dumps(row["options"][o])) for o in same)
                return {"row": row.get("id"), "index": row.get("index"), "class": row["class"], "rule": rule, "reason": why,
                        "campaign": row.get("campaign")}
    return None
