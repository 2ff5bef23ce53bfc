# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The coherence canary against reasoning models, with the loopback fake server modelling
SGLang 0.5.23's reasoning output (tests/integration/fakeserver.py --reasoning ...): a thinking model passes
whether or not thinking can be turned off, its reasoning is recorded apart from the answer, a model that
thinks forever fails with class no_answer, numeric answers count in both forms, and engines that reject
unknown request fields still work because the thinking switch is a per-engine option."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ast
import glob
import json
import os
import urllib.error
import urllib.request

import pytest
import yaml

from fakeserver import ROOT, fake_server, run_module  # pylint: disable=import-error

with open(os.path.join(ROOT, "roles", "sglang", "vars", "main.yml")) as _f:
    ENGINES = yaml.safe_load(_f)["sglang_engines"]
# what the serving role sends for SGLang (roles/sglang/vars/main.yml, probe_chat_fields)
THINKING_OFF = ENGINES["sglang"]["probe_chat_fields"]
SGLANG_VENV = os.environ.get("SGLANG_VENV") or os.path.join(os.environ.get("GPUHOST_ROOT", ROOT), ".cache", "sglang-venv")
QUESTION = "What is the capital of France?"


def post(url, body):
    req = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def chat_body(max_tokens=256, stream=False, **extra):
    body = {"model": "fake-model", "messages": [{"role": "user", "content": QUESTION}], "max_tokens": max_tokens,
            "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    body.update(extra)
    return body


def sse_deltas(text):
    out = []
    for line in text.split("\n"):
        if line.startswith("data: ") and line != "data: [DONE]":
            obj = json.loads(line[6:])
            out.extend(c["delta"] for c in obj["choices"])
    return out


# ---------------------------------------------------------------- the stand-in behaves like SGLang

def test_fake_with_reasoning_parser_splits_reasoning_from_the_answer():
    with fake_server("ok", "--reasoning", "open", "--reasoning-parser") as (url, dummy):
        status, text = post(url, chat_body())
        msg = json.loads(text)["choices"][0]["message"]
        assert status == 200 and msg["content"] == " Paris." and msg["reasoning_content"].startswith("Okay, the user")
        status, text = post(url, chat_body(stream=True))
        deltas = sse_deltas(text)
        assert all("reasoning_content" in d for d in deltas)  # 0.5.23's StreamDelta always carries the key
        reasoning = "".join(d["reasoning_content"] or "" for d in deltas)
        content = "".join(d.get("content") or "" for d in deltas)
        assert reasoning == msg["reasoning_content"] and content == " Paris."
        # thinking switched off: the template closes the block in the prompt, the model answers at once
        msg = json.loads(post(url, chat_body(**THINKING_OFF))[1])["choices"][0]["message"]
        assert msg["content"] == " Paris." and msg["reasoning_content"] is None


@pytest.mark.parametrize("style,head", [("tags", "<think>Okay"), ("open", "Okay")])
def test_fake_without_parser_leaves_the_tags_in_the_content(style, head):
    with fake_server("ok", "--reasoning", style) as (url, dummy):
        msg = json.loads(post(url, chat_body())[1])["choices"][0]["message"]
    assert msg["content"].startswith(head) and msg["content"].endswith("</think> Paris.")
    assert msg["reasoning_content"] is None


def test_fake_thinking_forever_hits_max_tokens_inside_the_reasoning():
    with fake_server("ok", "--reasoning", "open", "--reasoning-parser", "--think-forever") as (url, dummy):
        obj = json.loads(post(url, chat_body(max_tokens=100, **THINKING_OFF))[1])
    # thinking forever ignores nothing: enable_thinking=false still turns it off
    assert obj["choices"][0]["message"]["content"] == " Paris."
    with fake_server("ok", "--reasoning", "open", "--reasoning-parser", "--think-forever",
                     "--no-think-toggle") as (url, dummy):
        obj = json.loads(post(url, chat_body(max_tokens=100, **THINKING_OFF))[1])
    choice = obj["choices"][0]
    assert choice["finish_reason"] == "length" and choice["message"]["content"] == ""
    assert obj["usage"]["completion_tokens"] == 100 and obj["usage"]["reasoning_tokens"] == 100


def test_fake_strict_engine_rejects_unknown_fields():
    with fake_server("ok", "--strict-fields") as (url, dummy):
        status, text = post(url, chat_body(**THINKING_OFF))
        assert status == 422 and "chat_template_kwargs" in text
        assert post(url, chat_body())[0] == 200


# ---------------------------------------------------------------- the canary

THINKERS = [("open", True), ("tags", True), ("open", False), ("tags", False)]
IDS = ["glm5-parser", "glm45-parser", "glm5-inline", "glm45-inline"]


def thinker(style, parser, *extra):
    return fake_server("ok", "--reasoning", style, *((["--reasoning-parser"] if parser else []) + list(extra)))


@pytest.mark.parametrize("style,parser", THINKERS, ids=IDS)
def test_thinking_model_passes_when_thinking_cannot_be_turned_off(tmp_path, style, parser):
    """Nothing asks the engine to skip thinking (the module's default): the answer comes after 40 tokens
    of reasoning, so a probe that runs out of tokens while thinking gets the thinking budget once more."""
    with thinker(style, parser) as (url, dummy):
        res, dummy = run_module(tmp_path, base_url=url, api="chat", probes_only=True)
    assert not res.get("failed"), res.get("msg")
    coh = res["coherence"]
    assert coh["probes_passed"] == 8
    for v in coh["probes"]:
        assert v["answer"].strip() == v["expect"] + ".", v          # judged on the answer alone
        assert v["reasoning"].startswith("Okay, the user"), v        # reasoning recorded apart
        assert v["retried"] is True and v["finish_reason"] == "stop", v


@pytest.mark.parametrize("style,parser", THINKERS, ids=IDS)
def test_thinking_turned_off_by_the_engine_field(tmp_path, style, parser):
    with thinker(style, parser) as (url, dummy):
        res, dummy = run_module(tmp_path, base_url=url, api="chat", probes_only=True, probe_chat_fields=THINKING_OFF)
    assert not res.get("failed"), res.get("msg")
    assert res["coherence"]["probes_passed"] == 8
    assert res["coherence"]["chat_fields"] == THINKING_OFF
    for v in res["coherence"]["probes"]:
        assert v["retried"] is False and not v["reasoning"], v


@pytest.mark.parametrize("parser", [True, False], ids=["parser", "inline"])
def test_template_without_a_thinking_switch_still_passes(tmp_path, parser):
    """GLM-5.3 style: enable_thinking=false is ignored; with the parser the reasoning is in reasoning_content,
    without it the content is 'reasoning</think> answer' (the template opened the block in the prompt)."""
    with thinker("open", parser, "--no-think-toggle") as (url, dummy):
        res, dummy = run_module(tmp_path, base_url=url, api="chat", probes_only=True, probe_chat_fields=THINKING_OFF)
    assert not res.get("failed"), res.get("msg")
    assert all(v["retried"] and v["reasoning"] for v in res["coherence"]["probes"])


@pytest.mark.parametrize("style,parser", [("open", True), ("tags", False)], ids=["parser", "inline-tags"])
def test_model_that_thinks_forever_fails_with_no_answer(tmp_path, style, parser):
    with thinker(style, parser, "--think-forever", "--no-think-toggle") as (url, dummy):
        res, dummy = run_module(tmp_path, base_url=url, api="chat", probes_only=True, probe_chat_fields=THINKING_OFF,
                                probe_max_tokens=32, probe_think_tokens=200)
    assert res.get("failed") and res["failure_class"] == "no_answer", res.get("msg")
    assert "[no_answer]" in res["msg"]
    assert "thought for 232 tokens and never answered" in res["msg"], res["msg"]
    assert res["coherence"]["probes_passed"] == 0


def test_model_that_thinks_forever_without_tags_is_incoherent_and_says_it_ran_out(tmp_path):
    """Template-opened reasoning and no parser: nothing marks the text as reasoning, so it is judged as the
    answer (incoherent), and the message says the probe ran out of tokens."""
    with thinker("open", False, "--think-forever", "--no-think-toggle") as (url, dummy):
        res, dummy = run_module(tmp_path, base_url=url, api="chat", probes_only=True, probe_think_tokens=100)
    assert res.get("failed") and res["failure_class"] == "incoherent", res.get("msg")
    assert "max_tokens 132 reached" in res["msg"], res["msg"]


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_numeral_answers_count(tmp_path, api):
    """'What is two plus two?' -> '4.' and 'How many days are in a week?' -> '7.' pass as 'four' / 'seven'."""
    with fake_server("ok", "--numerals") as (url, dummy):
        res, dummy = run_module(tmp_path, base_url=url, api=api, probes_only=True)
    assert not res.get("failed"), res.get("msg")
    answers = dict((v["name"], v["answer"].strip()) for v in res["coherence"]["probes"])
    assert answers["arithmetic"] == "4." and answers["week"] == "7."


def test_strict_engine_works_without_the_field_and_names_it_when_sent(tmp_path):
    with thinker("open", True, "--strict-fields") as (url, dummy):
        ok, dummy = run_module(tmp_path, base_url=url, api="chat", probes_only=True)
        bad, dummy = run_module(tmp_path, base_url=url, api="chat", probes_only=True, probe_chat_fields=THINKING_OFF)
    assert not ok.get("failed"), ok.get("msg")
    assert bad.get("failed") and bad["failure_class"] == "http_4xx", bad.get("msg")
    assert "chat_template_kwargs" in bad["msg"] and "probe_chat_fields" in bad["msg"], bad["msg"]


# ---------------------------------------------------------------- the engine data against SGLang's own source

def _class_fields(path, name):
    with open(path) as f:
        tree = ast.parse(f.read())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name)
    return set(n.target.id for n in cls.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name))


def test_sglang_probe_fields_are_fields_of_the_pinned_sglang_request():
    """Every field the role sends to SGLang is a ChatCompletionRequest field of the pinned wheel (0.5.23,
    tests/fixtures/sglang-venv.sh), and the glm45 reasoning parser reads the same template switch."""
    assert THINKING_OFF == {"chat_template_kwargs": {"enable_thinking": False}}
    found = glob.glob(os.path.join(SGLANG_VENV, "lib", "python3*", "site-packages", "sglang"))
    if not found:
        if os.environ.get("GPUHOST_SKIP_SGLANG") == "1":
            pytest.skip("sglang fixture venv missing")
        pytest.fail("sglang fixture venv missing at %s: run tests/fixtures/sglang-venv.sh" % SGLANG_VENV)
    srt = os.path.join(found[0], "srt")
    fields = _class_fields(os.path.join(srt, "entrypoints", "openai", "protocol.py"), "ChatCompletionRequest")
    assert set(THINKING_OFF) <= fields, sorted(fields)
    with open(os.path.join(srt, "parser", "reasoning_parser.py")) as f:
        parser_src = f.read()
    glm45 = parser_src[parser_src.index("class Glm45Detector"):]
    assert 'reasoning_default: str = "enable_thinking"' in glm45[:2000]
