# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Result rows from what the playbook observed, SLO checks, and the decision.

The winner must (1) be ``ok`` (served, passed the coherence canary and every bench level's gate, met the SLOs),
(2) beat the base on the objective by more than max(adopt.min_improvement, measured noise), the noise being the
larger relative trial spread of the two (bench/metrics.aggregate_trials, the serving_bench gate's definition), and
(3) regress no adopt.gate_metrics on any level by more than max(adopt.max_regression, noise) (bench/store.compare,
the same rule as the serving_bench regression gate), and (4) pass the accuracy gate when the campaign enables it
(bench/accuracy.py): a benched candidate that fails it gets status ``inaccurate`` (its throughput stays in the row,
for the table and the plot) and is never the winner.

GPU health (gpu_facts' readings before and after each candidate's ladder, bench/gpu_health.py): a row carries its
comparable state; a candidate whose GPUs were degraded before its ladder or degraded during it is
``gpu_degraded`` (measured on wrong hardware: it runs again when the campaign resumes); a campaign with such a row
has no winner, so nothing it measured becomes the deployed configuration; a verdict between the base and a
candidate measured in another health state is ``refused`` with both states.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpuhost.sglang.plugins.module_utils.bench import gpu_health as bench_health
from ansible_collections.gpuhost.sglang.plugins.module_utils.bench import store as bench_store

# serving_bench failure classes that mean "the output is wrong", not "the server is slow or down"
INCOHERENT_CLASSES = ("incoherent", "nan", "empty", "no_answer", "replacement_chars", "control_chars", "script_soup",
                      "repetition", "wrong_answer")
SUMMARY_METRICS = ("output_throughput", "total_throughput", "ttft_ms.p50", "ttft_ms.p99", "tpot_ms.p50", "itl_ms.p99",
                   "e2e_ms.p99")


def _metric(level, name):
    agg = ((level.get("trials") or {}).get("metrics") or {}).get(name)
    if agg and agg.get("median") is not None:
        return agg["median"], agg.get("spread") or 0.0
    if "." in name:
        head, tail = name.split(".", 1)
        v = (level.get(head) or {}).get(tail)
    else:
        v = level.get(name)
    return v, 0.0


def summarize_level(level):
    out = {"concurrency": level.get("concurrency"), "client_bound": bool(level.get("client_bound")),
           "completed": level.get("completed"), "errors": level.get("errors") or {}}
    for name in SUMMARY_METRICS:
        v, spread = _metric(level, name)
        out[name] = v
        out[name + ".spread"] = spread
    out["agg"] = (level.get("trials") or {}).get("metrics") or {}
    return out


def slo_failures(level, slo):
    return ["%s %.1f ms > %.1f ms at c=%s" % (k, level[k], lim, level["concurrency"])
            for k, lim in sorted(slo.items()) if level.get(k) is not None and level[k] > lim]


def objective_value(levels, objective):
    """(value, spread, concurrency) of the objective over the summarized levels; value None when not met."""
    if objective["metric"] == "goodput":
        best = (None, 0.0, None)
        for lv in levels:
            if not slo_failures(lv, objective["slo"]) and lv.get("output_throughput") is not None:
                if best[0] is None or lv["output_throughput"] > best[0]:
                    best = (lv["output_throughput"], lv.get("output_throughput.spread") or 0.0, lv["concurrency"])
        return best
    for lv in levels:
        if lv["concurrency"] == objective["concurrency"]:
            return lv.get(objective["metric"]), lv.get(objective["metric"] + ".spread") or 0.0, lv["concurrency"]
    return None, 0.0, objective["concurrency"]


def accuracy_summary(acc):
    """The accuracy gate's result (serving_accuracy's compact form) as the row keeps it, or None when not run."""
    if not acc or acc.get("skipped"):
        return None
    if "measured" in acc:  # the base: last-known-good's own measurement, the reference of the others
        return {"lkg": True, "checks": acc.get("checks") or [], "measured": acc["measured"],
                "requests": (acc["measured"] or {}).get("requests"), "seconds": (acc["measured"] or {}).get("seconds")}
    return dict((k, acc.get(k)) for k in ("passed", "class", "message", "checks", "requests", "seconds"))


def health_of(before, after):
    """(state, degraded) of one ladder from gpu_facts' health readings taken before and after it: the comparable
    state recorded beside the row (None without a reading) and what was wrong before the ladder or got worse during
    it (empty when nothing was, or when the reading before was unknown: a host without NVML has nothing to judge)."""
    if not before:
        return None, []
    st = bench_health.state(before)
    if st["state"] == "unknown":
        return st, []
    wrong = ["before the ladder: " + p for p in before.get("problems") or []]
    return st, wrong + ["during the ladder: " + r for r in bench_health.degradation(before, after)]


def health_refusal(base_state, state):
    """Why a verdict between the base's row and a candidate's is refused (the candidate's GPUs were degraded, or
    the two were measured in different GPU health states), or None. Two rows that both could not read NVML are
    compared as rows without health are (bench/gpu_health.refusal)."""
    if base_state is not None and base_state == state and state.get("state") == "unknown":
        return None
    return bench_health.refusal(base_state, state)


def row_from(candidate, stage, objective, failure=None, levels=None, parser=None, message="", gpu_health=None,
             gpu_health_after=None, accuracy=None):
    """A result row. stage: rejected | gate_failed | benched | error. ``gpu_health`` and ``gpu_health_after``:
    gpu_facts' health read before and after a benched candidate's ladder. ``accuracy``: the accuracy gate's result of a
    benched candidate (serving_accuracy action=gate, or action=measure for the base)."""
    row = {"id": candidate["id"], "index": candidate["index"], "name": candidate["name"], "options": candidate["options"],
           "delta": candidate["delta"], "class": None, "message": message, "levels": [], "evidence": {},
           "accuracy": accuracy_summary(accuracy) if stage == "benched" else None}
    if stage == "rejected":
        row.update(status="rejected", **{"class": "bad_arguments"})
        row["evidence"] = {"parser_errors": (parser or {}).get("errors") or [], "suggested_argv": (parser or {}).get("suggested_argv")}
        row["message"] = message or "; ".join(
            str(e.get("text") or e.get("message") or e) if isinstance(e, dict) else str(e)
            for e in row["evidence"]["parser_errors"])[:600]
    elif stage == "gate_failed":
        failure = failure or {}
        cls = failure.get("class") or "startup_failure"
        row["class"] = cls
        row["status"] = "incoherent" if cls in INCOHERENT_CLASSES else "startup_failed"
        row["message"] = str(failure.get("message") or message)[:600]
        row["evidence"] = {"journal_tail": (failure.get("journal_tail") or [])[-20:]}
    elif stage == "benched":
        results = levels or []
        failed = [r for r in results if r.get("failed")]
        row["levels"] = [summarize_level((r.get("results") or [{}])[0]) for r in results if r.get("results")]
        if failed:
            cls = failed[0].get("failure_class") or "bench_failed"
            row["class"] = cls
            row["status"] = "incoherent" if cls in INCOHERENT_CLASSES else "bench_failed"
            row["message"] = str(failed[0].get("msg") or "")[:600]
        else:
            bad = [m for lv in row["levels"] for m in slo_failures(lv, objective["slo"])]
            value, _spread, _conc = objective_value(row["levels"], objective)
            if objective["metric"] == "goodput" and value is None:
                row.update(status="slo_violation", message="no level within the SLOs: " + "; ".join(bad))
            elif objective["metric"] != "goodput" and bad and any(
                    "c=%s" % objective["concurrency"] in m for m in bad):
                row.update(status="slo_violation", message="; ".join(bad))
            else:
                row["status"] = "ok"
                row["message"] = message
        row["class"] = row["class"] or ("slo_violation" if row["status"] == "slo_violation" else None)
        acc = row["accuracy"]
        if row["status"] == "ok" and acc is not None and acc.get("passed") is False:
            row.update(status="inaccurate", message=str(acc.get("message") or "")[:600],
                       **{"class": acc.get("class") or "accuracy_drop"})
        row["gpu_health"], row["gpu_degraded"] = health_of(gpu_health, gpu_health_after)
        if row["gpu_degraded"]:
            row.update(status="gpu_degraded", message=("GPUs degraded (%s); measured on wrong hardware, it runs again "
                                                       "when the campaign resumes" % "; ".join(row["gpu_degraded"]))[:600],
                       **{"class": "gpu_degraded"})
    else:
        row.update(status="error", message=str(message)[:600], **{"class": "error"})
    return row


def _levels_by_conc(row):
    return dict((lv["concurrency"], lv) for lv in row.get("levels") or [])


def judge(row, base, objective, adopt):
    """How ``row`` compares with the base row: dict(verdict, improvement, threshold, noise, regressions); verdict
    ``refused`` (with the reason) across GPU health states."""
    value, spread, conc = objective_value(row["levels"], objective)
    refused = health_refusal(base.get("gpu_health"), row.get("gpu_health"))
    if refused:
        return {"verdict": "refused", "improvement": None, "value": value, "concurrency": conc,
                "reason": "verdict refused: " + refused}
    bvalue, bspread, _bconc = objective_value(base["levels"], objective)
    if value is None or not bvalue:
        return {"verdict": "no_value", "improvement": None, "value": value, "base_value": bvalue, "concurrency": conc}
    improvement = (value - bvalue) / abs(bvalue)
    noise = max(spread, bspread)
    threshold = max(adopt["min_improvement"], noise)
    regressions = []
    base_levels = _levels_by_conc(base)
    for lv in row["levels"]:
        blv = base_levels.get(lv["concurrency"])
        if not blv or not lv.get("agg") or not blv.get("agg"):
            continue
        for chk in bench_store.compare(lv["agg"], {"metrics": blv["agg"]}, adopt["gate_metrics"], adopt["max_regression"]):
            if not chk["passed"]:
                regressions.append("c=%s %s worse by %.1f%% (threshold %.1f%%)" % (
                    lv["concurrency"], chk["metric"], chk["delta_pct"], 100 * chk["threshold"]))
    if regressions:
        verdict = "regresses"
    elif improvement > threshold:
        verdict = "beats"
    else:
        verdict = "loses"
    return {"verdict": verdict, "improvement": round(improvement, 4), "threshold": round(threshold, 4),
            "noise": round(noise, 4), "value": value, "base_value": bvalue, "concurrency": conc, "regressions": regressions}


def decide(candidates, rows, objective, adopt):
    """The decision over every candidate: {winner (row or None), base_ok, reason, judgements {id: judge}}."""
    base = rows.get(candidates[0]["id"])
    degraded = [rows[c["id"]] for c in candidates if rows.get(c["id"], {}).get("status") == "gpu_degraded"]
    if degraded:
        which = ", ".join(str(r["index"]) for r in degraded)
        return {"winner": None, "base_ok": bool(base and base.get("status") == "ok"), "judgements": {},
                "gpu_degraded": dict((r["id"], r["gpu_degraded"]) for r in degraded),
                "reason": "no winner: the GPUs were degraded while candidate(s) %s ran (%s); a campaign measured on "
                          "degraded GPUs never becomes the deployed configuration: fix the GPUs and resume it (those "
                          "candidates run again)" % (which, "; ".join(degraded[0]["gpu_degraded"]))}
    if not base or base.get("status") != "ok":
        return {"winner": None, "base_ok": False, "judgements": {},
                "reason": "the base (last-known-good) did not pass: %s" % ((base or {}).get("status") or "not measured")}
    judgements = {}
    best = None
    for cand in candidates[1:]:
        row = rows.get(cand["id"])
        if not row or row.get("status") != "ok":
            continue
        j = judge(row, base, objective, adopt)
        judgements[cand["id"]] = j
        if j["verdict"] == "beats" and (best is None or j["improvement"] > judgements[best["id"]]["improvement"]):
            best = row
    if best is None:
        reason = "no candidate beat the base by more than max(min_improvement %.1f%%, measured noise) and passed every gate" % (
            100 * adopt["min_improvement"])
    else:
        j = judgements[best["id"]]
        reason = "candidate %s (%s) beats the base by %+.1f%% at c=%s (threshold %.1f%%, noise %.1f%%)" % (
            best["index"], best["name"], 100 * j["improvement"], j["concurrency"], 100 * j["threshold"], 100 * j["noise"])
    return {"winner": best, "base_ok": True, "judgements": judgements, "reason": reason}
