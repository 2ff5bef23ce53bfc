# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Streaming load client for OpenAI-compatible servers: asyncio + aiohttp's HTTP parser, sharded over processes.

Hot path per request: write a pre-serialized request on the worker's own keep-alive connection, let aiohttp's
response parser (``aiohttp.http_parser.HttpResponseParser``, the C parser behind ``ClientSession``: chunked
framing, limits, framing errors) take each socket read, and append ``(time.monotonic(), body bytes so far)``,
nothing else. ``ClientSession`` itself is not used for the load: its per-request machinery (request and response
objects, a timer per read, connector bookkeeping) cost about 540 us a request on one core of the 2-core
controller, most of the client's CPU at c=1024 x 256 (cProfile in docs/bench.md, "Capacity"); here a
request costs what the parser and the event loop need. Stall and total timeouts are one watchdog task per shard,
not a timer per read; the cyclic garbage collector is off while requests are in flight (its pauses would stamp
reads late). SSE/JSON parsing, token counting and coherence checks run after the shard's load finished, so they
never delay a timestamp. Each shard measures its own event-loop lag (a sleeper task's
overshoot) and its CPU use, so the caller can mark a run ``client_bound`` instead of reporting latency the
client inflated itself. ``time.monotonic()`` is CLOCK_MONOTONIC: comparable across processes and with a
loopback server's own clock.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import asyncio
import errno
import gc
import json
import os
import ssl
import time
import traceback

try:
    import aiohttp
    from aiohttp.http_parser import HttpResponseParser  # the C parser when aiohttp's extension is built
    from yarl import URL  # aiohttp's own URL type (a dependency of aiohttp)
    HAS_AIOHTTP = True
    AIOHTTP_IMPORT_ERROR = None
except ImportError as e:  # pragma: no cover - depends on the environment
    aiohttp = None
    HttpResponseParser = None
    URL = str
    HAS_AIOHTTP = False
    AIOHTTP_IMPORT_ERROR = e

from ansible_collections.gpuhost.sglang.plugins.module_utils.bench import server_limits
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


_TIMEOUT = getattr(asyncio, "timeout", None)  # asyncio.timeout(): Python 3.11 and later


class _Fault(Exception):
    """A request failure already classified: ``cls`` is one of ERROR_CLASSES."""

    def __init__(self, cls, detail):
        Exception.__init__(self, detail)
        self.cls = cls
        self.detail = detail


# One read buffer a process, lent to every connection (asyncio.BufferedProtocol): an event loop takes one socket read
# at a time and buffer_updated copies it out at once, so no read can overwrite another. asyncio's plain Protocol
# path allocates a 256 KiB bytes object for every read (selector_events max_size) and shrinks it; on the 2-core box
# those fresh allocations page-faulted on every read (measured: 53k minor faults for 2048 responses of 48 KB).
READ_BUFFER = 1 << 18


class _Conn(asyncio.BufferedProtocol):
    """One worker's keep-alive HTTP/1.1 connection. One request at a time: :meth:`send` writes it and returns a
    future that completes when aiohttp's parser has the whole response (or fails with a :class:`_Fault`)."""

    _rbuf = None  # the process's read buffer (a memoryview), made on first use

    def __init__(self, loop):
        self._loop = loop
        self._reading_paused = False  # read by aiohttp's StreamReader (flow control: the whole body is kept anyway)
        # the transport, and the response in flight: its future, parser, head, body reader, (time, bytes) marks
        self.transport = self.fut = self.parser = self.msg = self.payload = self.marks = None
        self.started = self.last = 0.0  # when it was sent, when its last byte came

    # asyncio.Protocol
    def connection_made(self, transport):
        self.transport = transport

    def connection_lost(self, exc):
        self.transport = None
        fut = self.fut
        if fut is None or fut.done():
            return
        if self.payload is not None and self.parser is not None:
            try:
                self.parser.feed_eof()  # a body that ends with the connection (no length, not chunked) is whole now
            except Exception as e:  # chunked or sized body cut short: aiohttp's own framing error names it
                self._fail("disconnected", "the server closed the connection mid-response after %d body bytes "
                                           "(%s: %s)" % (self.payload.total_bytes, type(e).__name__, e))
                return
            if self.payload.is_eof():
                fut.set_result(None)
                return
        got = "after %d body bytes" % self.payload.total_bytes if self.payload is not None else "before a response"
        self._fail("disconnected", "the server closed the connection %s%s" % (got, " (%s)" % exc if exc else ""))

    def pause_reading(self):
        """aiohttp's StreamReader asks for this above its high-water mark; the client keeps every byte anyway."""

    def resume_reading(self, *args, **kwargs):
        """See :meth:`pause_reading`."""

    def get_buffer(self, sizehint):
        if _Conn._rbuf is None:
            _Conn._rbuf = memoryview(bytearray(READ_BUFFER))
        return _Conn._rbuf

    def buffer_updated(self, nbytes):
        self.data_received(_Conn._rbuf[:nbytes].tobytes())

    def data_received(self, data):
        self.last = t = time.monotonic()
        parser = self.parser
        if parser is None:  # bytes outside a response in flight: nothing waits for them
            return
        try:
            msgs = parser.feed_data(data)[0]
        except Exception as e:  # aiohttp.http_exceptions: bad status line, header too long, bad chunk size
            self._fail("malformed_sse", "malformed HTTP response: %s: %s" % (type(e).__name__, e))
            return
        if msgs and self.payload is None:
            self.msg, self.payload = msgs[0]
        p = self.payload
        if p is not None:
            self.marks.append((t, p.total_bytes))
            if p.is_eof():
                self.parser = None
                self.fut.set_result(None)
            else:
                exc = p.exception()
                if exc is not None:
                    self._fail("disconnected", "response body: %s: %s" % (type(exc).__name__, exc))

    # the client's side
    def send(self, data, started):
        self.parser = HttpResponseParser(self, self._loop, 1 << 20, payload_exception=aiohttp.ClientPayloadError,
                                         read_until_eof=True, auto_decompress=False)
        self.msg = self.payload = None
        self.marks = []
        self.started = self.last = started
        self.fut = self._loop.create_future()
        self.transport.write(data)
        return self.fut

    def _fail(self, cls, detail):
        self.parser = None
        if self.fut is not None and not self.fut.done():
            self.fut.set_exception(_Fault(cls, detail))
        self.close()

    def close(self):
        if self.transport is not None:
            self.transport.abort()
            self.transport = None


class _Target:
    """Where a shard's requests go: host, port, TLS, the request head (headers from :func:`headers_for`), timeouts;
    and the connections in flight, for the watchdog."""

    def __init__(self, url, headers, connect_timeout):
        u = URL(url)
        if u.scheme not in ("http", "https") or not u.host:
            raise ValueError("base_url must be an http:// or https:// URL, got %r" % url)
        self.host, self.port = u.host, u.port
        self.ssl = ssl.create_default_context() if u.scheme == "https" else None
        host = "[%s]" % u.host if ":" in u.host else u.host
        port = "" if u.is_default_port() else ":%d" % u.port
        lines = ["POST %s HTTP/1.1" % (u.raw_path_qs or "/"), "Host: %s%s" % (host, port)]
        for name, value in headers.items():
            if "\r" in name + value or "\n" in name + value:
                raise ValueError("request header %s contains a line break" % name)
            lines.append("%s: %s" % (name, value))
        self.head = ("\r\n".join(lines) + "\r\nContent-Length: ").encode("latin-1")
        self.connect_timeout = connect_timeout
        self.live = set()

    async def connect(self, loop):
        make = loop.create_connection(lambda: _Conn(loop), self.host, self.port, ssl=self.ssl,
                                      server_hostname=self.host if self.ssl else None)
        try:
            if _TIMEOUT is None:
                dummy, conn = await asyncio.wait_for(make, self.connect_timeout)
            else:
                # Python >= 3.11: the connect runs in the worker's own task under a deadline (wait_for wraps it in a
                # task of its own; no difference was measurable on the 2-core box, it is simply less work)
                async with _TIMEOUT(self.connect_timeout):
                    dummy, conn = await make
        except (asyncio.TimeoutError, TimeoutError):
            raise _Fault("connect_timeout", "no TCP connection to %s:%s within %s s" % (
                self.host, self.port, self.connect_timeout))
        except ConnectionRefusedError as e:
            raise _Fault("connection_refused", "%s:%s: %s" % (self.host, self.port, e))
        except (OSError, ssl.SSLError) as e:
            raise _Fault("connect_error", "%s:%s: %s: %s" % (self.host, self.port, type(e).__name__, e))
        self.live.add(conn)
        return conn

    def request(self, body):
        return self.head + b"%d\r\n\r\n" % len(body) + body


async def _one(loop, target, conn, body):
    """One request on ``conn`` (a new connection when it is None or closed). Returns (connection to reuse or None,
    raw record)."""
    mono = time.monotonic
    raw = {"start": mono(), "end": None, "status": None, "marks": None, "body": None, "error": None, "detail": None}
    try:
        if conn is None or conn.transport is None or conn.transport.is_closing():
            target.live.discard(conn)
            conn = await target.connect(loop)
        await conn.send(target.request(body), raw["start"])
        data = conn.payload.read_nowait()
        raw["status"] = status = conn.msg.code
        if status != 200:
            txt = data[:4096].decode("utf-8", "replace")
            raw["error"] = classify_http(status, txt)
            raw["detail"] = "HTTP %d: %s" % (status, txt[:300])
        else:
            raw["marks"], raw["body"] = conn.marks, data
        if conn.msg.should_close:
            conn.close()
    except _Fault as f:  # every failure is classified, never raised
        raw["error"], raw["detail"] = f.cls, f.detail
    except Exception as e:
        raw["error"], raw["detail"] = classify_exception(e)
    if conn is not None and conn.transport is None:
        target.live.discard(conn)
        conn = None
    raw["end"] = mono()
    return conn, raw


async def _watchdog(target, state, stall_timeout, total_timeout):
    """Fails a response that got no byte for ``stall_timeout`` s (class stalled) or ran ``total_timeout`` s (class
    timeout); one pass over the connections a tick instead of a timer per read."""
    tick = max(0.02, min(1.0, stall_timeout / 4.0, total_timeout / 4.0))
    while not state["stop"]:
        await asyncio.sleep(tick)
        now = time.monotonic()
        for conn in list(target.live):
            fut = conn.fut
            if fut is None or fut.done():
                continue
            if now - conn.last > stall_timeout:
                conn._fail("stalled", "no data from the server for %.1f s (stall_timeout %s s)" % (
                    now - conn.last, stall_timeout))
            elif now - conn.started > total_timeout:
                conn._fail("timeout", "the response took longer than timeout=%s s" % total_timeout)


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
    loop = asyncio.get_running_loop()
    target = _Target(spec["url"], spec["headers"], spec.get("connect_timeout", 10))
    lags, delays = [], []
    state = {"stop": False, "busy": []}
    resolution = await timer_resolution()  # ~12 ms once per process; inside the start delay when sharded
    delay = spec.get("start_at", 0) - time.monotonic()
    if delay > 0:
        await asyncio.sleep(delay)
    mon = asyncio.ensure_future(_lag_monitor(state, lags, delays, spec.get("lag_interval", 0.005)))
    dog = asyncio.ensure_future(_watchdog(target, state, spec["stall_timeout"], spec["timeout"]))
    cpu0 = time.process_time()
    wall0 = time.monotonic()
    it = iter(range(len(bodies)))
    # no cyclic garbage collection while requests are in flight: its full passes over the growing records stopped
    # the event loop for ~10-20 ms at c=256 on one core of the 2-core box (ITL error p99 40.6 ms with it, 2.4 ms
    # without; docs/bench.md). Reference counting still frees everything as it goes; the few cycles (a connection and
    # its last response reader) wait for the collector, which is on again as soon as the load ends.
    gc_was = gc.isenabled()
    gc.disable()

    async def worker():
        conn = None
        for i in it:
            conn, raws[i] = await _one(loop, target, conn, bodies[i])
        if conn is not None:
            conn.close()

    try:
        await asyncio.gather(*[worker() for dummy in range(max(1, min(spec["concurrency"], len(bodies))))])
    finally:
        wall = time.monotonic() - wall0
        cpu = time.process_time() - cpu0
        state["stop"] = True
        if gc_was:
            gc.enable()
        for conn in target.live:
            conn.close()
        dog.cancel()
        await asyncio.gather(mon, dog, return_exceptions=True)
    return raws, loop_stats(lags, delays, state["busy"], cpu, wall, resolution)


def postprocess(raw, api, count_tokens=None, prompt_tokens=None, checks=coherence.DETECTORS, keep_text=False,
                eos_ignored=False):
    """Turn a raw response into a metrics record (see bench_metrics.compute). ``eos_ignored``: the request was sent
    with ignore_eos, so its coherence is judged on the head of the text (coherence.detect_load)."""
    rec = {"ok": False, "error": raw.get("error"), "detail": raw.get("detail"), "start": raw["start"],
           "end": raw["end"], "chunk_times": [], "prompt_tokens": prompt_tokens, "output_tokens": 0,
           "usage": False, "coherent": False, "flags": [], "text": None, "logprobs": [],
           "tokenizer_tokens": None, "chunks": 0, "finish_reason": None}
    if rec["error"]:
        return rec
    try:
        p = bench_sse.parse_body(raw.get("body") or b"", raw.get("marks") or (), api, logprobs=keep_text)
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
    rec["text_bytes"] = len(text.encode("utf-8"))  # metrics.usage_above_text: special tokens stream no text
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
    rec["flags"] = coherence.detect_load(text, checks, eos_ignored)
    rec["coherent"] = not rec["flags"]
    rec["ok"] = True
    if keep_text or rec["flags"]:
        rec["text"] = text[:300] if not keep_text else text
    if keep_text:  # the coherence probes judge the answer apart from the reasoning
        rec["content"] = p["content"]
        rec["reasoning"] = p["reasoning"]
    return rec


def _shard_entry(spec, api, count_tokens, prompt_tokens, checks, keep_text, eos_ignored=False):
    raws, stats = asyncio.run(run_shard_async(spec))
    recs = [postprocess(r, api, count_tokens, pt, checks, keep_text, eos_ignored)
            for r, pt in zip(raws, prompt_tokens)]
    return recs, stats


def _child(conn, spec, api, count_tokens, prompt_tokens, checks, keep_text, eos_ignored=False):
    try:
        out = _shard_entry(spec, api, count_tokens, prompt_tokens, checks, keep_text, eos_ignored)
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


# Streams per process when cores are free. Measured (docs/bench.md; H200 machine, 16 cores, paced fake server, 20 ms ITL):
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
             keep_text=False, lag_interval=0.005, eos_ignored=False):
    """Send ``bodies`` with ``concurrency`` in flight over ``processes`` shards (``eos_ignored``: the bodies ask for
    ignore_eos; see postprocess).

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
        recs, stats = _shard_entry(spec, api, count_tokens, prompt_tokens, checks, keep_text, eos_ignored)
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
                                             checks, keep_text, eos_ignored), daemon=True)
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


def get_server_info(base_url, api_key=None, timeout=10.0):
    """The server's limits from SGLang's /get_server_info (bench/server_limits.py): (limits, None) or (None, why)."""
    return server_limits.fetch(lambda url, key, t: asyncio.run(_get_json(url, key, t)), base_url, api_key, timeout)


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
