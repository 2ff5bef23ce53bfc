# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Campaign outputs: Markdown table (the operators' layout: one column group per concurrency), CSV, JSON,
a Pareto plot (output tok/s per concurrency against p99 TTFT, like `vllm bench sweep`'s PARETO.png) and the
winner's options as an inventory snippet. Every file is written atomically (bench/store.atomic_write_text)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import csv
import io
import json
import os

from ansible_collections.gpuhost.sglang.plugins.module_utils.bench import gpu_health as bench_health
from ansible_collections.gpuhost.sglang.plugins.module_utils.bench import store as bench_store

CSV_FIELDS = ["index", "id", "name", "status", "class", "concurrency", "output_throughput", "output_throughput.spread",
              "total_throughput", "ttft_ms.p50", "ttft_ms.p99", "tpot_ms.p50", "itl_ms.p99", "e2e_ms.p99", "verdict",
              "improvement", "accuracy_check", "accuracy_value", "accuracy_reference", "accuracy_passed", "message"]


def _f(v, nd=1):
    if v is None:
        return "-"
    if isinstance(v, float):
        return ("%." + str(nd) + "f") % v
    return str(v)


def accuracy_fields(row):
    """(check, value, reference, passed) of the row's accuracy gate: the score (or greedy agreement) beside
    last-known-good's score (or agreement with itself); the base shows its own score. Empty strings when not run."""
    acc = row.get("accuracy")
    if not acc:
        return "", "", "", ""
    if acc.get("lkg"):
        m = acc.get("measured") or {}
        if "score" in m:
            return "score", m["score"].get("score"), "", "lkg"
        if "greedy" in m:
            return "greedy", "", "", "lkg"
        return "", "", "", "lkg"
    checks = acc.get("checks") or {}
    if "score" in checks:
        c = checks["score"]
        return "score", c.get("candidate_score"), c.get("lkg_score"), bool(c.get("passed"))
    if "greedy" in checks:
        c = checks["greedy"]
        return "greedy", c.get("value"), c.get("reference"), bool(c.get("passed"))
    return "", "", "", bool(acc.get("passed"))


def accuracy_cell(row):
    """The table's accuracy column: ``score 0.890/1.000 FAIL`` (candidate/last-known-good), ``greedy 1.000/1.000 ok``
    (agreement with last-known-good / its agreement with itself), ``lkg score 0.950`` for the base, ``-``."""
    check, value, ref, passed = accuracy_fields(row)
    if passed == "lkg":
        return ("lkg %s %s" % (check, _f(value, 3))).strip() if check else "lkg"
    if not check:
        return "-" if passed == "" else ("ok" if passed else "FAIL (%s)" % (row.get("accuracy") or {}).get("class"))
    return "%s %s/%s %s" % (check, _f(value, 3), _f(ref, 3), "ok" if passed else "FAIL")


def _note(row, judgement, decision):
    if decision.get("winner") and decision["winner"]["id"] == row["id"]:
        return "**winner** %+.1f%% (threshold %.1f%%)" % (100 * judgement["improvement"], 100 * judgement["threshold"])
    if row["status"] == "ruled_out":
        return "ruled out by candidate %s: %s" % (row.get("ruled_out_by_index"), row.get("message", ""))
    if judgement:
        if judgement["verdict"] == "refused":
            return judgement["reason"][:300].replace("|", "/")
        if judgement["verdict"] == "regresses":
            return "regresses: " + "; ".join(judgement["regressions"])
        if judgement.get("improvement") is not None:
            return "%s %+.1f%% (threshold %.1f%%)" % (judgement["verdict"], 100 * judgement["improvement"], 100 * judgement["threshold"])
    return (row.get("message") or "")[:160].replace("|", "/").replace("\n", " ")


def ordered_rows(candidates, rows):
    return [rows[c["id"]] for c in candidates if c["id"] in rows]


def markdown(plan, rows, decision):
    concs = plan["workload"]["concurrency"]
    acc_on = bool((plan.get("accuracy") or {}).get("enabled"))
    levels = "".join(" c=%d tok/s | c=%d TTFT p99 | c=%d TPOT p50 |" % (c, c, c) for c in concs)
    head = "| # | candidate | status |" + levels + (" accuracy |" if acc_on else "") + " note |"
    sep = "|" + "---|" * (4 + acc_on + 3 * len(concs))
    lines = ["# Campaign %s" % plan["name"], "",
             "Strategy %s, %d candidates (+ base), objective %s%s%s." % (
                 plan["strategy"], len(plan["candidates"]) - 1, plan["objective"]["metric"],
                 (" at c=%s" % plan["objective"]["concurrency"]) if plan["objective"]["concurrency"] else "",
                 (", SLO " + ", ".join("%s <= %s ms" % kv for kv in sorted(plan["objective"]["slo"].items())))
                 if plan["objective"]["slo"] else ""),
             "Workload: input %d, output %d tokens, %d trial(s) per level. Latency in ms." % (
                 plan["workload"]["input_len"], plan["workload"]["output_len"], plan["workload"]["trials"]), "",
             head, sep]
    for row in ordered_rows(plan["candidates"], rows):
        by = dict((lv["concurrency"], lv) for lv in row.get("levels") or [])
        cells = []
        for c in concs:
            lv = by.get(c, {})
            cells += [_f(lv.get("output_throughput")), _f(lv.get("ttft_ms.p99")), _f(lv.get("tpot_ms.p50"), 2)]
        status = row["status"] + ((" (%s)" % row["class"]) if row.get("class") and row["class"] != row["status"] else "")
        if acc_on:
            cells.append(accuracy_cell(row))
        lines.append("| %s | %s | %s | %s | %s |" % (
            row["index"], row["name"] or "base", status, " | ".join(cells),
            _note(row, decision["judgements"].get(row["id"]), decision)))
    health = health_lines(ordered_rows(plan["candidates"], rows))
    if health:
        lines += ["", "GPU health before each ladder:"] + health
    pending = [c for c in plan["candidates"] if c["id"] not in rows]
    if pending:
        lines += ["", "Not run (yet): " + ", ".join("%d %s" % (c["index"], c["name"]) for c in pending)]
    if plan.get("left_out"):
        lines += ["", "%d more candidates left out by max_candidates=%d." % (plan["left_out"], plan["max_candidates"])]
    if acc_on:
        lines += ["", _accuracy_line(plan["accuracy"])]
    lines += ["", "Decision: " + decision["reason"]]
    return lines


def health_lines(rows):
    """One line per GPU health state the benched rows were measured in, with the candidates measured in it."""
    seen = []
    for row in rows:
        if row.get("gpu_health") is None:
            continue
        text = bench_health.describe(row["gpu_health"])
        for entry in seen:
            if entry[0] == text:
                entry[1].append(str(row["index"]))
                break
        else:
            seen.append((text, [str(row["index"])]))
    return ["- %s: candidate(s) %s" % (text, ", ".join(idx)) for text, idx in seen]


def _accuracy_line(acc):
    return ("Accuracy gate: candidate/last-known-good; score = exact-match on %d task items, fails when one-sided "
            "McNemar mid-p < %g%s; greedy = identical outputs on %d prompts, fails below last-known-good's agreement "
            "with itself - %g.") % (acc["limit"], acc["alpha"], (" and the drop > %g" % acc["margin"]) if acc["margin"] else "",
                                    acc["greedy_prompts"], acc["greedy_margin"])


def csv_text(plan, rows, decision):
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=CSV_FIELDS, extrasaction="ignore")
    w.writeheader()
    for row in ordered_rows(plan["candidates"], rows):
        j = decision["judgements"].get(row["id"]) or {}
        base = {"index": row["index"], "id": row["id"], "name": row["name"] or "base", "status": row["status"],
                "class": row.get("class") or "", "verdict": "winner" if (decision.get("winner") or {}).get("id") == row["id"]
                else j.get("verdict", ""), "improvement": j.get("improvement", ""), "message": row.get("message") or ""}
        base["accuracy_check"], base["accuracy_value"], base["accuracy_reference"], base["accuracy_passed"] = \
            accuracy_fields(row)
        for lv in row.get("levels") or [{}]:
            rec = dict(base)
            rec.update(dict((k, lv.get(k)) for k in CSV_FIELDS if k in lv))
            w.writerow(rec)
    return buf.getvalue()


def snippet(winner):
    if not winner:
        return ""
    lines = ["# gpuhost.sglang tune: winner %s (%s)" % (winner["index"], winner["name"]), "sglang_options:"]
    for k in sorted(winner["options"]):
        lines.append("  %s: %s" % (k, json.dumps(winner["options"][k])))
    return "\n".join(lines) + "\n"


def pareto_front(points):
    """Points (ttft, tput, label) not dominated by another (lower TTFT and higher throughput), sorted by TTFT."""
    front = []
    for p in sorted(points, key=lambda x: (x[0], -x[1])):
        if not front or p[1] > front[-1][1]:
            front.append(p)
    return front


def plot(plan, rows, path):
    """Pareto plot; returns the path or None when matplotlib is missing."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, ax = plt.subplots(figsize=(8, 5))
    for conc in plan["workload"]["concurrency"]:
        pts = []
        for row in ordered_rows(plan["candidates"], rows):
            for lv in row.get("levels") or []:
                if lv["concurrency"] == conc and lv.get("ttft_ms.p99") is not None and lv.get("output_throughput") is not None:
                    label = str(row["index"]) + ("" if accuracy_fields(row)[3] is not False else " acc FAIL")
                    pts.append((lv["ttft_ms.p99"], lv["output_throughput"], label))
        if not pts:
            continue
        line = ax.scatter([p[0] for p in pts], [p[1] for p in pts], label="c=%d" % conc)
        bad = [p for p in pts if p[2].endswith("acc FAIL")]
        if bad:  # failed the accuracy gate: crossed out, and never on the front (it cannot be adopted)
            ax.scatter([p[0] for p in bad], [p[1] for p in bad], marker="x", s=120, color="red")
        front = pareto_front([p for p in pts if not p[2].endswith("acc FAIL")] or pts)
        ax.plot([p[0] for p in front], [p[1] for p in front], linestyle="--", color=line.get_facecolor()[0])
        for x, y, label in pts:
            ax.annotate(label, (x, y), textcoords="offset points", xytext=(4, 4), fontsize=8)
    ax.set_xlabel("p99 TTFT (ms)")
    ax.set_ylabel("output tok/s")
    ax.set_title("Campaign %s: candidates (labels = #, red x = failed the accuracy gate) and Pareto fronts"
                 % plan["name"], fontsize=9)
    ax.legend()
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    tmp = path + ".tmp.png"
    fig.savefig(tmp, dpi=100)
    plt.close(fig)
    os.replace(tmp, path)
    return path


def write_all(out_dir, plan, rows, decision, make_plot=True):
    files = {}
    table = markdown(plan, rows, decision)
    files["markdown"] = os.path.join(out_dir, "results.md")
    bench_store.atomic_write_text(files["markdown"], "\n".join(table) + "\n")
    files["csv"] = os.path.join(out_dir, "results.csv")
    bench_store.atomic_write_text(files["csv"], csv_text(plan, rows, decision))
    files["json"] = os.path.join(out_dir, "results.json")
    bench_store.atomic_write_json(files["json"], {"campaign": plan, "rows": ordered_rows(plan["candidates"], rows),
                                                  "decision": {"winner": (decision.get("winner") or {}).get("id"),
                                                               "reason": decision["reason"],
                                                               "judgements": decision["judgements"]}})
    snip = snippet(decision.get("winner"))
    if snip:
        files["snippet"] = os.path.join(out_dir, "winner.yml")
        bench_store.atomic_write_text(files["snippet"], snip)
    if make_plot:
        p = plot(plan, rows, os.path.join(out_dir, "pareto.png"))
        if p:
            files["plot"] = p
    return table, files, snip


def plan_line(candidate, parsed):
    """One line of the check-mode plan: index, name, the parser's verdict (and its errors when it rejects)."""
    parsed = parsed or {}
    name = candidate.get("name") or "base"
    if parsed.get("failed"):
        errors = parsed.get("errors") or []
        why = "; ".join(str(e.get("text") or e.get("message") or e) if isinstance(e, dict) else str(e) for e in errors)
        return "%d %s: REJECTED by the parser (%s)" % (candidate["index"], name, why or parsed.get("msg") or "no detail")
    if parsed.get("validated") is False:
        return "%d %s: not validated (%s)" % (candidate["index"], name, parsed.get("reason") or "no parser")
    warn = parsed.get("parser_warnings") or []
    return "%d %s: accepted by %s %s%s" % (candidate["index"], name, parsed.get("engine") or "the engine",
                                           parsed.get("engine_version") or "", (" (warnings: %s)" % "; ".join(warn)) if warn else "")
