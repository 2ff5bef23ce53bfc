#!/usr/bin/env python3
"""Record the real bytes of a live SGLang server for the replay fixtures: one file per exchange under --out, each
the request (method, path, body) then the response's status, headers and body bytes with the time of every read
(so a replay can keep the timing shape). Standard library only (the device machine has no network).
    python3 benchmarks/gpu/sglang/record.py --base-url http://127.0.0.1:30000 --out DIR
"""
import argparse
import http.client
import json
import os
import sys
import time
from urllib.parse import urlparse

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, os.path.join(ROOT, "collections"))
from ansible_collections.gpuhost.sglang.plugins.module_utils.bench import client as bench_client  # noqa: E402
from ansible_collections.gpuhost.sglang.plugins.module_utils.bench.probes import DEFAULT_PROBES  # noqa: E402


def probe_text(probe, api):
    """runner.probe_text (runner imports ansible, which the device machine lacks)."""
    if api == "chat":
        return probe.get("question") or probe.get("prompt")
    return probe.get("prompt") or probe.get("question")

PROMPT = "The capital of France is"
CHAT = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]


def exchange(base, method, path, body=None):
    u = urlparse(base)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=120)
    data = json.dumps(body).encode() if body is not None else None
    t0 = time.monotonic()
    conn.request(method, path, body=data, headers={"Content-Type": "application/json"} if data else {})
    resp = conn.getresponse()
    reads = []
    while True:
        chunk = resp.read1(65536) if hasattr(resp, "read1") else resp.read(65536)
        if not chunk:
            break
        reads.append([round(time.monotonic() - t0, 6), chunk.decode("utf-8", "replace")])
    conn.close()
    return {"request": {"method": method, "path": path, "body": body}, "status": resp.status,
            "headers": resp.getheaders(), "reads": reads}


def cases():
    base = {"model": "tiny", "max_tokens": 32, "temperature": 0}
    for stream in (True, False):
        s = "stream" if stream else "plain"
        for eos in (False, True):
            e = "-ignore_eos" if eos else ""
            extra = {"stream": stream, "ignore_eos": eos}
            if stream:
                extra["stream_options"] = {"include_usage": True}
            yield "completions-%s%s" % (s, e), "/v1/completions", dict(base, prompt=PROMPT, **extra)
            yield "chat-%s%s" % (s, e), "/v1/chat/completions", dict(base, messages=CHAT, **extra)
        yield "completions-%s-logprobs" % s, "/v1/completions", dict(base, prompt=PROMPT, stream=stream, logprobs=2)
        yield "chat-%s-logprobs" % s, "/v1/chat/completions", dict(base, messages=CHAT, stream=stream, logprobs=True,
                                                                   top_logprobs=2)
    # the probes exactly as serving_bench sends them (probe_max_tokens 32 default), and the NaN probe (logprobs)
    for api, path in (("completions", "/v1/completions"), ("chat", "/v1/chat/completions")):
        for i, pr in enumerate(DEFAULT_PROBES):
            yield "probe-%s-%d" % (api, i), path, json.loads(bench_client.build_payload(api, "tiny", probe_text(pr, api), 32))
        yield "probe-%s-nan" % api, path, json.loads(bench_client.build_payload(api, "tiny", probe_text(DEFAULT_PROBES[0], api),
                                                                                 32, logprobs=True))
        # a load request as serving_bench sends it: 64 tokens, ignore_eos, usage
        yield "load-%s-ignore_eos" % api, path, json.loads(bench_client.build_payload(
            api, "tiny", "alpha bravo charlie delta echo foxtrot golf hotel india juliet", 64, ignore_eos=True))
    yield "error-unknown-model", "/v1/completions", dict(base, model="nope", prompt=PROMPT)
    yield "error-bad-max_tokens", "/v1/completions", dict(base, prompt=PROMPT, max_tokens=-1)
    yield "error-prompt-too-long", "/v1/completions", dict(base, prompt="word " * 200000)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    rec = {}
    for name, path in (("health", "/health"), ("health_generate", "/health_generate"), ("models", "/v1/models"),
                       ("get_server_info", "/get_server_info"), ("metrics-before", "/metrics")):
        rec[name] = exchange(a.base_url, "GET", path)
    for name, path, body in cases():
        try:
            rec[name] = exchange(a.base_url, "POST", path, body)
        except Exception as exc:  # keep going: one failed exchange is a finding, not the end of the recording
            rec[name] = {"error": repr(exc)}
        print(name, rec[name].get("status"), flush=True)
    rec["metrics-after"] = exchange(a.base_url, "GET", "/metrics")
    with open(os.path.join(a.out, "sglang-0.5.17-exchanges.json"), "w") as f:
        json.dump(rec, f, indent=1)


if __name__ == "__main__":
    main()
