# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The load client's HTTP/1.1 path (keep-alive connections of its own, aiohttp's response parser) against raw
loopback servers that frame responses exactly as written here: chunked, sized and read-until-close bodies,
connection reuse, every way a response can break, the request it sends, TLS, and per-read timestamps."""

from __future__ import absolute_import, division, print_function

import asyncio
import gc
import os
import ssl
import subprocess
import time

import pytest

from ansible_collections.gpuhost.sglang.plugins.module_utils.bench import client as bench_client
from ansible_collections.gpuhost.sglang.plugins.module_utils.bench import inputs as bench_inputs

pytest.importorskip("aiohttp")  # ansible-test units' own venv has no aiohttp; stage 30's has

EVENT = b'data: {"choices":[{"index":0,"text":"w%d "}]}\n\n'
TAIL = (b'data: {"choices":[{"index":0,"text":"","finish_reason":"length"}]}\n\n'
        b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":%d}}\n\ndata: [DONE]\n\n')


def sse(n):
    return [EVENT % i for i in range(n)] + [TAIL % n]


def chunk(data):
    return b"%x\r\n%s\r\n" % (len(data), data)


class Server:
    """A raw asyncio server in the test's own loop: ``reply(writer, request_head, n)`` answers request ``n`` of a
    connection; it records each request head and counts connections."""

    def __init__(self, reply, tls=None):
        self.reply, self.tls = reply, tls
        self.heads, self.connections = [], 0

    async def handle(self, reader, writer):
        self.connections += 1
        n = 0
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int([ln.split(b":", 1)[1] for ln in head.split(b"\r\n")
                              if ln.lower().startswith(b"content-length:")][0])
                await reader.readexactly(length)
                self.heads.append(head)
                if await self.reply(writer, head, n) is False:
                    break
                n += 1
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def __aenter__(self):
        self.srv = await asyncio.start_server(self.handle, "127.0.0.1", 0, ssl=self.tls)
        self.port = self.srv.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc):
        self.srv.close()


def run(reply, n=4, concurrency=2, stall=5.0, timeout=30.0, headers=None, scheme="http", tls=None, host="127.0.0.1"):
    async def main():
        async with Server(reply, tls) as srv:
            spec = {"url": "%s://%s:%d/v1/completions" % (scheme, host, srv.port),
                    "headers": headers or bench_client.headers_for(None),
                    "bodies": [b'{"prompt":"p%d"}' % i for i in range(n)], "concurrency": concurrency,
                    "timeout": timeout, "stall_timeout": stall, "start_at": 0, "lag_interval": 0.005}
            raws, stats = await bench_client.run_shard_async(spec)
            return raws, stats, srv
    raws, stats, srv = asyncio.run(main())
    return [bench_client.postprocess(r, "completions") for r in raws], raws, srv


async def chunked(writer, head, n, events=8, extra=b""):
    writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n" + extra +
                 b"\r\n" + b"".join(chunk(e) for e in sse(events)) + b"0\r\n\r\n")
    await writer.drain()


def test_chunked_keep_alive_reuses_one_connection_per_stream():
    recs, raws, srv = run(chunked, n=12, concurrency=3)
    assert [r["error"] for r in recs] == [None] * 12
    assert all(r["ok"] and r["coherent"] and r["output_tokens"] == 8 for r in recs)
    assert recs[0]["chunks"] == 8 and len(recs[0]["chunk_times"]) == 8
    assert srv.connections == 3  # 12 requests over 3 keep-alive connections


def test_no_cyclic_gc_while_requests_are_in_flight():
    """Its full passes stopped the loop for 10-20 ms at c=256 (timestamps that late): off during the load, on after,
    and a caller that had it off keeps it off."""
    seen = []

    async def probe(writer, head, n):
        seen.append(gc.isenabled())  # the server runs in the client's loop: this is the client's state mid-load
        await chunked(writer, head, n)

    assert gc.isenabled()
    recs, dummy, dummy2 = run(probe, n=4, concurrency=2)
    assert all(r["ok"] for r in recs) and seen == [False] * 4 and gc.isenabled()
    gc.disable()
    try:
        run(chunked, n=2)
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_sized_and_read_until_close_bodies():
    body = b"".join(sse(5))

    async def sized(writer, head, n):
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))
        await writer.drain()

    async def until_close(writer, head, n):  # HTTP/1.0 style: no length, no chunking, the close ends the body
        writer.write(b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\n" + body)
        await writer.drain()
        return False

    recs, dummy, srv = run(sized, n=4, concurrency=1)
    assert [r["output_tokens"] for r in recs] == [5] * 4 and srv.connections == 1
    recs, dummy, srv = run(until_close, n=4, concurrency=1)
    assert [r["error"] for r in recs] == [None] * 4 and [r["output_tokens"] for r in recs] == [5] * 4
    assert srv.connections == 4  # the server closed each one: a new connection per request


def test_connection_close_header_opens_a_new_connection():
    recs, dummy, srv = run(lambda w, h, n: chunked(w, h, n, extra=b"connection: close\r\n"), n=4, concurrency=1)
    assert [r["error"] for r in recs] == [None] * 4 and srv.connections == 4


@pytest.mark.parametrize("how,cls,words", [
    ("cut_chunk", "disconnected", "TransferEncodingError"),
    ("cut_sized", "disconnected", "ContentLengthError"),
    ("before_response", "disconnected", "before a response"),
    ("bad_status", "malformed_sse", "malformed HTTP response"),
    ("bad_chunk_size", "malformed_sse", "malformed HTTP response"),
])
def test_broken_responses_are_classified_with_the_parsers_reason(how, cls, words):
    async def reply(writer, head, n):
        if how == "cut_chunk":
            writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n" + chunk(EVENT % 1) + b"40\r\ndata")
        elif how == "cut_sized":
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 500\r\n\r\n" + EVENT % 1)
        elif how == "bad_status":
            writer.write(b"HTTP/1.1 OK-ish\r\n\r\n")
        elif how == "bad_chunk_size":
            writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n" + EVENT % 1)
        await writer.drain()
        return False  # and close

    recs, dummy, dummy2 = run(reply, n=2, concurrency=1)
    for r in recs:
        assert r["error"] == cls, r
        assert words in r["detail"], r["detail"]


def test_http_error_status_is_classified_from_its_body():
    async def reply(writer, head, n):
        body = b'{"object":"error","message":"The model `x` does not exist."}'
        writer.write(b"HTTP/1.1 404 Not Found\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))
        await writer.drain()

    recs, dummy, srv = run(reply, n=3, concurrency=1)
    assert [r["error"] for r in recs] == ["model_not_found"] * 3
    assert recs[0]["detail"].startswith("HTTP 404: ") and "does not exist" in recs[0]["detail"]
    assert srv.connections == 1  # an error response with a length keeps the connection


@pytest.mark.parametrize("where", ["before_headers", "mid_body"])
def test_stall_is_found_by_the_watchdog_within_the_stall_timeout(where):
    async def reply(writer, head, n):
        if where == "mid_body":
            writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n" + chunk(EVENT % 1))
            await writer.drain()
        await asyncio.sleep(30)

    t0 = time.monotonic()
    recs, dummy, dummy2 = run(reply, n=2, concurrency=2, stall=0.4)
    took = time.monotonic() - t0
    assert [r["error"] for r in recs] == ["stalled"] * 2, recs
    assert "stall_timeout 0.4 s" in recs[0]["detail"]
    assert took < 3, took  # 0.4 s stall + a 0.1 s watchdog tick, not the server's 30 s


def test_total_timeout_while_data_keeps_coming():
    async def reply(writer, head, n):
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
        for i in range(100):
            writer.write(chunk(EVENT % i))
            await writer.drain()
            await asyncio.sleep(0.05)

    recs, dummy, dummy2 = run(reply, n=1, concurrency=1, stall=5.0, timeout=0.5)
    assert recs[0]["error"] == "timeout" and "timeout=0.5 s" in recs[0]["detail"]


def test_connection_refused_is_classified():
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    spec = {"url": "http://127.0.0.1:%d/v1/completions" % port, "headers": bench_client.headers_for(None),
            "bodies": [b"{}"], "concurrency": 1, "timeout": 5, "stall_timeout": 5, "start_at": 0}
    raws, dummy = asyncio.run(bench_client.run_shard_async(spec))
    assert raws[0]["error"] == "connection_refused" and str(port) in raws[0]["detail"]


def test_request_head_carries_host_port_key_and_length():
    recs, dummy, srv = run(chunked, n=1, concurrency=1, headers=bench_client.headers_for("sk-test-123"))
    head = srv.heads[0].decode("latin-1")
    lines = head.split("\r\n")
    assert lines[0] == "POST /v1/completions HTTP/1.1"
    assert "Host: 127.0.0.1:%d" % srv.port in lines
    assert "Authorization: Bearer sk-test-123" in lines and "Accept: text/event-stream" in lines
    assert "Content-Length: %d" % len(b'{"prompt":"p0"}') in lines


def test_header_line_breaks_are_refused_and_api_key_checked_without_echo():
    with pytest.raises(ValueError, match="line break"):
        bench_client._Target("http://127.0.0.1:1/v1/completions", {"Authorization": "Bearer a\r\nX-Evil: 1"}, 1)
    err = bench_inputs.api_key_error("secret\nvalue")
    assert err.startswith("api_key is invalid") and "secret" not in err
    assert bench_inputs.api_key_error("sk-abc_123") is None and bench_inputs.api_key_error(None) is None


def test_timestamps_are_taken_per_socket_read():
    async def reply(writer, head, n):
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
        for e in sse(4):
            writer.write(chunk(e))
            await writer.drain()
            await asyncio.sleep(0.05)
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    recs, raws, dummy = run(reply, n=1, concurrency=1)
    t = recs[0]["chunk_times"]
    assert len(t) == 4, recs[0]
    gaps = [b - a for a, b in zip(t, t[1:])]
    # each event stamped at its own read, 50 ms apart (bounds loose enough for a loaded CI box: stamped all at
    # the end, the span would be ~0)
    assert t[-1] - t[0] > 0.1 and sum(1 for g in gaps if g > 0.03) >= 2, gaps
    assert len(set(end for dummy, end in raws[0]["marks"] if end)) >= 4  # body bytes came in 4+ reads


def test_https_with_a_trusted_certificate(tmp_path, monkeypatch):
    cert, key = str(tmp_path / "cert.pem"), str(tmp_path / "key.pem")
    subprocess.check_call(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                           "/CN=localhost", "-addext", "subjectAltName=DNS:localhost", "-keyout", key, "-out", cert],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(cert, key)
    # untrusted: the handshake fails and says so
    recs, dummy, dummy2 = run(chunked, n=1, concurrency=1, scheme="https", tls=tls, host="localhost")
    assert recs[0]["error"] == "connect_error" and "CERTIFICATE_VERIFY_FAILED" in recs[0]["detail"]
    # trusted through OpenSSL's SSL_CERT_FILE (what ssl.create_default_context() reads)
    monkeypatch.setenv("SSL_CERT_FILE", cert)
    recs, dummy, srv = run(chunked, n=3, concurrency=1, scheme="https", tls=tls, host="localhost")
    assert [r["error"] for r in recs] == [None] * 3 and srv.connections == 1
    assert os.path.isfile(cert)
