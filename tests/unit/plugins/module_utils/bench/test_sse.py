# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import math
import random

import pytest

from ansible_collections.gpuhost.sglang.plugins.module_utils.bench import sse as bench_sse


def ev(obj, sep=b"\n\n", space=True):
    return (b"data: " if space else b"data:") + json.dumps(obj).encode() + sep


def comp(text, finish=None):
    return {"choices": [{"index": 0, "text": text, "finish_reason": finish, "logprobs": None}]}


def chat(text, finish=None):
    return {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}]}


def stream(pieces, api="completions", usage=True):
    mk = chat if api == "chat" else comp
    body = b"".join(ev(mk(p)) for p in pieces) + ev(mk("", "length"))
    if usage:
        body += ev({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": len(pieces)}})
    return body + b"data: [DONE]\n\n"


def chop(body, sizes, t0=1.0):
    """Split body into reads of the given sizes, timestamps t0, t0+1, ..."""
    reads, i, t = [], 0, t0
    for s in sizes:
        if i >= len(body):
            break
        reads.append((t, body[i:i + s]))
        i += s
        t += 1.0
    if i < len(body):
        reads.append((t, body[i:]))
    return reads


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_whole_response_in_one_read(api):
    pieces = [" w%d" % i for i in range(40)] + [u" caf\u00e9 \"q\" \\ \u4e2d"]
    r = bench_sse.parse_reads([(5.0, stream(pieces, api))], api)
    assert r["text"] == "".join(pieces)
    assert r["chunk_times"] == [5.0] * 41
    assert r["finish_reason"] == "length" and r["done"] is True
    assert r["usage"]["completion_tokens"] == 41
    assert r["empty_events"] == 1 and r["events"] == 43


def test_event_gets_time_of_the_read_that_completed_it():
    a, b, c = ev(comp("a")), ev(comp("b")), ev(comp("c", "stop")) + b"data: [DONE]\n\n"
    reads = [(1.0, a + b[:5]), (2.0, b[5:]), (3.0, c)]
    r = bench_sse.parse_reads(reads)
    assert r["chunk_times"] == [1.0, 2.0, 3.0]
    assert r["text"] == "abc"


def test_random_fragmentation_matches_one_read():
    rnd = random.Random(7)
    pieces = [" x%d\n" % i for i in range(300)]
    body = stream(pieces)
    whole = bench_sse.parse_reads([(0.0, body)])
    for dummy in range(20):
        sizes = [rnd.randint(1, 400) for dummy in range(len(body))]
        r = bench_sse.parse_reads(chop(body, sizes))
        assert r["text"] == whole["text"] and len(r["chunk_times"]) == 300
        assert r["chunk_times"] == sorted(r["chunk_times"])
        assert r["usage"] == whole["usage"] and r["done"]


def test_crlf_comments_event_lines_and_multiline_data():
    body = (b": keepalive\r\n\r\nevent: message\r\nid: 1\r\ndata: {\"choices\":[{\"text\":\"he\",\r\n"
            b"data: \"finish_reason\":null}]}\r\n\r\ndata:{\"choices\":[{\"text\":\"llo\",\"finish_reason\":\"stop\"}]}\r\n\r\n"
            b"data: [DONE]\r\n\r\n")
    r = bench_sse.parse_reads(chop(body, [3, 7, 11, 13, 17, 19, 23]))
    assert r["text"] == "hello" and r["finish_reason"] == "stop" and r["done"]


def test_crlf_event_completes_with_the_read_that_brings_its_last_line_feed():
    """A CRLF stream cut in two at every byte: an event belongs to the second read unless its whole closing
    CRLF CRLF came with the first (the body is normalized once, the marks moved with it)."""
    pieces = [" a", " b", " c"]
    body = stream(pieces).replace(b"\n", b"\r\n")
    ends = []  # where each text event's separator ends
    pos = 0
    for dummy in pieces:
        pos = body.index(b"\r\n\r\n", pos) + 4
        ends.append(pos)
    for k in range(1, len(body)):
        r = bench_sse.parse_reads([(1.0, body[:k]), (2.0, body[k:])])
        assert r["text"] == "".join(pieces) and r["done"], k
        assert r["chunk_times"] == [1.0 if end <= k else 2.0 for end in ends], k


def test_malformed_json_raises():
    body = ev(comp("a")) + b"data: {not json\n\n" + b"data: [DONE]\n\n"
    with pytest.raises(bench_sse.SSEError):
        bench_sse.parse_reads([(1.0, body)])


def test_data_after_done_raises():
    with pytest.raises(bench_sse.SSEError):
        bench_sse.parse_reads([(1.0, b"data: [DONE]\n\n" + ev(comp("x")))])


def test_event_without_choices_raises_but_usage_only_is_fine():
    with pytest.raises(bench_sse.SSEError):
        bench_sse.parse_reads([(1.0, ev({"id": "x"}))])
    r = bench_sse.parse_reads([(1.0, ev({"usage": {"completion_tokens": 2}}) + b"data: [DONE]\n\n")])
    assert r["usage"]["completion_tokens"] == 2


def test_stream_error_event_is_reported():
    body = ev(comp("a")) + ev({"error": {"message": "scheduler died"}})
    r = bench_sse.parse_reads([(1.0, body)])
    assert r["stream_error"] == {"message": "scheduler died"} and not r["done"]


def test_incomplete_tail_is_returned():
    r = bench_sse.parse_reads([(1.0, ev(comp("a")) + b'data: {"choices":[{"te')])
    assert r["text"] == "a" and r["tail"].startswith(b"data:")


def test_usage_on_every_chunk_and_reasoning_content_take_the_full_decoder():
    body = b"".join(ev({"choices": [{"delta": {"reasoning_content": "think%d" % i}}],
                        "usage": {"completion_tokens": i + 1}}) for i in range(10))
    body += ev(chat("answer", "stop")) + b"data: [DONE]\n\n"
    r = bench_sse.parse_reads([(1.0, body)], "chat")
    assert r["text"].startswith("think0think1") and r["text"].endswith("answer")
    assert len(r["chunk_times"]) == 11 and r["usage"]["completion_tokens"] == 10


def test_nan_logprobs_are_collected_only_when_asked():
    obj = {"choices": [{"text": "Paris", "finish_reason": None, "logprobs": {"token_logprobs": [float("nan")]}}]}
    body = json.dumps(obj, allow_nan=True).encode()
    r = bench_sse.parse_reads([(1.0, b"data: " + body + b"\n\ndata: [DONE]\n\n")], logprobs=True)
    assert len(r["logprobs"]) == 1 and math.isnan(r["logprobs"][0])
    chat_obj = {"choices": [{"delta": {"content": "Au"}, "logprobs": {"content": [{"token": "Au", "logprob": -0.1}]}}]}
    r = bench_sse.parse_reads([(1.0, ev(chat_obj) + b"data: [DONE]\n\n")], "chat", logprobs=True)
    assert r["logprobs"] == [-0.1]


def sgl(delta, finish=None):
    """A chat chunk as SGLang 0.5.23 writes it (sse_utils.py: compact, reasoning_content always present)."""
    d = {"reasoning_content": None}
    d.update(delta)
    obj = {"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "m",
           "choices": [{"index": 0, "delta": d, "logprobs": None, "finish_reason": finish, "matched_stop": None}]}
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


@pytest.mark.parametrize("one_read", [True, False])
def test_reasoning_content_and_content_come_back_apart(one_read):
    body = sgl({"role": "assistant", "content": ""}) + b"".join(
        sgl({"reasoning_content": " r%d" % i}) for i in range(12)) + b"".join(
        sgl({"content": " a%d" % i}) for i in range(12)) + sgl({}, "stop") + b"data: [DONE]\n\n"
    reads = [(1.0, body)] if one_read else chop(body, [97] * (len(body) // 97 + 1))
    r = bench_sse.parse_reads(reads, "chat")
    assert r["reasoning"] == "".join(" r%d" % i for i in range(12))
    assert r["content"] == "".join(" a%d" % i for i in range(12))
    assert r["text"] == r["reasoning"] + r["content"]  # the load path still times and checks every token
    assert len(r["chunk_times"]) == 24 and r["finish_reason"] == "stop"


def test_a_delta_with_both_fields_keeps_both_on_the_fast_path():
    body = b"".join(ev({"choices": [{"index": 0, "delta": {"content": "a", "reasoning_content": "r"}}]})
                    for dummy in range(10)) + ev(chat("", "stop")) + b"data: [DONE]\n\n"
    r = bench_sse.parse_reads([(1.0, body)], "chat")
    assert r["content"] == "a" * 10 and r["reasoning"] == "r" * 10


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_plain_fast_path_keeps_utf8_empties_and_compact_json(api):
    # unescaped UTF-8 (ensure_ascii=False, as SGLang's orjson sends), empty deltas and compact separators
    # mixed in one read: the one-regex fast path must give what the full decoder gives
    mk = chat if api == "chat" else comp
    pieces = [u"Grüße", u"", u" 東京", u" ok", u"", u" é"] * 5
    body = b"".join(b"data: " + json.dumps(mk(p), ensure_ascii=False,
                                           separators=(",", ":") if i % 2 else (", ", ": ")).encode("utf-8") + b"\n\n"
                    for i, p in enumerate(pieces))
    body += ev(mk("", "stop")) + b"data: [DONE]\n\n"
    p = bench_sse.parse_reads([(1.0, body)], api)
    assert p["text"] == u"".join(pieces)
    assert len(p["chunk_times"]) == len([x for x in pieces if x])
    assert p["empty_events"] == len(pieces) - len([x for x in pieces if x]) + 1
    assert p["finish_reason"] == "stop" and p["done"]


def _reference(reads, api):
    """Every event decoded on its own with json (no fast path): what parse_reads must agree with."""
    buf = b""
    text, times, finish, usage, events, empties = [], [], None, None, 0, 0
    for t, chunk in reads:
        buf += chunk
        while b"\n\n" in buf:
            e, buf = buf.split(b"\n\n", 1)
            if e[6:] == b"[DONE]":
                continue
            o = json.loads(e[6:])
            events += 1
            usage = o.get("usage") or usage
            for ch in o.get("choices") or []:
                piece = (ch.get("delta") or {}).get("content") if api == "chat" else ch.get("text")
                if piece:
                    text.append(piece)
                    times.append(t)
                else:
                    empties += 1
                finish = ch.get("finish_reason") or finish
    return "".join(text), times, finish, usage, events, empties


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("api", ["completions", "chat"])
def test_plain_body_path_agrees_with_decoding_every_event(api, seed):
    """Plain streams are parsed on the read's bytes without a bytes object per event: text, times, finish
    reason, usage and counts must be those of a one-event-at-a-time JSON decode, in one read or many."""
    rnd = random.Random(seed)
    words = [u" a", u" b\u00e9", u" \"q\"", u" \\x", u"", u" \u4e2d", u" tab\t", u" n\nl"]
    pieces = [rnd.choice(words) for dummy in range(rnd.randint(1, 80))]
    body = stream(pieces, api, usage=rnd.random() < 0.7)
    sizes = [len(body)] if seed % 2 == 0 else [rnd.randint(1, 300) for dummy in range(400)]
    reads = chop(body, sizes)
    r = bench_sse.parse_reads(reads, api)
    ref = _reference(reads, api)
    assert (r["text"], r["chunk_times"], r["finish_reason"], r["usage"], r["events"], r["empty_events"]) == ref
    assert r["done"] is True


def test_done_before_the_last_events_of_one_read_raises():
    body = b"".join(ev(comp(" w%d" % i)) for i in range(10))
    with pytest.raises(bench_sse.SSEError, match="after"):
        bench_sse.parse_reads([(1.0, body + b"data: [DONE]\n\n" + body)])
    with pytest.raises(bench_sse.SSEError, match="after"):
        bench_sse.parse_reads([(1.0, ev(comp(" a")) * 8 + b"data: [DONE]\n\n" + ev(comp(" b")) * 8)])
