# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""An in-process stand-in for module_utils/bench/client.py, for BenchRun unit tests.

It answers with the records client.postprocess() makes (same keys) on a virtual clock: ``concurrency`` requests
in flight, each taking ``ttft`` then ``tpot`` per further token, so metrics.compute() sees consistent timings.
The probes are answered with their expected word (the tiny model's behaviour); ``answer`` overrides that.
Faults: ``errors_at_call`` (n-th load call -> every request fails with that class), ``reject_ignore_eos``
(HTTP 422 as transformers serve answers), ``raise_at_call`` (an exception inside the client).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

from ansible_collections.gpuhost.sglang.plugins.module_utils.bench import client as bench_client
from ansible_collections.gpuhost.sglang.plugins.module_utils.bench import server_limits
from ansible_collections.gpuhost.sglang.plugins.module_utils.bench import server_metrics
from ansible_collections.gpuhost.sglang.plugins.module_utils.bench.probes import DEFAULT_PROBES

ANSWERS = {}
for _p in DEFAULT_PROBES:
    ANSWERS[_p["prompt"]] = _p["expect"]
    ANSWERS[_p["question"]] = _p["expect"]


class FakeClient(object):
    HAS_AIOHTTP = True
    AIOHTTP_IMPORT_ERROR = None
    build_payload = staticmethod(bench_client.build_payload)
    auto_processes = staticmethod(bench_client.auto_processes)
    client_verdict = staticmethod(bench_client.client_verdict)

    def __init__(self, models=("tiny",), ttft=0.05, tpot=0.01, answer=None, errors_at_call=None,
                 reject_ignore_eos=False, raise_at_call=None, usage_tokens=None, text="the quick brown fox jumps ",
                 server_info=None):
        self.models = list(models)
        self.ttft = ttft
        self.tpot = tpot
        self.answer = answer
        self.errors_at_call = errors_at_call or {}
        self.reject_ignore_eos = reject_ignore_eos
        self.raise_at_call = raise_at_call
        self.usage_tokens = usage_tokens
        self.text = text
        self.clock = 1000.0
        # the /get_server_info object an SGLang server would answer; None = a server without it (HTTP 404)
        self.server_info = server_info
        self.info_calls = []
        self.calls = []  # (kind, n bodies, concurrency)

    def get_server_info(self, base_url, api_key=None, timeout=10.0):
        def get_json(url, key, t):
            self.info_calls.append(url)
            if self.server_info is None:
                return 404, '{"detail":"Not Found"}'
            return 200, json.dumps(self.server_info)
        return server_limits.fetch(get_json, base_url, api_key, timeout)

    def get_models(self, base_url, api_key=None, timeout=10.0):
        if not self.models:
            return None, ("connection_refused", "connect to %s: refused" % base_url)
        return list(self.models), None

    def _record(self, body, start, keep_text, load_call):
        b = json.loads(body.decode("utf-8"))
        err = self.errors_at_call.get(load_call)
        if self.reject_ignore_eos and b.get("ignore_eos"):
            err = "http_4xx"
        n = int(b["max_tokens"])
        end = start + self.ttft + self.tpot * (n - 1)
        if err:
            return {"ok": False, "error": err, "detail": "HTTP 422: ignore_eos: extra fields not permitted"
                    if err == "http_4xx" else err, "start": start, "end": end, "chunk_times": [], "prompt_tokens": None,
                    "output_tokens": 0, "coherent": False, "flags": [], "text": None, "usage": False}, end
        prompt = b.get("prompt") or b["messages"][-1]["content"]
        words = ((self.answer or ANSWERS.get(prompt, "ok")) + ". ") if keep_text else self.text
        text = (words * n)[: max(len(words), 4 * n)]
        times = [start + self.ttft + self.tpot * i for i in range(n)]
        rec = {"ok": True, "error": None, "detail": None, "start": start, "end": end, "chunk_times": times,
               "chunks": n, "prompt_tokens": 16, "output_tokens": self.usage_tokens or n, "usage": True,
               "token_source": "usage", "coherent": True, "flags": [], "text": text if keep_text else None,
               "logprobs": [-0.5] * n if b.get("logprobs") else [], "tokenizer_tokens": None,
               "finish_reason": "length", "text_bytes": len(text.encode("utf-8"))}
        if keep_text:
            rec["content"] = text
            rec["reasoning"] = None
        return rec, end

    def fetch_metrics(self, base_url, timeout=5.0, path="/metrics"):
        """No metrics here (as a server without --enable-metrics): never touches the network."""
        raise server_metrics.MetricsError("GET %s%s failed: HTTP Error 404: Not Found (fake client)" % (base_url, path))

    def run_load(self, base_url, api, bodies, concurrency, processes=1, timeout=300.0, stall_timeout=60.0,
                 api_key=None, count_tokens=None, prompt_tokens=None, checks=None, keep_text=False, **kw):
        self.calls.append(("probe" if keep_text else "load", len(bodies), concurrency))
        call = len([c for c in self.calls if c[0] == "load"]) if not keep_text else None
        if self.raise_at_call is not None and call == self.raise_at_call:
            raise RuntimeError("fake client crashed")
        slots = [self.clock] * max(1, int(concurrency))
        recs = []
        for body in bodies:
            i = slots.index(min(slots))
            rec, end = self._record(body, slots[i], keep_text, call)
            slots[i] = end
            recs.append(rec)
        wall = max(slots) - self.clock
        self.clock = max(slots) + 0.01
        stats = {"wall_s": wall, "cpu_s": 0.01 * wall, "cpu_util": 0.01, "lag_samples": 100, "lag_p50_ms": 0.1,
                 "lag_p99_ms": 0.2, "lag_max_ms": 0.3, "lagged_cpu_share": 0.1}
        return recs, [stats]
