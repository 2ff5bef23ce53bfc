# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The real CPU inference engine on loopback, for pytest.

    from engine import serve, complete, chat

    with serve(".cache/tinymodel/good") as srv:        # transformers serve on a free 127.0.0.1 port
        r = complete(srv, "The capital of France is", stream=True)
        assert r.status == 200 and "Paris" in r.text

``serve`` starts the engine from the engine venv (tests/fixtures/engine-venv.sh) in its own process
group, waits (bounded) until /health answers and /v1/models lists the model, yields a ``Served``
(base_url, model, ...), and always kills the whole process group afterwards. The served model name
is the absolute model directory: transformers serve rejects any other ``model`` in a request (HTTP 400).

``complete``/``chat`` send one OpenAI-style request (streaming or not) with the standard library and
return a ``Reply`` normalised over both forms (status, text, finish_reason, usage, error, ...).
"""

from __future__ import absolute_import, division, print_function

import contextlib
import json
import os
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from typing import NamedTuple

ROOT = os.environ.get("GPUHOST_ROOT") or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENGINE_VENV = os.environ.get("GPUHOST_ENGINE_VENV") or os.path.join(ROOT, ".cache", "engine-venv")
TINYMODEL = os.environ.get("GPUHOST_TINYMODEL") or os.path.join(ROOT, ".cache", "tinymodel")
ENGINES = ("transformers",)
# KV cache bound for continuous batching: 256 blocks (of 256 tokens by default) of the tiny model's
# 2 KiB/token KV = ~128 MiB; 2048 tokens per scheduling step.
CB_NUM_BLOCKS = 256
CB_MAX_BATCH_TOKENS = 2048


class EngineError(RuntimeError):
    """The engine could not be started or did not become ready."""


class Served(NamedTuple):
    base_url: str
    model: str
    ready_seconds: float
    pid: int
    log_path: str


class Reply(NamedTuple):
    status: int
    text: str
    finish_reason: object
    usage: object
    error: object          # the error body (dict or text) when status != 200, or an in-stream error event
    chunks: int            # SSE data events carrying choices (streaming), 1 for a JSON reply
    done_sentinel: bool    # whether the stream ended with "data: [DONE]"
    raw: object            # the JSON body, or the list of decoded SSE events


def engine_venv_ready(venv=ENGINE_VENV):
    return os.path.isfile(os.path.join(venv, ".gpuhost-stamp")) and os.access(
        os.path.join(venv, "bin", "transformers"), os.X_OK)


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _log_tail(path, lines=40):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return ""


def _get(url, timeout=2.0):
    with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 (loopback only)
        return resp.status, resp.read().decode("utf-8", "replace")


@contextlib.contextmanager
def serve(model_dir, engine="transformers", venv=None, ready_timeout=120.0, continuous_batching=True,
          threads=1, log_path=None, cb_num_blocks=CB_NUM_BLOCKS, cb_max_batch_tokens=CB_MAX_BATCH_TOKENS):
    """Run the real engine for ``model_dir`` on 127.0.0.1; yield a ``Served``; always kill it.

    With continuous batching the KV cache is sized explicitly (``cb_num_blocks`` x block size tokens,
    ``cb_max_batch_tokens`` per step): left to itself transformers serve takes 60% of the machine's free
    RAM on CPU (measured: 14 GB RSS on a 24 GB box, OOM-killed next to a second engine).

    ``threads``: torch's intra-op threads (OMP_NUM_THREADS); None leaves torch's default (one per CPU). One by
    default: the tiny model gains nothing from more, and the engine shares the 2-core CI machine with the other
    pytest workers (test_accuracy_engine.py alone: 38.4 and 34.8 user CPU-s with the default, 26.9 and 26.2 with
    one thread, the same wall time, 2026-12-05)."""
    if engine not in ENGINES:
        raise ValueError("serve(engine=%r): engine must be one of %s" % (engine, ", ".join(ENGINES)))
    model_dir = os.path.abspath(model_dir)
    if not os.path.isfile(os.path.join(model_dir, "config.json")):
        raise EngineError("serve(model_dir=%r): no config.json there (build it with tests/fixtures/tinymodel.sh)"
                          % model_dir)
    venv = venv or ENGINE_VENV
    exe = os.path.join(venv, "bin", "transformers")
    if not os.access(exe, os.X_OK):
        raise EngineError("serve(venv=%r): %s missing (build it with tests/fixtures/engine-venv.sh)" % (venv, exe))

    port = free_port()
    cmd = [exe, "serve", model_dir, "--host", "127.0.0.1", "--port", str(port), "--device", "cpu",
           "--log-level", "info"]
    if continuous_batching:
        cmd += ["--continuous-batching", "--cb-num-blocks", str(cb_num_blocks),
                "--cb-max-batch-tokens", str(cb_max_batch_tokens)]
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
               NO_COLOR="1")
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    own_log = log_path is None
    if own_log:
        fd, log_path = tempfile.mkstemp(prefix="engine-%s-" % engine, suffix=".log")
        os.close(fd)
    base_url = "http://127.0.0.1:%d" % port
    start = time.monotonic()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
    try:
        deadline = start + ready_timeout
        while True:
            if proc.poll() is not None:
                raise EngineError("engine exited with %s before it was ready: %s\n%s"
                                  % (proc.returncode, " ".join(cmd), _log_tail(log_path)))
            if time.monotonic() > deadline:
                raise EngineError("engine not ready after %.0fs: %s\n%s"
                                  % (ready_timeout, " ".join(cmd), _log_tail(log_path)))
            try:
                status, _body = _get(base_url + "/health")
                if status == 200:
                    status, body = _get(base_url + "/v1/models")
                    ids = [m.get("id") for m in json.loads(body).get("data", [])]
                    if status == 200 and model_dir in ids:
                        break
            except (OSError, ValueError):
                pass
            time.sleep(0.1)
        yield Served(base_url, model_dir, round(time.monotonic() - start, 2), proc.pid, log_path)
    finally:
        _kill_group(proc)
        if own_log:
            with contextlib.suppress(OSError):
                os.unlink(log_path)


def _kill_group(proc, grace=10.0):
    """SIGTERM the engine's process group, SIGKILL what is left after ``grace`` seconds, reap."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
        # the leader is gone; make sure no child of the group survives it
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        return


# ------------------------------------------------------------------------------------------ requests


def request(srv, path, body, timeout=120.0):
    """POST ``body`` (JSON) to ``srv.base_url + path``; return a normalised ``Reply``."""
    data = json.dumps(body).encode()
    req = urllib.request.Request(srv.base_url + path, data=data, headers={"Content-Type": "application/json"})
    try:
        resp = urllib.request.urlopen(req, timeout=timeout)  # noqa: S310 (loopback only)
    except urllib.error.HTTPError as exc:
        text = exc.read().decode("utf-8", "replace")
        try:
            err = json.loads(text)
        except ValueError:
            err = text
        return Reply(exc.code, "", None, None, err, 0, False, err)
    with resp:
        if body.get("stream"):
            return _read_stream(resp)
        payload = json.loads(resp.read().decode("utf-8"))
    choice = payload["choices"][0]
    text = (choice["message"].get("content") or "") if "message" in choice else choice.get("text", "")
    return Reply(resp.status, text, choice.get("finish_reason"), payload.get("usage"), None, 1, False, payload)


def _read_stream(resp):
    events, texts, finish, usage, error, chunks, done = [], [], None, None, None, 0, False
    for raw_line in resp:
        line = raw_line.decode("utf-8", "replace").strip()
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            done = True
            continue
        event = json.loads(data)
        events.append(event)
        if "error" in event:
            error = event["error"]
            continue
        if event.get("usage"):
            usage = event["usage"]
        for choice in event.get("choices") or []:
            chunks += 1
            piece = choice.get("delta", {}).get("content") if "delta" in choice else choice.get("text")
            texts.append(piece or "")
            if choice.get("finish_reason"):
                finish = choice["finish_reason"]
    return Reply(resp.status, "".join(texts), finish, usage, error, chunks, done, events)


def complete(srv, prompt, stream=False, max_tokens=16, **extra):
    """/v1/completions at temperature 0."""
    body = {"model": srv.model, "prompt": prompt, "temperature": 0, "max_tokens": max_tokens, "stream": stream}
    body.update(extra)
    return request(srv, "/v1/completions", body)


def chat(srv, question, system=None, stream=False, max_tokens=16, **extra):
    """/v1/chat/completions at temperature 0: ``question`` as the user message, optional system prompt."""
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": question}]
    body = {"model": srv.model, "messages": messages, "temperature": 0, "max_tokens": max_tokens, "stream": stream}
    body.update(extra)
    return request(srv, "/v1/chat/completions", body)
