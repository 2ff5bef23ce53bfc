# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""serving_bench judged on what a healthy real SGLang sends, through the real SSE parser and accounting.

The streams are built in the byte shape of SGLang 0.5.17's completions stream
(python/sglang/srt/entrypoints/openai/serving_completions.py: one ``data: {...}\\n\\n`` event per decode step with
``text`` the delta, an empty delta for a special token, the finish event, then a usage-only event with
``choices: []`` when stream_options.include_usage is set, then ``data: [DONE]``), with the behaviour measured on an
H200 with the tiny model under ignore_eos: a short answer, then text past the model's own end that degenerates into
a loop, and 64 completion tokens in usage whatever the text (special tokens stream no text). The /metrics text
carries SGLang's counter and histogram names with the server's own counts.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

from ansible_collections.gpuhost.sglang.plugins.module_utils.bench import client as bench_client
from ansible_collections.gpuhost.sglang.plugins.module_utils.bench import coherence
from ansible_collections.gpuhost.sglang.plugins.module_utils.bench import runner
from ansible_collections.gpuhost.sglang.plugins.module_utils.bench import server_metrics as sm
from ansible_collections.gpuhost.sglang.tests.harness.fake_bench_client import ANSWERS, FakeClient
from ansible_collections.gpuhost.sglang.tests.unit.plugins.module_utils.bench.test_runner import params

# the tiny model's load output under ignore_eos on SGLang 0.5.17 (H200, recorded: tests/fixtures/sglang-0.5.17,
# load-chat-ignore_eos): a one-word answer, then past its end a loop from the second word
PAST_EOS = "Shakespeare.er.er.er.ats theer.ers Shakespeare.ers Shakespeare.ers four.ers Shakespeare.ers Shakespeare.ers quest."
LOOP_FROM_START = " the the the the the the the the the the the the the the the the the the the the"
GARBAGE = u" \ufffd\ufffd\u0416\u4e2d\u0e01 \ufffd"


def sglang_stream(text, completion_tokens=64, prompt_tokens=32, pieces=None, special=0, model="tiny"):
    """SSE bytes of one streamed completion as SGLang 0.5.17 sends it: ``pieces`` text deltas, ``special`` empty
    deltas (special tokens), finish_reason ``length``, then the usage event and [DONE]."""
    pieces = pieces or [text[i:i + 4] for i in range(0, len(text), 4)]
    out = []

    def ev(choices, usage=None):
        out.append(b"data: " + json.dumps({"id": "0f3a", "object": "text_completion", "created": 1764700000,
                                           "model": model, "choices": choices, "usage": usage}).encode() + b"\n\n")
    for p in pieces:
        ev([{"index": 0, "text": p, "logprobs": None, "finish_reason": None, "matched_stop": None}])
    for dummy in range(special):
        ev([{"index": 0, "text": "", "logprobs": None, "finish_reason": None, "matched_stop": None}])
    ev([{"index": 0, "text": "", "logprobs": None, "finish_reason": "length", "matched_stop": None}])
    ev([], {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens + completion_tokens,
            "completion_tokens": completion_tokens, "prompt_tokens_details": None, "reasoning_tokens": 0})
    out.append(b"data: [DONE]\n\n")
    return out


def metrics_text(gen_tokens, prompt_tokens, requests, ttft_buckets):
    """SGLang's /metrics (prometheus_client text) with the counters and the TTFT histogram."""
    lab = 'engine_type="unified",model_name="tiny"'
    lines = ["# TYPE sglang:generation_tokens_total counter",
             "sglang:generation_tokens_total{%s} %s" % (lab, float(gen_tokens)),
             "sglang:prompt_tokens_total{%s} %s" % (lab, float(prompt_tokens)),
             "sglang:num_requests_total{%s} %s" % (lab, float(requests))]
    total = 0
    for le, n in ttft_buckets:
        total = n
        lines.append('sglang:time_to_first_token_seconds_bucket{%s,is_streaming="true",le="%s"} %s' % (lab, le, float(n)))
    lines.append('sglang:time_to_first_token_seconds_sum{%s,is_streaming="true"} %s' % (lab, 0.05 * total))
    lines.append('sglang:time_to_first_token_seconds_count{%s,is_streaming="true"} %s' % (lab, float(total)))
    return "\n".join(lines) + "\n"


class SGLangShapedClient(FakeClient):
    """FakeClient timings and probes, but every load response goes through the real client.postprocess on SGLang
    shaped SSE bytes, and /metrics answers with the server's own counts."""

    def __init__(self, load_text=PAST_EOS, completion_tokens=64, server_tokens=None,
                 plain_text=" The capital of France is Paris.", **kw):
        FakeClient.__init__(self, **kw)
        self.load_text = load_text
        self.plain_text = plain_text
        self.completion_tokens = completion_tokens
        self.server_tokens = server_tokens  # None: the server's counter equals the usage it sent
        self.gen = self.prompt = self.reqs = 0

    def fetch_metrics(self, base_url, timeout=5.0, path="/metrics"):
        # every first token inside (0, 0.1] s by the server's timer (the fake's TTFT is 50 ms)
        return metrics_text(self.gen, self.prompt, self.reqs, [("0.1", self.reqs), ("0.25", self.reqs),
                                                               ("+Inf", self.reqs)])

    def run_load(self, base_url, api, bodies, concurrency, processes=1, timeout=300.0, stall_timeout=60.0,
                 api_key=None, count_tokens=None, prompt_tokens=None, checks=coherence.DETECTORS, keep_text=False,
                 **kw):
        recs, stats = FakeClient.run_load(self, base_url, api, bodies, concurrency, processes, timeout,
                                          stall_timeout, api_key, count_tokens, prompt_tokens, checks, keep_text)
        out = []
        for body, r in zip(bodies, recs):
            b = json.loads(body.decode("utf-8"))
            prompt = b.get("prompt") or b["messages"][-1]["content"]
            if not r["ok"] or (keep_text and prompt in ANSWERS):  # the probes: the fake's known answers
                out.append(r)
                continue
            ignore = b.get("ignore_eos")
            text = self.load_text if ignore else self.plain_text
            events = sglang_stream(text, self.completion_tokens, special=8)
            times = r["chunk_times"] + [r["end"]] * (len(events) - len(r["chunk_times"]))
            body_bytes, marks, n = b"", [], 0
            for t, e in zip(times, events):
                body_bytes += e
                marks.append((t, len(body_bytes)))
                n += 1
            raw = {"start": r["start"], "end": r["end"], "body": body_bytes, "marks": marks, "error": None}
            kwargs = {"eos_ignored": True} if kw.get("eos_ignored") else {}
            rec = bench_client.postprocess(raw, api, count_tokens, 32, checks, keep_text, **kwargs)
            out.append(rec)
            if keep_text:
                continue
            self.gen += self.server_tokens if self.server_tokens is not None else rec["output_tokens"]
            self.prompt += 32
            self.reqs += 1
        return out, stats


def run(tmp_path, client, **kw):
    p = params(tmp_path, concurrency="1,16", run_id="real", num_prompts=32, **kw)
    return runner.BenchRun(p, client=client).execute()


def test_past_eos_text_under_ignore_eos_is_not_judged_but_the_answer_is(tmp_path):
    # a healthy server: the text past the model's end loops; the run passes and says what was judged
    res = run(tmp_path, SGLangShapedClient())
    assert not res.failed, res.msg
    lvl = res.out["results"][0]
    assert lvl["incoherent"] == 0 and lvl["coherent"] == 32
    assert "without repetition" in lvl["coherence_scope"]
    assert res.out["coherence_sample"]["requests"] == 8 and res.out["coherence_sample"]["incoherent"] == 0


def test_broken_model_outputs_still_fail_under_ignore_eos(tmp_path):
    # a broken model's loop shows with or without ignore_eos: the coherence sample (sent without it) catches it
    for text, flag in ((LOOP_FROM_START, "repetition"), (GARBAGE, "replacement_chars"), ("  ", "empty")):
        res = run(tmp_path, SGLangShapedClient(load_text=text, plain_text=text if flag == "repetition" else
                                               " The capital of France is Paris."))
        assert res.failed, text
        assert res.out["failure_class"] in ("incoherent", "empty"), res.msg
        assert flag in res.msg, res.msg


def test_usage_the_server_confirms_is_kept_though_above_the_streamed_bytes(tmp_path):
    # 64 tokens counted, the loop's text is fewer bytes than that for the short outputs: special tokens stream none
    short = " Paris."
    res = run(tmp_path, SGLangShapedClient(load_text=short))
    assert not res.failed, res.msg
    lvl = res.out["results"][1]
    assert lvl["output_tokens"] == 64 * lvl["coherent"]  # the usage, not a guess from the text
    assert lvl["token_accounting"]["usage_above_text"] == lvl["coherent"]
    assert lvl["server_metrics"]["status"] == "ok", lvl["server_metrics"]
    assert not [w for w in res.warnings if "usage" in w], res.warnings


def test_a_real_token_disagreement_is_named_with_both_counts(tmp_path):
    res = run(tmp_path, SGLangShapedClient(server_tokens=48), server_metrics="require")
    assert res.failed and res.out["failure_class"] == "server_metrics", res.msg
    # 32 requests: the server counted 48 a request, the usage said 64
    assert "the server counted 1536" in res.msg and "usage (client fallback where absent) says 2048" in res.msg, res.msg


def ttft_delta(lo_count, le="0.1"):
    return {"counters": {"generation_tokens": 100.0, "requests": 10.0, "prompt_tokens": 1.0, "aborted": None},
            "ttft": {"buckets": {float(le): lo_count, 0.25: 10.0, float("inf"): 10.0}, "sum": 0.5, "count": 10.0}}


def test_client_ttft_above_the_servers_is_queueing_reported_not_failed():
    # c=256 on the H200: client p50 287 ms, server bucket (0, 0.1] s; the server's timer starts at the handler
    v = sm.reconcile(ttft_delta(10.0), {"generation_tokens": 100, "requests": 10, "ttft_s": [0.287] * 10})
    assert v["agree"], v["flags"]
    chk = [c for c in v["checks"] if c["metric"] == "ttft_p50_s"][0]
    assert chk["status"] == "queueing" and chk["gap_s"] > 0.18
    assert "serving_base.py" in chk["server_timer"]
    assert v["notes"] and "reported, not a disagreement" in v["notes"][0]


def test_client_ttft_below_the_servers_timer_is_a_disagreement():
    # the server saw its first token at >= 0.1 s after the handler started: a client cannot see it at 20 ms
    v = sm.reconcile(ttft_delta(0.0), {"generation_tokens": 100, "requests": 10, "ttft_s": [0.02] * 10})
    assert not v["agree"]
    assert "below the server's bucket" in v["flags"][0]
