# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Loopback fake OpenAI-compatible streaming server (aiohttp.web) for fault and timing tests.

Binds 127.0.0.1 only. Run as a subprocess: ``python fakeserver.py --behavior ok --port 0`` prints
``PORT <n>`` on stdout once listening. Behaviors:

ok            known answers for the default probes, varied words otherwise (usage included)
http_5xx      every completion request -> HTTP 500
disconnect    streams a few events then closes the connection (no [DONE])
stall         streams a few events then stops sending (connection kept open)
malformed     sends a non-JSON data payload
no_usage      ok but never sends usage
die_after     serves --die-after requests successfully, then the whole process exits
reject_ignore_eos  ok, but HTTP 422 for any request carrying ignore_eos (like transformers serve)
empty         NaN-model behaviour: empty text, finish_reason stop
garbage       random-weights behaviour: U+FFFD and control characters
nan_logprobs  ok text, but HTTP 400 "Out of range float values" when logprobs are requested
repeat        a repetition loop

Accuracy-gate task prompts (plugins/module_utils/bench/taskset.py) are answered with the item's answer and then
words; --accuracy F answers only the share F of them right (the same items every run: by a hash of the item id),
the rest with a wrong answer (a model whose numbers changed). --drift F changes the words after the answer for the
share F of all prompts (by a hash of the prompt): the answers stay, greedy outputs differ.

Reasoning models (chat only; combine with any behavior above, usually ok), modelled on SGLang 0.5.23 as
installed by tests (python/sglang/srt/... paths below are from that wheel):

--reasoning tags  the model itself writes ``<think>...</think>`` before the answer (GLM-4.5/4.6, Qwen3;
                  llama.cpp models/templates/GLM-4.6.jinja: ``enable_thinking=false`` makes the generation
                  prompt end in ``<think></think>``, so the model answers at once)
--reasoning open  the chat template opens ``<think>`` in the generation prompt, so the output starts inside
                  the reasoning and only ``</think>`` appears (GLM-4.7/GLM-5: rtp-llm PR #485, sglang
                  PR #39227; ``enable_thinking=false`` makes the prompt end in ``</think>``)
--reasoning-parser  the server runs with ``--reasoning-parser glm45``: reasoning goes to ``reasoning_content``
                  (streaming delta and non-streaming message), the answer to ``content``. Without it the
                  raw text, tags included, is the ``content`` (serving_chat.py only splits when
                  ``self.reasoning_parser and request.separate_reasoning``)
--think-tokens N  reasoning tokens before the answer (default 40, more than a short probe budget)
--think-forever   the model never closes its reasoning: every request ends with finish_reason length
--no-think-toggle the template has no enable_thinking switch (GLM-5.3: template_detection.py rule
                  ``glm53_always_think``): the model always thinks, whatever the request says
--numerals        numeric answers as digits ("4." instead of "four.")
--metrics         also serve SGLang's Prometheus metrics on /metrics (tests/fixtures/sglang_metrics.py), counting
                  every streamed completion; --metrics-skew F over-reports generated tokens by F (a lying server),
                  --metrics-prefix sglang_ renders the other prefix
--strict-fields   HTTP 422 for any request field outside the plain OpenAI schema, as transformers serve does
                  (transformers/cli/serving/utils.py ``BaseHandler._validate_request``)

Test helpers (imported by tests/integration/test_serving_bench*.py): ``fake_server()`` starts this file as
a subprocess and yields its base URL; ``run_module()`` runs plugins/modules/serving_bench.py as Ansible
does (own interpreter, JSON argument file, JSON result).

Timing: --ttft and --itl (seconds) pace events; with both 0 the whole body is written at once
(zero-latency capacity mode). --stamp puts the server's own time.monotonic() send time of each event
into its text as ``<t>|`` (for timing-accuracy measurements; same clock as the client).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
import zlib

from aiohttp import web

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "plugins", "module_utils", "bench"))
from probes import DEFAULT_PROBES  # noqa: E402  pylint: disable=wrong-import-position
import taskgen  # noqa: E402  pylint: disable=wrong-import-position
import taskset  # noqa: E402  pylint: disable=wrong-import-position

TASKS = dict((taskgen.prompt_for(t["kind"], t["question"]), t) for t in taskset.TASKS)


def _share(text):
    """A stable number in [0, 1) for ``text`` (crc32, the same in every process)."""
    return zlib.crc32(text.encode("utf-8")) / float(1 << 32)


WORDS = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa "
         "quebec romeo sierra tango uniform victor whiskey xray yankee zulu river stone cloud amber north "
         "garden window copper silver market bridge planet signal orange violet winter summer").split()


NUMERALS = {"zero": "0", "one": "1", "two": "2", "three": "3", "four": "4", "five": "5", "six": "6",
            "seven": "7", "eight": "8", "nine": "9", "ten": "10"}
# what the reasoning of a thinking model looks like before it answers (no probe's expected word in it)
THOUGHT = "Okay, the user asks a short factual question. Let me recall what I know and check it".split(" ")
# request fields of the plain OpenAI schema (what a strict engine accepts; transformers serve 5.24 also
# accepts generation_config, seed and, for chat, chat_template_kwargs: cli/serving/chat_completion.py)
OPENAI_FIELDS = frozenset(("model", "messages", "prompt", "max_tokens", "max_completion_tokens", "temperature",
                           "top_p", "n", "stream", "stream_options", "stop", "seed", "logprobs", "top_logprobs",
                           "presence_penalty", "frequency_penalty", "logit_bias", "user", "suffix", "echo",
                           "best_of", "tools", "tool_choice", "response_format"))


def answer_for(prompt, numerals=False):
    for p in DEFAULT_PROBES:
        if p["prompt"] in prompt or p["question"] in prompt:
            if numerals and p["expect"] in NUMERALS:
                return NUMERALS[p["expect"]] + "."
            return p["expect"] + "."
    return None


def sglang_chunk(model, delta=None, finish=None, usage=None, reasoning=None, role=None):
    """One chat stream chunk as SGLang 0.5.23 writes it (entrypoints/openai/sse_utils.py ``build_sse_content``:
    msgspec, compact; the delta always carries ``reasoning_content`` (null or a string), role and content only
    when set; the usage chunk has no choices (serving_chat.py, "Additional usage chunk")."""
    if usage is not None:
        obj = {"id": "x", "object": "chat.completion.chunk", "created": 0, "model": model, "choices": [],
               "usage": usage}
    else:
        d = {"reasoning_content": reasoning}
        if role is not None:
            d["role"] = role
        if delta is not None:
            d["content"] = delta
        obj = {"id": "x", "object": "chat.completion.chunk", "created": 0, "model": model,
               "choices": [{"index": 0, "delta": d, "logprobs": None, "finish_reason": finish, "matched_stop": None}]}
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


class Fake(object):
    def __init__(self, args):
        self.a = args
        self.metrics = None
        self.served = 0
        self.cache = {}

    def pieces(self, prompt, n):
        b = self.a.behavior
        if b == "empty":
            return [""] * n
        if b == "garbage":
            rnd = random.Random(hash(prompt) & 0xFFFF)
            return ["".join(rnd.choice(u"ab\ufffd\x07\x1bçд\u4e2d") for dummy in range(3)) for dummy in range(n)]
        if b == "repeat":
            return [" the"] * n
        task = TASKS.get(prompt)
        if task is not None:
            ans = task["answer"] if _share(task["id"]) < self.a.accuracy else task["answer"] + "0"
            rnd = random.Random(_share(prompt) + (1.0 if _share("drift" + prompt) < self.a.drift else 0.0))
            return ([" " + ans] + [" " + rnd.choice(WORDS) for dummy in range(n - 1)])[:n]
        ans = answer_for(prompt, self.a.numerals)
        if ans is not None and not self.a.stamp:
            return [" " + ans][:n]
        rnd = random.Random(len(prompt))
        return [" " + rnd.choice(WORDS) for dummy in range(n)]

    def thinks(self, body):
        """Whether the model reasons before answering this chat request. With a toggle, the template reads
        chat_template_kwargs.enable_thinking (default on for GLM-4.5..GLM-5: the templates test
        ``enable_thinking is defined and not enable_thinking``); without one it always thinks."""
        if self.a.reasoning == "off":
            return False
        if self.a.no_think_toggle:
            return True
        return (body.get("chat_template_kwargs") or {}).get("enable_thinking") is not False

    def reasoning_raw(self, body, prompt, n):
        """The raw tokens the model generates for a chat request (what the detokenizer sees before any
        reasoning parser), cut at ``n`` = max_tokens; returns (tokens, finish_reason, reasoning token count)."""
        answer = self.pieces(prompt, n)
        if not self.thinks(body):
            return answer, ("length" if len(answer) == n else "stop"), 0
        thought = []
        while len(thought) < n and (self.a.think_forever or len(thought) < self.a.think_tokens):
            k = len(thought)
            word = THOUGHT[k] if k < len(THOUGHT) else WORDS[(k * 7) % len(WORDS)]
            thought.append(word if k == 0 else " " + word)
        raw = (["<think>"] if self.a.reasoning == "tags" else []) + thought
        if self.a.think_forever or len(raw) >= n:
            raw = raw[:n]
            return raw, "length", len([t for t in raw if t != "<think>"])
        full = raw + ["</think>"] + answer
        finish = "length" if len(full) > n else "stop"
        return full[:n], finish, len(thought)

    def split_reasoning(self, body, raw):
        """(reasoning tokens, content tokens) as the server returns them. With a reasoning parser, SGLang's
        BaseReasoningFormatDetector (parser/reasoning_parser.py; glm45 = Glm45Detector) starts in reasoning
        when force_reasoning is set (serving_chat.py ``_get_reasoning_from_request``: the template always
        thinks, or enable_thinking is not false) or on ``<think>``, which it strips, and leaves it at
        ``</think>``; without a parser every token is content, tags included."""
        if not self.a.reasoning_parser:
            return [], list(raw)
        in_reasoning = self.thinks(body)
        reasoning, content = [], []
        for tok in raw:
            if tok == "<think>":
                in_reasoning = True
            elif tok == "</think>" and in_reasoning:
                in_reasoning = False
            elif in_reasoning:
                reasoning.append(tok)
            else:
                content.append(tok)
        return reasoning, content

    async def reasoning_chat(self, request, body, prompt, n):
        a = self.a
        raw, finish, n_reason = self.reasoning_raw(body, prompt, n)
        reasoning, content = self.split_reasoning(body, raw)
        ptoks = len(prompt.split())
        usage = {"prompt_tokens": ptoks, "total_tokens": ptoks + len(raw), "completion_tokens": len(raw),
                 "prompt_tokens_details": None, "reasoning_tokens": n_reason}  # protocol.py UsageInfo
        if not body.get("stream"):
            # serving_chat.py _build_chat_response: content "" when empty, reasoning_content None when empty
            msg = {"role": "assistant", "content": "".join(content), "reasoning_content": "".join(reasoning) or None,
                   "tool_calls": None}
            return web.json_response({"id": "x", "object": "chat.completion", "created": 0, "model": a.model,
                                      "choices": [{"index": 0, "message": msg, "logprobs": None,
                                                   "finish_reason": finish, "matched_stop": None}],
                                      "usage": usage})
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        await resp.write(sglang_chunk(a.model, delta="", role="assistant"))
        if a.ttft:
            await asyncio.sleep(a.ttft)
        in_reasoning = [True] * len(reasoning) + [False] * len(content)
        for i, (is_r, tok) in enumerate(zip(in_reasoning, reasoning + content)):
            if i and a.itl:
                await asyncio.sleep(a.itl)
            await resp.write(sglang_chunk(a.model, reasoning=tok) if is_r else sglang_chunk(a.model, delta=tok))
        await resp.write(sglang_chunk(a.model, finish=finish))
        if (body.get("stream_options") or {}).get("include_usage") and a.behavior != "no_usage":
            await resp.write(sglang_chunk(a.model, usage=usage))
        await resp.write(b"data: [DONE]\n\n")
        return resp

    def event(self, api, model, piece, finish=None, usage=None):
        if api == "chat":
            choice = {"index": 0, "delta": {"content": piece}, "finish_reason": finish}
            obj = {"id": "x", "object": "chat.completion.chunk", "model": model, "choices": [choice]}
        else:
            # SGLang 0.5.23 (python/sglang/srt/entrypoints/openai/serving_completions.py:403, protocol.py:546-582):
            # ``chunk.model_dump_json()`` — pydantic's compact JSON, fields in model order, ``"usage":null`` on every
            # chunk, hidden_states/token_ids/prompt_token_ids/sglext dropped when None; the final usage chunk is
            # ``model_dump_json(exclude_none=True)`` with ``choices: []``
            choice = {"index": 0, "text": piece, "logprobs": None, "finish_reason": finish, "matched_stop": None}
            obj = {"id": "x", "object": "text_completion", "created": 0, "model": model, "choices": [choice],
                   "usage": None}
        if usage is not None:
            obj = {"id": "x", "object": obj["object"], "created": 0, "model": model, "choices": [], "usage": usage}
        return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"

    async def models(self, request):
        return web.json_response({"object": "list", "data": [{"id": self.a.model, "object": "model"}]})

    async def health(self, request):
        return web.Response(text="ok")

    async def completions(self, request):
        return await self.handle(request, "completions")

    async def chat(self, request):
        return await self.handle(request, "chat")

    async def handle(self, request, api):
        a = self.a
        body = await request.json()
        if a.behavior == "die_after" and self.served >= a.die_after:
            os._exit(3)
        self.served += 1
        if body.get("model") != a.model:
            return web.json_response({"error": {"message": "The model `%s` does not exist." % body.get("model")}},
                                     status=404)
        if a.behavior == "http_5xx":
            return web.json_response({"error": {"message": "internal error"}}, status=500)
        if a.strict_fields and set(body) - OPENAI_FIELDS:
            # transformers serve: HTTPException(422, "Unexpected fields in the request: {...}")
            return web.json_response({"detail": "Unexpected fields in the request: %s" % (set(body) - OPENAI_FIELDS)},
                                     status=422)
        if a.behavior == "reject_ignore_eos" and "ignore_eos" in body:
            return web.json_response({"detail": [{"loc": ["body", "ignore_eos"], "msg": "Extra inputs are not permitted"}]},
                                     status=422)
        if a.behavior == "nan_logprobs" and body.get("logprobs"):
            return web.json_response({"error": {"message": "Out of range float values are not JSON compliant"}},
                                     status=400)
        prompt = body.get("prompt") if api == "completions" else body["messages"][-1]["content"]
        n = int(body.get("max_tokens") or 16)
        t0 = time.monotonic()
        if api == "chat" and a.reasoning != "off":
            return await self.reasoning_chat(request, body, prompt, n)
        pieces = self.pieces(prompt, n)
        usage = None
        if a.behavior != "no_usage" and (body.get("stream_options") or {}).get("include_usage"):
            usage = {"prompt_tokens": len(prompt.split()), "completion_tokens": len(pieces),
                     "total_tokens": len(prompt.split()) + len(pieces)}
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        model = a.model
        if a.ttft == 0 and a.itl == 0 and a.behavior in ("ok", "no_usage", "reject_ignore_eos") and not a.stamp:
            key = (api, prompt if n < 64 else len(prompt), n, usage is None)
            data = self.cache.get(key)
            if data is None:
                evs = [self.event(api, model, p) for p in pieces]
                evs.append(self.event(api, model, "", finish="length" if len(pieces) == n else "stop"))
                if usage is not None:
                    evs.append(self.event(api, model, "", usage=usage))
                evs.append(b"data: [DONE]\n\n")
                data = b"".join(evs)
                if len(self.cache) < 4096:
                    self.cache[key] = data
            await resp.write(data)
            self.record(prompt, pieces, t0, time.monotonic() - t0)
            return resp
        if a.ttft:
            await asyncio.sleep(a.ttft)
        first = time.monotonic() - t0
        itl = a.slow_itl if self.served <= a.slow_first else a.itl  # a slow phase: the first --slow-first requests
        for i, p in enumerate(pieces):
            if i and itl:
                await asyncio.sleep(itl)
            if a.behavior in ("disconnect", "stall") and i == 3:
                if a.behavior == "disconnect":
                    request.transport.close()
                    return resp
                await asyncio.sleep(3600)
            if a.behavior == "malformed" and i == 2:
                await resp.write(b"data: {not json\n\n")
                continue
            if a.stamp:
                p = "%.6f|" % time.monotonic()
            await resp.write(self.event(api, model, p))
        await resp.write(self.event(api, model, "", finish="length" if len(pieces) == n else "stop"))
        if usage is not None:
            await resp.write(self.event(api, model, "", usage=usage))
        await resp.write(b"data: [DONE]\n\n")
        self.record(prompt, pieces, t0, first)
        return resp

    def record(self, prompt, pieces, t0, ttft):
        if self.metrics is not None:
            e2e = time.monotonic() - t0
            gaps = [(e2e - ttft) / (len(pieces) - 1)] * (len(pieces) - 1) if len(pieces) > 1 else []
            self.metrics.record(len(prompt.split()), len(pieces), ttft, gaps, e2e)

    async def prometheus(self, request):
        return web.Response(text=self.metrics.render(), content_type="text/plain", charset="utf-8")


class Replay(object):
    """``--replay FILE``: serve the bytes a real server sent, recorded by benchmarks/gpu/sglang/record.py
    (tests/fixtures/sglang-0.5.17/README.md), with their timing shape: each recorded socket read is written at
    its recorded offset from the request's arrival (``--replay-speed`` scales the offsets). A request gets the
    recording of the same kind: a probe prompt its own recorded answer, an unknown model, a negative max_tokens or
    an overlong prompt the recorded error, otherwise the recorded exchange of the same API, stream flag,
    ignore_eos and logprobs. /metrics serves the recorded text with the generation, prompt and request counters
    advanced by what the replay served (the recorded usage), so the reconciliation sees a consistent server."""

    COUNTERS = ("sglang:generation_tokens_total", "sglang:prompt_tokens_total", "sglang:num_requests_total")

    def __init__(self, path, speed=1.0, export_dir=None):
        with open(path) as f:
            self.rec = json.load(f)
        self.speed = speed
        self.export_dir = export_dir
        self.flushes = 0
        self.model = None
        self.by_prompt = {}
        for name, ex in self.rec.items():
            req = ex.get("request") or {}
            body = req.get("body") or {}
            self.model = self.model or body.get("model")
            if name.startswith("probe-") and not name.endswith("-nan"):
                self.by_prompt[(req["path"], self._prompt(body))] = name
        self.served = {"sglang:generation_tokens_total": 0.0, "sglang:prompt_tokens_total": 0.0,
                       "sglang:num_requests_total": 0.0}

    @staticmethod
    def _prompt(body):
        if body.get("messages"):
            return body["messages"][-1].get("content")
        return body.get("prompt")

    def pick(self, path, body):
        api = "chat" if "chat" in path else "completions"
        prompt = self._prompt(body) or ""
        if body.get("model") != self.model:
            return "error-unknown-model"
        if int(body.get("max_tokens") or 1) < 0:
            return "error-bad-max_tokens"
        if len(prompt) > 100000:
            return "error-prompt-too-long"
        if (path, prompt) in self.by_prompt and not body.get("logprobs"):
            return self.by_prompt[(path, prompt)]
        if body.get("logprobs") and body.get("stream") and "probe-%s-nan" % api in self.rec:
            return "probe-%s-nan" % api
        if body.get("ignore_eos") and body.get("stream") and "load-%s-ignore_eos" % api in self.rec:
            return "load-%s-ignore_eos" % api
        name = "%s-%s%s" % (api, "stream" if body.get("stream") else "plain",
                            "-ignore_eos" if body.get("ignore_eos") else ("-logprobs" if body.get("logprobs") else ""))
        return name

    async def send(self, request, name):
        ex = self.rec[name]
        t0 = time.monotonic()
        received = time.time()
        headers = dict((k, v) for k, v in ex["headers"] if k.lower() in ("content-type",))
        resp = web.StreamResponse(status=ex["status"], headers=headers)
        await resp.prepare(request)
        for at, text in ex["reads"]:
            delay = t0 + at * self.speed - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            await resp.write(text.encode("utf-8"))
        await resp.write_eof()
        usage = self.usage(ex)
        if usage:
            self.served["sglang:generation_tokens_total"] += usage.get("completion_tokens") or 0
            self.served["sglang:prompt_tokens_total"] += usage.get("prompt_tokens") or 0
            self.served["sglang:num_requests_total"] += 1
            self.export(received, ex, usage)
        return resp

    def export(self, received, ex, usage):
        """One record a served completion, as SGLang 0.5.17's --export-metrics-to-file writes it (python/sglang/srt/
        observability/request_metrics_exporter.py FileRequestMetricsExporter: the request's meta_info, one JSON line
        a request, in DIR/sglang-request-metrics-YYYYMMDD_HH.log; the field names from req_time_stats.py
        convert_to_output_meta_info and tokenizer_manager.py)."""
        if not self.export_dir:
            return
        now = time.time()
        first = received + (ex["reads"][0][0] * self.speed if ex.get("reads") else 0.0)
        ct = usage.get("completion_tokens") or 0
        rec = {"request_received_ts": received, "api_server_dispatch_finish_ts": received,
               "response_sent_to_client_ts": first, "request_finished_ts": now, "prompt_tokens": usage.get(
                   "prompt_tokens"), "completion_tokens": ct, "cached_tokens": 0, "e2e_latency": now - received,
               "request_parameters": "{}"}
        if ct > 1 and now > first:
            rec["decode_throughput"] = (ct - 1) / (now - first)
        path = os.path.join(self.export_dir, time.strftime("sglang-request-metrics-%Y%m%d_%H.log"))
        with open(path, "a") as f:
            f.write(json.dumps(rec) + "\n")

    async def flush_cache(self, request):  # sglang 0.5.17 http_server.py /flush_cache: GET or POST, 200 when idle
        self.flushes += 1
        return web.Response(text="Cache flushed.\n")

    @staticmethod
    def usage(ex):
        body = "".join(t for dummy, t in ex.get("reads") or [])
        found = None
        for line in body.splitlines():
            line = line[6:] if line.startswith("data: ") else line
            if '"usage"' not in line:
                continue
            try:
                u = json.loads(line).get("usage")
            except ValueError:
                continue
            found = u or found
        return found

    async def post(self, request):
        body = await request.json()
        return await self.send(request, self.pick(request.path, body))

    async def get(self, request):
        name = {"/health": "health", "/health_generate": "health_generate", "/v1/models": "models",
                "/get_server_info": "get_server_info"}.get(request.path)
        if name:
            return await self.send(request, name)
        text = "".join(t for dummy, t in self.rec["metrics-after"]["reads"])
        lines, done = [], set()
        for line in text.splitlines():
            for c in self.COUNTERS:
                # the served counts go on the first series of each counter (SGLang exports one per label set)
                if c not in done and (line.startswith(c + "{") or line.startswith(c + " ")):
                    head, val = line.rsplit(" ", 1)
                    line = "%s %s" % (head, float(val) + self.served[c])
                    done.add(c)
            lines.append(line)
        return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")


# ---------------------------------------------------------------- helpers for the pytest side
# (start a fake server as a subprocess; run the module like Ansible does)

ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
FAKESERVER = os.path.join(HERE, "fakeserver.py")


@contextlib.contextmanager
def fake_server(behavior="ok", *extra):
    """Start tests/integration/fakeserver.py on 127.0.0.1 (free port); yields (base_url, Popen)."""
    proc = subprocess.Popen([sys.executable, FAKESERVER, "--behavior", behavior, "--port", "0"] + list(extra),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        line = proc.stdout.readline()
        if not line.startswith("PORT "):
            raise RuntimeError("fake server did not start: %r %s" % (line, proc.stderr.read()))
        yield "http://127.0.0.1:%d" % int(line.split()[1]), proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)


def free_port():
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def run_module(tmp_path, python=None, **args):
    """Run serving_bench like Ansible does (tests/harness); returns (result dict, seconds). The tests size their
    levels themselves (num_prompts), so the module's minimum duration and request count are off unless a test sets
    them."""
    from ansible_collections.gpuhost.sglang.tests import harness  # pylint: disable=import-outside-toplevel
    args = dict({"min_duration_s": 0, "min_requests": 1}, **args)
    res = harness.run_module("serving_bench", args, tmp_path=tmp_path, python=python)
    return res, res.seconds


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--behavior", default="ok")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--model", default="fake-model")
    ap.add_argument("--ttft", type=float, default=0.0)
    ap.add_argument("--itl", type=float, default=0.0)
    ap.add_argument("--die-after", type=int, default=5)
    ap.add_argument("--slow-first", type=int, default=0, help="the first N completion requests stream at --slow-itl")
    ap.add_argument("--slow-itl", type=float, default=0.0)
    ap.add_argument("--stamp", action="store_true")
    ap.add_argument("--reasoning", choices=["off", "tags", "open"], default="off")
    ap.add_argument("--reasoning-parser", action="store_true")
    ap.add_argument("--think-tokens", type=int, default=40)
    ap.add_argument("--think-forever", action="store_true")
    ap.add_argument("--no-think-toggle", action="store_true")
    ap.add_argument("--numerals", action="store_true")
    ap.add_argument("--accuracy", type=float, default=1.0, help="share of accuracy-gate task items answered right")
    ap.add_argument("--drift", type=float, default=0.0, help="share of prompts whose words after the answer change")
    ap.add_argument("--strict-fields", action="store_true")
    ap.add_argument("--metrics", action="store_true")
    ap.add_argument("--metrics-skew", type=float, default=1.0)
    ap.add_argument("--metrics-prefix", default="sglang:", choices=["sglang:", "sglang_"])
    ap.add_argument("--replay", help="serve a recording of a real server (see Replay)")
    ap.add_argument("--replay-speed", type=float, default=1.0, help="scale the recorded read offsets")
    ap.add_argument("--export-metrics-to-file-dir", help="replay: write SGLang's per-request records here")
    a = ap.parse_args(argv)
    fake = Fake(a)
    if a.metrics:
        sys.path.insert(0, os.path.join(HERE, "..", "fixtures"))
        from sglang_metrics import SglangMetrics  # pylint: disable=import-outside-toplevel
        fake.metrics = SglangMetrics(a.model, a.metrics_prefix, a.metrics_skew)
    app = web.Application(client_max_size=16 << 20)
    if a.replay:
        rep = Replay(a.replay, a.replay_speed, a.export_metrics_to_file_dir)
        app.router.add_route("*", "/flush_cache", rep.flush_cache)
        for path in ("/health", "/health_generate", "/v1/models", "/get_server_info", "/metrics"):
            app.router.add_get(path, rep.get)
        app.router.add_post("/v1/completions", rep.post)
        app.router.add_post("/v1/chat/completions", rep.post)
    else:
        app.router.add_get("/v1/models", fake.models)
        app.router.add_get("/health", fake.health)
        app.router.add_post("/v1/completions", fake.completions)
        app.router.add_post("/v1/chat/completions", fake.chat)
    if fake.metrics is not None and not a.replay:
        app.router.add_get("/metrics", fake.prometheus)

    async def start():
        runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", a.port, backlog=4096)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # pylint: disable=protected-access
        sys.stdout.write("PORT %d\n" % port)
        sys.stdout.flush()
        while True:
            await asyncio.sleep(3600)

    try:
        asyncio.run(start())
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
