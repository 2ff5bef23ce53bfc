# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Reports: the Markdown table (seeds' layout), JUnit XML, PNG plots (matplotlib, optional), progress log."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
from xml.sax.saxutils import escape, quoteattr

from ansible_collections.gpuhost.sglang.plugins.module_utils.bench import store as bench_store

HEADER = ("| Concurrency | Output tok/s | Total tok/s | Peak | TPOT ms | TTFT p50/p99 ms | ITL p99 | Coherent |",
          "|---:|---:|---:|---:|---:|---:|---:|---|")


def _f(v, nd=2):
    if v is None:
        return "-"
    if isinstance(v, (int, float)) and abs(v) >= 1000:
        return "{:,.0f}".format(v)
    return ("{:.%df}" % nd).format(v)


def table_lines(levels):
    """Markdown table lines for result entries (sorted by concurrency). ``*`` marks client-bound latency."""
    lines = list(HEADER)
    for r in sorted(levels, key=lambda x: int(x.get("concurrency") or 0)):
        cb = "*" if r.get("client_bound") else ""
        ttft = r.get("ttft_ms") or {}
        tpot = r.get("tpot_ms") or {}
        itl = r.get("itl_ms") or {}
        total = r.get("completed", 0)
        coh = r.get("coherent", 0)
        errs = sum((r.get("errors") or {}).values())
        verdict = "yes" if (coh == total and errs == 0 and total) else "NO"
        coherent = "%s (%d/%d)" % (verdict, coh, r.get("requests", total))
        lines.append("| %s | %s | %s | %s | %s | %s/%s%s | %s | %s |" % (
            r.get("concurrency"), _f(r.get("output_throughput")), _f(r.get("total_throughput")),
            _f(r.get("peak_output_throughput"), 0), _f(tpot.get("mean")), _f(ttft.get("p50"), 1),
            _f(ttft.get("p99"), 1), cb, _f(itl.get("p99"), 1), coherent))
    return lines


def markdown(run):
    out = ["# serving_bench run %s" % run.get("run_id"), ""]
    fp = run.get("fingerprint") or {}
    if fp:
        out.append("Fingerprint: " + ", ".join("%s=%s" % (k, fp[k]) for k in sorted(fp)))
    wl = run.get("workload") or {}
    if wl:
        out.append("Workload: " + ", ".join("%s=%s" % (k, wl[k]) for k in sorted(wl)))
    coh = run.get("coherence") or {}
    if coh:
        out.append("Coherence probes: %s (%s/%s passed, class %s)" % (
            "PASSED" if coh.get("passed") else "FAILED", coh.get("probes_passed"), coh.get("probes_total"),
            coh.get("class")))
    out.append("")
    levels = [v for dummy, v in sorted((run.get("levels") or {}).items(), key=lambda kv: int(kv[0]))]
    out.extend(table_lines(levels))
    if any(lv.get("client_bound") for lv in levels):
        out.append("")
        out.append("`*` client-bound: the benchmark client itself was saturated; latency figures are upper bounds.")
    checks = []
    for lv in levels:
        for c in (lv.get("regression") or {}).get("checks", []):
            if "baseline" in c:
                checks.append((lv.get("concurrency"), c))
    if checks:
        out += ["", "| Concurrency | Metric | Baseline | Now | Delta % | Threshold % | Verdict |",
                "|---:|---|---:|---:|---:|---:|---|"]
        for conc, c in checks:
            out.append("| %s | %s | %s | %s | %+.1f | %.1f | %s |" % (
                conc, c["metric"], _f(c["baseline"]), _f(c["now"]), c["delta_pct"], 100 * c["threshold"],
                "ok" if c["passed"] else "REGRESSION"))
    if run.get("failures"):
        out += ["", "Failures:"] + ["- " + f for f in run["failures"]]
    return "\n".join(out) + "\n"


def junit(run):
    cases = []
    coh = run.get("coherence") or {}
    for v in coh.get("probes", []):
        msg = None if v.get("passed") else "class %s: expected %r, got %r" % (v.get("class"), v.get("expect"), v.get("answer"))
        cases.append(("coherence", "probe %s" % v.get("name"), msg))
    for key, lv in sorted((run.get("levels") or {}).items(), key=lambda kv: int(kv[0])):
        errs = lv.get("errors") or {}
        cases.append(("load.c%s" % key, "errors", ("errors: %s" % errs) if errs else None))
        inc = lv.get("incoherent", 0)
        cases.append(("load.c%s" % key, "coherent output", ("%d incoherent outputs" % inc) if inc else None))
        for c in (lv.get("regression") or {}).get("checks", []):
            msg = None
            if not c.get("passed"):
                msg = "%s: baseline %s now %s delta %+.1f%% threshold %.1f%%" % (
                    c["metric"], c["baseline"], c["now"], c["delta_pct"], 100 * c["threshold"])
            cases.append(("regression.c%s" % key, c["metric"], msg))
    fails = len([c for c in cases if c[2]])
    out = ['<?xml version="1.0" encoding="UTF-8"?>',
           '<testsuite name=%s tests="%d" failures="%d">' % (quoteattr("serving_bench " + str(run.get("run_id"))),
                                                             len(cases), fails)]
    for cls, name, msg in cases:
        out.append('  <testcase classname=%s name=%s>' % (quoteattr(cls), quoteattr(name)))
        if msg:
            out.append('    <failure message=%s>%s</failure>' % (quoteattr(msg[:500]), escape(msg)))
        out.append('  </testcase>')
    out.append('</testsuite>')
    return "\n".join(out) + "\n"


def plots(run, history, out_prefix):
    """Write <prefix>-throughput.png (throughput and TPOT vs concurrency) and <prefix>-history.png.
    Returns (files, warning or None); never raises when matplotlib is missing."""
    try:
        import matplotlib  # pylint: disable=import-outside-toplevel
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
    except ImportError:
        return [], "matplotlib is not installed where the module runs: plots skipped"
    files = []
    levels = sorted((run.get("levels") or {}).values(), key=lambda x: int(x.get("concurrency") or 0))
    if levels:
        xs = [lv["concurrency"] for lv in levels]
        fig, ax1 = plt.subplots(figsize=(7, 4))
        ax1.plot(xs, [lv.get("output_throughput") for lv in levels], "o-", label="output tok/s")
        ax1.plot(xs, [lv.get("peak_output_throughput") for lv in levels], "s--", label="peak output tok/s")
        ax1.set_xscale("log", base=2)
        ax1.set_xlabel("concurrency")
        ax1.set_ylabel("tokens/s")
        ax2 = ax1.twinx()
        ax2.plot(xs, [(lv.get("tpot_ms") or {}).get("mean") for lv in levels], "r^-", label="TPOT ms")
        ax2.set_ylabel("TPOT ms")
        fig.legend(loc="upper left")
        ax1.set_title("serving_bench %s" % run.get("run_id"))
        fig.tight_layout()
        path = out_prefix + "-throughput.png"
        fig.savefig(path + ".tmp.png", dpi=90)
        os.replace(path + ".tmp.png", path)
        plt.close(fig)
        files.append(path)
    if history:
        key = run.get("key")
        series = {}
        for h in history:
            if h.get("key") == key:
                series.setdefault(h.get("concurrency"), []).append(h)
        if series:
            fig, ax = plt.subplots(figsize=(7, 4))
            for conc, hs in sorted(series.items(), key=lambda kv: int(kv[0] or 0)):
                ax.plot(range(len(hs)), [h.get("output_throughput") for h in hs], "o-", label="c=%s" % conc)
            ax.set_xlabel("run (oldest first)")
            ax.set_ylabel("output tok/s")
            ax.set_title("history for fingerprint %s" % key)
            ax.legend()
            fig.tight_layout()
            path = out_prefix + "-history.png"
            fig.savefig(path + ".tmp.png", dpi=90)
            os.replace(path + ".tmp.png", path)
            plt.close(fig)
            files.append(path)
    return files, None


def progress(report_dir, line):
    """Append one timestamped line to report_dir/progress.log (``tail -f`` it during a sweep)."""
    if not report_dir:
        return
    os.makedirs(report_dir, exist_ok=True)
    with open(os.path.join(report_dir, "progress.log"), "a") as f:
        f.write("%s %s\n" % (bench_store.now_iso(), line))
        f.flush()


def write_reports(report_dir, run, make_plots=True):
    """(Re)write the run's Markdown, JUnit XML and plots; returns (files, warnings)."""
    rid = run["run_id"]
    files = []
    warnings = []
    base = os.path.join(report_dir, rid)
    md = markdown(run)
    bench_store.atomic_write_text(base + ".md", md)
    bench_store.atomic_write_text(os.path.join(report_dir, "latest.md"), md)
    bench_store.atomic_write_text(base + ".junit.xml", junit(run))
    files += [base + ".md", base + ".junit.xml"]
    if make_plots:
        hist = bench_store.read_jsonl(os.path.join(report_dir, "history.jsonl"))
        pf, warn = plots(run, hist, base)
        files += pf
        if warn:
            warnings.append(warn)
    return files, warnings
