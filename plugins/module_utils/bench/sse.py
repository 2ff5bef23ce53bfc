# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Server-sent-events parsing for OpenAI-compatible streams, kept off the hot path.

The client only records ``(monotonic_time, body length)`` for every socket read while a stream runs.
After the request ends, :func:`parse_body` splits the body into SSE events, gives each event the
time of the read that completed it (the earliest moment the client could have seen it), decodes
all JSON payloads of a stream in one C call and extracts text, finish reason, usage and errors.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re

try:
    import orjson as _orjson  # optional, faster
except ImportError:  # pragma: no cover - depends on the environment
    _orjson = None

DONE = b"[DONE]"
PLAIN_SEP = b"\n\ndata: "


class SSEError(Exception):
    """Malformed SSE or JSON payload (class ``malformed_sse``)."""


def _loads(data):
    if _orjson is not None:
        try:
            return _orjson.loads(data)
        except ValueError:
            pass  # orjson rejects NaN/Infinity literals; the stdlib accepts them
    return json.loads(data)


def _event_payload(ev):
    datas = []
    for line in ev.split(b"\n"):
        if line.startswith(b"data:"):
            datas.append(line[5:].strip())
        # comments (":"), event:, id:, retry: carry no payload
    return b"\n".join(datas) if datas else None


def body_of(reads):
    """``(body, marks)`` of ``[(t, bytes), ...]`` reads: all their bytes in one object and ``(t, end)`` per read, ``end``
    the body's length after that read (what the client records; :func:`parse_body` works on this form)."""
    marks = []
    end = 0
    for t, chunk in reads:
        end += len(chunk)
        marks.append((t, end))
    return b"".join(chunk for dummy, chunk in reads), marks


def _lf(body, marks):
    """CRLF line ends as LF, each mark moved to the same place: a read that ended between a CR and its LF ends
    before that line end (the LF came with the next read, as when each read was normalized with what came before)."""
    out = []
    crlfs = 0
    prev = 0
    for t, end in marks:
        crlfs += body.count(b"\r\n", max(0, prev - 1), end)
        prev = end
        out.append((t, end - crlfs - (1 if body[end - 1:end + 1] == b"\r\n" else 0)))
    return body.replace(b"\r\n", b"\n"), out


def _range_group(body, t, s, end, groups):
    """Append the group of the events in ``body[s:end]`` (see :func:`_raw_groups`)."""
    # plain stream: every newline of the range is one of the separators' two, so no event had another line
    if body.startswith(b"data: ", s):
        seps = body.count(PLAIN_SEP, s, end)
        if body.count(b"\n", s, end) == 2 * seps:
            groups.append((t, s, end, seps + 1))
            return
    payloads = [x for x in (_event_payload(e) for e in body[s:end].split(b"\n\n") if e) if x is not None]
    if payloads:
        groups.append((t, s, end, payloads))


def _raw_groups(body, marks, api=None, logprobs=False):
    """``(t, start, end, payloads)`` per read that completed events: ``body[start:end]`` holds those events without
    their last separator; ``payloads`` is the number of events when every event is exactly ``data: <payload>``
    (what SGLang, vLLM and transformers send: :func:`parse_body` then works on ranges of ``body`` itself, without a
    bytes object per event or per read), else the list of ``data:`` payloads. With ``api``, a long run of events
    that differ in their text alone comes as one ``(t, -1, -1, Run)`` group (:func:`_uniform_run`) between the groups
    of the events before and after it. Returns ``(groups, tail)``; ``tail`` is an incomplete last event."""
    groups = []
    start = 0
    for t, mark in marks:
        end = body.rfind(b"\n\n", start, mark)
        if end < 0:
            continue
        s, start = start, end + 2
        run = _uniform_run(body, s, end, api, logprobs) if api is not None and end - s >= UNIFORM_MIN else None
        if run is None:
            _range_group(body, t, s, end, groups)
            continue
        if run.first_end is not None:
            _range_group(body, t, s, run.first_end, groups)
        groups.append((t, -1, -1, run))
        if run.rest_start < end:
            _range_group(body, t, run.rest_start, end, groups)
    return groups, body[start:].strip()


# A read that brings many events (a whole response on a fast link): their text is cut out with one split instead of
# two counts and a regex pass over the read.
UNIFORM_MIN = 2048


class Run:
    """Plain content events that differ in their text alone: ``text`` (str), ``events``, ``nonempty``; the first
    event of the read ends at ``first_end``, the events after the run start at ``rest_start``."""

    __slots__ = ("text", "events", "nonempty", "first_end", "rest_start")

    def __init__(self, text, events, nonempty, first_end, rest_start):
        self.text, self.events, self.nonempty = text, events, nonempty
        self.first_end, self.rest_start = first_end, rest_start


def _uniform_run(body, s, end, api, logprobs):
    """The run of events that starts with the second event of ``body[s:end]`` and repeats it but for the text, or None.

    The second event must be a single ``data:`` line with one text key (the fast path's regex), none of the markers
    that need the full decoder and no backslash; its bytes before the text are the prefix P, after it the suffix S.
    The run ends before the last events that are not P, a text without a double quote, and S (a finish reason, usage,
    ``[DONE]``: at most 8 looked at). Its texts come from the fast path's regex, and the run is taken only when it is
    exactly P + t1 + S + separator + P + t2 + S ... rebuilt from them, with no backslash or newline in any text;
    else None (the caller parses the range as before). The first event (up to ``first_end``) and the events after
    the run (from ``rest_start``) are parsed as before; ``first_end`` is None when the first event has the run's shape
    and starts it."""
    f0 = body.find(b"\n\n", s, end)
    if f0 < 0:
        return None
    a = f0 + 2
    e1 = body.find(b"\n\n", a, end)
    if e1 < 0 or not body.startswith(b"data: ", a) or body.find(b"\n", a, e1) >= 0 or body.find(b"\\", a, e1) >= 0:
        return None
    if _has(body, a, e1, _SLOW_MARKERS) or (api == "chat" and _has(body, a, e1, _REASONING_MARKERS)) or (
            logprobs and _has(body, a, e1, _LOGPROB_MARKERS)):
        return None
    rx = _PLAIN_RX[api]
    m = rx.search(body, a, e1)
    if m is None or rx.search(body, m.end(), e1) is not None:
        return None
    ts, te = m.span(1)
    prefix, suffix = body[a:ts], body[te:e1]
    j = end
    for dummy in range(8):  # the last event of the run
        k = body.rfind(b"\n\n", e1, j) + 2
        if k < 2:
            return None
        if body.startswith(prefix, k) and body.endswith(suffix, k, j) and (
                body.find(b'"', k + len(prefix), j - len(suffix)) < 0):
            break
        j = k - 2
    else:
        return None
    # the first event joins the run when it has its shape too (SGLang's completions; chat's first delta differs)
    if body.startswith(prefix, s) and body.endswith(suffix, s, f0) and body.find(b'"', s + len(prefix), f0 - len(suffix)) < 0:
        a, f0 = s, None
    texts = rx.findall(body, a, j)
    joined = b"".join(texts)
    if b"\\" in joined or b"\n" in joined or (
            (suffix + b"\n\n" + prefix).join(texts) != body[a + len(prefix):j - len(suffix)] or
            not body.endswith(suffix, a, j)):
        return None
    try:
        text = joined.decode("utf-8")
    except UnicodeDecodeError:
        return None
    n = len(texts)
    return Run(text, n, n - texts.count(b""), f0, j + 2)


def _groups(body, marks, api=None, logprobs=False):
    if b"\r" in body:
        body, marks = _lf(body, marks)
    return body, _raw_groups(body, marks, api, logprobs)


def split_groups(reads):
    """Split ``[(t, bytes), ...]`` reads into ``[(t, [payload, ...]), ...]``: the ``data:`` payloads of
    the SSE events completed by each read, stamped with that read's time.

    Handles CRLF, events split across reads, several events per read, multi-line data, comments
    and ``event:``/``id:`` lines. Returns ``(groups, tail)``; ``tail`` is an incomplete last event.
    """
    body, (raw, tail) = _groups(*body_of(reads))
    return [(t, body[s + 6:e].split(PLAIN_SEP) if isinstance(payloads, int) else payloads)
            for t, s, e, payloads in raw], tail


def split_events(reads):
    """Flat ``[(t, payload), ...]`` view of :func:`split_groups` (returns ``(events, tail)``)."""
    groups, tail = split_groups(reads)
    return [(t, p) for t, ps in groups for p in ps], tail


def decode_payloads(payloads):
    """Decode JSON payloads (``[DONE]`` excluded by the caller) in one call; SSEError on bad JSON."""
    if not payloads:
        return []
    try:
        return _loads(b"[" + b",".join(payloads) + b"]")
    except ValueError:
        for i, p in enumerate(payloads):
            try:
                _loads(p)
            except ValueError:
                raise SSEError("event %d is not JSON: %r" % (i, p[:80]))
        raise SSEError("stream payloads are not valid JSON")


_TEXT_RX = {
    "completions": re.compile(rb'"text"\s*:\s*"((?:[^"\\]|\\.)*)"'),
    "chat": re.compile(rb'"content"\s*:\s*"((?:[^"\\]|\\.)*)"'),
}
# anything that needs the full decoder: non-null usage/finish/logprobs, errors, reasoning text, tool calls
# (a content-less event fails the one-text-per-event count check; reasoning text: _REASONING_MARKERS)
_SLOW_MARKERS = (b'usage":{', b'usage": {', b'finish_reason":"', b'finish_reason": "', b'error"')
_LOGPROB_MARKERS = (b'logprobs":{', b'logprobs": {', b'logprobs":[', b'logprobs": [')
# reasoning text in a delta (also next to content in one delta): SGLang's ``reasoning_content`` (0.5.23 sends
# the key on every chat chunk, null when empty: sse_utils.py StreamDelta), vLLM's ``reasoning`` (vllm PR #27752)
_REASONING_MARKERS = (b'reasoning_content":"', b'reasoning_content": "', b'"reasoning":"', b'"reasoning": "')
REASONING_KEYS = ("reasoning_content", "reasoning")


# (anchored on the key's last letters, the rarer first byte for the regex engine's scan: ~20% faster than on the
# opening quote; a key that merely ends the same way adds a match and fails the one-text-per-event count check)
_PLAIN_RX = {
    "completions": re.compile(rb'xt": ?"([^"]*)"'),
    "chat": re.compile(rb'ntent": ?"([^"]*)"'),
}


def _fast_texts(payloads, api, logprobs=False, markers=True):
    """Text of plain content events (one choice, nothing else of interest) as ``(text, nonempty, empty)``, or
    None to decode fully (see :func:`_fast_blob`)."""
    blob = b"\n".join(payloads)
    return _fast_blob(blob, 0, len(blob), len(payloads), api, logprobs, markers)


def _has(buf, start, end, needles):
    for m in needles:
        if buf.find(m, start, end) >= 0:
            return True
    return False


def _fast_blob(buf, start, end, count, api, logprobs=False, markers=True):
    """:func:`_fast_texts` for ``count`` events whose payloads are all in ``buf[start:end]`` (any separators between
    them), read in place.

    Events are JSON objects, so an unescaped double quote never occurs inside a captured string body. Without
    a backslash in the range the bodies are the text's UTF-8 bytes as they are (one regex pass, one decode);
    with escapes they are decoded together by one ``json.loads`` of an array of strings.
    """
    if markers and _has(buf, start, end, _SLOW_MARKERS):
        return None
    if api == "chat" and _has(buf, start, end, _REASONING_MARKERS):
        return None
    if logprobs and _has(buf, start, end, _LOGPROB_MARKERS):
        return None
    if buf.find(b"\\", start, end) < 0:
        found = _PLAIN_RX[api].findall(buf, start, end)
        if len(found) != count:
            return None
        empty = found.count(b"")
        try:
            return b"".join(found).decode("utf-8"), len(found) - empty, empty
        except UnicodeDecodeError:
            return None
    found = _TEXT_RX[api].findall(buf, start, end)
    if len(found) != count:
        return None
    try:
        texts = json.loads(b'["' + b'","'.join(found) + b'"]')
    except ValueError:
        return None
    nonempty = [x for x in texts if x]
    return "".join(nonempty), len(nonempty), len(texts) - len(nonempty)


def parse_reads(reads, api="completions", logprobs=False):
    """:func:`parse_body` of ``[(t, bytes), ...]`` socket reads."""
    body, marks = body_of(reads)
    return parse_body(body, marks, api, logprobs)


def parse_body(body, marks, api="completions", logprobs=False):
    """Parse one streamed response: ``body`` all its bytes, ``marks`` ``[(t, end), ...]`` the time of each socket read
    and the body's length after it (each event gets the time of the read that completed it). Returns a dict:

    ``chunk_times`` (times of events carrying text), ``text`` (all generated text, reasoning included),
    ``content`` and ``reasoning`` (chat: the answer and the reasoning text apart), ``finish_reason``, ``usage`` (dict or
    None), ``done`` (saw [DONE]), ``events``, ``empty_events`` (events with a choice but no text),
    ``stream_error`` (error object or None), ``logprobs`` (logprob values seen, may contain NaN/inf),
    ``tail`` (undelivered bytes). Raises SSEError on malformed SSE/JSON. Logprobs are only collected
    with ``logprobs=True`` (the NaN probe); load requests never ask for them.

    Plain content events (the bulk of a stream) take a fast path: grouped by read, their text is pulled out of
    the body in place with one regex and one decode per group (no copy of the body, of a read or of an event);
    any event with usage, a finish reason, logprobs, an error or an unexpected shape goes through the full JSON
    decoder.
    """
    api = "chat" if api == "chat" else "completions"
    body, (raw, tail) = _groups(body, marks, api, logprobs)
    done = False
    chunk_times = []
    pieces = []
    state = {"finish": None, "usage": None, "err": None, "empty": 0, "logprobs": [], "events": 0,
             "reasoning": [], "reasoning_at": set()}
    for t, s, e, payloads in raw:
        if done:
            raise SSEError("data after [DONE]")
        if isinstance(payloads, Run):
            state["events"] += payloads.events
            state["empty"] += payloads.events - payloads.nonempty
            if payloads.nonempty:
                chunk_times.extend([t] * payloads.nonempty)
                pieces.append(payloads.text)
            continue
        head = None  # (bytes, start, end, count): the events for the fast path
        if isinstance(payloads, int):
            # plain events: cut them on the body itself; the last three (finish_reason, usage, [DONE]) are split
            # off for the full decoder, the rest is one range for the fast path
            n = payloads
            cut = e
            for dummy in range(3 if n > 6 else 0):
                cut = body.rfind(PLAIN_SEP, s, cut)
            if cut < e:
                head = (body, s + 6, cut, n - 3)
                payloads = body[cut + len(PLAIN_SEP):e].split(PLAIN_SEP)
            else:
                payloads = body[s + 6:e].split(PLAIN_SEP)
        if DONE in payloads or (head is not None and body.find(b"data: [DONE]\n\n", s, e) >= 0):
            i = payloads.index(DONE) if DONE in payloads else -1
            if i != len(payloads) - 1:
                raise SSEError("data after [DONE]")
            done = True
            payloads = payloads[:i]
            if not payloads and head is None:
                continue
        state["events"] += len(payloads) + (head[3] if head is not None else 0)
        # finish_reason/usage live in the last events of a stream: when a whole response arrives in one
        # read, its last few events take the full decoder and the rest stays on the fast path
        # (the head skips the marker scan: an error or multi-choice event there breaks the one-text-per-event
        # count and falls back anyway; usage/finish_reason come from the fully decoded tail)
        head_list = None
        if head is None and len(payloads) > 6:
            head_list, payloads = payloads[:-3], payloads[-3:]
            blob = b"\n".join(head_list)
            head = (blob, 0, len(blob), len(head_list))
        rest = payloads
        if head is not None:
            fast = _fast_blob(*head, api=api, logprobs=logprobs, markers=False)
        else:
            fast = _fast_texts(payloads, api, logprobs, markers=True) if payloads else None
            if fast is not None:
                rest = []
        if fast is None:
            if head is not None:
                rest = (head_list if head_list is not None else head[0][head[1]:head[2]].split(PLAIN_SEP)) + payloads
        else:
            joined, nonempty, empty = fast
            if nonempty:
                chunk_times.extend([t] * nonempty)
                pieces.append(joined)  # one piece per group: _content() indexes pieces, reasoning never takes this path
            state["empty"] += empty
        if rest:
            for o in decode_payloads(rest):
                _slow_event(o, t, api, state, chunk_times, pieces)
    text = "".join(pieces)
    return {
        "chunk_times": chunk_times,
        "text": text,
        "content": _content(state, pieces, text),
        "reasoning": "".join(state["reasoning"]),
        "finish_reason": state["finish"],
        "usage": state["usage"],
        "done": done,
        "events": state["events"],
        "empty_events": state["empty"],
        "stream_error": state["err"],
        "logprobs": state["logprobs"],
        "tail": tail,
    }


def _content(state, pieces, text):
    """The chat content alone: the text pieces that were not reasoning."""
    if not state["reasoning_at"]:
        return text
    at = state["reasoning_at"]
    return "".join(p for i, p in enumerate(pieces) if i not in at)


def _slow_event(o, t, api, state, chunk_times, pieces):
    if not isinstance(o, dict):
        raise SSEError("event payload is not a JSON object: %r" % (o,))
    if o.get("error") is not None:
        state["err"] = o.get("error")
        return
    u = o.get("usage")
    if u:
        state["usage"] = u
    choices = o.get("choices")
    if choices is None:
        if u:
            return
        raise SSEError("event without choices, usage or error: %r" % (str(o)[:80],))
    for c in choices:
        if not isinstance(c, dict):
            raise SSEError("choice is not an object")
        if api == "chat":
            d = c.get("delta") or {}
            content = d.get("content") or ""
            thought = next((d[k] for k in REASONING_KEYS if d.get(k)), "")
            if not isinstance(content, str) or not isinstance(thought, str):
                raise SSEError("choice text is not a string")
            if thought:
                state["reasoning"].append(thought)
                if not content:
                    state["reasoning_at"].add(len(pieces))
            piece = content or thought
        else:
            piece = c.get("text") or ""
        if not isinstance(piece, str):
            raise SSEError("choice text is not a string")
        if piece:
            chunk_times.append(t)
            pieces.append(piece)
        else:
            state["empty"] += 1
        if c.get("finish_reason"):
            state["finish"] = c.get("finish_reason")
        lp = c.get("logprobs")
        if lp:
            state["logprobs"].extend(_logprob_values(lp))


def _logprob_values(lp):
    """Logprob numbers from a completions (``token_logprobs``) or chat (``content[].logprob``) block."""
    vals = []
    if isinstance(lp, dict):
        tl = lp.get("token_logprobs")
        if isinstance(tl, list):
            vals.extend(v for v in tl if isinstance(v, (int, float)))
        content = lp.get("content")
        if isinstance(content, list):
            for item in content:
                if isinstance(item, dict) and isinstance(item.get("logprob"), (int, float)):
                    vals.append(item["logprob"])
    return vals
