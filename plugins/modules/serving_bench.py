#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: serving_bench
short_description: Coherence-gated streaming benchmark with stored baselines for OpenAI-compatible servers
version_added: "0.1.0"
description:
  - Benchmarks an OpenAI-compatible server (SGLang first; vLLM and transformers serve work too) by streaming
    C(/v1/completions) or C(/v1/chat/completions) at one or more concurrency levels, with sglang bench_serving's
    metric definitions (TTFT, TPOT, ITL, E2E, output/total/peak throughput, achieved concurrency).
  - "Coherence gate: known-answer probes at temperature 0 (default: the collection's C(DEFAULT_PROBES)),
    a NaN probe through logprobs where the server supports them, and detectors for empty output, U+FFFD and
    control characters, script soup and repetition loops on every load request. Throughput counts only coherent
    output; a run whose output is garbage fails however fast it is."
  - "Reasoning models: a probe is judged on its answer only; the reasoning (C(reasoning_content), or an inline
    C(<think>) block or text ending in C(</think>) when the server has no reasoning parser) is recorded apart.
    O(probe_chat_fields) can ask the engine to skip thinking; a probe that ran out of tokens while thinking
    gets O(probe_think_tokens) more once; one that still has no answer fails with class C(no_answer)."
  - "Regression gate: with O(baseline_dir), each concurrency level is compared with the stored baseline of the
    same O(fingerprint) and workload. A metric fails when it is worse than the baseline median by more than
    max(O(tolerance), measured noise). The first run records the baseline; only O(update_baseline=true)
    replaces one, and the replaced baseline is archived and logged."
  - "Faults are classified and counted per request: C(connection_refused), C(connect_error), C(connect_timeout),
    C(http_4xx), C(http_429), C(http_5xx), C(model_not_found), C(disconnected), C(stalled), C(timeout),
    C(malformed_sse), C(stream_error), C(nan), C(client_error); C(missing_usage) when the server omits usage and
    O(require_usage=true). The task fails with the class in C(msg), never a traceback, and what was measured
    is saved first."
  - The client is asyncio + aiohttp, sharded over processes; it measures its own event-loop lag and CPU use and
    marks a level C(client_bound) instead of silently reporting latency it inflated itself.
  - With O(report_dir), writes per-run JSON, an append-only history JSONL, a Markdown table, JUnit XML, PNG plots
    (when matplotlib is installed) and C(progress.log) (one line per completed level/trial and every few seconds).
author:
  - gpuhost.sglang contributors (@gpuhost)
requirements:
  - python >= 3.10
  - aiohttp
  - tokenizers or transformers (only for O(tokenizer))
  - matplotlib (optional, for plots)
  - orjson (optional, faster JSON)
options:
  base_url:
    description: Server root URL, for example C(http://10.0.0.5:30000) (C(/v1) is appended when missing).
    type: str
    required: true
  model:
    description: Model name sent in requests. Default is the first entry of C(/v1/models).
    type: str
  api:
    description: Which endpoint to stream.
    type: str
    choices: [completions, chat]
    default: completions
  concurrency:
    description:
      - "Concurrency level(s): an int, a list of ints, or a comma-separated string such as C(1,16,256)."
    type: raw
    default: 1
  num_prompts:
    description: Requests per concurrency level and trial. Default 2 x concurrency, at least 8.
    type: int
  input_len:
    description: Prompt length in tokens (exact with O(tokenizer); words otherwise).
    type: int
    default: 128
  output_len:
    description: C(max_tokens) of each load request.
    type: int
    default: 64
  dataset:
    description:
      - Path to a prompt file (JSONL with C(prompt) or C(messages), optional C(output_len); or a JSON list).
        Replaces the random prompts.
    type: path
  tokenizer:
    description:
      - Local Hugging Face tokenizer directory (or C(tokenizer.json)) for exact-length prompts and for counting
        tokens when the server sends no usage; the mismatch against server usage is reported.
    type: path
  ignore_eos:
    description:
      - Ask for exactly O(output_len) tokens with C(ignore_eos). When the server rejects the field with a 4xx
        (transformers serve answers 422) the run continues without it and C(ignore_eos_accepted=false) is returned.
    type: bool
    default: true
  temperature:
    description: Sampling temperature of load requests (probes always use 0).
    type: float
    default: 0.0
  seed:
    description: Seed of the random prompts (same seed, same workload).
    type: int
    default: 0
  warmup:
    description: Warmup requests before the first level (not measured).
    type: int
    default: 2
  probes:
    description:
      - Known-answer probes, each with C(expect) and a C(prompt) (completions) and/or C(question) (chat);
        optional C(name). Default is C(DEFAULT_PROBES) of the collection (module_utils/bench/probes.py).
    type: list
    elements: dict
  run_probes:
    description: Run the coherence probes before the load.
    type: bool
    default: true
  probes_only:
    description: Run only the coherence probes (no load); what the serving role's readiness gate uses.
    type: bool
    default: false
  probe_max_tokens:
    description:
      - Answer budget, C(max_tokens) of each probe. The expected word must be among the answer's first 12 words;
        32 tokens leave room for a short sentence.
    type: int
    default: 32
  probe_think_tokens:
    description:
      - Thinking budget of reasoning models. A probe that ran out of tokens before answering (reasoning and no
        answer, or plain fluent text cut at C(max_tokens), which is what template-opened reasoning looks like
        without a reasoning parser) is sent once more with O(probe_max_tokens) + O(probe_think_tokens).
        If it still has no answer it fails with class C(no_answer) ("thought for N tokens and never answered").
      - 0 disables the second attempt.
    type: int
    default: 1024
  probe_chat_fields:
    description:
      - "Extra request fields merged into every chat probe, for example
        C(chat_template_kwargs: {enable_thinking: false}) to ask SGLang (or transformers serve) to skip a
        reasoning model's thinking. The serving role passes its engine's C(probe_chat_fields)
        (roles/sglang/vars/main.yml)."
      - Empty (default) sends nothing extra, since strict engines answer HTTP 422 to unknown fields.
    type: dict
    default: {}
  probe_min_pass:
    description: Fraction of probes that must pass.
    type: float
    default: 1.0
  nan_probe:
    description: Also send one probe with logprobs and fail with class C(nan) on NaN/inf logprobs or the
      server's "Out of range float values" error.
    type: bool
    default: true
  load_checks:
    description: Detectors applied to every load request's output.
    type: list
    elements: str
    choices: [empty, replacement_chars, control_chars, script_soup, repetition]
    default: [empty, replacement_chars, control_chars, script_soup, repetition]
  max_incoherent_rate:
    description: Largest fraction of completed load requests allowed to fail O(load_checks).
    type: float
    default: 0.05
  max_error_rate:
    description: Largest fraction of load requests allowed to fail (any error class).
    type: float
    default: 0.0
  require_usage:
    description: Fail with C(missing_usage) when the server sends no usage (tokens would only be estimated).
    type: bool
    default: true
  api_key:
    description: Bearer token.
    type: str
  timeout:
    description: Per-request limit in seconds (whole request).
    type: float
    default: 300
  stall_timeout:
    description: Seconds without a byte from the server before a stream is classified C(stalled).
    type: float
    default: 60
  server_metrics:
    description:
      - Read the server's Prometheus metrics (SGLang C(--enable-metrics), C(sglang:) or C(sglang_) names) before and
        after each level and report its generated-token, request and TTFT figures next to the client's
        (C(results[].server_metrics)). C(auto) when exported; C(require) also fails the run with class
        C(server_metrics) on a disagreement beyond O(server_metrics_tolerance) or when none are exported.
    type: str
    choices: [auto, require, "off"]
    default: auto
  server_metrics_tolerance:
    description: Relative difference of server and client token/request counts above which they disagree.
    type: float
    default: 0.02
  client_processes:
    description:
      - Client processes; 0 means one per 32 concurrent streams, at most one per free core (the cores
        C(sched_getaffinity) allows, less the share other work keeps busy).
    type: int
    default: 0
  client_lag_threshold_ms:
    description:
      - Timestamp-error budget in ms. A level is marked C(client_bound) when a client process's event-loop lag
        p99, less the loop's own timer resolution (the selector's 1 ms granularity plus the idle wake-up latency,
        measured per process), exceeds it. See docs/bench.md.
      - On a client-bound level the regression gate ignores latency changes below twice the measured lag p99.
    type: float
    default: 1.0
  client_cpu_threshold:
    description: Client CPU use (fraction of one core per process) above which a level is marked C(client_bound).
    type: float
    default: 0.9
  trials:
    description: Trials per level; the regression gate uses their median and spread.
    type: int
    default: 1
  tolerance:
    description: Relative regression tolerance (0.1 = 10%); the effective threshold is max(tolerance, noise).
    type: float
    default: 0.1
  min_abs_ms:
    description: Latency regressions smaller than this many milliseconds are ignored (timer noise).
      On client-bound levels the floor is raised to twice the client's lag p99.
    type: float
    default: 1.0
  gate_metrics:
    description: Metrics the regression gate compares.
    type: list
    elements: str
    choices: [output_throughput, total_throughput, peak_output_throughput, ttft_ms.p50, ttft_ms.p99, tpot_ms.p50,
              tpot_ms.mean, itl_ms.p50, itl_ms.p99, e2e_ms.p50, e2e_ms.p99]
    default: [output_throughput, ttft_ms.p50, tpot_ms.p50]
  fingerprint:
    description:
      - What identifies the system under test (host, GPU model/count, driver, engine version, rendered server
        args, model, ...). Baselines are keyed by it plus the workload.
    type: dict
    default: {}
  baseline_dir:
    description: Controller directory of baselines. Without it there is no regression gate.
    type: path
  update_baseline:
    description: Replace the stored baseline with this run (the old one is archived). The only way to replace one.
    type: bool
    default: false
  report_dir:
    description: Directory for run JSON, history JSONL, Markdown, JUnit XML, plots and C(progress.log).
    type: path
  run_id:
    description: Run identifier; tasks of one sweep pass the same one to share a run file. Default is a timestamp.
    type: str
  mode:
    description: C(run) benchmarks; C(report) only renders the reports of an existing O(run_id) (no traffic).
    type: str
    choices: [run, report]
    default: run
  plots:
    description: Write PNG plots (needs matplotlib; skipped with a warning when missing).
    type: bool
    default: true
notes:
  - In check mode nothing is sent and nothing is written.
  - Use C(delegate_to) to run it on the controller (default in playbooks/bench.yml) or on the target with the
    engine venv's python.
attributes:
  check_mode:
    support: full
    description: In check mode no request is sent and nothing is written.
  diff_mode:
    support: none
    description: Nothing on the host changes, so there is no diff.
"""

EXAMPLES = r"""
- name: Coherence gate only (fast; after every restart)
  gpuhost.sglang.serving_bench:
    base_url: http://127.0.0.1:30000
    probes_only: true

- name: Sweep with baselines and reports
  gpuhost.sglang.serving_bench:
    base_url: "http://{{ ansible_host }}:30000"
    concurrency: [1, 16, 256]
    input_len: 1024
    output_len: 256
    trials: 3
    fingerprint:
      host: "{{ inventory_hostname }}"
      gpu: 8x RTX PRO 6000
      engine: sglang 0.5.23
    baseline_dir: "{{ playbook_dir }}/../reports/baselines"
    report_dir: "{{ playbook_dir }}/../reports"
  delegate_to: localhost
"""

RETURN = r"""
results:
  description: One entry per concurrency level (see docs/bench.md for every field).
  returned: when load ran
  type: list
  elements: dict
  contains:
    concurrency:
      description: Concurrency level.
      type: int
    output_throughput:
      description: Coherent output tokens per second over the level's duration.
      type: float
    total_throughput:
      description: (prompt + output tokens) per second.
      type: float
    peak_output_throughput:
      description: Largest 1-second bucket of output tokens.
      type: float
    achieved_concurrency:
      description: Sum of request E2E over duration.
      type: float
    ttft_ms:
      description: Time to first token, mean/p50/p90/p99/max in ms.
      type: dict
    tpot_ms:
      description: Time per output token after the first, mean/p50/p90/p99/max in ms.
      type: dict
    itl_ms:
      description: Gaps between text chunks, mean/p50/p90/p99/max in ms.
      type: dict
    e2e_ms:
      description: Request latency, mean/p50/p90/p99/max in ms.
      type: dict
    completed:
      description: Requests that finished without error.
      type: int
    errors:
      description: Failed requests by class.
      type: dict
    client_bound:
      description: The client itself was saturated (see client_bound_reason); latency is an upper bound.
      type: bool
    regression:
      description: Baseline verdict of the level (status recorded/compared/replaced/kept/disabled, checks).
      type: dict
coherence:
  description:
    - "Probe verdicts; C(passed), C(class), C(probes) (per probe: C(answer), C(reasoning), C(finish_reason),
      C(output_tokens), C(max_tokens), C(retried), C(detail)), C(chat_fields), C(retried), C(nan_probe)."
  returned: when probes ran
  type: dict
failed:
  description: True when a gate failed.
  returned: on failure
  type: bool
failure_class:
  description: Class of the first failure (connection_refused, http_5xx, nan, empty, incoherent, regression, ...).
  returned: always
  type: str
model:
  description: Model name used.
  returned: when a server was contacted
  type: str
ignore_eos_accepted:
  description: Whether the server accepted C(ignore_eos) (null when not asked).
  returned: when load ran
  type: bool
ignore_eos_rejection:
  description: The server's answer when it rejected C(ignore_eos) (the run continued without it).
  returned: when the server rejected ignore_eos
  type: str
run_id:
  description: Run identifier.
  returned: always
  type: str
table:
  description: Markdown table lines (Concurrency | Output tok/s | Total tok/s | Peak | TPOT ms | TTFT p50/p99 ms | ITL p99 | Coherent).
  returned: always
  type: list
  elements: str
files:
  description: Report files written.
  returned: always
  type: list
  elements: str
"""

import os
import threading
import time
import uuid

from ansible.module_utils.basic import AnsibleModule, missing_required_lib
from ansible_collections.gpuhost.sglang.plugins.module_utils.bench import client as bench_client
from ansible_collections.gpuhost.sglang.plugins.module_utils.bench import metrics as bench_metrics
from ansible_collections.gpuhost.sglang.plugins.module_utils.bench import report as bench_report
from ansible_collections.gpuhost.sglang.plugins.module_utils.bench import store as bench_store
from ansible_collections.gpuhost.sglang.plugins.module_utils.bench import workload as bench_workload
from ansible_collections.gpuhost.sglang.plugins.module_utils.bench import coherence
from ansible_collections.gpuhost.sglang.plugins.module_utils.bench import server_metrics
from ansible_collections.gpuhost.sglang.plugins.module_utils.bench.probes import DEFAULT_PROBES

MAX_CONCURRENCY = 100000


class BenchFailure(Exception):
    def __init__(self, cls, msg):
        super(BenchFailure, self).__init__(msg)
        self.cls = cls
        self.msg = msg


def parse_concurrency(value):
    """int, list of ints or comma string -> sorted unique list of ints in [1, 100000]; ValueError naming allowed values."""
    allowed = "an int >= 1, a list of ints, or a comma-separated string like '1,16,256'"
    if isinstance(value, bool) or value is None:
        raise ValueError("concurrency must be %s, got %r" % (allowed, value))
    if isinstance(value, int):
        items = [value]
    elif isinstance(value, str):
        items = [x.strip() for x in value.strip().strip("[]").split(",") if x.strip()]
    elif isinstance(value, (list, tuple)):
        items = list(value)
    else:
        raise ValueError("concurrency must be %s, got %r" % (allowed, value))
    out = []
    for it in items:
        try:
            if isinstance(it, bool) or (isinstance(it, float) and not it.is_integer()):
                raise ValueError()
            n = int(it)
        except (TypeError, ValueError):
            raise ValueError("concurrency must be %s; %r is not an int" % (allowed, it))
        if n < 1 or n > MAX_CONCURRENCY:
            raise ValueError("concurrency values must be between 1 and %d, got %d" % (MAX_CONCURRENCY, n))
        out.append(n)
    if not out:
        raise ValueError("concurrency must be %s, got an empty value" % allowed)
    return sorted(set(out))


def validate(p):
    """Early, precise input errors (variable name and allowed values)."""
    errs = []

    def need(name, ok, allowed):
        if not ok:
            errs.append("%s=%r is invalid: allowed %s" % (name, p[name], allowed))

    for name in ("input_len", "output_len", "probe_max_tokens", "trials"):
        need(name, p[name] >= 1, "an int >= 1")
    need("probe_think_tokens", p["probe_think_tokens"] >= 0, "an int >= 0 (0 = no second attempt)")
    need("num_prompts", p["num_prompts"] is None or p["num_prompts"] >= 1, "an int >= 1 (or unset for 2 x concurrency)")
    need("warmup", p["warmup"] >= 0, "an int >= 0")
    need("client_processes", p["client_processes"] >= 0, "an int >= 0 (0 = auto)")
    for name in ("probe_min_pass", "max_incoherent_rate", "max_error_rate", "client_cpu_threshold"):
        need(name, 0.0 <= p[name] <= 1.0, "a number between 0 and 1")
    need("tolerance", 0.0 <= p["tolerance"] <= 10.0, "a number between 0 and 10 (0.1 = 10%)")
    for name in ("timeout", "stall_timeout", "client_lag_threshold_ms"):
        need(name, p[name] > 0, "a number > 0")
    need("min_abs_ms", p["min_abs_ms"] >= 0, "a number >= 0")
    need("temperature", p["temperature"] >= 0, "a number >= 0")
    url = p["base_url"] or ""
    need("base_url", url.startswith("http://") or url.startswith("https://"), "an http:// or https:// URL")
    for i, probe in enumerate(p["probes"] or []):
        if not isinstance(probe, dict) or not isinstance(probe.get("expect"), str) or not probe.get("expect") or not (
                isinstance(probe.get("prompt"), str) or isinstance(probe.get("question"), str)):
            errs.append("probes[%d] is invalid: each probe needs a non-empty string 'expect' and a string 'prompt' "
                        "and/or 'question' (optional 'name')" % i)
    if p["mode"] == "report" and not (p["report_dir"] and p["run_id"]):
        errs.append("mode=report needs report_dir and run_id")
    return errs


def new_run_id():
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + uuid.uuid4().hex[:6]


class Progress(object):
    def __init__(self, report_dir):
        self.report_dir = report_dir

    def __call__(self, line):
        try:
            bench_report.progress(self.report_dir, line)
        except OSError:
            pass


class Ticker(object):
    """Writes a progress line every ``interval`` seconds while a level runs (in-process: request count
    is not visible across processes, so the line shows elapsed time)."""

    def __init__(self, progress, label, interval=5.0):
        self.progress = progress
        self.label = label
        self.interval = interval
        self.stop = threading.Event()
        self.t0 = time.time()
        self.thread = threading.Thread(target=self._run)
        self.thread.daemon = True

    def _run(self):
        while not self.stop.wait(self.interval):
            self.progress("%s running for %.0f s" % (self.label, time.time() - self.t0))

    def __enter__(self):
        if self.progress.report_dir:
            self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        return False


def probe_text(probe, api):
    if api == "chat":
        return probe.get("question") or probe.get("prompt")
    return probe.get("prompt") or probe.get("question")


def probe_failure_verdict(probe, rec, api, chat_fields):
    """Verdict of a probe whose request failed (transport class), naming probe_chat_fields when the server
    refused a request that carried them."""
    detail = rec.get("detail")
    if chat_fields and rec["error"] == "http_4xx":
        detail = "%s; the server refused a request with probe_chat_fields %s: this engine does not take them" % (
            detail, ", ".join(sorted(chat_fields)))
    return {"name": probe.get("name") or probe_text(probe, api), "expect": probe["expect"], "answer": None,
            "reasoning": None, "passed": False, "class": rec["error"], "flags": [], "detail": detail}


def needs_think_budget(verdict, rec):
    """The probe ran out of tokens before answering: reasoning without an answer, or fluent text (no garbage
    flag) cut at max_tokens, which is what template-opened reasoning looks like without a reasoning parser."""
    if rec.get("finish_reason") != "length":
        return False
    return verdict["class"] == "no_answer" or (verdict["class"] == "incoherent" and not verdict["flags"])


def run_probes(p, model, api):
    probes = p["probes"] or DEFAULT_PROBES
    chat_fields = dict(p["probe_chat_fields"] or {}) if api == "chat" else {}

    def bodies_for(items, max_tokens):
        return [bench_client.build_payload(api, model, probe_text(pr, api), max_tokens, temperature=0.0,
                                           extra=chat_fields) for pr in items]

    def send(bodies, timeout):
        recs, dummy = bench_client.run_load(p["base_url"], api, bodies, concurrency=len(bodies), processes=1,
                                            timeout=timeout, stall_timeout=p["stall_timeout"], api_key=p["api_key"],
                                            keep_text=True)
        return recs

    def judge(probe, rec, max_tokens):
        if not rec["ok"]:
            v = probe_failure_verdict(probe, rec, api, chat_fields)
        else:
            v = coherence.probe_verdict(probe, rec.get("content", rec["text"]) or "", reasoning=rec.get("reasoning"),
                                        finish_reason=rec.get("finish_reason"), output_tokens=rec.get("output_tokens"),
                                        max_tokens=max_tokens)
        v["max_tokens"] = max_tokens
        v["retried"] = False
        return v

    bodies = bodies_for(probes, p["probe_max_tokens"])
    if p["nan_probe"]:
        bodies.append(bench_client.build_payload(api, model, probe_text(probes[0], api), p["probe_max_tokens"],
                                                 temperature=0.0, logprobs=True, extra=chat_fields))
    recs = send(bodies, min(p["timeout"], 120.0))
    verdicts = [judge(probe, rec, p["probe_max_tokens"]) for probe, rec in zip(probes, recs)]
    # reasoning models: a probe cut off while thinking gets the thinking budget once more
    again = [i for i, (v, rec) in enumerate(zip(verdicts, recs)) if p["probe_think_tokens"] and rec["ok"]
             and needs_think_budget(v, rec)]
    if again:
        budget = p["probe_max_tokens"] + p["probe_think_tokens"]
        for i, rec in zip(again, send(bodies_for([probes[i] for i in again], budget), p["timeout"])):
            verdicts[i] = judge(probes[i], rec, budget)
            verdicts[i]["retried"] = True
    summary = coherence.summarize(verdicts, p["probe_min_pass"])
    summary["probes"] = verdicts
    summary["api"] = api
    summary["chat_fields"] = chat_fields
    summary["retried"] = len(again)
    nan = {"requested": bool(p["nan_probe"])}
    if p["nan_probe"]:
        rec = recs[-1]
        if rec["ok"]:
            vals = rec.get("logprobs") or []
            nan.update({"supported": bool(vals), "nan": coherence.has_nan(vals), "values": len(vals)})
            if not vals:
                nan["detail"] = "server returned no logprobs (ignored the field)"
        elif rec["error"] == "nan":
            nan.update({"supported": True, "nan": True, "detail": rec.get("detail")})
        else:
            nan.update({"supported": False, "nan": False, "detail": "%s: %s" % (rec["error"], rec.get("detail"))})
        if nan.get("nan"):
            summary["passed"] = False
            summary["class"] = "nan"
    summary["nan_probe"] = nan
    return summary


def level_failures(res, p):
    """Failure (class, message) list for one measured level."""
    out = []
    n = res["requests"] or 1
    errs = res.get("errors") or {}
    nerr = sum(errs.values())
    if nerr and float(nerr) / n > p["max_error_rate"]:
        cls = max(errs.items(), key=lambda kv: kv[1])[0]
        out.append((cls, "c=%d: %d/%d requests failed: %s%s" % (
            res["concurrency"], nerr, res["requests"], ", ".join("%s=%d" % kv for kv in sorted(errs.items())),
            ("; first: " + res["error_samples"][0]) if res.get("error_samples") else "")))
    done = res["completed"]
    if done:
        inc = res["incoherent"]
        if inc and float(inc) / done > p["max_incoherent_rate"]:
            flags = res.get("incoherent_flags") or {}
            cls = "empty" if flags.get("empty") == inc else "incoherent"
            out.append((cls, "c=%d: %d/%d outputs failed coherence checks (%s); sample: %r" % (
                res["concurrency"], inc, done, ", ".join("%s=%d" % kv for kv in sorted(flags.items())),
                (res.get("incoherent_samples") or [""])[0])))
        acc = res.get("token_accounting") or {}
        if p["require_usage"] and acc.get("missing_usage"):
            out.append(("missing_usage", "c=%d: %d/%d responses carried no usage (stream_options.include_usage); "
                        "token counts would be estimates (%s). Set require_usage=false to accept that." % (
                            res["concurrency"], acc["missing_usage"], done, acc.get("fallback"))))
    sm = res.get("server_metrics") or {}
    if p.get("server_metrics") == "require" and sm.get("status") != "ok":
        out.append(("server_metrics", "c=%d: %s" % (res["concurrency"], sm.get("line") or sm.get("reason"))))
    return out


def measure_level(p, model, api, bodies, prompt_tokens, conc, count_tokens, progress, trial):
    procs = p["client_processes"] or bench_client.auto_processes(conc)
    label = "c=%d trial %d/%d" % (conc, trial + 1, p["trials"])
    progress("%s started: %d requests, %d client process(es)" % (label, len(bodies), procs))
    before, why = server_metrics.begin(p["base_url"], p["server_metrics"], model)
    with Ticker(progress, label):
        recs, stats = bench_client.run_load(
            p["base_url"], api, bodies, concurrency=conc, processes=procs, timeout=p["timeout"],
            stall_timeout=p["stall_timeout"], api_key=p["api_key"], count_tokens=count_tokens,
            prompt_tokens=prompt_tokens, checks=tuple(p["load_checks"]))
    res = bench_metrics.compute(recs, conc)
    res["server_metrics"] = (server_metrics.finish(p["base_url"], before, recs, p["server_metrics_tolerance"], model)
                             if before else {"status": "unavailable" if why != "off" else "off", "reason": why})
    progress("%s %s" % (label, res["server_metrics"].get("line") or "server metrics: %s" % why))
    client, bound, reason = bench_client.client_verdict(stats, p["client_cpu_threshold"], p["client_lag_threshold_ms"])
    res["client"] = client
    res["client_bound"] = bound
    res["client_bound_reason"] = reason
    res["error_samples"] = [r.get("detail") or r.get("error") for r in recs if not r.get("ok")][:3]
    flags = {}
    samples = []
    for r in recs:
        if r.get("ok") and not r.get("coherent"):
            for f in r.get("flags") or []:
                flags[f] = flags.get(f, 0) + 1
            if len(samples) < 3:
                samples.append(r.get("text"))
    res["incoherent_flags"] = flags
    res["incoherent_samples"] = samples
    ok = [r for r in recs if r.get("ok")]
    usage = [r for r in ok if r.get("usage")]
    acc = {"usage": len(usage), "missing_usage": len(ok) - len(usage),
           "fallback": "tokenizer" if count_tokens else "chunk count"}
    pairs = [(r["output_tokens"], r["tokenizer_tokens"]) for r in usage if r.get("tokenizer_tokens") is not None]
    if pairs:
        diff = sum(abs(a - b) for a, b in pairs)
        acc["tokenizer_vs_usage_abs_diff"] = diff
        acc["tokenizer_vs_usage_rel"] = round(float(diff) / max(1, sum(a for a, dummy in pairs)), 4)
        acc["tokenizer_mismatched_requests"] = len([1 for a, b in pairs if a != b])
    chunks = sum(r.get("chunks", 0) for r in usage)
    if usage:
        acc["chunks_vs_usage"] = round(float(chunks) / max(1, sum(r["output_tokens"] for r in usage)), 4)
    res["token_accounting"] = acc
    res["num_prompts"] = len(bodies)
    res["trial"] = trial + 1
    progress("%s done: %.1f output tok/s, TTFT p50 %s ms, TPOT p50 %s ms, errors %s, incoherent %d%s" % (
        label, res["output_throughput"], res["ttft_ms"]["p50"], res["tpot_ms"]["p50"], res["errors"] or 0,
        res["incoherent"], ", CLIENT-BOUND (%s)" % reason if bound else ""))
    return res


def preflight_ignore_eos(p, model, api, prompt):
    """One short request with ignore_eos; a 4xx naming/rejecting the field -> retry without it."""
    body = bench_client.build_payload(api, model, prompt, 4, p["temperature"], ignore_eos=True)
    recs, dummy = bench_client.run_load(p["base_url"], api, [body], 1, 1, timeout=min(p["timeout"], 120.0),
                                        stall_timeout=p["stall_timeout"], api_key=p["api_key"])
    rec = recs[0]
    if rec["ok"]:
        return True, None
    detail = rec.get("detail") or ""
    if rec["error"] == "http_4xx" and (" 422" in detail[:9] or "ignore_eos" in detail):
        body = bench_client.build_payload(api, model, prompt, 4, p["temperature"], ignore_eos=False)
        recs, dummy = bench_client.run_load(p["base_url"], api, [body], 1, 1, timeout=min(p["timeout"], 120.0),
                                            stall_timeout=p["stall_timeout"], api_key=p["api_key"])
        if recs[0]["ok"]:
            return False, detail[:200]
        rec = recs[0]
    raise BenchFailure(rec["error"], "preflight request failed: %s" % (rec.get("detail") or rec["error"]))


def history_line(run_id, key, res, passed):
    return {"ts": bench_store.now_iso(), "run_id": run_id, "key": key, "concurrency": res["concurrency"],
            "output_throughput": res["output_throughput"], "total_throughput": res["total_throughput"],
            "peak_output_throughput": res["peak_output_throughput"], "ttft_p50_ms": res["ttft_ms"]["p50"],
            "ttft_p99_ms": res["ttft_ms"]["p99"], "tpot_p50_ms": res["tpot_ms"]["p50"],
            "itl_p99_ms": res["itl_ms"]["p99"], "errors": res["errors"], "coherent": res["coherent"],
            "completed": res["completed"], "client_bound": res["client_bound"], "passed": passed}


def main():
    module = AnsibleModule(
        argument_spec=dict(
            base_url=dict(type="str", required=True),
            model=dict(type="str"),
            api=dict(type="str", choices=["completions", "chat"], default="completions"),
            concurrency=dict(type="raw", default=1),
            num_prompts=dict(type="int"),
            input_len=dict(type="int", default=128),
            output_len=dict(type="int", default=64),
            dataset=dict(type="path"),
            tokenizer=dict(type="path"),
            ignore_eos=dict(type="bool", default=True),
            temperature=dict(type="float", default=0.0),
            seed=dict(type="int", default=0),
            warmup=dict(type="int", default=2),
            probes=dict(type="list", elements="dict"),
            run_probes=dict(type="bool", default=True),
            probes_only=dict(type="bool", default=False),
            probe_max_tokens=dict(type="int", default=32, no_log=False),
            probe_think_tokens=dict(type="int", default=1024, no_log=False),
            probe_chat_fields=dict(type="dict", default={}),
            probe_min_pass=dict(type="float", default=1.0, no_log=False),
            nan_probe=dict(type="bool", default=True),
            load_checks=dict(type="list", elements="str", choices=list(coherence.DETECTORS),
                             default=list(coherence.DETECTORS)),
            max_incoherent_rate=dict(type="float", default=0.05),
            max_error_rate=dict(type="float", default=0.0),
            require_usage=dict(type="bool", default=True),
            api_key=dict(type="str", no_log=True),
            timeout=dict(type="float", default=300.0),
            stall_timeout=dict(type="float", default=60.0),
            server_metrics=dict(type="str", choices=["auto", "require", "off"], default="auto"),
            server_metrics_tolerance=dict(type="float", default=0.02),
            client_processes=dict(type="int", default=0),
            client_lag_threshold_ms=dict(type="float", default=1.0),
            client_cpu_threshold=dict(type="float", default=0.9),
            trials=dict(type="int", default=1),
            tolerance=dict(type="float", default=0.1),
            min_abs_ms=dict(type="float", default=1.0),
            gate_metrics=dict(type="list", elements="str", choices=sorted(bench_metrics.GATE_METRICS),
                              default=["output_throughput", "ttft_ms.p50", "tpot_ms.p50"]),
            fingerprint=dict(type="dict", default={}),
            baseline_dir=dict(type="path"),
            update_baseline=dict(type="bool", default=False),
            report_dir=dict(type="path"),
            run_id=dict(type="str"),
            mode=dict(type="str", choices=["run", "report"], default="run"),
            plots=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    p = module.params
    run_id = p["run_id"] or new_run_id()
    out = {"changed": False, "run_id": run_id, "table": [], "files": [], "failure_class": "ok"}
    errs = validate(p)
    try:
        levels = parse_concurrency(p["concurrency"])
    except ValueError as e:
        errs.append(str(e))
        levels = []
    if errs:
        out["failure_class"] = "invalid_input"
        module.fail_json(msg="invalid input: " + "; ".join(errs), **out)

    if p["mode"] == "report":
        doc = bench_store.read_json(bench_store.run_path(p["report_dir"], run_id))
        if doc is None:
            out["failure_class"] = "invalid_input"
            module.fail_json(msg="mode=report: no run file for run_id %s under %s" % (run_id, p["report_dir"]), **out)
        files, warns = ([], [])
        if not module.check_mode:
            files, warns = bench_report.write_reports(p["report_dir"], doc, p["plots"])
            out["changed"] = True
        for w in warns:
            module.warn(w)
        lvls = [v for dummy, v in sorted(doc.get("levels", {}).items(), key=lambda kv: int(kv[0]))]
        out.update(table=bench_report.table_lines(lvls), files=files, results=lvls, coherence=doc.get("coherence"),
                   failures=doc.get("failures", []))
        if doc.get("failures"):
            out["failure_class"] = doc.get("failure_class") or "failed"
            module.fail_json(msg="run %s has failures: %s" % (run_id, "; ".join(doc["failures"])), **out)
        module.exit_json(**out)

    if module.check_mode:
        module.exit_json(skipped=True, msg="check mode: no requests sent, nothing written", **out)
    if not bench_client.HAS_AIOHTTP:
        out["failure_class"] = "missing_library"
        module.fail_json(msg=missing_required_lib("aiohttp"), exception=str(bench_client.AIOHTTP_IMPORT_ERROR), **out)

    report_dir = p["report_dir"]
    progress = Progress(report_dir)
    api = p["api"]
    state = {"levels": {}, "failures": [], "coherence": None, "key": None, "workload": None}

    def save_run():
        if not report_dir:
            return

        def upd(doc):
            doc.setdefault("levels", {}).update(state["levels"])
            doc["fingerprint"] = p["fingerprint"]
            doc["base_url"] = p["base_url"]
            if state["workload"] is not None:
                doc["workload"] = state["workload"]
                doc["key"] = state["key"]
            if state["coherence"] is not None:
                doc["coherence"] = state["coherence"]
            for f in state["failures"]:
                if f not in doc.setdefault("failures", []):
                    doc["failures"].append(f)
            if state.get("failure_class"):
                doc["failure_class"] = state["failure_class"]
        doc = bench_store.update_run(report_dir, run_id, upd)
        out["changed"] = True
        files, warns = bench_report.write_reports(report_dir, doc, p["plots"] and not p["probes_only"])
        for w in warns:
            if w not in out.setdefault("warnings_seen", []):
                out["warnings_seen"].append(w)
                module.warn(w)
        out["files"] = [bench_store.run_path(report_dir, run_id)] + files
        lvls = [v for dummy, v in sorted(doc.get("levels", {}).items(), key=lambda kv: int(kv[0]))]
        out["table"] = bench_report.table_lines(lvls)

    def fail(cls, msg):
        state["failures"].append("%s: %s" % (cls, msg))
        state["failure_class"] = cls
        out["failure_class"] = cls
        out["results"] = [v for dummy, v in sorted(state["levels"].items(), key=lambda kv: int(kv[0]))]
        out["coherence"] = state["coherence"]
        if not out["table"]:
            out["table"] = bench_report.table_lines(out["results"])
        try:
            save_run()
        except OSError as e:
            msg += " (saving the partial results failed too: %s)" % e
        progress("FAILED %s: %s" % (cls, msg))
        out.pop("warnings_seen", None)
        module.fail_json(msg="serving_bench failed [%s]: %s" % (cls, msg), **out)

    try:
        # 1. model
        models, err = bench_client.get_models(p["base_url"], p["api_key"], timeout=min(p["timeout"], 15.0))
        model = p["model"]
        fatal = ("connection_refused", "connect_error", "connect_timeout", "http_5xx")
        if err is not None and (model is None or err[0] in fatal):
            raise BenchFailure(err[0], "cannot list models at %s: %s" % (p["base_url"], err[1]))
        if model is None:
            if not models:
                raise BenchFailure("model_not_found", "/v1/models lists no model; set the model option")
            model = models[0]
        elif models and model not in models:
            raise BenchFailure("model_not_found", "model %r is not served at %s (served: %s)" % (
                model, p["base_url"], ", ".join(models[:10])))
        out["model"] = model

        # 2. coherence probes
        if p["run_probes"] or p["probes_only"]:
            t0 = time.time()
            coh = run_probes(p, model, api)
            coh["seconds"] = round(time.time() - t0, 3)
            state["coherence"] = coh
            out["coherence"] = coh
            progress("coherence probes: %s (%d/%d, class %s) in %.2f s" % (
                "passed" if coh["passed"] else "FAILED", coh["probes_passed"], coh["probes_total"], coh["class"],
                coh["seconds"]))
            if not coh["passed"]:
                bad = [v for v in coh["probes"] if not v["passed"]]
                detail = "; ".join(("%s: expected %r: %s" % (v["name"], v["expect"], v["detail"]))
                                   if v["class"] == "no_answer" else "%s: expected %r, got %r%s" % (
                    v["name"], v["expect"], v.get("answer"), (" (%s)" % v["detail"]) if v.get("detail") else "")
                    for v in bad[:3])
                if coh["class"] == "nan":
                    detail = "NaN probe: %s. %s" % (coh["nan_probe"].get("detail") or "NaN/inf logprobs", detail)
                raise BenchFailure(coh["class"], "coherence probes failed (%d/%d passed): %s" % (
                    coh["probes_passed"], coh["probes_total"], detail))
        if p["probes_only"]:
            if report_dir:
                save_run()
            out["msg"] = "coherence probes passed (%d/%d) in %.2f s" % (
                state["coherence"]["probes_passed"], state["coherence"]["probes_total"], state["coherence"]["seconds"])
            module.exit_json(**out)

        # 3. workload
        tok = None
        if p["tokenizer"]:
            try:
                tok = bench_workload.load_tokenizer(p["tokenizer"])
            except bench_workload.TokenizerError as e:
                raise BenchFailure("invalid_input", "tokenizer: %s" % e)
        count_tokens = tok.count if tok is not None else None
        workload = {"api": api, "model": model, "input_len": p["input_len"], "output_len": p["output_len"],
                    "num_prompts": p["num_prompts"], "ignore_eos": p["ignore_eos"], "temperature": p["temperature"],
                    "seed": p["seed"], "dataset": os.path.basename(p["dataset"]) if p["dataset"] else None,
                    "tokenizer": bool(p["tokenizer"])}
        key = bench_store.fingerprint_key(p["fingerprint"], workload)
        state["workload"] = workload
        state["key"] = key
        maxn = max(p["num_prompts"] or max(2 * c, 8) for c in levels)
        if p["dataset"]:
            try:
                prompts, dummy = bench_workload.load_dataset(p["dataset"], maxn, p["seed"])
            except ValueError as e:
                raise BenchFailure("invalid_input", "dataset: %s" % e)
            ptoks = [tok.count(x) if tok else None for x in prompts]
        else:
            prompts, ptoks = bench_workload.random_prompts(maxn, p["input_len"], p["seed"], tok)

        # 4. ignore_eos support + warmup
        accepted = None
        if p["ignore_eos"]:
            accepted, why = preflight_ignore_eos(p, model, api, prompts[0])
            if not accepted:
                out["ignore_eos_rejection"] = why
                module.warn("server rejected ignore_eos (%s); measuring without it, outputs may stop early" % why)
        out["ignore_eos_accepted"] = accepted
        use_eos = bool(p["ignore_eos"] and accepted)
        if p["warmup"]:
            wb = [bench_client.build_payload(api, model, prompts[i % len(prompts)], p["output_len"], p["temperature"],
                                             use_eos) for i in range(p["warmup"])]
            wrecs, dummy = bench_client.run_load(p["base_url"], api, wb, p["warmup"], 1, p["timeout"], p["stall_timeout"],
                                                 p["api_key"])
            werr = [r for r in wrecs if not r["ok"]]
            if werr:
                raise BenchFailure(werr[0]["error"], "warmup failed: %s" % (werr[0].get("detail") or werr[0]["error"]))

        # 5. levels
        for conc in levels:
            n = p["num_prompts"] or max(2 * conc, 8)
            bodies = [bench_client.build_payload(api, model, prompts[i], p["output_len"], p["temperature"], use_eos)
                      for i in range(n)]
            trial_results = []
            for t in range(p["trials"]):
                res = measure_level(p, model, api, bodies, ptoks[:n], conc, count_tokens, progress, t)
                trial_results.append(res)
                fails = level_failures(res, p)
                if fails:
                    res["passed"] = False
                    res["regression"] = {"status": "not_checked"}
                    res["ignore_eos"] = use_eos
                    state["levels"][str(conc)] = res
                    if report_dir:
                        bench_store.append_jsonl(os.path.join(report_dir, "history.jsonl"),
                                                 history_line(run_id, key, res, False))
                    cls, msg = fails[0]
                    raise BenchFailure(cls, msg + ("" if len(fails) == 1 else " (also: %s)" % "; ".join(
                        "%s: %s" % f for f in fails[1:])))
            agg = bench_metrics.aggregate_trials(trial_results)
            ordered = sorted(trial_results, key=lambda r: r["output_throughput"])
            res = dict(ordered[len(ordered) // 2])
            res["trials"] = {"n": p["trials"], "metrics": agg}
            res["ignore_eos"] = use_eos
            reg = {"status": "disabled", "passed": True, "checks": [], "key": key}
            if p["baseline_dir"]:
                base = bench_store.load_baseline(p["baseline_dir"], key)
                base_level = (base or {}).get("levels", {}).get(str(conc))
                metrics = list(p["gate_metrics"])
                floor = p["min_abs_ms"]
                if res["client_bound"]:
                    # latency the client may have inflated by up to its own lag: only changes well beyond it count
                    floor = max(floor, 2.0 * (res["client"].get("max_lag_p99_ms") or 0.0))
                    reg["note"] = "client-bound level: latency changes below %.1f ms (2 x client lag p99) ignored" % floor
                if base_level is not None:
                    reg["checks"] = bench_store.compare(agg, base_level, metrics, p["tolerance"], floor)
                    reg["status"] = "compared"
                    reg["passed"] = all(c["passed"] for c in reg["checks"])
                    reg["baseline_run_id"] = base_level.get("run_id")
                if p["update_baseline"] or base_level is None:
                    reg["status"] = bench_store.record_level(p["baseline_dir"], key, p["fingerprint"], workload, conc,
                                                             agg, p["trials"], run_id, replace=p["update_baseline"])
                    if p["update_baseline"]:
                        reg["passed"] = True  # an explicit replacement is not a regression verdict
            res["regression"] = reg
            res["passed"] = reg["passed"]
            state["levels"][str(conc)] = res
            if report_dir:
                bench_store.append_jsonl(os.path.join(report_dir, "history.jsonl"),
                                         history_line(run_id, key, res, reg["passed"]))
                save_run()
            progress("c=%d %s" % (conc, "passed" if reg["passed"] else "REGRESSION"))
            if not reg["passed"]:
                bad = [c for c in reg["checks"] if not c["passed"]]
                raise BenchFailure("regression", "c=%d: %s" % (conc, "; ".join(
                    "%s baseline %s now %s delta %+.1f%% > threshold %.1f%%" % (
                        c["metric"], c["baseline"], c["now"], c["delta_pct"], 100 * c["threshold"]) for c in bad)))
    except BenchFailure as e:
        fail(e.cls, e.msg)
    except Exception as e:  # pylint: disable=broad-except
        fail("internal_error", "%s: %s" % (type(e).__name__, e))

    out["results"] = [v for dummy, v in sorted(state["levels"].items(), key=lambda kv: int(kv[0]))]
    out["coherence"] = state["coherence"]
    if report_dir:
        save_run()
    else:
        out["table"] = bench_report.table_lines(out["results"])
    out.pop("warnings_seen", None)
    out["msg"] = "serving_bench passed: %s" % ", ".join(
        "c=%s %.1f tok/s" % (r["concurrency"], r["output_throughput"]) for r in out["results"])
    module.exit_json(**out)


if __name__ == "__main__":
    main()
