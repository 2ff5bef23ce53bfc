# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Streaming load client for OpenAI-compatible servers: asyncio + aiohttp, sharded over processes.

Hot path per request: send a pre-serialized body, append ``(time.monotonic(), bytes)`` per socket
read, nothing else. SSE/JSON parsing, token counting and coherence checks run after the shard's
load finished, so they never delay a timestamp. Each shard measures its own event-loop lag (a
sleeper task's overshoot) and its CPU use, so the caller can mark a run ``client_bound`` instead of
reporting latency the client inflated itself. ``time.monotonic()`` is CLOCK_MONOTONIC: comparable
across processes and with a loopback server's own clock.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import asyncio
import errno
import json
import os
import time
import traceback

try:
    import aiohttp
    from yarl import URL  # aiohttp's own URL type (a dependency of aiohttp)
    HAS_AIOHTTP = True
    AIOHTTP_IMPORT_ERROR = None
except ImportError as e:  # pragma: no cover - depends on the environment
    aiohttp = None
    URL = str
    HAS_AIOHTTP = False
    AIOHTTP_IMPORT_ERROR = e

from ansible_collections.gpuhost.sglang.plugins.module_utils.bench import sse as bench_sse
from ansible_collections.gpuhost.sglang.plugins.module_utils.bench import coherence

ERROR_CLASSES = (
    "connection_refused", "connect_error", "connect_timeout", "http_4xx", "http_429", "http_5xx",
    "model_not_found", "disconnected", "stalled", "timeout", "malformed_sse", "stream_error", "nan",
    "client_error",
)


def endpoint(base_url, api):
    base = base_url.rstrip("/")
    if not base.endswith("/v1"):
        base += "/v1"
    return base + ("/chat/completions" if api == "chat" else "/completions")


def headers_for(api_key):
    h = {"Content-Type": "application/json", "Accept": "text/event-stream"}
    if api_key:
        h["Authorization"] = "Bearer " + api_key
    return h


def build_payload(api, model, prompt, max_tokens, temperature=0.0, ignore_eos=False, logprobs=False,
                  extra=None):
    body = {"model": model, "max_tokens": int(max_tokens), "temperature": temperature, "stream": True,
            "stream_options": {"include_usage": True}}
    if api == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
        if logprobs:
            body["logprobs"] = True
            body["top_logprobs"] = 1
    else:
        body["prompt"] = prompt
        if logprobs:
            body["logprobs"] = 1
    if ignore_eos:
        body["ignore_eos"] = True
    if extra:
        body.update(extra)
    return json.dumps(body).encode("utf-8")


def classify_http(status, body_text):
    low = (body_text or "").lower()
    if status in (400, 404, 422) and "model" in low and any(
            w in low for w in ("not found", "does not exist", "unknown model", "not served", "no model", "invalid model")):
        return "model_not_found"
    if status == 404 and "model" in low:
        return "model_not_found"
    if status == 400 and ("out of range float" in low or " nan" in low):
        return "nan"
    if status == 429:
        return "http_429"
    if 500 <= status:
        return "http_5xx"
    return "http_4xx"


def classify_exception(exc):
    """Map a client exception to (class, detail)."""
    detail = "%s: %s" % (type(exc).__name__, exc)
    if aiohttp is not None:
        conn_timeout = getattr(aiohttp, "ConnectionTimeoutError", None)
        sock_timeout = getattr(aiohttp, "SocketTimeoutError", None)
        if conn_timeout is not None and isinstance(exc, conn_timeout):
            return "connect_timeout", detail
        if sock_timeout is not None and isinstance(exc, sock_timeout):
            return "stalled", detail
        if isinstance(exc, aiohttp.ServerTimeoutError):
            return "stalled", detail
        if isinstance(exc, aiohttp.ClientConnectorError):
            oserr = getattr(exc, "os_error", None)
            if isinstance(oserr, ConnectionRefusedError) or getattr(oserr, "errno", None) == errno.ECONNREFUSED:
                return "connection_refused", detail
            return "connect_error", detail
        if isinstance(exc, (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError,
                            aiohttp.ClientOSError)):
            return "disconnected", detail
        if isinstance(exc, aiohttp.ClientResponseError):
            return classify_http(exc.status, str(exc)), detail
    if isinstance(exc, ConnectionRefusedError):
        return "connection_refused", detail
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
        return "timeout", detail
    if isinstance(exc, (ConnectionResetError, BrokenPipeError)):
        return "disconnected", detail
    return "client_error", detail


async def _one(session, url, body):
    mono = time.monotonic
    raw = {"start": mono(), "end": None, "status": None, "reads": None, "error": None, "detail": None}
    try:
        async with session.post(url, data=body) as resp:  # the session's headers and timeout
            raw["status"] = resp.status
            if resp.status != 200:
                txt = (await resp.content.read(4096)).decode("utf-8", "replace")
                raw["error"] = classify_http(resp.status, txt)
                raw["detail"] = "HTTP %d: %s" % (resp.status, txt[:300])
                raw["end"] = mono()
                return raw
            reads = []
            app = reads.append
            readany = resp.content.readany
            while True:
                chunk = await readany()
                if not chunk:
                    break
                app((mono(), chunk))
            raw["reads"] = reads
    except Exception as e:  # every failure is classified, never raised
        raw["error"], raw["detail"] = classify_exception(e)
    raw["end"] = mono()
    return raw


# asyncio's selectors wait in whole milliseconds: EpollSelector/PollSelector round every timeout up with
# math.ceil(timeout * 1e3) (CPython Lib/selectors.py, "epoll_wait() has a resolution of 1 millisecond, round away
# from zero"). A sleeper woken early by I/O re-arms with an arbitrary remainder, so its overshoot reaches ~1 ms on a
# perfectly idle loop: that much lag is the timer's, and delays no socket read (I/O wakes the selector at once).
SELECTOR_GRANULARITY_S = {"EpollSelector": 1e-3, "PollSelector": 1e-3, "DevpollSelector": 1e-3,
                          "KqueueSelector": 1e-9, "SelectSelector": 1e-6}
_RESOLUTION_CACHE = {}


async def timer_resolution(samples=10, interval=0.001):
    """The event loop's timer resolution in ms: the selector's timeout granularity plus the median wake-up
    overshoot of a sleeper on the idle loop (kernel timer slack, virtualisation; at most the granularity again),
    measured once per process."""
    pid = os.getpid()
    if pid in _RESOLUTION_CACHE:
        return _RESOLUTION_CACHE[pid]
    loop = asyncio.get_running_loop()
    sel = type(getattr(loop, "_selector", None)).__name__
    gran = SELECTOR_GRANULARITY_S.get(sel, 1e-3)  # unknown loops (uvloop: libuv timers are ms too): 1 ms
    over = []
    for dummy in range(samples):
        t = loop.time()
        await asyncio.sleep(interval)
        over.append(loop.time() - t - interval)
    over.sort()
    # the median wake-up overshoot is the timer's (kernel slack, a VM's timer path); a tail is load, which the
    # verdict must see, not subtract: so the median, and never more than the granularity itself
    res = round((gran + min(gran, max(0.0, over[len(over) // 2]))) * 1000, 3)
    _RESOLUTION_CACHE[pid] = res
    return res


async def _lag_monitor(state, lags, delays, interval):
    """Sleeper task: each overshoot of ``interval`` is one lag sample (timer resolution included); right after
    each wake-up one bare yield measures how long the ready queue holds a woken task (``delays``: what a socket
    read's timestamp waits, no timer involved). For lag samples over 1 ms it also records the share of that
    wall time this process spent on CPU (busy client vs. starved client)."""
    loop = asyncio.get_running_loop()
    ptime = time.process_time
    busy = state["busy"]
    while not state["stop"]:
        t = loop.time()
        c = ptime()
        await asyncio.sleep(interval)
        t1 = loop.time()
        await asyncio.sleep(0)
        delays.append(loop.time() - t1)
        wall = t1 - t
        lag = wall - interval
        lags.append(lag)
        if lag > 0.001:
            busy.append((ptime() - c) / wall)


def _p(vals, q):
    return vals[min(len(vals) - 1, int(len(vals) * q))] if vals else None


def _ms(v):
    return round(v * 1000, 3) if v is not None else None


def loop_stats(lags, delays, busy, cpu, wall, resolution_ms):
    """One shard's client statistics (see :func:`client_verdict`)."""
    lags = sorted(lags)
    delays = sorted(delays)
    return {
        "wall_s": round(wall, 4),
        "cpu_s": round(cpu, 4),
        "cpu_util": round(cpu / wall, 4) if wall > 0 else 0.0,
        "lag_samples": len(lags),
        "lag_p50_ms": _ms(_p(lags, 0.5)),
        "lag_p99_ms": _ms(_p(lags, 0.99)),
        "lag_max_ms": _ms(lags[-1] if lags else None),
        "timer_resolution_ms": resolution_ms,
        "ready_delay_p99_ms": _ms(_p(delays, 0.99)),
        "lagged_cpu_share": round(sum(busy) / len(busy), 3) if busy else None,
    }


async def run_shard_async(spec):
    """Run one shard: ``spec`` has url, headers, bodies, concurrency, timeout, stall_timeout,
    start_at, lag_interval. Returns (raws, stats)."""
    bodies = spec["bodies"]
    raws = [None] * len(bodies)
    timeout = aiohttp.ClientTimeout(total=spec["timeout"], sock_read=spec["stall_timeout"],
                                    sock_connect=spec.get("connect_timeout", 10))
    connector = aiohttp.TCPConnector(limit=0, limit_per_host=0, ttl_dns_cache=300)
    lags, delays = [], []
    state = {"stop": False, "busy": []}
    # one timeout object and one parsed URL for the session: per request they were re-merged and re-parsed
    # per request nothing is merged: headers and timeout are the session's, and no cookie jar is consulted
    # (an OpenAI-compatible server sets none; aiohttp's default CookieJar filters and updates on every request)
    async with aiohttp.ClientSession(connector=connector, read_bufsize=1 << 20, auto_decompress=False,
                                     timeout=timeout, headers=spec["headers"],
                                     cookie_jar=aiohttp.DummyCookieJar()) as session:
        resolution = await timer_resolution()  # ~12 ms once per process; inside the start delay when sharded
        delay = spec.get("start_at", 0) - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        mon = asyncio.ensure_future(_lag_monitor(state, lags, delays, spec.get("lag_interval", 0.005)))
        cpu0 = time.process_time()
        wall0 = time.monotonic()
        it = iter(range(len(bodies)))
        url = URL(spec["url"])

        async def worker():
            for i in it:
                raws[i] = await _one(session, url, bodies[i])

        await asyncio.gather(*[worker() for dummy in range(max(1, min(spec["concurrency"], len(bodies))))])
        wall = time.monotonic() - wall0
        cpu = time.process_time() - cpu0
        state["stop"] = True
        await mon
    return raws, loop_stats(lags, delays, state["busy"], cpu, wall, resolution)


def postprocess(raw, api, count_tokens=None, prompt_tokens=None, checks=coherence.DETECTORS, keep_text=False):
    """Turn a raw response into a metrics record (see bench_metrics.compute)."""
    rec = {"ok": False, "error": raw.get("error"), "detail": raw.get("detail"), "start": raw["start"],
           "end": raw["end"], "chunk_times": [], "prompt_tokens": prompt_tokens, "output_tokens": 0,
           "usage": False, "coherent": False, "flags": [], "text": None, "logprobs": [],
           "tokenizer_tokens": None, "chunks": 0, "finish_reason": None}
    if rec["error"]:
        return rec
    try:
        p = bench_sse.parse_reads(raw.get("reads") or [], api, logprobs=keep_text)
    except bench_sse.SSEError as e:
        rec["error"], rec["detail"] = "malformed_sse", str(e)
        return rec
    if p["stream_error"] is not None:
        msg = json.dumps(p["stream_error"])[:300]
        rec["error"] = "nan" if ("out of range float" in msg.lower() or "nan" in msg.lower().split()) else "stream_error"
        rec["detail"] = msg
        return rec
    if not p["done"] and not p["finish_reason"]:
        rec["error"] = "disconnected"
        rec["detail"] = "stream ended without [DONE] or finish_reason after %d events" % p["events"]
        return rec
    text = p["text"]
    rec["text_bytes"] = len(text.encode("utf-8"))  # metrics.usable_tokens: a usage count above this is impossible
    rec["chunk_times"] = p["chunk_times"]
    rec["chunks"] = len(p["chunk_times"])
    rec["finish_reason"] = p["finish_reason"]
    rec["logprobs"] = p["logprobs"]
    usage = p["usage"] or {}
    if count_tokens is not None:
        rec["tokenizer_tokens"] = count_tokens(text)
    if usage.get("completion_tokens") is not None:
        rec["usage"] = True
        rec["output_tokens"] = int(usage["completion_tokens"])
        rec["token_source"] = "usage"
        if usage.get("prompt_tokens") is not None:
            rec["prompt_tokens"] = int(usage["prompt_tokens"])
    elif rec["tokenizer_tokens"] is not None:
        rec["output_tokens"] = rec["tokenizer_tokens"]
        rec["token_source"] = "tokenizer"
    else:
        rec["output_tokens"] = len(p["chunk_times"])
        rec["token_source"] = "chunks"
    rec["flags"] = coherence.detect(text, checks)
    rec["coherent"] = not rec["flags"]
    rec["ok"] = True
    if keep_text or rec["flags"]:
        rec["text"] = text[:300] if not keep_text else text
    if keep_text:  # the coherence probes judge the answer apart from the reasoning
        rec["content"] = p["content"]
        rec["reasoning"] = p["reasoning"]
    return rec


def _shard_entry(spec, api, count_tokens, prompt_tokens, checks, keep_text):
    raws, stats = asyncio.run(run_shard_async(spec))
    recs = [postprocess(r, api, count_tokens, pt, checks, keep_text) for r, pt in zip(raws, prompt_tokens)]
    return recs, stats


def _child(conn, spec, api, count_tokens, prompt_tokens, checks, keep_text):
    try:
        out = _shard_entry(spec, api, count_tokens, prompt_tokens, checks, keep_text)
        conn.send(("ok", out))
    except BaseException:  # report to the parent, never die silently
        conn.send(("fatal", traceback.format_exc()[-2000:]))
    finally:
        conn.close()
        os._exit(0)


def free_cores(sample_s=0.1, cpus=None):
    """Cores this process may use (``sched_getaffinity``) less the share other work keeps busy, from two
    reads of /proc/stat ``sample_s`` apart (idle + iowait = free). At least 1; the affinity count when
    /proc/stat cannot be read."""
    allowed = sorted(cpus if cpus is not None else os.sched_getaffinity(0))

    def read():
        out = {}
        try:
            with open("/proc/stat") as f:
                for line in f:
                    if line.startswith("cpu") and line[3:4].isdigit():
                        parts = line.split()
                        vals = [int(x) for x in parts[1:]]
                        out[int(parts[0][3:])] = (sum(vals), vals[3] + (vals[4] if len(vals) > 4 else 0))
        except (OSError, ValueError):
            return None
        return out

    a = read()
    time.sleep(sample_s)
    b = read()
    if not a or not b:
        return max(1, len(allowed))
    free = 0.0
    for c in allowed:
        if c in a and c in b and b[c][0] > a[c][0]:
            free += (b[c][1] - a[c][1]) / (b[c][0] - a[c][0])
        elif c in b:
            free += 1.0
    return max(1, int(free + 0.25))


# Streams per process when cores are free. Issue 11 (H200 machine, 16 cores, paced fake server, 20 ms ITL):
# 32 streams a process (c=256, 8 processes) gave TTFT/ITL error p99 0.26/0.22 ms and 128 (c=1024, 8) 0.41/0.34 ms,
# where 256 a process gave ITL error p99 18.3 ms (c=256) and TTFT 3.4 ms (c=1024, 4).
STREAMS_PER_PROCESS = 32


def auto_processes(concurrency, per_process=STREAMS_PER_PROCESS, cpus=None):
    """Client processes for ``concurrency`` streams: one per ``per_process`` streams, at most one per free
    core (``cpus``, default :func:`free_cores`), at least one."""
    want = -(-int(concurrency) // per_process)
    if want <= 1:
        return 1  # no need to sample /proc/stat (0.1 s) for one process
    cpus = cpus or free_cores()
    return max(1, min(want, cpus, int(concurrency)))


def run_load(base_url, api, bodies, concurrency, processes=1, timeout=300.0, stall_timeout=60.0,
             api_key=None, count_tokens=None, prompt_tokens=None, checks=coherence.DETECTORS,
             keep_text=False, lag_interval=0.005):
    """Send ``bodies`` with ``concurrency`` in flight over ``processes`` shards.

    Returns (records in body order, list of per-shard stats). A shard that crashes yields
    ``client_error`` records, never an exception.
    """
    if not HAS_AIOHTTP:
        raise RuntimeError("aiohttp is required")
    url = endpoint(base_url, api)
    headers = headers_for(api_key)
    n = len(bodies)
    prompt_tokens = prompt_tokens or [None] * n
    processes = max(1, min(int(processes), int(concurrency), max(n, 1)))
    base_spec = {"url": url, "headers": headers, "timeout": timeout, "stall_timeout": stall_timeout,
                 "lag_interval": lag_interval}
    if processes == 1:
        spec = dict(base_spec, bodies=bodies, concurrency=concurrency, start_at=0)
        recs, stats = _shard_entry(spec, api, count_tokens, prompt_tokens, checks, keep_text)
        return recs, [stats]
    import multiprocessing
    ctx = multiprocessing.get_context("fork")
    start_at = time.monotonic() + 0.25 + 0.05 * processes
    procs = []
    for i in range(processes):
        idx = list(range(i, n, processes))
        conc = concurrency // processes + (1 if i < concurrency % processes else 0)
        spec = dict(base_spec, bodies=[bodies[j] for j in idx], concurrency=conc, start_at=start_at)
        parent, child = ctx.Pipe(duplex=False)
        p = ctx.Process(target=_child, args=(child, spec, api, count_tokens, [prompt_tokens[j] for j in idx],
                                             checks, keep_text), daemon=True)
        p.start()
        child.close()
        procs.append((p, parent, idx))
    records = [None] * n
    stats = []
    for p, conn, idx in procs:
        try:
            kind, payload = conn.recv()
        except EOFError:
            kind, payload = "fatal", "client shard process exited without a result (exit code %s)" % p.exitcode
        p.join(10)
        if kind == "ok":
            recs, st = payload
            for j, r in zip(idx, recs):
                records[j] = r
            stats.append(st)
        else:
            for j in idx:
                records[j] = {"ok": False, "error": "client_error", "detail": payload, "start": None, "end": None,
                              "chunk_times": [], "prompt_tokens": None, "output_tokens": 0, "coherent": False}
    return records, stats


def client_verdict(stats, cpu_threshold=0.9, lag_threshold_ms=1.0):
    """Combine per-shard stats: (client dict, client_bound bool, reason or None).

    A shard is client-bound when its CPU use reaches ``cpu_threshold`` of a core (saturated: always flagged), or
    when its event-loop lag p99 beyond the loop's own timer resolution exceeds ``lag_threshold_ms`` (the
    timestamp-error budget: a woken read waits about that long before it is stamped; benchmarks/timing_accuracy.py
    measures the error next to this estimate). ``timestamp_error_ms`` is the worst shard's estimate.
    """
    reasons = []
    errs = []
    for i, s in enumerate(stats):
        res = s.get("timer_resolution_ms")
        res = 1.0 if res is None else res
        lag = s.get("lag_p99_ms")
        err = max(0.0, lag - res) if lag is not None else None
        errs.append(err or 0.0)
        if s.get("cpu_util", 0) >= cpu_threshold:
            reasons.append("shard %d CPU %.0f%% >= %.0f%% of a core (saturated: events queue behind the client's "
                           "own work)" % (i, 100 * s["cpu_util"], 100 * cpu_threshold))
        if err is not None and err > lag_threshold_ms:
            share = s.get("lagged_cpu_share")
            if share is None:
                why = "unknown cause"
            elif share >= 0.6:
                why = "the client's own work blocked its event loop (%.0f%% CPU while lagging)" % (100 * share)
            else:
                why = "the client was starved of CPU by other processes (%.0f%% CPU while lagging)" % (100 * share)
            reasons.append("shard %d event-loop lag p99 %.2f ms, timer resolution %.2f ms: timestamps up to %.2f ms "
                           "late > %.2f ms at %.0f%% CPU (%s)" % (
                               i, lag, res, err, lag_threshold_ms, 100 * s.get("cpu_util", 0), why))
    client = {
        "processes": len(stats),
        "cpu_s": round(sum(s.get("cpu_s", 0) for s in stats), 4),
        "max_cpu_util": max([s.get("cpu_util", 0) for s in stats] or [0]),
        "max_lag_p99_ms": max([s.get("lag_p99_ms") or 0 for s in stats] or [0]),
        "timer_resolution_ms": max([s.get("timer_resolution_ms") or 0 for s in stats] or [0]),
        "timestamp_error_ms": round(max(errs or [0.0]), 3),
        "shards": stats,
    }
    return client, bool(reasons), ("; ".join(reasons) if reasons else None)


async def _get_json(url, api_key, timeout):
    t = aiohttp.ClientTimeout(total=timeout)
    async with aiohttp.ClientSession(timeout=t) as s:
        async with s.get(url, headers=headers_for(api_key)) as r:
            body = await r.text()
            return r.status, body


def get_models(base_url, api_key=None, timeout=10.0):
    """GET /v1/models -> (list of ids, None) or (None, (class, detail))."""
    base = base_url.rstrip("/")
    if not base.endswith("/v1"):
        base += "/v1"
    try:
        status, body = asyncio.run(_get_json(base + "/models", api_key, timeout))
    except Exception as e:
        return None, classify_exception(e)
    if status != 200:
        return None, (classify_http(status, body), "GET /v1/models: HTTP %d: %s" % (status, body[:200]))
    try:
        data = json.loads(body)
        return [m["id"] for m in data.get("data", []) if isinstance(m, dict) and "id" in m], None
    except (ValueError, TypeError, KeyError, AttributeError) as e:
        return None, ("malformed_response", "GET /v1/models: %s" % e)
