# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The inference fixture through the REAL CPU engine (transformers serve) over HTTP on 127.0.0.1.

- good copy: answers 100% of plugins/module_utils/bench/probes.py DEFAULT_PROBES, completion and chat form
  (with and without a system prompt), streaming and not;
- NaN copy: HTTP 200, empty text, finish_reason "stop", 1 completion token, no error anywhere;
- random copy: HTTP 200, garbage text, 0 probes answered;
- the engine's reaction to ignore_eos, logprobs and stream_options (documented in docs/sandbox-model.md);
- the trainer is deterministic (bit-identical files on re-run) and idempotent;
- serving_bench's gate on these engines (classes and counts; its timing tests are in test_serving_bench_engine.py):
  the chat canary with the role's probe_chat_fields passes on the good copy, the NaN and random copies fail it.

Skipped only when the engine venv does not exist (tests/fixtures/engine-venv.sh builds it); the tiny
model is (re)built here when missing or stale. Figures are written to tests/output/engine-fixture.json.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import importlib.util
import json
import os
import socket
import subprocess
import time

import pytest
import yaml

import engine  # pylint: disable=import-error
from fakeserver import run_module  # pylint: disable=import-error

ROOT = engine.ROOT
TRAINER = os.path.join(ROOT, "tests", "fixtures", "tinymodel.py")
SYSTEM = "You are a helpful assistant."
FORMS = ("completion", "chat", "chat_system")
MAX_TOKENS = 16
LOAD = dict(input_len=16, output_len=32, num_prompts=8, warmup=1, plots=False)

pytestmark = pytest.mark.skipif(
    not engine.engine_venv_ready(),
    reason="engine venv missing at %s: build it with tests/fixtures/engine-venv.sh" % engine.ENGINE_VENV)


def _load_trainer():
    spec = importlib.util.spec_from_file_location("gpuhost_tinymodel", TRAINER)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


tinymodel = _load_trainer()
PROBES = tinymodel.load_probes()
FIGURES = {}


def _venv_python():
    return os.path.join(engine.ENGINE_VENV, "bin", "python")


def _train(out, *args, expect_rc=0):
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    start = time.monotonic()
    res = subprocess.run([_venv_python(), TRAINER, "--out", str(out)] + list(args), env=env,
                         capture_output=True, text=True, timeout=600, check=False)
    assert res.returncode == expect_rc, res.stdout + res.stderr
    return res.stdout, time.monotonic() - start


@pytest.fixture(scope="module")
def models():
    _train(engine.TINYMODEL)  # no-op (a few seconds) when the manifest matches
    with open(os.path.join(engine.TINYMODEL, "manifest.json")) as f:
        manifest = json.load(f)
    yield engine.TINYMODEL, manifest
    out = os.path.join(ROOT, "tests", "output")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "engine-fixture.json"), "w") as f:
        json.dump(FIGURES, f, indent=2, sort_keys=True)


def _served(models, name):
    with engine.serve(os.path.join(models[0], name)) as srv:
        FIGURES.setdefault("ready_seconds", {})[name] = srv.ready_seconds
        yield srv
    # serve() must have killed the whole process group and freed the port
    with pytest.raises(ProcessLookupError):
        os.killpg(srv.pid, 0)
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", int(srv.base_url.rsplit(":", 1)[1]))) != 0, "port still served"


@pytest.fixture(scope="module")
def good(models):
    yield from _served(models, "good")


@pytest.fixture(scope="module")
def nan(models):
    yield from _served(models, "nan")


@pytest.fixture(scope="module")
def random_model(models):
    yield from _served(models, "random")


def ask(srv, probe, form, stream, **extra):
    if form == "completion":
        return engine.complete(srv, probe["prompt"], stream=stream, max_tokens=MAX_TOKENS, **extra)
    system = SYSTEM if form == "chat_system" else None
    return engine.chat(srv, probe["question"], system=system, stream=stream, max_tokens=MAX_TOKENS, **extra)


def _replies(srv, form, stream):
    return [(p, ask(srv, p, form, stream)) for p in PROBES]


# ------------------------------------------------------------------------------------------ helper


def test_serve_rejects_unknown_engine(tmp_path):
    with pytest.raises(ValueError, match="engine must be one of transformers"):
        with engine.serve(str(tmp_path), engine="vllm"):
            pass


def test_serve_rejects_dir_without_model(tmp_path):
    with pytest.raises(engine.EngineError, match="no config.json"):
        with engine.serve(str(tmp_path)):
            pass


def test_probe_matcher():
    assert tinymodel.probe_passes("Paris", " Paris.")
    assert tinymodel.probe_passes("four", "Four.")
    assert not tinymodel.probe_passes("Au", "Aurora")          # whole word only
    assert not tinymodel.probe_passes("Paris", "^\rPar%Q")       # partial garbage
    assert not tinymodel.probe_passes("Paris", "")
    assert not tinymodel.probe_passes("Paris", "x" * 60 + " Paris")  # not near the start


# -------------------------------------------------------------------------------------------- good


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("form", FORMS)
def test_good_answers_every_probe(good, form, stream):
    wrong = []
    for probe, r in _replies(good, form, stream):
        assert r.status == 200, r.error
        assert r.error is None
        assert r.finish_reason == "stop", (probe["name"], r)
        assert r.usage and 1 <= r.usage["completion_tokens"] < MAX_TOKENS, r.usage
        if not tinymodel.probe_passes(probe["expect"], r.text):
            wrong.append((probe["name"], r.text))
    FIGURES.setdefault("good_accuracy", {})["%s/%s" % (form, "sse" if stream else "json")] = \
        "%d/%d" % (len(PROBES) - len(wrong), len(PROBES))
    assert not wrong, wrong


def test_good_stream_matches_json(good):
    for probe in PROBES:
        for form in FORMS:
            a, b = ask(good, probe, form, False), ask(good, probe, form, True)
            assert a.text == b.text and a.usage == b.usage, (probe["name"], form, a, b)
            assert b.chunks > 1  # really streamed, token by token


# --------------------------------------------------------------------------------------------- NaN


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("form", FORMS)
def test_nan_returns_empty_text_without_error(nan, form, stream):
    """All-NaN weights: greedy argmax = token 0 = <|endoftext|> -> nothing to say, and no error."""
    for probe, r in _replies(nan, form, stream):
        assert r.status == 200 and r.error is None, r
        assert r.text == "", r.text
        assert r.finish_reason == "stop"
        assert r.usage["completion_tokens"] == 1, r.usage
        assert r.usage["total_tokens"] == r.usage["prompt_tokens"] + 1
        assert not tinymodel.probe_passes(probe["expect"], r.text)
    FIGURES.setdefault("nan", {})["%s/%s" % (form, "sse" if stream else "json")] = {
        "status": r.status, "text": r.text, "finish_reason": r.finish_reason, "usage": r.usage}


# ------------------------------------------------------------------------------------------ random


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("form", FORMS)
def test_random_answers_no_probe(random_model, form, stream):
    replies = _replies(random_model, form, stream)
    for _probe, r in replies:
        assert r.status == 200 and r.error is None, r
    passed = [p["name"] for p, r in replies if tinymodel.probe_passes(p["expect"], r.text)]
    garbage = [r for _p, r in replies if r.text and r.finish_reason == "length"
               and r.usage["completion_tokens"] == MAX_TOKENS]
    FIGURES.setdefault("random", {})["%s/%s" % (form, "sse" if stream else "json")] = {
        "passed": len(passed), "length_limited": len(garbage), "example": replies[0][1].text}
    assert passed == []
    # fluent-looking garbage up to max_tokens, not silence: what tells it apart from the NaN copy
    assert len(garbage) >= len(replies) - 1, [r for _p, r in replies]


# ---------------------------------------------------------------------------------- request quirks


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("form", ["completion", "chat"])
def test_ignore_eos_is_rejected(good, form, stream):
    r = ask(good, PROBES[0], form, stream, ignore_eos=True)
    assert r.status == 422
    assert "ignore_eos" in r.error["detail"]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_logprobs_is_ignored(good, stream):
    c = ask(good, PROBES[0], "completion", stream, logprobs=1)
    h = ask(good, PROBES[0], "chat", stream, logprobs=True, top_logprobs=1)
    for r in (c, h):
        assert r.status == 200 and tinymodel.probe_passes(PROBES[0]["expect"], r.text)
        bodies = r.raw if stream else [r.raw]
        assert all(ch.get("logprobs") is None for b in bodies for ch in b.get("choices", [])), bodies


@pytest.mark.parametrize("form", ["completion", "chat"])
def test_stream_usage_and_end_of_stream(good, form):
    with_opt = ask(good, PROBES[0], form, True, stream_options={"include_usage": True})
    without = ask(good, PROBES[0], form, True)
    for r in (with_opt, without):
        assert r.status == 200
        # usage rides on the last chunk (the one with finish_reason), asked for or not
        assert r.raw[-1].get("usage") == r.usage and r.usage["completion_tokens"] >= 1
        assert r.raw[-1]["choices"][0]["finish_reason"] == "stop"
        # the stream just ends: no "data: [DONE]" sentinel
        assert r.done_sentinel is False
    assert with_opt.usage == without.usage


def test_request_model_must_be_the_served_path(good):
    r = engine.request(good, "/v1/completions", {"model": "tiny", "prompt": "x", "max_tokens": 2})
    assert r.status == 400 and "pinned" in r.error["detail"]


# ----------------------------------------------------------------------------------------- trainer


def test_manifest_records_accuracy_and_hashes(models):
    out, manifest = models
    acc = manifest["probe_accuracy"]
    assert acc["good"]["correct"] == acc["good"]["total"] == 3 * len(PROBES)
    assert acc["nan"]["correct"] == 0 and acc["random"]["correct"] == 0
    # the training time is recorded, not bounded here: the fixture is built once (stage 20), often beside other
    # stages on the same two cores, and a wall-clock bound measured under that load proves nothing (84 s seen)
    assert manifest["training_seconds"] > 0, manifest
    for rel, digest in manifest["files"].items():
        assert tinymodel.sha256_file(os.path.join(out, rel)) == digest, rel
    assert {r.split("/")[0] for r in manifest["files"]} == {"good", "nan", "random"}
    FIGURES["manifest"] = {k: manifest[k] for k in ("training_seconds", "wall_seconds", "parameters",
                                                    "vocab_size", "steps", "final_loss")}


def test_trainer_is_deterministic_and_idempotent(models, tmp_path):
    _out, manifest = models
    stdout, seconds = _train(tmp_path / "m")
    with open(tmp_path / "m" / "manifest.json") as f:
        again = json.load(f)
    assert again["files"] == manifest["files"], "weights differ on re-run: training is not deterministic"
    stdout, seconds_again = _train(tmp_path / "m")
    assert "up to date" in stdout
    assert seconds_again < seconds
    # a modified file is noticed (and would be rebuilt)
    (tmp_path / "m" / "good" / "config.json").write_text("{}")
    stdout, _rc = _train(tmp_path / "m", "--check", expect_rc=3)
    assert "missing, stale or modified" in stdout
    _train(tmp_path / "nowhere", "--check", expect_rc=3)
    FIGURES["retrain"] = {"wall_seconds": round(seconds, 1), "noop_seconds": round(seconds_again, 1)}


# ------------------------------------------------------ serving_bench's gate on these engines (classes and counts)


def engine_data(name):
    with open(os.path.join(ROOT, "roles", "sglang", "vars", "main.yml")) as f:
        return yaml.safe_load(f)["sglang_engines"][name]


def test_chat_canary_as_the_role_sends_it_passes_on_the_real_engine(tmp_path, good):
    """The chat probes with the transformers engine's probe_chat_fields (roles/sglang/vars/main.yml): transformers
    serve 5.24 accepts chat_template_kwargs (it rejects unknown fields with 422) and the tiny model answers."""
    fields = engine_data("transformers")["probe_chat_fields"]
    assert fields == {"chat_template_kwargs": {"enable_thinking": False}}
    res, dummy = run_module(tmp_path, base_url=good.base_url, api="chat", probes_only=True, probe_chat_fields=fields)
    assert not res.get("failed"), res.get("msg")
    assert res["coherence"]["probes_passed"] == 8 and res["coherence"]["chat_fields"] == fields
    assert all(not v["retried"] and not v["reasoning"] for v in res["coherence"]["probes"])


@pytest.mark.parametrize("name,cls", [("nan", "empty"), ("random", "incoherent")])
def test_broken_models_fail_the_gate(tmp_path, request, name, cls):
    srv = request.getfixturevalue({"nan": "nan", "random": "random_model"}[name])
    probes, dummy = run_module(tmp_path, base_url=srv.base_url, probes_only=True)
    load, dummy = run_module(tmp_path, base_url=srv.base_url, run_probes=False, concurrency=2, **LOAD)
    assert probes.get("failed") and probes["failure_class"] == cls, probes.get("msg")
    assert probes["coherence"]["probes_passed"] == 0
    # the load path alone also refuses to count the output as throughput
    assert load.get("failed") and load["failure_class"] == cls, load.get("msg")
    r = load["results"][0]
    assert r["completed"] == 8 and r["coherent"] == 0 and r["output_throughput"] == 0.0
