# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import math
import os
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
    ref = reference(reads, api)[:6]
    assert (r["text"], r["chunk_times"], r["finish_reason"], r["usage"], r["events"], r["empty_events"]) == ref
    assert r["done"] is True


def test_done_before_the_last_events_of_one_read_raises():
    body = b"".join(ev(comp(" w%d" % i)) for i in range(10))
    with pytest.raises(bench_sse.SSEError, match="after"):
        bench_sse.parse_reads([(1.0, body + b"data: [DONE]\n\n" + body)])
    with pytest.raises(bench_sse.SSEError, match="after"):
        bench_sse.parse_reads([(1.0, ev(comp(" a")) * 8 + b"data: [DONE]\n\n" + ev(comp(" b")) * 8)])


# The uniform-run path (a read of many events that differ in their text alone, cut out with one regex pass and
# proven by rebuilding the read) against a one-event-at-a-time JSON decode, on SGLang 0.5.17's recorded streams
# and on hand-made ones that break the run in every way it can be broken.
REAL = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "fixtures", "sglang-0.5.17", "exchanges.json")
with open(REAL) as _f:
    EXCHANGES = json.load(_f)
STREAMS = sorted(k for k, v in EXCHANGES.items() if isinstance(v, dict) and v.get("status") == 200 and
                 (v.get("request") or {}).get("body") and v["request"]["body"].get("stream") and len(v.get("reads") or ()) > 2)


def reference(reads, api):
    """SSE by the spec's rules, one event at a time, every payload through json: (text, times, finish, usage,
    events, empty events, done)."""
    buf = b""
    text, times, finish, usage, events, empties, done = [], [], None, None, 0, 0, False
    for t, chunk in reads:
        buf += chunk
        buf = buf.replace(b"\r\n", b"\n") if not buf.endswith(b"\r") else buf[:-1].replace(b"\r\n", b"\n") + b"\r"
        while b"\n\n" in buf:
            e, buf = buf.split(b"\n\n", 1)
            datas = [ln[5:].strip() for ln in e.split(b"\n") if ln.startswith(b"data:")]
            if not datas:
                continue  # a comment or keep-alive
            data = b"\n".join(datas)
            if data == b"[DONE]":
                done = True
                continue
            o = json.loads(data)
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
    return "".join(text), times, finish, usage, events, empties, done


def parsed(reads, api):
    r = bench_sse.parse_reads(reads, api)
    return r["text"], r["chunk_times"], r["finish_reason"], r["usage"], r["events"], r["empty_events"], r["done"]


def runs(body, api):
    """How many events the uniform path took from ``body`` as one read (0: it was not taken)."""
    body = body.replace(b"\r\n", b"\n")
    groups, dummy = bench_sse._raw_groups(body, [(1.0, len(body))], api)
    return sum(p.events for dummy, dummy, dummy, p in groups if isinstance(p, bench_sse.Run))


def sglang_event(text, finish=None, usage=None, rid=b"8ecdf1f3", api="completions"):
    """One event as SGLang 0.5.17 sends it (compact JSON, UTF-8 as is; the recorded exchanges' key order)."""
    if api == "chat":
        choice = {"index": 0, "delta": {"role": None, "content": text, "reasoning_content": None, "tool_calls": None},
                  "logprobs": None, "finish_reason": finish, "matched_stop": None}
        obj = {"id": rid.decode(), "object": "chat.completion.chunk", "created": 1796237160, "model": "tiny",
               "choices": [choice] if usage is None else [], "usage": usage}
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish, "matched_stop": None}
        obj = {"id": rid.decode(), "object": "text_completion", "created": 1796237160, "model": "tiny",
               "choices": [choice] if usage is None else [], "usage": usage}
    return b"data: " + json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8") + b"\n\n"


def sglang_body(texts, api="completions", eol=b"\n"):
    body = b"".join(sglang_event(x, api=api) for x in texts) + sglang_event("", "length", api=api)
    body += sglang_event("", usage={"prompt_tokens": 3, "completion_tokens": len(texts)}, api=api) + b"data: [DONE]\n\n"
    return body.replace(b"\n", eol)


WORDS = [u" alpha", u" caf\u00e9", u" \u6771\u4eac", u"", u" \U0001f600", u" bravo", u" x"]


@pytest.mark.parametrize("name", STREAMS)
def test_recorded_sglang_streams_agree_as_recorded_and_in_one_read(name):
    ex = EXCHANGES[name]
    api = "chat" if "chat" in ex["request"]["path"] else "completions"
    reads = [(t, x.encode("utf-8")) for t, x in ex["reads"]]
    assert parsed(reads, api) == reference(reads, api)
    body = b"".join(x for dummy, x in reads)
    one = [(7.0, body)]
    assert parsed(one, api) == reference(one, api)
    if len(body) >= bench_sse.UNIFORM_MIN and "logprobs" not in name:  # logprobs events take the full decoder
        assert runs(body, api) > 0, "the uniform path was not taken for %s" % name


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_every_two_read_split_agrees(api):
    # every byte boundary, inside multi-byte UTF-8 characters and inside the separators included
    n = 14 if api == "completions" else 10  # just over the uniform path's threshold either way
    body = sglang_body([WORDS[i % len(WORDS)] for i in range(n)], api)
    assert len(body) >= bench_sse.UNIFORM_MIN and runs(body, api) == n  # the first text event has the run's shape too
    for cut in range(1, len(body)):
        reads = [(1.0, body[:cut]), (2.0, body[cut:])]
        assert parsed(reads, api) == reference(reads, api), cut


@pytest.mark.parametrize("eol", [b"\n", b"\r\n"])
def test_one_byte_a_read_and_crlf_agree(eol):
    body = sglang_body([WORDS[i % len(WORDS)] for i in range(40)], eol=eol)
    reads = [(float(i), body[i:i + 1]) for i in range(len(body))]
    assert parsed(reads, "completions") == reference(reads, "completions")
    one = [(3.0, body)]
    assert parsed(one, "completions") == reference(one, "completions")
    assert runs(body, "completions") == 40


def _break(i, texts):
    """The body of ``texts`` with event ``i`` (or the stream around it) made different in one way each."""
    evs = [sglang_event(x) for x in texts]
    kind = i % 9
    if kind == 0:
        evs[i] = b": keep-alive\n\n" + evs[i]  # a comment event inside the run
    elif kind == 1:
        evs[i] = sglang_event(u'say "hi" \\ now')  # escapes in one text
    elif kind == 2:
        evs[i] = sglang_event(texts[i], rid=b"8ecdf1f4")  # one byte of the prefix differs
    elif kind == 3:
        evs[i] = sglang_event(texts[i], finish="stop")  # the suffix differs (and must be read)
    elif kind == 4:
        evs[i] = b"event: delta\n" + evs[i]  # a second line in one event
    elif kind == 5:
        evs[i] = evs[i].replace(b'"text":"', b'"text": "')  # the key spelled with a space
    elif kind == 6:
        evs[i] = evs[i].replace(b',"model"', b',\ndata: "model"')  # one object over two data lines
    elif kind == 7:
        evs[i] = sglang_event(texts[i], usage={"prompt_tokens": 1, "completion_tokens": 2})  # usage mid-stream
    else:
        evs[i] = b"data: [DONE]\n\n" + evs[i]  # [DONE] in the middle
    body = b"".join(evs) + sglang_event("", "length") + b"data: [DONE]\n\n"
    return body


@pytest.mark.parametrize("i", range(0, 20))
def test_a_run_broken_anywhere_parses_as_the_reference_does(i):
    texts = [WORDS[j % len(WORDS)] for j in range(20)]
    body = _break(i, texts)
    one = [(1.0, body)]
    if b"data: [DONE]\n\ndata" in body:  # events after [DONE]: refused, as before
        with pytest.raises(bench_sse.SSEError):
            parsed(one, "completions")
    else:
        assert parsed(one, "completions") == reference(one, "completions")


def test_a_text_that_looks_like_the_next_event_does_not_fool_the_rebuild():
    # the text of one event holds the bytes of the separator and a whole event (escaped by JSON: the quotes come
    # with backslashes, so that read leaves the uniform path); the counts are the reference's
    inner = sglang_event(u" sneaky").decode("utf-8")
    texts = [u" a"] * 12 + [u"\n\n" + inner] + [u" b"] * 12
    body = sglang_body(texts)
    one = [(1.0, body)]
    assert parsed(one, "completions") == reference(one, "completions")
