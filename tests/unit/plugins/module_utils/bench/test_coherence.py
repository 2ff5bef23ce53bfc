# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import random
import re

import pytest

from ansible_collections.gpuhost.sglang.plugins.module_utils.bench import coherence as c
from ansible_collections.gpuhost.sglang.plugins.module_utils.bench.probes import DEFAULT_PROBES

GOOD = ("The quick answer depends on the scheduler, the batch size and the memory bandwidth of the card; "
        "in practice the decode phase is bound by how fast weights stream from HBM into the SMs.")


@pytest.mark.parametrize("text,flags", [
    ("", ["empty"]), ("   \n", ["empty"]), (GOOD, []), (u"Paris \ufffd\ufffd", ["replacement_chars"]),
    ("ok\x07\x1b[0m", ["control_chars"]), ("line\nnext\ttab", []),
    (u"abc \u0434\u043e\u043c \u4e2d\u6587\u5b57 \u03b5\u03bb\u03bb abc \u0434\u043e\u043c \u4e2d\u6587", ["script_soup"]),
    (u"\u0414\u043e\u0431\u0440\u044b\u0439 \u0434\u0435\u043d\u044c, Paris", []),
    (" the" * 40, ["repetition"]), ("I am. " + "and then we go back " * 12, ["repetition"]),
    (u"\u597d" * 60, ["repetition"]),
])
def test_detectors(text, flags):
    assert c.detect(text) == flags


def test_repetition_needs_a_real_loop():
    varied = " ".join("w%d" % (i % 37) for i in range(64))  # period 37 > 16: not a loop
    assert not c.repetition_flag(varied)
    assert c.repetition_flag("intro words here " + " ".join(["alpha beta gamma"] * 20))


@pytest.mark.parametrize("probe", DEFAULT_PROBES, ids=[p["name"] for p in DEFAULT_PROBES])
def test_probe_verdicts_for_default_probes(probe):
    assert c.probe_verdict(probe, " %s." % probe["expect"])["class"] == "ok"
    assert c.probe_verdict(probe, " %s, of course" % probe["expect"].upper())["passed"]
    assert c.probe_verdict(probe, "")["class"] == "empty"
    assert c.probe_verdict(probe, " banana banana")["class"] == "incoherent"
    assert c.probe_verdict(probe, " x" + probe["expect"] + "y")["class"] == "incoherent"  # whole word only


def test_expect_must_be_near_the_start():
    p = {"expect": "Paris"}
    assert not c.probe_verdict(p, " ".join(["word"] * 20) + " Paris")["passed"]


def test_reasoning_block_is_stripped():
    p = {"expect": "four"}
    assert c.probe_verdict(p, "<think>" + "two plus two, hmm " * 10 + "</think> four")["passed"]
    assert c.probe_verdict(p, "hmm let me see ... </think>four.")["passed"]


def test_nan_logprobs_win():
    v = c.probe_verdict({"expect": "Paris"}, "Paris", logprobs=[-0.1, float("nan")])
    assert v["class"] == "nan" and not v["passed"]


def test_summarize_classes():
    ok = {"passed": True, "class": "ok"}
    assert c.summarize([ok, ok])["passed"]
    assert c.summarize([ok, {"passed": False, "class": "empty"}])["class"] == "empty"
    assert c.summarize([{"passed": False, "class": "empty"}, {"passed": False, "class": "incoherent"}])["class"] == \
        "incoherent"
    assert c.summarize([{"passed": False, "class": "http_5xx"}, {"passed": False, "class": "empty"}])["class"] == \
        "http_5xx"
    assert c.summarize([ok, {"passed": False, "class": "incoherent"}], min_pass=0.5)["passed"]


@pytest.mark.parametrize("expect,text,ok", [
    ("four", "2 + 2 = 4.", True), ("four", " 4", True), ("four", "Four.", True), ("four", "14", False),
    ("four", "4th", False), ("seven", "There are 7 days in a week.", True), ("7", "seven days", True),
    ("seven", "17 days", False), ("Paris", "4 Paris", True),
])
def test_numeric_answers_count_as_numeral_or_word(expect, text, ok):
    assert c.probe_verdict({"expect": expect}, text)["passed"] is ok


def test_answer_is_judged_in_content_only_and_reasoning_is_recorded_apart():
    p = {"expect": "Paris"}
    v = c.probe_verdict(p, " Paris.", reasoning="Lyon? No, the capital is not Lyon.")
    assert v["class"] == "ok" and v["answer"] == " Paris." and v["reasoning"].startswith("Lyon? No")
    v = c.probe_verdict(p, " Lyon.", reasoning="The capital is Paris.")
    assert v["class"] == "incoherent" and v["reasoning"] == "The capital is Paris."
    # inline block (no reasoning parser on the server): split the same way
    v = c.probe_verdict(p, "<think>Lyon? no</think>\nParis.")
    assert v["class"] == "ok" and v["answer"].strip() == "Paris." and v["reasoning"] == "Lyon? no"
    # the template opened the block in the prompt: only the closing tag is in the output
    v = c.probe_verdict(p, "Lyon? no, think again</think>Paris.")
    assert v["class"] == "ok" and v["reasoning"] == "Lyon? no, think again"


@pytest.mark.parametrize("text,reasoning,finish,want", [
    ("", "Let me think. " * 40, "length", "thought for 1056 tokens and never answered (max_tokens 1056 reached)"),
    ("<think>Let me think about it", None, "length", "thought for 1056 tokens and never answered"),
    ("", "hmm", "stop", "thought for 1056 tokens and stopped without an answer"),
])
def test_reasoning_without_an_answer_is_no_answer(text, reasoning, finish, want):
    v = c.probe_verdict({"expect": "Paris"}, text, reasoning=reasoning, finish_reason=finish, output_tokens=1056,
                        max_tokens=1056)
    assert v["class"] == "no_answer" and not v["passed"]
    assert want in v["detail"], v["detail"]
    # no reasoning at all: still the NaN model's empty class
    assert c.probe_verdict({"expect": "Paris"}, "", finish_reason="stop", output_tokens=1)["class"] == "empty"


def test_summarize_no_answer():
    na = {"passed": False, "class": "no_answer"}
    assert c.summarize([na, na])["class"] == "no_answer"
    assert c.summarize([{"passed": True, "class": "ok"}, na])["class"] == "no_answer"
    assert c.summarize([na, {"passed": False, "class": "incoherent"}])["class"] == "incoherent"


def _reference_repetition(text, min_words=16, coverage=0.6, tail_words=64):
    """The detector's rule written out plainly (str words, pairwise comparison)."""
    words = re.findall(r"\w+", text[-tail_words * 12:].lower(), re.U)[-tail_words:]
    n = len(words)
    if n < min_words:
        return None  # the character-loop branch is not what this compares
    max_period = min(16, n // 4)
    if len(set(words)) > (1 - coverage) * n + max_period:
        return False
    need = coverage * n - max_period
    return any(sum(1 for i in range(n - p) if words[i] == words[i + p]) >= max(need, 3 * p)
               for p in range(1, max_period + 1))


@pytest.mark.parametrize("seed", range(40))
def test_fast_repetition_and_control_checks_agree_with_the_plain_rule(seed):
    rnd = random.Random(seed)
    vocab = ["alpha", "bravo", "caf\u00e9", "x1", "_u", "\u4e2d\u6587", "z"][:rnd.randint(2, 7)]
    loop = [rnd.choice(vocab) for dummy in range(rnd.randint(1, 12))]
    words = [rnd.choice(vocab) for dummy in range(rnd.randint(0, 40))] + loop * rnd.randint(0, 10)
    text = rnd.choice([" ", ", ", ". "]).join(words)
    if seed % 5 == 0:
        text += rnd.choice(["\x07", "\x1b[0m", "\t", "\x85"])
    want = _reference_repetition(text)
    if want is not None:
        assert c.repetition_flag(text) is want, text
    assert ("control_chars" in c.detect(text)) is bool(re.search(u"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]", text))


def _repetition_reference(text, min_words=16, coverage=0.6, tail_words=64):
    """The repetition check's definition written plainly (word lists compared, every period counted)."""
    words = re.findall(r"\w+", text[-tail_words * 12:].lower(), re.U)[-tail_words:]
    n = len(words)
    if n < min_words:
        return None  # the character-loop branch: not what this compares
    max_period = min(16, n // 4)
    for p in range(1, max_period + 1):
        same = sum(1 for i in range(n - p) if words[i] == words[i + p])
        if same >= coverage * n - max_period and same >= 3 * p:
            return True
    return False


def test_ascii_word_split_and_period_masks_agree_with_the_plain_definition():
    rnd = random.Random(7)
    alphabet = "ab_Z9 .,;:!?'\"-\t\n\r\x0b\x0c()[]{}/\\"
    for dummy in range(300):
        s = "".join(rnd.choice(alphabet) for dummy in range(rnd.randint(0, 80)))
        assert c._ascii_words(s) == re.findall(rb"\w+", s.encode("ascii"))
    vocab = ["alpha", "bravo", "charlie", "delta", "echo", "Alpha", "x_1", "42"]
    for dummy in range(400):
        k = rnd.randint(1, len(vocab))
        n = rnd.randint(16, 90)
        period = rnd.randint(1, 18)
        loop = [rnd.choice(vocab[:k]) for dummy in range(period)]
        words = [loop[i % period] if rnd.random() < 0.8 else rnd.choice(vocab) for i in range(n)]
        text = rnd.choice([" ", ", ", ". "]).join(words)
        assert c.repetition_flag(text) == _repetition_reference(text), text
