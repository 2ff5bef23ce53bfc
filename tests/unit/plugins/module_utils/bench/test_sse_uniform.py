# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The uniform-run path of the SSE parser (a read of many events that differ in their text alone, cut out with one
regex pass and proven by rebuilding the read) against a one-event-at-a-time JSON decode, on SGLang 0.5.17's recorded
streams and on hand-made ones that break the run in every way it can be broken."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os

import pytest

from ansible_collections.gpuhost.sglang.plugins.module_utils.bench import sse as bench_sse

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
    body = sglang_body([WORDS[i % len(WORDS)] for i in range(14)], api)
    assert runs(body, api) == 14  # all the text events: the first one has their shape too
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
