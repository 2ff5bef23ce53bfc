# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""serving_bench against the real CPU engine (transformers serve on loopback) and the sandbox's tiny model:
the good copy passes the gate, the NaN and random-weight copies fail it (probes and load checks), a
throttled engine (a loopback proxy that holds every chunk) is caught against a recorded baseline, and
an unchanged re-run passes."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import asyncio
import contextlib
import os
import threading

import pytest

from engine import TINYMODEL, complete, engine_venv_ready, serve  # pylint: disable=import-error
from fakeserver import run_module  # pylint: disable=import-error

# timing (stage 30 runs these alone, after the parallel run): the latency baseline compared with reruns, the probes'
# wall-time bound. The chat canary and the broken models run in the parallel run, on test_engine_fixture.py's engines
# (they assert classes and counts): test_chat_canary_as_the_role_sends_it_passes_on_the_real_engine,
# test_broken_models_fail_the_gate.
timing = pytest.mark.timing
pytestmark = [pytest.mark.skipif(
    not (engine_venv_ready() and os.path.isfile(os.path.join(TINYMODEL, "good", "config.json"))),
    reason="engine venv / tiny model missing: run tests/fixtures/engine-venv.sh and tests/fixtures/tinymodel.sh")]

LOAD = dict(input_len=16, output_len=32, num_prompts=8, warmup=1, plots=False)


@pytest.fixture(scope="module", name="good")
def good_engine():
    """The good copy, started once for both tests (they run one after the other in stage 30's timing run)."""
    with serve(os.path.join(TINYMODEL, "good")) as srv:
        complete(srv, "The capital of France is", max_tokens=4)  # the engine's slow first request, not measured
        yield srv


@contextlib.contextmanager
def throttling_proxy(upstream_url, delay):
    """Loopback TCP proxy in front of the engine; with ``delay`` > 0 it holds the start of every response
    for ``delay`` seconds (a throttled engine: slow prefill). Keep-alive safe: the hold is armed by each
    client->server chunk and applied to the next server->client chunk."""
    host, port = upstream_url.rsplit("//", 1)[1].split(":")
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    box = {}

    async def pipe(reader, writer, conn, upstream):
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                if upstream:
                    conn["armed"] = True
                elif conn["armed"] and delay:
                    conn["armed"] = False
                    await asyncio.sleep(delay)
                writer.write(data)
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    async def handle(creader, cwriter):
        ureader, uwriter = await asyncio.open_connection(host, int(port))
        conn = {"armed": False}
        await asyncio.gather(pipe(creader, uwriter, conn, True), pipe(ureader, cwriter, conn, False))

    async def start():
        box["server"] = await asyncio.start_server(handle, "127.0.0.1", 0)
        box["port"] = box["server"].sockets[0].getsockname()[1]
        ready.set()

    def run():
        asyncio.set_event_loop(loop)
        loop.run_until_complete(start())
        loop.run_forever()

    th = threading.Thread(target=run, daemon=True)
    th.start()
    ready.wait(10)
    try:
        yield "http://127.0.0.1:%d" % box["port"]
    finally:
        async def stop():
            box["server"].close()
        asyncio.run_coroutine_threadsafe(stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        th.join(10)
        loop.close()


@timing
def test_good_model_passes_the_gate(tmp_path, good):
    fast, dt = run_module(tmp_path, base_url=good.base_url, probes_only=True)
    res, dummy = run_module(tmp_path, base_url=good.base_url, concurrency="1,4", report_dir=str(tmp_path / "rep"),
                            **LOAD)
    assert not fast.get("failed"), fast.get("msg")
    assert fast["coherence"]["probes_passed"] == 8
    assert fast["coherence"]["seconds"] < 5.0, fast["coherence"]["seconds"]
    assert not res.get("failed"), res.get("msg")
    assert res["ignore_eos_accepted"] is False  # transformers serve answers 422: measured without it
    for r in res["results"]:
        assert r["completed"] == 8 and r["coherent"] == 8, r
        assert r["output_throughput"] > 0 and r["token_accounting"]["missing_usage"] == 0
    assert len(res["table"]) == 4


@timing
def test_throttled_engine_is_a_regression_and_unchanged_rerun_passes(tmp_path, good):
    args = dict(LOAD)
    args.update(concurrency=2, num_prompts=16, trials=3, tolerance=0.25, run_probes=False,
                baseline_dir=str(tmp_path / "base"), report_dir=str(tmp_path / "rep"),
                fingerprint={"host": "loopback", "model": "tinymodel/good"},
                gate_metrics=["output_throughput", "ttft_ms.p50", "e2e_ms.p50"])
    with throttling_proxy(good.base_url, 0.0) as url:
        first, dummy = run_module(tmp_path, base_url=url, **args)
        again, dummy = run_module(tmp_path, base_url=url, **args)
    with throttling_proxy(good.base_url, 1.5) as url:
        slow, dummy = run_module(tmp_path, base_url=url, **args)
    assert not first.get("failed"), first.get("msg")
    assert first["results"][0]["regression"]["status"] == "recorded"
    assert not again.get("failed"), again.get("msg")
    assert again["results"][0]["regression"]["status"] == "compared"
    assert slow.get("failed") and slow["failure_class"] == "regression", slow.get("msg")
    # a 1.5 s hold per response: TTFT/E2E p50 rise by ~1500 ms, far beyond tolerance, noise and client lag
    assert "ttft_ms.p50 baseline" in slow["msg"] and "threshold" in slow["msg"]
    check = [c for c in slow["results"][0]["regression"]["checks"] if c["metric"] == "ttft_ms.p50"][0]
    assert check["now"] - check["baseline"] > 1000 and not check["passed"]
