# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Coherence checks for generated text: known-answer probe verdicts and garbage detectors.

Detectors (each returns a flag name when it fires):

- ``empty``: no visible text (NaN logits argmax to token 0 / EOS on most engines).
- ``replacement_chars``: U+FFFD in the text (invalid UTF-8 from byte-level tokens: random weights).
- ``control_chars``: C0/C1 control characters other than tab/newline/carriage return.
- ``script_soup``: letters from three or more writing systems, each a real share of the text.
- ``repetition``: a loop: one word n-gram (or character unit) covering most of a long output.

Probe verdicts judge the answer only. Reasoning models think before they answer: with a reasoning parser
the server returns the thinking as ``reasoning_content`` and the answer as ``content`` (SGLang 0.5.23
``serving_chat.py``; ``--reasoning-parser glm45``); without one the thinking is inline in the content,
either as a ``<think>...</think>`` block (GLM-4.5/4.6, Qwen3) or, when the chat template opened the block in
the prompt (GLM-4.7/GLM-5, Qwen3-thinking), as text ending in a dangling ``</think>``. :func:`split_reasoning`
separates the two; reasoning without an answer is class ``no_answer`` (the model thought until max_tokens,
or stopped), never ``empty`` (which means NaN weights).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math
import operator
import re
import unicodedata
from collections import Counter

DETECTORS = ("empty", "replacement_chars", "control_chars", "script_soup", "repetition")
PROBE_CLASSES = ("ok", "empty", "nan", "incoherent", "no_answer")
THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
# numeric answers count in either form: "four" or "4" (a model that answers "2 + 2 = 4" knows the answer)
NUMBER_WORDS = dict((w, str(i)) for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen twenty".split()))
NUMBER_WORDS.update(dict((w, str(10 * i)) for i, w in enumerate(
    "thirty forty fifty sixty seventy eighty ninety".split(), 3)))
_NUMERAL_WORDS = dict((v, k) for k, v in NUMBER_WORDS.items())
_WORD_RE = re.compile(r"\w+", re.U)
_ASCII_WORD_RE = re.compile(rb"\w+")  # the same words as _WORD_RE on ASCII text, on its bytes (faster)
# ... and faster still: every byte that is not a word byte ([A-Za-z0-9_], what \w means in a bytes pattern) made a
# space, then split on whitespace: the same words, with no regex (tests/unit: test_coherence)
_NON_WORD_TO_SPACE = bytes(c if _ASCII_WORD_RE.match(bytes([c])) else 32 for c in range(256))
_CONTROL_RE = re.compile(u"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
_CHAR_LOOP_RE = re.compile(r"(.{1,40}?)\1{5,}", re.S)


def split_reasoning(content, reasoning=None):
    """``(answer, reasoning)`` of one reply from its ``content`` and, when the server has a reasoning parser,
    its ``reasoning_content``.

    Inline forms (no parser): ``<think>R</think>A`` and ``R</think>A`` (the template opened the block in the
    prompt) give ``A``; like SGLang's reasoning detectors, the first ``</think>`` ends the reasoning. An
    unclosed ``<think>R`` is reasoning with no answer yet.
    """
    text = content or ""
    thought = [reasoning] if reasoning else []
    if THINK_CLOSE in text:
        head, dummy, answer = text.partition(THINK_CLOSE)
        pre, opened, inner = head.partition(THINK_OPEN)
        if opened:
            thought.append(inner)
            answer = pre + answer
        else:
            thought.append(head)
    elif THINK_OPEN in text:
        answer, dummy, inner = text.partition(THINK_OPEN)
        thought.append(inner)
    else:
        answer = text
    return answer, "".join(thought)


def strip_reasoning(text):
    """The answer part of ``text`` (see :func:`split_reasoning`)."""
    return split_reasoning(text)[0]


def _script(ch):
    try:
        name = unicodedata.name(ch)
    except ValueError:
        return "UNKNOWN"
    first = name.split(" ", 1)[0]
    if first == "CJK":
        return "HAN"
    return first


def script_shares(text):
    """Share of each writing system among the letters of ``text`` (ASCII fast path)."""
    if text.isascii():
        return {"LATIN": 1.0} if any(c.isalpha() for c in text) else {}
    letters = [c for c in text if c.isalpha()]
    if not letters:
        return {}
    cnt = Counter()
    ascii_letters = 0
    for c in letters:
        if c < u"\x80":
            ascii_letters += 1
        else:
            cnt[_script(c)] += 1
    if ascii_letters:
        cnt["LATIN"] += ascii_letters
    n = float(len(letters))
    return dict((k, v / n) for k, v in cnt.items())


def _ascii_words(text):
    """``_ASCII_WORD_RE.findall`` of ASCII ``text``'s bytes."""
    return text.encode("ascii").translate(_NON_WORD_TO_SPACE).split()


_PERIOD_MASKS = {}


def _period_masks(n):
    """``(p, 8p, mask of the low 8(n-p) bits)`` for the periods 1..16 of ``n`` one-byte word ids (made once per n)."""
    got = _PERIOD_MASKS.get(n)
    if got is None:
        got = _PERIOD_MASKS[n] = [(p, p << 3, (1 << ((n - p) << 3)) - 1) for p in range(1, min(16, n) + 1)]
    return got


def repetition_flag(text, min_words=16, coverage=0.6, tail_words=64):
    """True when the output ends in a loop: within its last ``tail_words`` words (at least
    ``min_words``), a period of at most 16 words repeats over ``coverage`` of them; for text without
    words (CJK, symbols), a short character unit repeating 6+ times over half of a 40+ char text."""
    tail = text[-tail_words * 12:].lower()
    words = (_ascii_words(tail) if tail.isascii() else _WORD_RE.findall(tail))[-tail_words:]
    n = len(words)
    if n >= min_words:
        # a loop of period p covering `coverage` of the words leaves at most (1-coverage)*n + p distinct words
        max_period = min(16, n // 4)
        # each word's id is the index of its first occurrence (< n <= tail_words <= 256: one byte), mapped in C
        ids = {}
        seq = bytes(map(ids.setdefault, words, range(n))) if n <= 256 else list(map(ids.setdefault, words, range(n)))
        if len(ids) > (1 - coverage) * n + max_period:
            return False
        need = coverage * n - max_period
        # one byte per word id, the whole sequence as one integer: its first n-p bytes are x >> 8p, its last n-p
        # bytes x's low 8(n-p) bits; XORed, their zero bytes are the positions where word i equals word i+p
        if n > 256:
            for p in range(1, max_period + 1):
                same = sum(map(operator.eq, words, words[p:]))
                if same >= need and same >= 3 * p:
                    return True
            return False
        x = int.from_bytes(seq, "big")
        for p, shift, mask in _period_masks(n)[:max_period]:
            same = ((x >> shift) ^ (x & mask)).to_bytes(n - p, "big").count(0)
            if same >= need and same >= 3 * p:
                return True
        return False
    if len(text) >= 40:
        covered = sum(len(m.group(0)) for m in _CHAR_LOOP_RE.finditer(text))
        if covered >= 0.5 * len(text):
            return True
    return False


_ASCII_CONTROL = bytes(c for c in range(128) if _CONTROL_RE.match(chr(c)))


def _has_ascii_control(text):
    """``_CONTROL_RE.search`` for ASCII text: deleting the control bytes shortens it."""
    b = text.encode("ascii")
    return len(b.translate(None, _ASCII_CONTROL)) != len(b)


def detect(text, checks=DETECTORS):
    """Return the list of detector flags that fire for ``text`` (empty list: looks coherent)."""
    flags = []
    visible = text.strip()
    if "empty" in checks and not visible:
        return ["empty"]
    if "replacement_chars" in checks and u"\ufffd" in text:
        flags.append("replacement_chars")
    if "control_chars" in checks and (_has_ascii_control(text) if text.isascii() else _CONTROL_RE.search(text)):
        flags.append("control_chars")
    if "script_soup" in checks:
        shares = script_shares(text)
        if len([s for s in shares.values() if s >= 0.1]) >= 3:
            flags.append("script_soup")
    if "repetition" in checks and repetition_flag(text):
        flags.append("repetition")
    return flags


# Load requests sent with ignore_eos run past the model's own end of sequence; what follows is not the model's
# answer and degenerates into loops on a healthy model. Recorded on SGLang 0.5.17 (H200, the tiny model, chat,
# 64 tokens, ignore_eos): "Shakespeare.er.er.er.ats theer.ers Shakespeare.ers Shakespeare.ers four.ers ..." -- the
# answer is one word, the loop starts at the second. The stream does not show where the answer ended: chat skips
# empty deltas (python/sglang/srt/entrypoints/openai/serving_chat.py ``if delta:``) and completions streams the
# special tokens as empty-text events among empty events of other causes. So under ignore_eos a load output is
# judged by the detectors a degenerate continuation of a healthy model does not fire (empty, U+FFFD and control
# characters, script soup) on its whole text, and not for repetition; a loop from the first tokens -- a broken
# model's loop -- is caught by the coherence sample, requests of the same workload sent without ignore_eos and
# judged with every detector (runner.BenchRun.coherence_sample), and by the known-answer probes.
EOS_IGNORED_SKIPS = ("repetition",)


def detect_load(text, checks=DETECTORS, eos_ignored=False):
    """:func:`detect` for one load output; under ignore_eos without the checks in EOS_IGNORED_SKIPS."""
    if eos_ignored:
        checks = tuple(c for c in checks if c not in EOS_IGNORED_SKIPS)
    return detect(text, checks)


def expect_forms(expect):
    """The spellings that count for ``expect``: itself, and the numeral of a number word or vice versa."""
    other = NUMBER_WORDS.get(expect.strip().lower()) or _NUMERAL_WORDS.get(expect.strip())
    return [expect] + ([other] if other else [])


def expect_found(text, expect, window_words=12):
    """``expect`` (or its other numeric form) appears, case-insensitive and as a whole word, within the first
    ``window_words`` words."""
    words = _WORD_RE.findall(text)
    head = " ".join(words[:window_words])
    pat = r"(?<!\w)(?:" + "|".join(re.escape(f) for f in expect_forms(expect)) + r")(?!\w)"
    return re.search(pat, head, re.I | re.U) is not None


def has_nan(values):
    for v in values:
        if isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
            return True
    return False


def _tokens(n):
    return "%d" % n if n is not None else "an unknown number of"


def probe_verdict(probe, text, logprobs=None, checks=DETECTORS, reasoning=None, finish_reason=None,
                  output_tokens=None, max_tokens=None):
    """Verdict for one known-answer probe: ``text`` is the reply's content, ``reasoning`` its
    ``reasoning_content`` (servers with a reasoning parser), ``finish_reason``/``output_tokens``/``max_tokens``
    say how the reply ended (for the message).

    Returns ``{"name", "expect", "answer", "reasoning", "passed", "class", "flags", "finish_reason",
    "output_tokens", "detail"}`` where class is one of ``ok``, ``empty``, ``nan``, ``incoherent``,
    ``no_answer``. Only the answer is judged; the reasoning is recorded apart.
    """
    answer, thought = split_reasoning(text or "", reasoning)
    flags = detect(answer, checks)
    detail = None
    cut = finish_reason == "length"
    if logprobs and has_nan(logprobs):
        cls = "nan"
    elif not answer.strip() and thought.strip():
        cls = "no_answer"
        if cut:
            detail = "thought for %s tokens and never answered%s" % (
                _tokens(output_tokens), (" (max_tokens %d reached)" % max_tokens) if max_tokens else "")
        else:
            detail = "thought for %s tokens and stopped without an answer (finish_reason %s)" % (
                _tokens(output_tokens), finish_reason)
    elif "empty" in flags:
        cls = "empty"
    elif expect_found(answer, probe["expect"]):
        cls = "ok"
    else:
        cls = "incoherent"
        if cut and max_tokens:
            detail = "max_tokens %d reached" % max_tokens
    return {
        "name": probe.get("name") or probe.get("prompt") or probe.get("question"),
        "expect": probe["expect"],
        "answer": answer[:200],
        "reasoning": thought[:200],
        "passed": cls == "ok",
        "class": cls,
        "flags": flags,
        "finish_reason": finish_reason,
        "output_tokens": output_tokens,
        "detail": detail,
    }


def summarize(verdicts, min_pass=1.0):
    """Overall gate from probe verdicts (and probe request errors, given as verdicts with class=error class).

    The failure class is the most specific one seen: a transport error class, then ``nan``, then
    ``empty`` (all failing probes empty), ``no_answer`` (all failing probes thought without answering, or
    were empty), else ``incoherent``.
    """
    total = len(verdicts)
    passed = len([v for v in verdicts if v.get("passed")])
    rate = (passed / float(total)) if total else 1.0
    ok = rate >= min_pass
    cls = "ok"
    if not ok:
        failing = [v["class"] for v in verdicts if not v.get("passed")]
        errors = [c for c in failing if c not in PROBE_CLASSES]
        if errors:
            cls = Counter(errors).most_common(1)[0][0]
        elif "nan" in failing:
            cls = "nan"
        elif all(c == "empty" for c in failing):
            cls = "empty"
        elif all(c in ("empty", "no_answer") for c in failing):
            cls = "no_answer"
        else:
            cls = "incoherent"
    return {"passed": ok, "class": cls, "probes_passed": passed, "probes_total": total, "pass_rate": round(rate, 4)}
