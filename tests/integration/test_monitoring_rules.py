# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""roles/monitoring rules: rendered from the role's defaults and a stored baseline, checked and tested with the
REAL promtool (Debian's prometheus package, unpacked by tests/fixtures/monitoring-apt-repo.sh): every alert has a
firing and a not-firing case, the recording rules accept both SGLang prefixes."""
import json
import os
import re
import subprocess

import jinja2
import pytest
import yaml

from ansible_collections.gpuhost.sglang.plugins.module_utils.bench import alert_thresholds
from ansible_collections.gpuhost.sglang.plugins.module_utils.bench import server_metrics

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
# promtool comes from the fixture cache of the checkout (stage 20), also when this file runs from a copy
CACHE = os.path.join(os.environ.get("GPUHOST_ROOT") or ROOT, ".cache")
PROMTOOL = os.path.join(CACHE, "monitoring-apt-repo", "root", "usr", "bin", "promtool")
TEMPLATE = os.path.join(ROOT, "roles", "monitoring", "templates", "gpuhost-rules.yml.j2")

BASELINE = {"key": "k1", "fingerprint": {"host": "gpu1"}, "updated": "2026-12-01T00:00:00Z",
            "levels": {"1": {"metrics": {"ttft_ms.p99": {"median": 80.0}, "itl_ms.p99": {"median": 10.0}}},
                       "16": {"metrics": {"ttft_ms.p99": {"median": 200.0}, "itl_ms.p99": {"median": 20.0}}}}}


def render(tmp_path):
    defaults = yaml.safe_load(open(os.path.join(ROOT, "roles", "monitoring", "defaults", "main.yml")))
    defaults["monitoring_latency_thresholds"] = alert_thresholds.from_docs([BASELINE], 1.5)
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(os.path.dirname(TEMPLATE)), undefined=jinja2.StrictUndefined,
                             keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=False)
    text = env.get_template(os.path.basename(TEMPLATE)).render(**defaults)
    path = tmp_path / "gpuhost-rules.yml"
    path.write_text(text)
    return path, defaults


def promtool(*args):
    assert os.access(PROMTOOL, os.X_OK), "promtool missing: run tests/fixtures/monitoring-apt-repo.sh (stage 20)"
    return subprocess.run([PROMTOOL] + list(args), capture_output=True, text=True, timeout=120, check=False)


def test_thresholds_from_the_baseline():
    t = alert_thresholds.from_docs([BASELINE], 1.5)
    assert t == {"gpu1": {"baseline_key": "k1", "factor": 1.5, "ttft_p99_s": 0.3, "itl_p99_s": 0.03}}
    with pytest.raises(alert_thresholds.ThresholdError, match="monitoring_latency_factor is 0.5"):
        alert_thresholds.from_docs([BASELINE], 0.5)


def hist(name, host, le_rates, minutes=15):
    """Cumulative histogram buckets growing linearly: le -> per-minute increase."""
    out = []
    for le, per_min in le_rates:
        out.append({"series": '%s_bucket{host="%s",model_name="m",le="%s"}' % (name, host, le),
                    "values": "0+%sx%d" % (per_min, minutes)})
    return out


def cases():
    g1 = 'host="gpu1",gpu="0",UUID="GPU-1"'
    c = []
    # server down: fires after `for` (1m), not while up
    c.append(("SglangServerDown", [{"series": 'up{job="sglang",host="a"}', "values": "1 1 0 0 0 0"},
                                   {"series": 'up{job="sglang",host="b"}', "values": "1 1 1 1 1 1"}],
              "4m", [{"exp_labels": {"severity": "critical", "job": "sglang", "host": "a"},
                      "exp_annotations": {"summary": "SGLang on a does not answer /metrics"}}]))
    c.append(("SglangServerDown", [{"series": 'up{job="sglang",host="a"}', "values": "1 1 1 0 0 0"}], "3m", []))
    # error rate 10% (5xx) on the sglang_ prefix -> fires; 1% -> not
    for ratio, exp in ((10, True), (1, False)):
        series = [{"series": 'sglang_http_responses_total{host="a",status_code="200",endpoint="/v1/completions",method="POST"}',
                   "values": "0+%dx20" % (100 - ratio)},
                  {"series": 'sglang_http_responses_total{host="a",status_code="500",endpoint="/v1/completions",method="POST"}',
                   "values": "0+%dx20" % ratio}]
        c.append(("SglangHighErrorRate", series, "15m",
                  [{"exp_labels": {"severity": "warning", "host": "a"},
                    "exp_annotations": {"summary": "a: 10% of HTTP responses are 5xx"}}] if exp else []))
    # TTFT p99 above 1.5x baseline (0.3 s): all first tokens in (0.4, 0.8] -> fires; all in (0.1, 0.2] -> not
    for le_hit, exp in (("0.8", True), ("0.2", False)):
        buckets = [("0.1", 0), ("0.2", 10 if le_hit == "0.2" else 0), ("0.4", 10 if le_hit == "0.2" else 0),
                   ("0.8", 10), ("+Inf", 10)]
        c.append(("SglangTTFTAboveBaseline", hist("sglang:time_to_first_token_seconds", "gpu1", buckets), "12m",
                  [{"exp_labels": {"severity": "warning", "baseline": "k1", "host": "gpu1", "model_name": "m"},
                    "exp_annotations": {"summary": "gpu1: p99 TTFT 796ms above 1.5x its benchmark baseline (0.3 s)"}}]
                  if exp else []))
    for le_hit, exp in (("0.06", True), ("0.02", False)):
        buckets = [("0.01", 0), ("0.02", 10 if le_hit == "0.02" else 0), ("0.04", 10 if le_hit == "0.02" else 0),
                   ("0.06", 10), ("+Inf", 10)]
        c.append(("SglangITLAboveBaseline", hist("sglang_inter_token_latency_seconds", "gpu1", buckets), "12m",
                  [{"exp_labels": {"severity": "warning", "baseline": "k1", "host": "gpu1", "model_name": "m"},
                    "exp_annotations": {"summary": "gpu1: p99 inter-token latency 59.8ms above 1.5x its benchmark "
                                                   "baseline (0.03 s)"}}] if exp else []))
    # queue: growing past 10 -> fires; high but flat -> not
    c.append(("SglangQueueGrowing", [{"series": 'sglang:num_queue_reqs{host="a",model_name="m"}', "values": "0+5x20"}],
              "15m", [{"exp_labels": {"severity": "warning", "host": "a", "model_name": "m"},
                       "exp_annotations": {"summary": "a: 75 requests queued and the queue keeps growing"}}]))
    c.append(("SglangQueueGrowing", [{"series": 'sglang:num_queue_reqs{host="a",model_name="m"}', "values": "50x20"}],
              "15m", []))
    # KV full AND retracting -> fires; full without retractions -> not
    for retract, exp in (("0+3x20", True), ("0x20", False)):
        c.append(("SglangKVCacheFullRetracting",
                  [{"series": 'sglang:token_usage{host="a",model_name="m",tp_rank="0"}', "values": "0.98x20"},
                   {"series": 'sglang:num_retracted_requests_total{host="a",model_name="m"}', "values": retract}],
                  "15m", [{"exp_labels": {"severity": "warning", "host": "a", "model_name": "m"},
                           "exp_annotations": {"summary": "a: KV cache token usage above 0.95 and requests are being "
                                                          "retracted"}}] if exp else []))
    for aborted, exp in (("0+6x20", True), ("7x20", False)):
        c.append(("SglangAbortedRequests",
                  [{"series": 'sglang_num_aborted_requests_total{host="a",model_name="m"}', "values": aborted}],
                  "15m", [{"exp_labels": {"severity": "warning", "host": "a", "model_name": "m"},
                           "exp_annotations": {"summary": "a: requests are being aborted (0.1/s)"}}] if exp else []))
    for xid, exp in (("0 0 79 79", True), ("0 0 0 0", False)):
        c.append(("GpuXidError", [{"series": "DCGM_FI_DEV_XID_ERRORS{%s,job=\"dcgm\"}" % g1, "values": xid}], "3m",
                  [{"exp_labels": {"severity": "critical", "host": "gpu1", "gpu": "0", "UUID": "GPU-1"},
                    "exp_annotations": {"summary": "gpu1 GPU 0: XID error 79"}}] if exp else []))
    for val, exp in (("0 1 1", True), ("0 0 0", False)):
        c.append(("GpuRowRemapFailure", [{"series": "DCGM_FI_DEV_ROW_REMAP_FAILURE{%s}" % g1, "values": val}], "2m",
                  [{"exp_labels": {"severity": "critical", "host": "gpu1", "gpu": "0", "UUID": "GPU-1"},
                    "exp_annotations": {"summary": "gpu1 GPU 0: row remapping failed (replace or reset the GPU)"}}]
                  if exp else []))
    # 0x40 HW thermal + 0x1 idle = 65 -> fires with value 64; 0x10 sync boost + 0x1 idle + 0x2 app clocks -> not
    for val, exp in (("65x20", True), ("19x20", False)):
        c.append(("GpuThrottling", [{"series": "DCGM_FI_DEV_CLOCKS_EVENT_REASONS{%s}" % g1, "values": val}], "10m",
                  [{"exp_labels": {"severity": "warning", "host": "gpu1", "gpu": "0", "UUID": "GPU-1"},
                    "exp_annotations": {"summary": "gpu1 GPU 0: thermal or power throttling (clocks event reasons 64)"}}]
                  if exp else []))
    # deep liveness check (node_exporter textfile of roles/sglang/files/gpuhost-liveness.py): two failures in a row
    # fire with the failure class; failures that a pass interrupts do not
    lv = 'host="a",unit="sglang.service"'
    for consecutive, exp in (("0 1 2 2 2", True), ("0 1 0 1 0", False)):
        c.append(("SglangLivenessFailing",
                  [{"series": "gpuhost_liveness_consecutive_failures{%s}" % lv, "values": consecutive},
                   {"series": 'gpuhost_liveness_failure{%s,class="garbage"}' % lv, "values": "0 1 1 1 1"},
                   {"series": 'gpuhost_liveness_failure{%s,class="nan"}' % lv, "values": "0 0 0 0 0"}],
                  "3m", [{"exp_labels": {"severity": "critical", "host": "a", "unit": "sglang.service", "class": "garbage"},
                          "exp_annotations": {"summary": "a sglang.service: 2 deep liveness checks in a row failed "
                                                         "(garbage)"}}] if exp else []))
    for restarts, exp in (("0 0 1 1", True), ("0 0 0 0", False)):
        c.append(("SglangLivenessRestarted",
                  [{"series": "gpuhost_liveness_restarts_total{%s}" % lv, "values": restarts}], "3m",
                  [{"exp_labels": {"severity": "warning", "host": "a", "unit": "sglang.service"},
                    "exp_annotations": {"summary": "a: the deep liveness check restarted sglang.service (1 in the last "
                                                   "hour; its journal says why)"}}] if exp else []))
    # the last run stops advancing at 5 min (300 s): at 40 min it is 2100 s old (> 1200); a timer that keeps running
    # is never older than one scrape
    for last, exp in (("0+60x5 300x40", True), ("0+60x45", False)):
        c.append(("SglangLivenessStale",
                  [{"series": "gpuhost_liveness_last_run_timestamp_seconds{%s}" % lv, "values": last}], "40m",
                  [{"exp_labels": {"severity": "warning", "host": "a", "unit": "sglang.service"},
                    "exp_annotations": {"summary": "a sglang.service: no deep liveness check for 35m 0s (timer "
                                                   "stopped?)"}}] if exp else []))
    return c


def recording_cases():
    # both prefixes land in one recorded series per host
    series = [{"series": 'sglang:generation_tokens_total{host="a",model_name="m"}', "values": "0+600x10"},
              {"series": 'sglang_generation_tokens_total{host="b",model_name="m"}', "values": "0+1200x10"}]
    return [{"interval": "1m", "input_series": series, "promql_expr_test": [
        {"expr": "gpuhost:sglang_generation_tokens:rate1m", "eval_time": "5m",
         "exp_samples": [{"labels": 'gpuhost:sglang_generation_tokens:rate1m{host="a",model_name="m"}', "value": 10},
                         {"labels": 'gpuhost:sglang_generation_tokens:rate1m{host="b",model_name="m"}', "value": 20}]}]}]


def test_promtool_check_and_test_rules(tmp_path):
    rules, dummy = render(tmp_path)
    check = promtool("check", "rules", str(rules))
    assert check.returncode == 0, check.stdout + check.stderr
    doc = yaml.safe_load(rules.read_text())
    alerts = sorted(set(r["alert"] for g in doc["groups"] for r in g["rules"] if "alert" in r))
    tests = []
    covered = {}
    for name, series, at, exp in cases():
        covered.setdefault(name, set()).add(bool(exp))
        tests.append({"interval": "1m", "input_series": series,
                      "alert_rule_test": [{"eval_time": at, "alertname": name, "exp_alerts": exp}]})
    tests += recording_cases()
    # every alert is tested firing and not firing
    assert {a: covered.get(a) for a in alerts} == {a: {True, False} for a in alerts}
    spec = tmp_path / "rules.test.yml"
    spec.write_text(yaml.safe_dump({"rule_files": [str(rules)], "evaluation_interval": "1m", "tests": tests}))
    res = promtool("test", "rules", str(spec))
    print(check.stdout.strip())
    print("%d alert rules, %d test groups (%d alert cases, %d recording cases)" % (
        len(alerts), len(tests), len(cases()), len(recording_cases())))
    print(res.stdout.strip())
    assert res.returncode == 0, res.stdout + res.stderr


# ---- the SGLang names the rules and dashboards use, replayed against a real server's /metrics ----------------------
# tests/fixtures/sglang-0.5.17/: /metrics of a real SGLang 0.5.17 (H200 machine) before and after load, and after the
# side-by-side bench. Every SGLang series a rule reads must be in that exposition, with the labels the rule selects
# or aggregates by, or be listed here with the reason it is absent there.
REAL = os.path.join(ROOT, "tests", "fixtures", "sglang-0.5.17")
DASHBOARDS = os.path.join(ROOT, "roles", "monitoring", "files", "dashboards")
# SGLang runs prometheus_client in multiprocess mode (sglang 0.5.17 python/sglang/srt/utils/common.py
# set_prometheus_multiproc_dir, MultiProcessCollector): a labelled counter that was never incremented has no sample
# in any process's file and is not exported at all, not even its HELP line.
ABSENT_IN_0_5_17 = {
    "sglang:num_aborted_requests_total": "declared in srt/observability/metrics_collector.py (TokenizerMetricsCollector)"
                                         "; exported after the first abort only: no request was aborted in the recording",
    "sglang:num_retracted_requests_total": "declared in srt/observability/metrics_collector.py (SchedulerMetricsCollector)"
                                           "; exported after the first retraction only: the KV cache never ran full",
}
_NAME_RE = re.compile(r'__name__\s*=~\s*"sglang\[:_\]([a-zA-Z0-9_]+)"')
_SELECTOR_RE = re.compile(r'\{([^{}]*__name__[^{}]*)\}')
_MATCHER_RE = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"')
_BY_RE = re.compile(r'by\s*\(([^)]*)\)')
_RECORDED_RE = re.compile(r'gpuhost:sglang_[a-zA-Z0-9_:]+')
SCRAPE_LABELS = {"host", "job", "instance", "le"}  # added by the scrape config, or the histogram's own


def exposition_labels(texts):
    """{canonical family name: set of label names} over the expositions (histogram series keep their suffix)."""
    out = {}
    for text in texts:
        for name, labels, dummy in server_metrics.parse(text):
            out.setdefault(server_metrics.canonical(name), set()).update(labels)
    return out


def real_expositions():
    texts = [open(os.path.join(REAL, "metrics-after-bench.txt")).read()]
    with open(os.path.join(REAL, "exchanges.json")) as f:
        rec = json.load(f)
    texts += ["".join(t for dummy, t in rec[k]["reads"]) for k in ("metrics-before", "metrics-after")]
    return texts


def sglang_uses(rules_doc, dashboards):
    """(raw SGLang names with the labels each rule needs of them, recorded names the rules define, recorded names
    the dashboards and alerts read)."""
    uses, recorded, read = {}, set(), set()
    for g in rules_doc["groups"]:
        for r in g["rules"]:
            expr = r["expr"]
            if "record" in r:
                recorded.add(r["record"])
            else:
                read.update(_RECORDED_RE.findall(expr))
            by = set(lab.strip() for m in _BY_RE.findall(expr) for lab in m.split(",") if lab.strip())
            for sel in _SELECTOR_RE.findall(expr):
                for name in _NAME_RE.findall(sel):
                    need = (set(m[0] for m in _MATCHER_RE.findall(sel)) | by) - SCRAPE_LABELS - {"__name__"}
                    uses.setdefault("sglang:" + name, set()).update(need)
    for d in dashboards:
        for expr in re.findall(r'"expr":\s*"((?:[^"\\]|\\.)*)"', json.dumps(d)):
            read.update(_RECORDED_RE.findall(expr))
            if re.search(r'(?<![a-zA-Z0-9_:])sglang[:_][a-z]', expr):
                uses.setdefault("dashboard reads a raw SGLang series: " + expr, set())
    return uses, recorded, read


def name_problems(uses, recorded, read, families, absent):
    probs = []
    for name, need in sorted(uses.items()):
        fam = families.get(name)
        if fam is None:
            if name not in absent:
                probs.append("%s is not in the real SGLang 0.5.17 /metrics and not listed as absent" % name)
        elif need - fam:
            probs.append("%s has no label %s in the real /metrics (it has %s)" % (
                name, ", ".join(sorted(need - fam)), ", ".join(sorted(fam))))
    for name in sorted(set(absent) - set(uses)):
        probs.append("%s is listed as absent but no rule uses it" % name)
    for name in sorted(set(absent) & set(families)):
        probs.append("%s is listed as absent but the real /metrics has it" % name)
    for name in sorted(read - recorded):
        probs.append("%s is read by a dashboard or alert but no rule records it" % name)
    return probs


def _rules_and_dashboards(tmp_path, edit=lambda t: t):
    rules, dummy = render(tmp_path)
    doc = yaml.safe_load(edit(rules.read_text()))
    dashboards = [json.load(open(os.path.join(DASHBOARDS, f))) for f in sorted(os.listdir(DASHBOARDS))]
    return doc, dashboards


def test_rule_and_dashboard_names_exist_in_real_sglang_0_5_17(tmp_path):
    doc, dashboards = _rules_and_dashboards(tmp_path)
    uses, recorded, read = sglang_uses(doc, dashboards)
    families = exposition_labels(real_expositions())
    assert len(uses) >= 12 and len(read) >= 12, (sorted(uses), sorted(read))
    assert name_problems(uses, recorded, read, families, ABSENT_IN_0_5_17) == []
    print("%d SGLang series used, %d present in the real 0.5.17 /metrics, absent there: %s" % (
        len(uses), len(set(uses) & set(families)), ", ".join(sorted(ABSENT_IN_0_5_17))))


@pytest.mark.parametrize("plant, expect", [
    (lambda t: t.replace('sglang[:_]generation_tokens_total', 'sglang[:_]generation_token_total'),
     "sglang:generation_token_total is not in the real SGLang 0.5.17 /metrics"),
    (lambda t: t.replace('status_code=~"5.."', 'status=~"5.."'), "sglang:http_responses_total has no label status"),
    (lambda t: t.replace('record: gpuhost:sglang_token_usage', 'record: gpuhost:sglang_token_usage_ratio'),
     "gpuhost:sglang_token_usage is read by a dashboard or alert but no rule records it"),
])
def test_planted_wrong_names_are_caught(tmp_path, plant, expect):
    doc, dashboards = _rules_and_dashboards(tmp_path, plant)
    probs = name_problems(*sglang_uses(doc, dashboards), families=exposition_labels(real_expositions()),
                          absent=ABSENT_IN_0_5_17)
    assert any(expect in p for p in probs), probs


def test_absent_list_is_checked_both_ways():
    families = exposition_labels(real_expositions())
    uses = {"sglang:num_requests_total": set()}
    assert name_problems(uses, set(), set(), families, {"sglang:num_requests_total": "x"}) == [
        "sglang:num_requests_total is listed as absent but the real /metrics has it"]
    assert name_problems({}, set(), set(), families, {"sglang:foo_total": "x"}) == [
        "sglang:foo_total is listed as absent but no rule uses it"]


def recorded_series(text, host, names):
    """promtool input series of the samples of ``names`` (canonical) in an exposition, as they are spelled there, with
    ``host``: counters and histogram series grow by their recorded value each minute, gauges hold it."""
    out = []
    for line in text.splitlines():
        m = re.match(r'^(sglang[:_][a-zA-Z0-9_]+)(\{[^}]*\})?\s+(\S+)$', line)
        if not m or not any(server_metrics.canonical(m.group(1)).startswith(n) for n in names):
            continue
        labels = (m.group(2) or "{}")[1:-1]
        labels = 'host="%s"' % host + ("," + labels if labels else "")
        grows = re.search(r'(_total|_bucket|_count|_sum)$', m.group(1))
        out.append({"series": "%s{%s}" % (m.group(1), labels),
                    "values": ("0+%sx10" if grows else "%sx10") % float(m.group(3))})
    return out


def test_recording_rules_read_the_recorded_scrape_the_same_in_both_spellings(tmp_path):
    # host a: the real SGLang 0.5.17 /metrics (sglang:); host b: the same text spelled sglang_ (derived:
    # tests/fixtures/sglang-0.5.17/underscore_metrics.py). Every recording rule whose SGLang series the recording has
    # must give both hosts the same value.
    rules, dummy = render(tmp_path)
    doc = yaml.safe_load(rules.read_text())
    colon = open(os.path.join(REAL, "metrics-after-bench.txt")).read()
    underscored = open(os.path.join(REAL, "metrics-after-bench-underscore.txt")).read()
    assert "sglang:" not in underscored
    families = exposition_labels([colon])
    exprs, names = [], set()
    for g in doc["groups"]:
        for r in g["rules"]:
            srcs = ["sglang:" + n for n in _NAME_RE.findall(r.get("expr", "")) if "record" in r]
            # a rule naming an SGLang series outside the both-spellings regex reads one spelling only
            assert not re.search(r'(?<![\[a-zA-Z0-9_:])sglang[:_][a-z]', re.sub(r'sglang\[:_\]', '', r["expr"])), r
            if srcs and all(s in families for s in srcs):
                names.update(s[:-len("_bucket")] if s.endswith("_bucket") else s for s in srcs)
                # equal to within 1e-9 (1 = true): a sum's order may differ between the two hosts' series, and a
                # rate summed in another order differed by -7.1e-15 in one run
                exprs.append({"expr": 'abs(sum(%s{host="a"}) - sum(%s{host="b"})) < bool 1e-9' % (r["record"], r["record"]),
                              "eval_time": "5m", "exp_samples": [{"labels": "{}", "value": 1}]})
    assert len(exprs) >= 10, exprs
    series = recorded_series(colon, "a", names) + recorded_series(underscored, "b", names)
    assert len([s for s in series if s["series"].startswith("sglang_")]) == len(series) // 2
    spec = tmp_path / "recorded.test.yml"
    spec.write_text(yaml.safe_dump({"rule_files": [str(rules)], "evaluation_interval": "1m", "tests": [
        {"interval": "1m", "input_series": series, "promql_expr_test": exprs}]}))
    res = promtool("test", "rules", str(spec))
    print("%d recording rules compared over %d recorded series in both spellings" % (len(exprs), len(series)))
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
