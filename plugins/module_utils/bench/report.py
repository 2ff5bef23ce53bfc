# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Reports: the Markdown table (operators' layout), JUnit XML, PNG plots (matplotlib, optional), progress log."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
from xml.sax.saxutils import escape, quoteattr

from ansible_collections.gpuhost.sglang.plugins.module_utils.bench import store as bench_store

HEADER = ("| Concurrency | Output tok/s | Total tok/s | Peak tok/s (1 s) | TPOT p50 ms | TTFT p50/p99 ms | ITL p99 ms "
          "| Errors | Coherent |",
          "|---:|---:|---:|---:|---:|---:|---:|---|---|")


# Every mark the table can carry: (mark, the result field that sets it, where it goes, its legend). The legend is
# printed under the table (legend_lines): by the play, and in the Markdown report.
MARKS = (
    ("*", "client_bound", "TTFT p99",
     "client-bound: the benchmark client itself was saturated or lagging (client_bound_reason); latency figures are "
     "upper bounds"),
    ("~", "first_window", "Concurrency",
     "first-window outlier: the level's first requests were slower than the rest (first_window): a server still "
     "cold at this concurrency or the first burst of a short level; raise warmup_per_slot or min_duration_s"),
    ("?", "counts", "Output tok/s",
     "token counts unverified: the responses' usage claims more tokens than their streamed text and no server "
     "counter confirmed it (counts_reason); throughput and TPOT are the server's claim, not gated and never a "
     "baseline. Verify with the server's metrics on (SGLang: --enable-metrics)"),
)


def marked(r, mark):
    """Whether result ``r`` carries ``mark`` (see MARKS)."""
    field = dict((m[0], m[1]) for m in MARKS)[mark]
    if field == "counts":
        return r.get("counts") == "unverified"
    if field == "first_window":
        return bool((r.get("first_window") or {}).get("outlier"))
    return bool(r.get(field))


def legend_lines(levels=None):
    """The legend of the table's marks: every mark (``levels`` None), or those the given results carry."""
    return ["`%s` %s (%s column)." % (m[0], m[3], m[2]) for m in MARKS
            if levels is None or any(marked(r, m[0]) for r in levels)]


def _f(v, nd=2):
    if v is None:
        return "-"
    if isinstance(v, (int, float)) and abs(v) >= 1000:
        return "{:,.0f}".format(v)
    return ("{:.%df}" % nd).format(v)


def gate_value(r, name, path):
    """The figure the regression gate used: with trials the median over trials, else the level's own value."""
    med = ((((r.get("trials") or {}).get("metrics") or {}).get(name)) or {}).get("median")
    if med is not None and ((r.get("trials") or {}).get("n") or 1) > 1:
        return med
    cur = r
    for k in path:
        cur = (cur or {}).get(k)
    return cur


def table_lines(levels):
    """Markdown table lines for result entries (sorted by concurrency). MARKS lists the marks; with
    trials a row shows the medians over trials (what the gate compared) and the concurrency reads ``c (xN)``.
    Coherent counts completed requests only; failed requests are in Errors, by class."""
    lines = list(HEADER)
    for r in sorted(levels, key=lambda x: int(x.get("concurrency") or 0)):
        cb = "*" if marked(r, "*") else ""
        unverified = "?" if marked(r, "?") else ""
        ntr = (r.get("trials") or {}).get("n") or 1
        done = r.get("completed", 0)
        coh = r.get("coherent", 0)
        errs = r.get("errors") or {}
        verdict = "yes" if (coh == done and done) else "NO"
        errors = ", ".join("%s=%d" % kv for kv in sorted(errs.items())) if errs else "0"
        lines.append("| %s%s%s | %s%s | %s | %s | %s | %s/%s%s | %s | %s | %s (%d/%d) |" % (
            r.get("concurrency"), (" (x%d)" % ntr) if ntr > 1 else "", "~" if marked(r, "~") else "",
            _f(gate_value(r, "output_throughput", ("output_throughput",))), unverified,
            _f(gate_value(r, "total_throughput", ("total_throughput",))),
            _f(gate_value(r, "peak_output_throughput", ("peak_output_throughput",)), 0),
            _f(gate_value(r, "tpot_ms.p50", ("tpot_ms", "p50"))), _f(gate_value(r, "ttft_ms.p50", ("ttft_ms", "p50")), 1),
            _f(gate_value(r, "ttft_ms.p99", ("ttft_ms", "p99")), 1), cb,
            _f(gate_value(r, "itl_ms.p99", ("itl_ms", "p99")), 1), errors, verdict, coh, done))
    return lines


def workload_line(run, levels):
    """What really ran: the asked workload, whether ignore_eos was accepted, measured mean tokens."""
    wl = dict(run.get("workload") or {})
    if not wl:
        return None
    if not wl.get("tokenizer") and "input_len" in wl:
        wl["input_words"] = wl.pop("input_len")  # without a tokenizer a prompt is that many words, not tokens
    eos = [lv.get("ignore_eos") for lv in levels if "ignore_eos" in lv]
    if wl.get("ignore_eos") and eos:
        wl["ignore_eos"] = "accepted" if all(eos) else "REJECTED by the server (outputs may stop early)"
    parts = ["%s=%s" % (k, wl[k]) for k in sorted(wl)]
    meas = [lv.get("measured_tokens") for lv in levels if lv.get("measured_tokens")]
    if meas:
        parts.append("measured mean prompt/output tokens %s" % "; ".join(
            "c=%s %s/%s" % (lv.get("concurrency"), lv["measured_tokens"].get("prompt"), lv["measured_tokens"].get("output"))
            for lv in levels if lv.get("measured_tokens")))
    return "Workload: " + ", ".join(parts)


def markdown(run):
    out = ["# serving_bench run %s" % run.get("run_id"), ""]
    fp = run.get("fingerprint") or {}
    if fp:
        out.append("Fingerprint: " + ", ".join("%s=%s" % (k, fp[k]) for k in sorted(fp)))
    levels = [v for dummy, v in sorted((run.get("levels") or {}).items(), key=lambda kv: int(kv[0]))]
    wline = workload_line(run, levels)
    if wline:
        out.append(wline)
    coh = run.get("coherence") or {}
    if coh:
        out.append("Coherence probes: %s (%s/%s passed, class %s)" % (
            "PASSED" if coh.get("passed") else "FAILED", coh.get("probes_passed"), coh.get("probes_total"),
            coh.get("class")))
    out.append("")
    out.extend(table_lines(levels))
    legend = legend_lines(levels)
    if legend:
        out.append("")
        out.extend(legend)
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
        ax2.plot(xs, [gate_value(lv, "tpot_ms.p50", ("tpot_ms", "p50")) for lv in levels], "r^-", label="TPOT p50 ms")
        ax2.set_ylabel("TPOT p50 ms")
        handles = ax1.get_legend_handles_labels()
        handles2 = ax2.get_legend_handles_labels()
        # below the axes: never over the title or the data
        ax1.legend(handles[0] + handles2[0], handles[1] + handles2[1], loc="upper center",
                   bbox_to_anchor=(0.5, -0.18), ncol=3, frameon=False)
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
            fig, ax = plt.subplots(figsize=(8, 4.5))
            for conc, hs in sorted(series.items(), key=lambda kv: int(kv[0] or 0)):
                hs = sorted(hs, key=lambda h: h.get("ts") or "")  # time order, whatever order lines were appended
                xs = list(range(len(hs)))
                line = ax.plot(xs, [h.get("output_throughput") for h in hs], "o-", label="c=%s" % conc)[0]
                bad = [i for i, h in enumerate(hs) if not h.get("passed")]
                if bad:
                    ax.plot([xs[i] for i in bad], [hs[i].get("output_throughput") for i in bad], "x", color="red",
                            markersize=11, markeredgewidth=2.5, linestyle="none",
                            label="failed (c=%s)" % conc, zorder=5)
                line.set_zorder(3)
            ax.set_xlabel("run, oldest first (red x: the run failed its gate)")
            ax.set_ylabel("output tok/s")
            ax.set_title("history for fingerprint %s" % key)
            ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
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
