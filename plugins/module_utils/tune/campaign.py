# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A tuning campaign: validation of the YAML document and expansion of its search space into candidates.

Strategies (public anchors: sgl-project/sglang python/sglang/auto_benchmark_lib.py, PR #21736; vllm-project/vllm
benchmarks/auto_tune/auto_tune.sh and vllm/benchmarks/sweep/serve.py):
  one_at_a_time  each value of each option on top of the base (sglang.auto_benchmark's tier 1 without its cap)
  grid           the Cartesian product of every option's values (vLLM auto_tune.sh / `vllm bench sweep`)
  tiers          sglang.auto_benchmark (PR #21736, python/sglang/auto_benchmark_lib.py): tier 1 = the first 6
                 options one at a time, tier 2 = every combination of the first 3, tier 3 = every combination;
                 candidates are taken tier by tier until max_candidates (its default is 8)
The base (the host's current sglang_options) is always candidate 0: every candidate is compared with it,
measured by the same ladder in the same campaign.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import itertools
import json

from ansible_collections.gpuhost.sglang.plugins.module_utils.bench import accuracy as bench_accuracy
from ansible_collections.gpuhost.sglang.plugins.module_utils.bench.metrics import GATE_METRICS
from ansible_collections.gpuhost.sglang.plugins.module_utils.tune import memory
from ansible_collections.gpuhost.sglang.plugins.module_utils.tune.errors import CampaignError

STRATEGIES = ("one_at_a_time", "grid", "tiers")
# sglang auto_benchmark_lib.py: tier 1 covers the first 6 flags, tier 2 the first 3 (PR #21736)
TIER1_OPTIONS = 6
TIER2_OPTIONS = 3
APIS = ("completions", "chat")
OBJECTIVE_METRICS = ("output_throughput", "total_throughput", "goodput")
LATENCY_METRICS = tuple(m for m in GATE_METRICS if "_ms." in m)
TOP_KEYS = ("name", "base", "space", "strategy", "max_candidates", "time_budget_s", "workload", "objective", "adopt",
            "crash_rules", "description", "accuracy")
ACCURACY_KEYS = ("enabled", "checks", "alpha", "margin", "greedy_margin", "greedy_metric", "limit", "greedy_prompts",
                 "concurrency", "api")


def _int(doc, key, path, default, low=1):
    val = doc.get(key, default)
    if isinstance(val, bool) or not isinstance(val, int) or val < low:
        raise CampaignError(path, val, "an int >= %d" % low)
    return val


def _num(val, path, low=0.0):
    if isinstance(val, bool) or not isinstance(val, (int, float)) or val < low:
        raise CampaignError(path, val, "a number >= %s" % low)
    return float(val)


def option_key(name, path):
    if not isinstance(name, str) or not name.strip("-") or " " in name:
        raise CampaignError(path, name, "a long option name such as mem-fraction-static")
    return name.strip().lstrip("-")


def _workload(doc):
    if not isinstance(doc, dict):
        raise CampaignError("workload", doc, "a mapping with concurrency (list of ints), input_len, output_len, trials")
    for k in doc:
        if k not in ("concurrency", "input_len", "output_len", "trials", "num_prompts", "api", "warmup"):
            raise CampaignError("workload.%s" % k, doc[k], "unknown key; allowed: concurrency, input_len, output_len, "
                                "trials, num_prompts, api, warmup")
    conc = doc.get("concurrency")
    if not isinstance(conc, list) or not conc or any(isinstance(c, bool) or not isinstance(c, int) or c < 1 for c in conc):
        raise CampaignError("workload.concurrency", conc, "a non-empty list of ints >= 1, e.g. [1, 16, 64]")
    api = doc.get("api", "completions")
    if api not in APIS:
        raise CampaignError("workload.api", api, "one of %s" % ", ".join(APIS))
    out = {"concurrency": sorted(set(conc)), "input_len": _int(doc, "input_len", "workload.input_len", 128),
           "output_len": _int(doc, "output_len", "workload.output_len", 64),
           "trials": _int(doc, "trials", "workload.trials", 2), "api": api,
           "warmup": _int(doc, "warmup", "workload.warmup", 2, low=0)}
    if doc.get("num_prompts") is not None:
        out["num_prompts"] = _int(doc, "num_prompts", "workload.num_prompts", None)
    return out


def _objective(doc, workload):
    if not isinstance(doc, dict):
        raise CampaignError("objective", doc, "a mapping: {metric: output_throughput|total_throughput|goodput, concurrency, slo}")
    for k in doc:
        if k not in ("metric", "concurrency", "slo"):
            raise CampaignError("objective.%s" % k, doc[k], "unknown key; allowed: metric, concurrency, slo")
    metric = doc.get("metric", "output_throughput")
    if metric not in OBJECTIVE_METRICS:
        raise CampaignError("objective.metric", metric, "one of %s" % ", ".join(OBJECTIVE_METRICS))
    slo = doc.get("slo") or {}
    if not isinstance(slo, dict):
        raise CampaignError("objective.slo", slo, "a mapping of latency metric -> limit in ms, e.g. {ttft_ms.p99: 500}")
    for k, v in slo.items():
        if k not in LATENCY_METRICS:
            raise CampaignError("objective.slo.%s" % k, v, "unknown metric; allowed: %s" % ", ".join(LATENCY_METRICS))
        _num(v, "objective.slo.%s" % k, low=0.001)
    if metric == "goodput":
        if not slo:
            raise CampaignError("objective.slo", slo, "goodput needs at least one SLO, e.g. {ttft_ms.p99: 500}")
        conc = None
        if doc.get("concurrency") is not None:
            raise CampaignError("objective.concurrency", doc["concurrency"], "not used with goodput (the best level within the SLOs counts)")
    else:
        conc = doc.get("concurrency", workload["concurrency"][-1])
        if conc not in workload["concurrency"]:
            raise CampaignError("objective.concurrency", conc, "one of workload.concurrency %s" % workload["concurrency"])
    return {"metric": metric, "concurrency": conc, "slo": dict((k, float(v)) for k, v in slo.items())}


def _adopt(doc):
    doc = {} if doc is None else doc
    if not isinstance(doc, dict):
        raise CampaignError("adopt", doc, "a mapping: {enabled: bool, min_improvement: 0.02, max_regression: 0.1}")
    for k in doc:
        if k not in ("enabled", "min_improvement", "max_regression", "gate_metrics"):
            raise CampaignError("adopt.%s" % k, doc[k], "unknown key; allowed: enabled, min_improvement, max_regression, gate_metrics")
    if not isinstance(doc.get("enabled", False), bool):
        raise CampaignError("adopt.enabled", doc["enabled"], "true or false")
    gate = doc.get("gate_metrics", ["output_throughput", "ttft_ms.p99", "tpot_ms.p50"])
    if not isinstance(gate, list) or any(m not in GATE_METRICS for m in gate):
        raise CampaignError("adopt.gate_metrics", gate, "a list of: %s" % ", ".join(GATE_METRICS))
    return {"enabled": doc.get("enabled", False),
            "min_improvement": _num(doc.get("min_improvement", 0.02), "adopt.min_improvement"),
            "max_regression": _num(doc.get("max_regression", 0.1), "adopt.max_regression"),
            "gate_metrics": gate}


def _accuracy(doc):
    """The accuracy gate's settings (bench/accuracy.py): off unless enabled."""
    doc = {} if doc is None else doc
    if not isinstance(doc, dict):
        raise CampaignError("accuracy", doc, "a mapping: {enabled: true, checks: auto, alpha: 0.05, margin: 0.0}")
    for k in doc:
        if k not in ACCURACY_KEYS:
            raise CampaignError("accuracy.%s" % k, doc[k], "unknown key; allowed: %s" % ", ".join(ACCURACY_KEYS))
    if not isinstance(doc.get("enabled", False), bool):
        raise CampaignError("accuracy.enabled", doc["enabled"], "true or false")
    checks = doc.get("checks", "auto")
    if checks != "auto" and (not isinstance(checks, list) or any(c not in bench_accuracy.CHECKS for c in checks)):
        raise CampaignError("accuracy.checks", checks, "auto (from the options each candidate changes) or a list of: %s"
                            % ", ".join(bench_accuracy.CHECKS))
    metric = doc.get("greedy_metric", "identical")
    if metric not in bench_accuracy.GREEDY_METRICS:
        raise CampaignError("accuracy.greedy_metric", metric, "one of %s" % ", ".join(bench_accuracy.GREEDY_METRICS))
    api = doc.get("api", "completions")
    if api not in APIS:
        raise CampaignError("accuracy.api", api, "one of %s (completions: the task prompts as they are, no chat template "
                            "and no reasoning before the answer)" % ", ".join(APIS))
    out = {"enabled": doc.get("enabled", False), "checks": checks, "greedy_metric": metric, "api": api,
           "alpha": _num(doc.get("alpha", bench_accuracy.DEFAULT_ALPHA), "accuracy.alpha", low=1e-9),
           "margin": _num(doc.get("margin", bench_accuracy.DEFAULT_MARGIN), "accuracy.margin"),
           "greedy_margin": _num(doc.get("greedy_margin", bench_accuracy.DEFAULT_GREEDY_MARGIN), "accuracy.greedy_margin"),
           "limit": _int(doc, "limit", "accuracy.limit", len(bench_accuracy.load_tasks())),
           "greedy_prompts": _int(doc, "greedy_prompts", "accuracy.greedy_prompts", bench_accuracy.GREEDY_PROMPTS),
           "concurrency": _int(doc, "concurrency", "accuracy.concurrency", 16)}
    if out["limit"] > len(bench_accuracy.load_tasks()):
        raise CampaignError("accuracy.limit", out["limit"], "an int from 1 to %d (the task set's size)"
                            % len(bench_accuracy.load_tasks()))
    for k in ("alpha", "margin", "greedy_margin"):
        if out[k] >= 1:
            raise CampaignError("accuracy.%s" % k, doc[k], "a number in [0, 1)")
    return out


def accuracy_checks(candidates, acc):
    """Each candidate's checks (the base has none: it is last-known-good), and the union the base must measure."""
    needed = []
    for cand in candidates:
        checks = [] if cand["index"] == 0 or not acc["enabled"] else (
            bench_accuracy.checks_for(cand["delta"]) if acc["checks"] == "auto" else list(acc["checks"]))
        cand["accuracy_checks"] = checks
        needed += [c for c in checks if c not in needed]
    return [c for c in bench_accuracy.CHECKS if c in needed]


def _scalar_ok(v):
    return v is None or isinstance(v, (bool, int, float, str))


def _space(doc):
    """[(key, [delta dict, ...])]: an option's values become {option: value}; a group (a name whose values are
    all mappings, e.g. an attention backend pair) contributes each mapping whole."""
    if not isinstance(doc, dict) or not doc:
        raise CampaignError("space", doc, "a non-empty mapping of option -> list of values, e.g. {mem-fraction-static: [0.85, 0.92]}")
    out = []
    for name, values in doc.items():
        if not isinstance(values, list) or not values:
            raise CampaignError("space.%s" % name, values, "a non-empty list of values (or of option mappings for a group)")
        if all(isinstance(v, dict) for v in values):
            deltas = []
            for i, v in enumerate(values):
                delta = {}
                for k, x in v.items():
                    if not (_scalar_ok(x) or (isinstance(x, list) and all(_scalar_ok(y) for y in x))):
                        raise CampaignError("space.%s[%d].%s" % (name, i, k), x, "a scalar or a list of scalars")
                    delta[option_key(k, "space.%s[%d].%s" % (name, i, k))] = x
                deltas.append(delta)
            key = "group:%s" % name
        else:
            key = option_key(name, "space.%s" % name)
            deltas = []
            for i, v in enumerate(values):
                if not (_scalar_ok(v) or (isinstance(v, list) and all(_scalar_ok(x) for x in v))):
                    raise CampaignError("space.%s[%d]" % (name, i), v,
                                        "a scalar (str, number, bool, null) or a list of scalars; a group lists only mappings")
                deltas.append({key: v})
        if any(k == key for k, _v in out):
            raise CampaignError("space.%s" % name, values, "the option appears twice (with and without leading --)")
        out.append((key, deltas))
    return out


def _merge(deltas):
    out = {}
    for d in deltas:
        out.update(d)
    return out


def canonical(obj):
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


def candidate_id(options):
    """Stable id of a full option set: resume matches by content, not by position."""
    return hashlib.sha256(canonical(options).encode()).hexdigest()[:10]


def _deltas(space, strategy):
    """Ordered (tier, option delta) pairs, before de-duplication."""
    def one_at_a_time(entries, tier):
        return [(tier, d) for _k, vals in entries for d in vals]

    def product(entries, tier):
        return [(tier, _merge(combo)) for combo in itertools.product(*[vals for _k, vals in entries])]

    if strategy == "one_at_a_time":
        return one_at_a_time(space, 1)
    if strategy == "grid":
        return product(space, 1)
    return one_at_a_time(space[:TIER1_OPTIONS], 1) + product(space[:TIER2_OPTIONS], 2) + product(space, 3)


def expand(space, strategy, base, max_candidates, profile=None):
    """Candidates in order: the base first, then the strategy's, de-duplicated by the effective option set
    (``profile`` options under the candidate's, as the serving role merges them).

    Returns (candidates, left_out): each candidate {id, index, name, tier, delta, options}; ``options`` is what
    goes into sglang_options; left_out counts the distinct candidates beyond max_candidates."""
    profile = profile or {}

    def effective(opts):
        out = dict(profile)
        out.update(opts)
        return out

    base_eff = effective(base)
    cands = [{"id": candidate_id(base_eff), "index": 0, "name": "base", "tier": 0, "delta": {}, "options": dict(base)}]
    seen = set([cands[0]["id"]])
    left_out = 0
    for tier, delta in _deltas(space, strategy):
        opts = dict(base)
        opts.update(delta)
        eff = effective(opts)
        delta = dict((k, v) for k, v in delta.items() if k not in base_eff or base_eff[k] != v)
        cid = candidate_id(eff)
        if cid in seen:
            continue
        seen.add(cid)
        if len(cands) - 1 >= max_candidates:
            left_out += 1
            continue
        name = ", ".join("%s=%s" % (k, json.dumps(v)) for k, v in sorted(delta.items()))
        cands.append({"id": cid, "index": len(cands), "name": name, "tier": tier, "delta": delta, "options": opts})
    return cands, left_out


def load(doc, base_options=None, profile_options=None):
    """Validate a campaign document and expand it. Raises CampaignError naming the one wrong key."""
    if not isinstance(doc, dict):
        raise CampaignError("campaign", doc, "a YAML mapping with name, space, strategy, workload, objective")
    for k in doc:
        if k not in TOP_KEYS:
            raise CampaignError(k, doc[k], "unknown key; allowed: %s" % ", ".join(TOP_KEYS))
    name = doc.get("name")
    if not isinstance(name, str) or not name or not all(c.isalnum() or c in "-_." for c in name):
        raise CampaignError("name", name, "a non-empty name of letters, digits, '-', '_' and '.' (it names the state directory)")
    base = doc.get("base", base_options)
    if base is None:
        base = {}
    if not isinstance(base, dict):
        raise CampaignError("base", base, "a mapping of options (default: the host's sglang_options)")
    base = dict((option_key(k, "base.%s" % k), v) for k, v in base.items())
    if "base" in doc and base_options is not None:
        host = dict((option_key(k, "sglang_options.%s" % k), v) for k, v in base_options.items())
        if host != base:
            raise CampaignError("base", doc["base"], "the host's sglang_options %s (the base is what the host serves; "
                                "leave base out or deploy it first)" % canonical(host))
    strategy = doc.get("strategy", "one_at_a_time")
    if strategy not in STRATEGIES:
        raise CampaignError("strategy", strategy, "one of %s" % ", ".join(STRATEGIES))
    space = _space(doc.get("space"))
    max_candidates = _int(doc, "max_candidates", "max_candidates", 8)
    budget = doc.get("time_budget_s")
    budget = None if budget is None else _num(budget, "time_budget_s", low=1)
    workload = _workload(doc.get("workload"))
    objective = _objective(doc.get("objective", {}), workload)
    adopt = _adopt(doc.get("adopt"))
    rules = memory.load_rules(doc.get("crash_rules"))
    cands, left_out = expand(space, strategy, base, max_candidates, profile_options)
    acc = _accuracy(doc.get("accuracy"))
    acc["lkg_checks"] = accuracy_checks(cands, acc)
    return {"accuracy": acc, "name": name, "description": doc.get("description", ""), "base": base, "strategy": strategy,
            "space": [[k, v] for k, v in space], "max_candidates": max_candidates, "time_budget_s": budget,
            "workload": workload, "objective": objective, "adopt": adopt, "crash_rules": rules,
            "candidates": cands, "left_out": left_out}
