# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The serving_bench run: one class, one step per method, one place that catches a failure and saves what was
measured (the module keeps docs, argument spec and a short main(), as kubernetes.core's k8s.py does with
module_utils/k8s/runner.py).

``BenchRun(params, client=...)``: ``client`` is anything with bench_client's functions (get_models, build_payload,
run_load, auto_processes, client_verdict); the unit tests pass a fake one. ``execute()`` returns a ``Result``:
``failed``, ``msg`` and ``out`` (the module's return values) and ``warnings`` (each to be passed to module.warn).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math
import os
import threading
import time
import uuid

from ansible_collections.gpuhost.sglang.plugins.module_utils.bench import client as bench_client
from ansible_collections.gpuhost.sglang.plugins.module_utils.bench import metrics as bench_metrics
from ansible_collections.gpuhost.sglang.plugins.module_utils.bench import report as bench_report
from ansible_collections.gpuhost.sglang.plugins.module_utils.bench import store as bench_store
from ansible_collections.gpuhost.sglang.plugins.module_utils.bench import workload as bench_workload
from ansible_collections.gpuhost.sglang.plugins.module_utils.bench import coherence
from ansible_collections.gpuhost.sglang.plugins.module_utils.bench import gpu_health as bench_health
from ansible_collections.gpuhost.sglang.plugins.module_utils.bench import server_limits
from ansible_collections.gpuhost.sglang.plugins.module_utils.bench import server_metrics
from ansible_collections.gpuhost.sglang.plugins.module_utils.bench.inputs import capacity_errors, parse_concurrency, validate
from ansible_collections.gpuhost.sglang.plugins.module_utils.bench.probes import DEFAULT_PROBES

MAX_RESIZE = 100.0  # a calibration trial grows a level at most 100x


class BenchFailure(Exception):
    def __init__(self, cls, msg):
        super(BenchFailure, self).__init__(msg)
        self.cls = cls
        self.msg = msg


# requests of the coherence sample (sent without ignore_eos when the load uses it)
COHERENCE_SAMPLE = 8


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


def history_line(run_id, key, res, passed):
    return {"ts": bench_store.now_iso(), "run_id": run_id, "key": key, "concurrency": res["concurrency"],
            "output_throughput": res["output_throughput"], "total_throughput": res["total_throughput"],
            "peak_output_throughput": res["peak_output_throughput"], "ttft_p50_ms": res["ttft_ms"]["p50"],
            "ttft_p99_ms": res["ttft_ms"]["p99"], "tpot_p50_ms": res["tpot_ms"]["p50"],
            "itl_p99_ms": res["itl_ms"]["p99"], "errors": res["errors"], "coherent": res["coherent"],
            "completed": res["completed"], "client_bound": res["client_bound"], "counts": res.get("counts"),
            "passed": passed,
            "gpu_health": res.get("gpu_health")}


def regression_text(conc, checks):
    """``c=16: output_throughput baseline 492.8 now 201.1 delta +59.2% > threshold 40.0%; ...`` (the failing checks)."""
    return "c=%d: %s" % (conc, "; ".join("%s baseline %s now %s delta %+.1f%% > threshold %.1f%%" % (
        c["metric"], c["baseline"], c["now"], c["delta_pct"], 100 * c["threshold"]) for c in checks if not c["passed"]))


def sorted_levels(levels):
    """Level results of a ``{"<c>": result}`` dict in concurrency order."""
    return [v for dummy, v in sorted(levels.items(), key=lambda kv: int(kv[0]))]


class Result(object):
    def __init__(self, out, failed=False, msg=None, warnings=None):
        self.out = out
        self.failed = failed
        self.msg = msg
        self.warnings = warnings or []


class BenchRun(object):
    """One serving_bench invocation. State: ``levels`` (measured results by concurrency), ``failures``,
    ``coherence``, ``workload``/``key`` (baseline identity), ``model``, the prompts; ``out`` is what the module
    returns. Steps: resolve_model, probe, build_workload, preflight, warmup, measure, gate."""

    def __init__(self, params, client=bench_client, check_mode=False):
        self.p = params
        self.client = client
        self.check_mode = check_mode
        self.api = params["api"]
        self.report_dir = params["report_dir"]
        self.run_id = params["run_id"] or new_run_id()
        self.progress = Progress(self.report_dir)
        self.out = {"changed": False, "run_id": self.run_id, "table": [], "legend": bench_report.legend_lines(),
                    "files": [], "failure_class": "ok"}
        self.warnings = []
        self.levels = {}
        self.failures = []
        self.failure_class = None
        self.coherence = None
        self.workload = None
        self.key = None
        self.model = None
        self.prompts = []
        self.prompt_tokens = []
        self.count_tokens = None
        self.tokenizer = None
        self.use_eos = False
        self.concurrency = []
        self.health_state = bench_health.state(params.get("gpu_health"))
        self.queue_bound = {}
        self.warmups = {}

    # -- entry points -------------------------------------------------------------------------------------

    def execute(self):
        """Validate, then run (or render the reports in mode=report). Never raises."""
        errs = validate(self.p)
        try:
            self.concurrency = parse_concurrency(self.p["concurrency"])
        except ValueError as e:
            errs.append(str(e))
        if not errs and self.p["mode"] == "run" and not self.p["probes_only"]:
            errs += capacity_errors(self.concurrency)
        if errs:
            self.out["failure_class"] = "invalid_input"
            return Result(self.out, True, "invalid input: " + "; ".join(errs))
        if self.p["mode"] == "report":
            return self.render_report()
        if self.p["mode"] == "finalize":
            return self.finalize()
        if self.check_mode:
            self.out["skipped"] = True
            return Result(self.out, msg="check mode: no requests sent, nothing written")
        if not getattr(self.client, "HAS_AIOHTTP", True):
            self.out["failure_class"] = "missing_library"
            self.out["exception"] = str(getattr(self.client, "AIOHTTP_IMPORT_ERROR", ""))
            # imported here: the rest of the runner is plain Python (benchmarks/gpu/sglang/health_bench.py runs it
            # on a machine without Ansible)
            from ansible.module_utils.basic import missing_required_lib  # pylint: disable=import-outside-toplevel
            return Result(self.out, True, missing_required_lib("aiohttp"))
        return self.run()

    def run(self):
        """The steps, and the ONE place that turns a failure into a saved partial result and a message."""
        try:
            self.resolve_model()
            if not self.p["probes_only"]:
                self.check_server_limits()
            if self.p["run_probes"] or self.p["probes_only"]:
                self.probe()
            if self.p["probes_only"]:
                return self.finish_probes_only()
            self.build_workload()
            self.preflight()
            self.coherence_sample()
            for conc in self.concurrency:
                self.warmup(conc)
                self.gate(conc, self.measure(conc))
        except BenchFailure as e:
            return self.failed(e.cls, e.msg)
        except Exception as e:  # pylint: disable=broad-except
            return self.failed("internal_error", "%s: %s" % (type(e).__name__, e))
        return self.finish()

    # -- steps ----------------------------------------------------------------------------------------------

    def resolve_model(self):
        p = self.p
        models, err = self.client.get_models(p["base_url"], p["api_key"], timeout=min(p["timeout"], 15.0))
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
        self.model = model
        self.out["model"] = model

    def check_server_limits(self):
        """Levels above the server's running-request cap (SGLang /get_server_info) measure its queue: refused
        unless allow_queue_bound (bench/server_limits.py)."""
        p = self.p
        limits, why = self.client.get_server_info(p["base_url"], p["api_key"], timeout=min(p["timeout"], 15.0))
        self.out["server_limits"] = limits
        if limits is None:
            self.warnings.append("server limits unknown (%s): queue-bound levels are not detected" % why)
            return
        err, warns, bound = server_limits.verdict(self.concurrency, limits, p["allow_queue_bound"], p["input_len"],
                                                  p["output_len"])
        self.queue_bound = bound
        self.warnings.extend(warns)
        if err:
            raise BenchFailure("queue_bound", err)

    def probe(self):
        t0 = time.time()
        coh = self.run_probes()
        coh["seconds"] = round(time.time() - t0, 3)
        self.coherence = coh
        self.out["coherence"] = coh
        self.progress("coherence probes: %s (%d/%d, class %s) in %.2f s" % (
            "passed" if coh["passed"] else "FAILED", coh["probes_passed"], coh["probes_total"], coh["class"],
            coh["seconds"]))
        if coh["passed"]:
            return
        bad = [v for v in coh["probes"] if not v["passed"]]
        detail = "; ".join(("%s: expected %r: %s" % (v["name"], v["expect"], v["detail"]))
                           if v["class"] == "no_answer" else "%s: expected %r, got %r%s" % (
            v["name"], v["expect"], v.get("answer"), (" (%s)" % v["detail"]) if v.get("detail") else "")
            for v in bad[:3])
        if coh["class"] == "nan":
            detail = "NaN probe: %s. %s" % (coh["nan_probe"].get("detail") or "NaN/inf logprobs", detail)
        raise BenchFailure(coh["class"], "coherence probes failed (%d/%d passed): %s" % (
            coh["probes_passed"], coh["probes_total"], detail))

    def _send(self, bodies, timeout):
        recs, dummy = self.client.run_load(self.p["base_url"], self.api, bodies, concurrency=len(bodies), processes=1,
                                           timeout=timeout, stall_timeout=self.p["stall_timeout"],
                                           api_key=self.p["api_key"], keep_text=True)
        return recs

    def _judge(self, probe, rec, max_tokens, chat_fields):
        if not rec["ok"]:
            v = probe_failure_verdict(probe, rec, self.api, chat_fields)
        else:
            v = coherence.probe_verdict(probe, rec.get("content", rec["text"]) or "", reasoning=rec.get("reasoning"),
                                        finish_reason=rec.get("finish_reason"), output_tokens=rec.get("output_tokens"),
                                        max_tokens=max_tokens)
        v["max_tokens"] = max_tokens
        v["retried"] = False
        return v

    def run_probes(self):
        p, api, model = self.p, self.api, self.model
        probes = p["probes"] or DEFAULT_PROBES
        chat_fields = dict(p["probe_chat_fields"] or {}) if api == "chat" else {}

        def bodies_for(items, max_tokens):
            return [self.client.build_payload(api, model, probe_text(pr, api), max_tokens, temperature=0.0,
                                              extra=chat_fields) for pr in items]

        bodies = bodies_for(probes, p["probe_max_tokens"])
        if p["nan_probe"]:
            bodies.append(self.client.build_payload(api, model, probe_text(probes[0], api), p["probe_max_tokens"],
                                                    temperature=0.0, logprobs=True, extra=chat_fields))
        recs = self._send(bodies, min(p["timeout"], 120.0))
        verdicts = [self._judge(probe, rec, p["probe_max_tokens"], chat_fields) for probe, rec in zip(probes, recs)]
        # reasoning models: a probe cut off while thinking gets the thinking budget once more
        again = [i for i, (v, rec) in enumerate(zip(verdicts, recs)) if p["probe_think_tokens"] and rec["ok"]
                 and needs_think_budget(v, rec)]
        if again:
            budget = p["probe_max_tokens"] + p["probe_think_tokens"]
            for i, rec in zip(again, self._send(bodies_for([probes[i] for i in again], budget), p["timeout"])):
                verdicts[i] = self._judge(probes[i], rec, budget, chat_fields)
                verdicts[i]["retried"] = True
        summary = coherence.summarize(verdicts, p["probe_min_pass"])
        summary.update(probes=verdicts, api=api, chat_fields=chat_fields, retried=len(again))
        summary["nan_probe"] = self.nan_verdict(recs[-1] if p["nan_probe"] else None)
        if summary["nan_probe"].get("nan"):
            summary["passed"] = False
            summary["class"] = "nan"
        return summary

    @staticmethod
    def nan_verdict(rec):
        nan = {"requested": rec is not None}
        if rec is None:
            return nan
        if rec["ok"]:
            vals = rec.get("logprobs") or []
            nan.update({"supported": bool(vals), "nan": coherence.has_nan(vals), "values": len(vals)})
            if not vals:
                nan["detail"] = "server returned no logprobs (ignored the field)"
        elif rec["error"] == "nan":
            nan.update({"supported": True, "nan": True, "detail": rec.get("detail")})
        else:
            nan.update({"supported": False, "nan": False, "detail": "%s: %s" % (rec["error"], rec.get("detail"))})
        return nan

    def build_workload(self):
        p = self.p
        tok = None
        if p["tokenizer"]:
            try:
                tok = bench_workload.load_tokenizer(p["tokenizer"])
            except bench_workload.TokenizerError as e:
                raise BenchFailure("invalid_input", "tokenizer: %s" % e)
        self.count_tokens = tok.count if tok is not None else None
        self.workload = {"api": self.api, "model": self.model, "input_len": p["input_len"],
                         "output_len": p["output_len"], "num_prompts": p["num_prompts"], "ignore_eos": p["ignore_eos"],
                         "temperature": p["temperature"], "seed": p["seed"],
                         "dataset": os.path.basename(p["dataset"]) if p["dataset"] else None,
                         "tokenizer": bool(p["tokenizer"])}
        self.key = bench_store.fingerprint_key(p["fingerprint"], self.workload)
        self.tokenizer = tok
        self.ensure_prompts(max(self.requests_for(c) for c in self.concurrency))

    def ensure_prompts(self, n):
        """At least ``n`` distinct prompts (random prompts are regenerated: the same seed gives the same first
        ones); a dataset shorter than ``n`` is cycled."""
        p, tok = self.p, self.tokenizer
        if len(self.prompts) >= n or (self.prompts and p["dataset"]):
            return
        if p["dataset"]:
            try:
                self.prompts, dummy = bench_workload.load_dataset(p["dataset"], n, p["seed"])
            except ValueError as e:
                raise BenchFailure("invalid_input", "dataset: %s" % e)
            self.prompt_tokens = [tok.count(x) if tok else None for x in self.prompts]
        else:
            self.prompts, self.prompt_tokens = bench_workload.random_prompts(n, p["input_len"], p["seed"], tok)

    def requests_for(self, conc):
        return max(self.p["num_prompts"] or max(2 * conc, 8), self.p["min_requests"])

    def _one(self, body):
        p = self.p
        recs, dummy = self.client.run_load(p["base_url"], self.api, [body], 1, 1, timeout=min(p["timeout"], 120.0),
                                           stall_timeout=p["stall_timeout"], api_key=p["api_key"])
        return recs[0]

    def preflight(self):
        """ignore_eos support: one short request with it; a 4xx naming/rejecting the field -> retry without it."""
        p = self.p
        accepted = None
        if p["ignore_eos"]:
            accepted = True
            rec = self._one(self.client.build_payload(self.api, self.model, self.prompts[0], 4, p["temperature"],
                                                      ignore_eos=True))
            if not rec["ok"]:
                detail = rec.get("detail") or ""
                if rec["error"] == "http_4xx" and (" 422" in detail[:9] or "ignore_eos" in detail):
                    rec = self._one(self.client.build_payload(self.api, self.model, self.prompts[0], 4,
                                                              p["temperature"], ignore_eos=False))
                if not rec["ok"]:
                    raise BenchFailure(rec["error"], "preflight request failed: %s" % (rec.get("detail") or rec["error"]))
                accepted = False
                self.out["ignore_eos_rejection"] = detail[:200]
                self.warnings.append("server rejected ignore_eos (%s); measuring without it, outputs may stop early"
                                     % detail[:200])
        self.out["ignore_eos_accepted"] = accepted
        self.use_eos = bool(p["ignore_eos"] and accepted)

    def coherence_sample(self):
        """Under ignore_eos: a few requests of the workload sent without it, judged for what the load outputs are not
        (they run past the model's end; see coherence.EOS_IGNORED_SKIPS). Too many flagged -> class incoherent."""
        p = self.p
        if not self.use_eos:
            return
        n = min(COHERENCE_SAMPLE, p["num_prompts"] or COHERENCE_SAMPLE)
        bodies = [self.client.build_payload(self.api, self.model, self.prompts[i % len(self.prompts)], p["output_len"],
                                            p["temperature"], False) for i in range(n)]
        recs, dummy = self.client.run_load(p["base_url"], self.api, bodies, n, 1, timeout=min(p["timeout"], 120.0),
                                           stall_timeout=p["stall_timeout"], api_key=p["api_key"],
                                           checks=tuple(p["load_checks"]), keep_text=True)
        ok = [r for r in recs if r.get("ok")]
        # only what the load itself cannot judge fails here; the other checks run on every load output
        bad = [r for r in ok if set(r.get("flags") or []) & set(coherence.EOS_IGNORED_SKIPS)]
        flags = {}
        for r in bad:
            for f in r.get("flags") or []:
                flags[f] = flags.get(f, 0) + 1
        self.out["coherence_sample"] = {"requests": n, "completed": len(ok), "incoherent": len(bad), "flags": flags,
                                        "samples": [r.get("text") for r in bad[:3]]}
        if ok and float(len(bad)) / len(ok) > p["max_incoherent_rate"]:
            raise BenchFailure("incoherent",
                               "coherence sample (%d requests without ignore_eos): %d/%d outputs failed coherence "
                               "checks (%s); sample: %r" % (n, len(bad), len(ok), ", ".join(
                                   "%s=%d" % kv for kv in sorted(flags.items())), (bad[0].get("text") or "")[:120]))

    def bodies(self, n):
        p = self.p
        return [self.client.build_payload(self.api, self.model, self.prompts[i % len(self.prompts)], p["output_len"],
                                          p["temperature"], self.use_eos) for i in range(n)]

    def warmup_requests(self, conc):
        """Warm-up requests before a level of concurrency ``conc``: max(warmup, ceil(warmup_per_slot x conc)), so every
        slot has carried a request before the level is measured; 0 when ``warmup`` is 0."""
        p = self.p
        if not p["warmup"]:
            return 0
        return max(p["warmup"], int(math.ceil(p["warmup_per_slot"] * conc)))

    def warmup(self, conc):
        """Before each level, requests of its workload sent at its own concurrency (not measured), so a c=256 level does
        not measure its own ramp; outputs cut to ``warmup_output_len`` tokens to keep the cost down."""
        p = self.p
        n = self.warmup_requests(conc)
        if not n:
            self.warmups[conc] = {"requests": 0, "concurrency": conc}
            return
        self.ensure_prompts(n)
        max_tokens = min(p["output_len"], p["warmup_output_len"])
        bodies = [self.client.build_payload(self.api, self.model, self.prompts[i % len(self.prompts)], max_tokens,
                                            p["temperature"], self.use_eos) for i in range(n)]
        t0 = time.time()
        procs = p["client_processes"] or self.client.auto_processes(conc)
        wrecs, dummy = self.client.run_load(p["base_url"], self.api, bodies, conc, procs, p["timeout"],
                                            p["stall_timeout"], p["api_key"])
        werr = [r for r in wrecs if not r["ok"]]
        if werr:
            raise BenchFailure(werr[0]["error"], "c=%d: warmup failed: %s" % (
                conc, werr[0].get("detail") or werr[0]["error"]))
        self.warmups[conc] = {"requests": n, "concurrency": conc, "max_tokens": max_tokens,
                              "seconds": round(time.time() - t0, 3)}
        self.progress("c=%d: warm-up: %d requests of %d tokens at concurrency %d in %.2f s (not measured)" % (
            conc, n, max_tokens, conc, self.warmups[conc]["seconds"]))

    def measure(self, conc):
        """All trials of one level; a trial that fails its checks ends the run (its result is kept). A first trial
        shorter than min_duration_s is a calibration: the level is resized from its rate and measured again."""
        p = self.p
        n = self.requests_for(conc)
        sizing = {"min_duration_s": p["min_duration_s"], "min_requests": p["min_requests"],
                  "calibration_requests": None, "calibration_duration_s": None}
        trial_results = []
        for t in range(p["trials"]):
            res = self.checked_trial(conc, n, t)
            if t == 0 and res["duration_s"] < p["min_duration_s"]:
                first_n, first_s = n, res["duration_s"]
                sizing["calibration_requests"] = first_n
                sizing["calibration_duration_s"] = first_s
                scale = p["min_duration_s"] / max(res["duration_s"], 1e-3) * 1.15
                n = int(math.ceil(n * min(scale, MAX_RESIZE)))
                self.progress("c=%d: %d requests took %.2f s < min_duration_s %.1f s: measuring again with %d" % (
                    conc, first_n, first_s, p["min_duration_s"], n))
                res = self.checked_trial(conc, n, t)
            trial_results.append(res)
        agg = bench_metrics.aggregate_trials(trial_results)
        ordered = sorted(trial_results, key=lambda r: r["output_throughput"])
        res = dict(ordered[len(ordered) // 2])
        unverified = [t for t in trial_results if t.get("counts") == "unverified"]
        if unverified:  # one trial whose counts could not be verified makes the level's figures unverified
            res["counts"], res["counts_reason"] = unverified[0]["counts"], unverified[0]["counts_reason"]
        res["trials"] = {"n": p["trials"], "metrics": agg}
        res["ignore_eos"] = self.use_eos
        res["queue_bound"] = self.queue_bound.get(conc)
        res["warmup"] = self.warmups.get(conc) or {"requests": 0, "concurrency": conc}
        sizing["requests"] = n
        sizing["short"] = res["duration_s"] < p["min_duration_s"]
        res["sizing"] = sizing
        return res

    def checked_trial(self, conc, n, t):
        self.ensure_prompts(n)
        res = self.measure_trial(self.bodies(n), [self.prompt_tokens[i % len(self.prompt_tokens)] for i in range(n)],
                                 conc, t)
        fails = level_failures(res, self.p)
        if fails:
            res["passed"] = False
            res["regression"] = {"status": "not_checked"}
            res["ignore_eos"] = self.use_eos
            self.levels[str(conc)] = res
            self.append_history(res, False)
            cls, msg = fails[0]
            raise BenchFailure(cls, msg + ("" if len(fails) == 1 else " (also: %s)" % "; ".join(
                "%s: %s" % f for f in fails[1:])))
        return res

    def measure_trial(self, bodies, prompt_tokens, conc, trial):
        p = self.p
        procs = p["client_processes"] or self.client.auto_processes(conc)
        label = "c=%d trial %d/%d" % (conc, trial + 1, p["trials"])
        self.progress("%s started: %d requests, %d client process(es)" % (label, len(bodies), procs))
        # the server's own counters before and after the level (the client may fetch them itself: the fake does)
        get = getattr(self.client, "fetch_metrics", server_metrics.fetch)
        before, why = server_metrics.begin(p["base_url"], p["server_metrics"], self.model, get=get)
        with Ticker(self.progress, label):
            recs, stats = self.client.run_load(
                p["base_url"], self.api, bodies, concurrency=conc, processes=procs, timeout=p["timeout"],
                stall_timeout=p["stall_timeout"], api_key=p["api_key"], count_tokens=self.count_tokens,
                prompt_tokens=prompt_tokens, checks=tuple(p["load_checks"]), eos_ignored=self.use_eos)
        res = bench_metrics.compute(recs, conc)
        res["sampling_noise"] = bench_metrics.sampling_noise(recs, conc)
        res["first_window"] = fw = bench_metrics.first_window(recs, conc)
        if fw["outlier"]:
            worst = ", ".join("%s %s in the first %d requests vs %s in the rest (median)" % (
                k, v["first"], fw["requests"], v["rest_median"]) for k, v in sorted(fw["metrics"].items()) if v["outlier"])
            msg = ("c=%d: the level's first window is an outlier (%s): a server still cold at this concurrency, or "
                   "the first burst of c simultaneous requests weighing on a short level; more warm-up "
                   "(warmup_per_slot, now %s) or a longer level (min_duration_s) dilutes it" % (
                       conc, worst, p["warmup_per_slot"]))
            if msg not in self.warnings:
                self.warnings.append(msg)
        res["server_metrics"] = (server_metrics.finish(p["base_url"], before, recs, p["server_metrics_tolerance"],
                                                       self.model, get=get)
                                 if before else {"status": "unavailable" if why != "off" else "off", "reason": why})
        self.progress("%s %s" % (label, res["server_metrics"].get("line") or "server metrics: %s" % why))
        client, bound, reason = self.client.client_verdict(stats, p["client_cpu_threshold"],
                                                           p["client_lag_threshold_ms"])
        res.update(client=client, client_bound=bound, client_bound_reason=reason)
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
        res["coherence_scope"] = ("whole output without %s (ignore_eos: past the model's own end a healthy model "
                                  "loops; the coherence sample judges it)" % ", ".join(coherence.EOS_IGNORED_SKIPS)
                                  if self.use_eos else "whole output, every detector")
        res["incoherent_samples"] = samples
        res["token_accounting"] = token_accounting(recs, self.count_tokens)
        res["num_prompts"] = len(bodies)
        res["trial"] = trial + 1
        res["measured_tokens"] = mean_tokens(recs)
        res["counts"], res["counts_reason"] = counts_verdict(conc, res)
        if res["counts"] == "verified" and res["token_accounting"]["usage_above_text"]:
            self.progress("c=%d: %s: usage kept" % (conc, res["counts_reason"]))
        elif res["counts"] == "unverified" and res["counts_reason"] not in self.warnings:
            self.warnings.append(res["counts_reason"])
        self.progress("%s done: %.1f output tok/s, TTFT p50 %s ms, TPOT p50 %s ms, errors %s, incoherent %d%s" % (
            label, res["output_throughput"], res["ttft_ms"]["p50"], res["tpot_ms"]["p50"], res["errors"] or 0,
            res["incoherent"], ", CLIENT-BOUND (%s)" % reason if bound else ""))
        return res

    def regression(self, conc, res):
        """The regression verdict of one measurement of a level against the stored baseline (nothing recorded)."""
        p = self.p
        reg = {"status": "disabled", "passed": True, "checks": [], "key": self.key}
        if not p["baseline_dir"]:
            return reg, None
        base = bench_store.load_baseline(p["baseline_dir"], self.key)
        base_level = (base or {}).get("levels", {}).get(str(conc))
        floor = p["min_abs_ms"]
        if res["client_bound"]:
            # latency the client may have inflated by up to its own lag: only changes well beyond it count
            floor = max(floor, 2.0 * (res["client"].get("max_lag_p99_ms") or 0.0))
            reg["note"] = "client-bound level: latency changes below %.1f ms (2 x client lag p99) ignored" % floor
        refused = bench_health.refusal(base_level.get("gpu_health"), self.health_state) if base_level else None
        if refused:
            reg.update(status="refused", passed=False, reason="regression verdict refused: " + refused,
                       baseline_run_id=base_level.get("run_id"))
        elif base_level is not None:
            reg["checks"] = bench_store.compare(res["trials"]["metrics"], base_level, list(p["gate_metrics"]),
                                                p["tolerance"], floor, noise_factor=p["noise_factor"],
                                                max_threshold=p["max_threshold"],
                                                unverified=res.get("counts_reason") if res.get(
                                                    "counts") == "unverified" else None)
            if res.get("counts") == "unverified":
                reg["counts"] = "unverified"
            reg["status"] = "compared"
            reg["passed"] = all(c["passed"] for c in reg["checks"])
            reg["baseline_run_id"] = base_level.get("run_id")
        return reg, base_level

    def gate(self, conc, res):
        """Regression verdict of one level; records the baseline when there is none. A level that fails the rule is
        measured again, up to ``confirm_regressions`` times: it fails only when every measurement fails (a regression
        persists; a slow phase of the host passes). The measurements that failed stay in the run file
        (``regression.unconfirmed``) and in the history."""
        p = self.p
        reg, base_level = self.regression(conc, res)
        unconfirmed = []
        # (a replacement is not a verdict: nothing to confirm)
        while (not reg["passed"] and reg["status"] != "refused" and not p["update_baseline"]
               and len(unconfirmed) < p["confirm_regressions"]):
            unconfirmed.append({"checks": reg["checks"], "output_throughput": res["output_throughput"],
                                "ttft_p50_ms": res["ttft_ms"]["p50"], "tpot_p50_ms": res["tpot_ms"]["p50"],
                                "client_bound": res["client_bound"], "duration_s": res["duration_s"]})
            self.append_history(res, False)
            self.progress("c=%d: %s: measuring again to confirm (%d/%d)" % (
                conc, regression_text(conc, reg["checks"]), len(unconfirmed), p["confirm_regressions"]))
            res = self.measure(conc)
            reg, base_level = self.regression(conc, res)
        if unconfirmed:
            reg["unconfirmed"] = unconfirmed
        record_ok, not_recorded = bench_health.may_record(self.health_state)
        wants_record = p["baseline_dir"] and (p["update_baseline"] or base_level is None)
        refusal = bench_store.recordable(res.get("counts"), res.get("counts_reason")) if wants_record else None
        if refusal:
            reg.update(status="not_recorded", reason="c=%d: %s" % (conc, refusal))
            self.warnings.append("c=%d: no baseline recorded: its token counts are unverified (counts_reason)" % conc)
        elif wants_record and not record_ok:
            reg.update(status="withheld", reason="no baseline recorded: " + not_recorded)
            self.warnings.append("c=%d: %s" % (conc, reg["reason"]))
        elif wants_record and self.health_state is not None:
            # recorded by mode=finalize once the reading after the run shows the GPUs did not degrade
            reg.update(status="pending", pending_baseline={"metrics": res["trials"]["metrics"], "trials": p["trials"],
                                                           "replace": p["update_baseline"]})
            if p["update_baseline"]:
                reg["passed"] = True
        elif wants_record:
            reg["status"] = bench_store.record_level(p["baseline_dir"], self.key, p["fingerprint"], self.workload,
                                                     conc, res["trials"]["metrics"], p["trials"], self.run_id,
                                                     replace=p["update_baseline"], extra={"counts": res.get("counts")})
            if p["update_baseline"]:
                reg["passed"] = True  # an explicit replacement is not a regression verdict
        res["gpu_health"] = self.health_state
        res["regression"] = reg
        res["passed"] = reg["passed"]
        self.levels[str(conc)] = res
        self.append_history(res, reg["passed"])
        self.save()
        verdict = "passed" + (" (the regression was not confirmed)" if unconfirmed else "")
        self.progress("c=%d %s" % (conc, verdict if reg["passed"] else reg["status"].upper()))
        if reg["status"] == "refused":
            raise BenchFailure("gpu_health", "c=%d: %s" % (conc, reg["reason"]))
        if refusal and p["update_baseline"]:
            raise BenchFailure("unverified_counts", "update_baseline=true: " + reg["reason"])
        if not reg["passed"]:
            raise BenchFailure("regression", regression_text(conc, reg["checks"]) + (
                " (confirmed by %d more measurement(s): %s)" % (len(unconfirmed), ", ".join(
                    "%.1f output tok/s" % u["output_throughput"] for u in unconfirmed)) if unconfirmed else ""))

    # -- saving and finishing ---------------------------------------------------------------------------------

    def append_history(self, res, passed):
        if self.report_dir:
            bench_store.append_jsonl(os.path.join(self.report_dir, "history.jsonl"),
                                     history_line(self.run_id, self.key, res, passed))

    def _update_doc(self, doc):
        p = self.p
        doc.setdefault("levels", {}).update(self.levels)
        doc["fingerprint"] = p["fingerprint"]
        if p.get("gpu_health"):
            # the health is part of what identifies the system under test; the full reading is kept for finalize
            doc["fingerprint_gpu_health"] = self.health_state
            doc.setdefault("gpu_health", {})["before"] = p["gpu_health"]
        doc["base_url"] = p["base_url"]
        if self.workload is not None:
            doc["workload"] = self.workload
            doc["key"] = self.key
        if self.coherence is not None:
            doc["coherence"] = self.coherence
        for f in self.failures:
            if f not in doc.setdefault("failures", []):
                doc["failures"].append(f)
        if self.failure_class:
            doc["failure_class"] = self.failure_class

    def save(self):
        """Merge this run's state into the run file and rewrite the reports (no-op without report_dir)."""
        if not self.report_dir:
            return
        doc = bench_store.update_run(self.report_dir, self.run_id, self._update_doc)
        self.out["changed"] = True
        files, warns = bench_report.write_reports(self.report_dir, doc, self.p["plots"] and not self.p["probes_only"])
        for w in warns:
            if w not in self.warnings:
                self.warnings.append(w)
        self.out["files"] = [bench_store.run_path(self.report_dir, self.run_id)] + files
        self.out["table"] = bench_report.table_lines(sorted_levels(doc.get("levels", {})))

    def failed(self, cls, msg):
        self.failures.append("%s: %s" % (cls, msg))
        self.failure_class = cls
        self.out["failure_class"] = cls
        self.out["results"] = sorted_levels(self.levels)
        self.out["coherence"] = self.coherence
        if not self.out["table"]:
            self.out["table"] = bench_report.table_lines(self.out["results"])
        try:
            self.save()
        except OSError as e:
            msg += " (saving the partial results failed too: %s)" % e
        self.progress("FAILED %s: %s" % (cls, msg))
        return Result(self.out, True, "serving_bench failed [%s]: %s" % (cls, msg), self.warnings)

    def finish_probes_only(self):
        self.save()
        c = self.coherence
        return Result(self.out, msg="coherence probes passed (%d/%d) in %.2f s" % (
            c["probes_passed"], c["probes_total"], c["seconds"]), warnings=self.warnings)

    def finish(self):
        self.out["results"] = sorted_levels(self.levels)
        self.out["coherence"] = self.coherence
        if self.report_dir:
            self.save()
        else:
            self.out["table"] = bench_report.table_lines(self.out["results"])
        return Result(self.out, msg="serving_bench passed: %s" % ", ".join(
            "c=%s %.1f tok/s" % (r["concurrency"], r["output_throughput"]) for r in self.out["results"]),
            warnings=self.warnings)

    def finalize(self):
        """mode=finalize: judge the run's GPU health before against after; record its pending baselines when the
        GPUs did not degrade, discard them and mark the run ``gpu_degraded`` when they did."""
        p = self.p
        path = bench_store.run_path(p["report_dir"], self.run_id)
        doc = bench_store.read_json(path)
        if doc is None:
            self.out["failure_class"] = "invalid_input"
            return Result(self.out, True, "mode=finalize: no run file for run_id %s under %s" % (
                self.run_id, p["report_dir"]))
        before = (doc.get("gpu_health") or {}).get("before")
        reasons = bench_health.degradation(before, p["gpu_health_after"])
        pending = [(k, lvl) for k, lvl in sorted(doc.get("levels", {}).items(), key=lambda kv: int(kv[0]))
                   if (lvl.get("regression") or {}).get("status") == "pending"]
        self.out["gpu_degraded"] = reasons
        if self.check_mode:
            self.out["skipped"] = True
            return Result(self.out, msg="check mode: nothing recorded")
        events = {}

        def update(d):
            d.setdefault("gpu_health", {})["after"] = p["gpu_health_after"]
            d["gpu_health"]["degraded"] = reasons
            for k, dummy in pending:
                reg = d["levels"][k]["regression"]
                if reasons:
                    reg.update(status="discarded", reason="GPUs degraded during the run: " + "; ".join(reasons))
                else:
                    reg["status"] = events[k]
                reg.pop("pending_baseline", None)
            if reasons:
                d["gpu_degraded"] = reasons
                note = "gpu_degraded: " + "; ".join(reasons)
                if note not in d.setdefault("failures", []):
                    d["failures"].append(note)
                d["failure_class"] = d.get("failure_class") or "gpu_degraded"

        if not reasons and pending and not p["baseline_dir"]:
            self.out["failure_class"] = "invalid_input"
            return Result(self.out, True, "mode=finalize: run %s has %d pending baseline(s) and baseline_dir is not "
                          "set" % (self.run_id, len(pending)))
        if not reasons:
            for k, lvl in pending:
                pb = lvl["regression"]["pending_baseline"]
                events[k] = bench_store.record_level(
                    p["baseline_dir"], doc["key"], doc.get("fingerprint"), doc.get("workload"), int(k), pb["metrics"],
                    pb["trials"], self.run_id, replace=pb["replace"],
                    extra={"gpu_health": lvl.get("gpu_health"), "counts": lvl.get("counts")})
        bench_store.update_run(p["report_dir"], self.run_id, update)
        self.out.update(changed=True, baselines=dict(events))
        if reasons:
            self.out["failure_class"] = "gpu_degraded"
            return Result(self.out, True, "run %s: GPUs degraded during the run (%s); %d pending baseline(s) "
                          "discarded" % (self.run_id, "; ".join(reasons), len(pending)), self.warnings)
        return Result(self.out, msg="run %s: GPU health unchanged; baselines %s" % (
            self.run_id, ", ".join("c=%s %s" % kv for kv in sorted(events.items())) or "none pending"))

    def render_report(self):
        """mode=report: re-render an existing run's reports (no traffic)."""
        p = self.p
        doc = bench_store.read_json(bench_store.run_path(p["report_dir"], self.run_id))
        if doc is None:
            self.out["failure_class"] = "invalid_input"
            return Result(self.out, True, "mode=report: no run file for run_id %s under %s" % (
                self.run_id, p["report_dir"]))
        files = []
        if not self.check_mode:
            files, self.warnings = bench_report.write_reports(p["report_dir"], doc, p["plots"])
            self.out["changed"] = True
        lvls = sorted_levels(doc.get("levels", {}))
        self.out.update(table=bench_report.table_lines(lvls), files=files, results=lvls,
                        coherence=doc.get("coherence"), failures=doc.get("failures", []))
        if doc.get("failures"):
            self.out["failure_class"] = doc.get("failure_class") or "failed"
            return Result(self.out, True, "run %s has failures: %s" % (self.run_id, "; ".join(doc["failures"])),
                          self.warnings)
        return Result(self.out, warnings=self.warnings)


# how to make the counts verifiable: the server's own generated-token counter (server_metrics.py)
VERIFY_HINT = ("to verify them, start the server with its metrics on (SGLang: --enable-metrics) and keep "
               "server_metrics auto or require")


def counts_verdict(conc, res):
    """Whether the level's token counts could be verified: (``verified`` | ``unverified`` | ``unchecked``, reason).

    ``verified``: the server's generated-token counter agrees with the summed usage. ``unverified``: responses counted
    more completion tokens than bytes of streamed text (SGLang's special tokens stream no text, and so does a lie) and
    no counter confirmed them, or the counter disagrees. ``unchecked``: no counter read, but no response claimed more
    tokens than the text it streamed."""
    above = (res.get("token_accounting") or {}).get("usage_above_text") or 0
    sm = res.get("server_metrics") or {}
    check = dict((c["metric"], c) for c in sm.get("checks") or []).get("generation_tokens") or {}
    if check.get("status") == "ok":
        return "verified", "c=%d: the server's generation-token counter (%d) agrees with the usage (%d)%s" % (
            conc, check["server"], check["client"], " (%d responses counted more completion tokens than bytes of "
            "streamed text: special tokens)" % above if above else "")
    if check.get("status") == "disagree":
        return "unverified", ("c=%d: token counts unverified: the server's generation-token counter (%g) disagrees "
                              "with the responses' usage (%g)" % (conc, check["server"], check["client"]))
    if above:
        return "unverified", ("c=%d: token counts unverified: %d/%d responses counted more completion tokens than "
                              "bytes of streamed text and the server's token counter was not read (%s); special "
                              "tokens and a server that over-reports look the same, %s" % (
                                  conc, above, res.get("completed") or 0, sm.get("reason") or sm.get("status") or "off",
                                  VERIFY_HINT))
    return "unchecked", "c=%d: no server token counter read; no response counted more tokens than its streamed text" % (
        conc)


def token_accounting(recs, count_tokens):
    """Where the token counts came from: server usage, the tokenizer's count against it, chunks per token."""
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
    acc["usage_above_text"] = len([1 for r in usage if bench_metrics.usage_above_text(r)])
    chunks = sum(r.get("chunks", 0) for r in usage)
    if usage:
        acc["chunks_vs_usage"] = round(float(chunks) / max(1, sum(r["output_tokens"] for r in usage)), 4)
    return acc


def mean_tokens(recs):
    """Mean prompt and output tokens of the completed requests, as the server (or the fallback) counted them."""
    ok = [r for r in recs if r.get("ok")]
    prompt = [r["prompt_tokens"] for r in ok if r.get("prompt_tokens") is not None]
    return {"prompt": round(sum(prompt) / float(len(prompt)), 1) if prompt else None,
            "output": round(sum(bench_metrics.usable_tokens(r) for r in ok) / float(len(ok)), 1) if ok else None}
