# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The accuracy gate: task set, normalization, statistics against known values, verdicts, and the client path with
an in-process stand-in for bench/client.run_load."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
from fractions import Fraction
from statistics import NormalDist

import pytest

from ansible_collections.gpuhost.sglang.plugins.module_utils.bench import accuracy as A
from ansible_collections.gpuhost.sglang.plugins.module_utils.bench import client as bench_client
from ansible_collections.gpuhost.sglang.plugins.module_utils.bench import taskgen
from ansible_collections.gpuhost.sglang.plugins.module_utils.bench import taskset

Z95 = NormalDist().inv_cdf(0.975)


# -- task set ---------------------------------------------------------------------------------------------------

def test_checked_in_taskset_is_what_the_generator_makes_byte_for_byte():
    path = os.path.join(os.path.dirname(taskgen.__file__), "taskset.py")
    with open(path) as f:
        assert f.read() == taskgen.render(taskgen.generate())


def test_taskset_size_kinds_and_exact_answers():
    items = A.load_tasks()
    assert len(items) == len(taskset.TASKS) == 11 * 48
    assert len(set(it["id"] for it in items)) == len(items)
    assert set(it["kind"] for it in items) == set(taskgen.KIND_NAMES)
    for it in items:
        assert it["answer"] and not any(ch.isspace() for ch in it["answer"])
        assert it["prompt"].endswith("Q: %s\nA:" % it["question"])
        assert A.normalize(" " + it["answer"]) == it["answer"]  # every answer survives normalization
    sample = dict((it["id"], it) for it in items)
    assert eval(sample["add-000"]["question"][8:-1]) == int(sample["add-000"]["answer"])  # pylint: disable=eval-used


def test_another_seed_gives_another_set_and_the_same_seed_the_same():
    assert taskgen.generate(seed=1) == taskgen.generate(seed=1)
    assert taskgen.generate(seed=1) != taskgen.generate()


def test_limit_interleaves_kinds_and_bad_limit_is_named():
    first = A.load_tasks(11)
    assert [it["kind"] for it in first] == list(taskgen.KIND_NAMES)
    with pytest.raises(A.AccuracyError, match="limit: 0 is not an int >= 1"):
        A.load_tasks(0)
    with pytest.raises(A.AccuracyError, match=r"kinds: \['nope'\] are not task kinds; allowed: add"):
        A.load_tasks(kinds=["nope"])


@pytest.mark.parametrize("text,word", [
    (" 41", "41"), (" 41\nQ: What is 2 + 2?\nA: 4", "41"), ("\n\n  CAT.", "CAT"), ("A: 7", "7"),
    ("Answer: **tac**", "tac"), ('"g",', "g"), ("`15` is the product", "15"), ("", ""), ("   \n ", ""),
    ("<think>3 + 4 is 7</think> 7", "7"), ("41!", "41"),
])
def test_normalize(text, word):
    assert A.normalize(text) == word


# -- statistics against known values -----------------------------------------------------------------------------

def test_exact_binomial_by_hand():
    # P(X = k), X ~ Bin(12, 1/2): C(12, k) / 4096
    assert A.binom_half_pmf(10, 12) == 66 / 4096.0
    assert A.binom_half_pmf(13, 12) == 0.0
    assert sum(A.binom_half_pmf(k, 12) for k in range(13)) == 1.0


@pytest.mark.parametrize("b,c,exact,midp", [
    # b = 10, c = 2: P(X >= 10) = (66 + 12 + 1) / 4096; mid-p = (12 + 1 + 66/2) / 4096
    (10, 2, Fraction(79, 4096), Fraction(46, 4096)),
    # b = 5, c = 0: P(X >= 5) = 1/32; mid-p = 1/64
    (5, 0, Fraction(1, 32), Fraction(1, 64)),
    # b = c = 3: P(X >= 3 | 6) = (20 + 15 + 6 + 1)/64 = 42/64; mid-p = (22 + 10)/64
    (3, 3, Fraction(42, 64), Fraction(32, 64)),
    # candidate better (b = 0, c = 4): nothing against it
    (0, 4, Fraction(1), Fraction(1) - Fraction(1, 32)),
    (0, 0, Fraction(1), Fraction(1)),
])
def test_mcnemar_exact_and_midp_hand_computed(b, c, exact, midp):
    assert A.mcnemar_exact(b, c) == pytest.approx(float(exact), abs=1e-15)
    assert A.mcnemar_midp(b, c) == pytest.approx(float(midp), abs=1e-15)


@pytest.mark.parametrize("x,n,lo,hi", [
    # Newcombe 1998 (Statistics in Medicine 17:857, "Two-sided confidence intervals for the single proportion"),
    # Table II, method 3 (Wilson score, no continuity correction)
    (81, 263, 0.2553, 0.3662), (15, 148, 0.0624, 0.1605), (0, 20, 0.0, 0.1611), (1, 29, 0.0061, 0.1718),
])
def test_wilson_against_newcombes_table(x, n, lo, hi):
    got = A.wilson(x, n, Z95)
    assert round(got[0], 4) == lo and round(got[1], 4) == hi


def test_newcombe_paired_method10():
    # Newcombe 1998 (Statistics in Medicine 17:2635) example (a): 36 pairs both right, 12 and 2 discordant, n = 50;
    # method 10 limits as reproduced from the paper's Table II (0.0569, 0.3404): unverified against the print.
    lo, hi = A.newcombe_paired(36, 12, 2, 0)
    assert (round(lo, 4), round(hi, 4)) == (0.0569, 0.3404)
    # swapping the two arms negates the interval; it always holds the point estimate
    lo2, hi2 = A.newcombe_paired(36, 2, 12, 0)
    assert (lo2, hi2) == pytest.approx((-hi, -lo))
    for cell in ((50, 0, 0, 0), (0, 0, 0, 50), (10, 5, 5, 30), (200, 3, 40, 257)):
        lo, hi = A.newcombe_paired(*cell)
        n = float(sum(cell))
        assert -1.0 <= lo <= (cell[1] - cell[2]) / n <= hi <= 1.0


# -- score verdict ------------------------------------------------------------------------------------------------

def _score(correct):
    return {"ids": ["i%d" % i for i in range(len(correct))], "correct": list(correct)}


def test_score_verdict_fails_a_real_drop_with_both_scores_in_the_message():
    lkg = _score([True] * 60 + [False] * 40)
    cand = _score([True] * 45 + [False] * 15 + [False] * 40)   # 15 items lost, none gained
    v = A.score_verdict(cand, lkg)
    assert not v["passed"] and v["class"] == "accuracy_drop"
    assert (v["candidate_score"], v["lkg_score"], v["lkg_only"], v["candidate_only"]) == (0.45, 0.6, 15, 0)
    assert v["p_value"] == pytest.approx(0.5 ** 16)
    assert "0.450 (45/100) vs last-known-good 0.600 (60/100)" in v["message"] and v["message"].startswith("FAILED")


def test_score_verdict_passes_noise_and_improvement():
    lkg = _score([True] * 60 + [False] * 40)
    # two lost, one gained: p = P(X > 2 | 3) + P(X = 2)/2 = 1/8 + 3/16
    noisy = _score([True] * 58 + [False] * 2 + [True] + [False] * 39)
    v = A.score_verdict(noisy, lkg)
    assert v["passed"] and v["p_value"] == pytest.approx(5 / 16.0)
    assert A.score_verdict(_score([True] * 100), lkg)["passed"]
    assert A.score_verdict(lkg, lkg)["message"].startswith("passed: exact-match score 0.600 (60/100)")


def test_score_verdict_margin_lets_a_small_significant_drop_pass():
    lkg = _score([True] * 500 + [False] * 500)
    cand = _score([True] * 490 + [False] * 510)   # 10 lost of 1000: significant, 1 point
    assert not A.score_verdict(cand, lkg)["passed"]
    assert A.score_verdict(cand, lkg, margin=0.02)["passed"]


def test_score_verdict_bad_input_is_named():
    lkg = _score([True, False])
    with pytest.raises(A.AccuracyError, match="different items"):
        A.score_verdict(_score([True]), lkg)
    with pytest.raises(A.AccuracyError, match=r"alpha: 2 is not a number in \[1e-09, 1.0\)"):
        A.score_verdict(lkg, lkg, alpha=2)
    with pytest.raises(A.AccuracyError, match="candidate: None is not a score result"):
        A.score_verdict(None, lkg)


# -- greedy verdict -----------------------------------------------------------------------------------------------

def _greedy(texts):
    return {"prompts": ["p%d" % i for i in range(len(texts))], "texts": list(texts)}


def test_prefix_fraction_and_agreement():
    assert A.prefix_fraction("abcd", "abxy") == 0.5
    assert A.prefix_fraction("", "") == 1.0 and A.prefix_fraction("ab", "") == 0.0
    ag = A.agreement(["a", "b", None, "dd"], ["a", "c", "x", "de"])
    assert ag == {"identical": 1, "n": 4, "rate": 0.25, "prefix": round((1 + 0 + 0 + 0.5) / 4, 4)}


def test_greedy_verdict_tolerance_from_lkg_against_itself():
    base = ["out %d" % i for i in range(20)]
    repeat = base[:18] + ["batching moved %d" % i for i in range(2)]        # LKG agrees with itself 0.9
    same_ish = base[:17] + ["x", "y", "z"]                                     # 0.85 >= 0.9 - 0.1
    changed = base[:10] + ["out %d changed" % i for i in range(10, 20)]       # 0.5 identical, prefixes shared
    ok = A.greedy_verdict(_greedy(same_ish), _greedy(base), _greedy(repeat))
    assert ok["passed"] and ok["threshold"] == 0.8 and ok["value"] == 0.85
    bad = A.greedy_verdict(_greedy(changed), _greedy(base), _greedy(repeat))
    assert not bad["passed"] and bad["class"] == "greedy_divergence"
    assert "0.500" in bad["message"] and "with itself 0.900" in bad["message"]
    # a stricter margin fails the near one
    assert not A.greedy_verdict(_greedy(same_ish), _greedy(base), _greedy(repeat), margin=0.0)["passed"]
    # metric prefix: shared prefixes count partly
    assert A.greedy_verdict(_greedy(changed), _greedy(base), _greedy(repeat), metric="prefix")["value"] > 0.5


def test_greedy_verdict_bad_input_is_named():
    g = _greedy(["a"])
    with pytest.raises(A.AccuracyError, match="metric: 'exact' is not one of identical, prefix"):
        A.greedy_verdict(g, g, g, metric="exact")
    with pytest.raises(A.AccuracyError, match="different prompts"):
        A.greedy_verdict(_greedy(["a", "b"]), g, g)


# -- which check ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("delta,checks", [
    ({}, []), ({"max-running-requests": 64}, ["greedy"]),
    ({"cuda-graph-backend-decode": "disabled", "cuda-graph-backend-prefill": "disabled"}, ["greedy"]),
    ({"--chunked-prefill-size": 4096, "schedule-conservativeness": 0.8}, ["greedy"]),
    ({"kv-cache-dtype": "fp8_e4m3"}, ["score"]), ({"attention-backend": "triton"}, ["score"]),
    ({"mem-fraction-static": 0.9, "quantization": "fp8"}, ["score"]), ({"some-new-flag": 1}, ["score"]),
])
def test_checks_for(delta, checks):
    assert A.checks_for(delta) == checks


def test_campaign_flags_are_classified():
    """Every option the shipped campaigns vary is in one of the two lists (an unlisted one gets the score)."""
    import yaml  # pylint: disable=import-outside-toplevel
    root = os.path.join(os.path.dirname(taskgen.__file__), "..", "..", "..", "campaigns")
    for name in sorted(os.listdir(root)):
        with open(os.path.join(root, name)) as f:
            doc = yaml.safe_load(f)
        for key, values in doc["space"].items():
            keys = [k for v in values for k in v] if all(isinstance(v, dict) for v in values) else [key]
            for k in keys:
                assert k in A.GREEDY_FLAGS or k in A.SCORE_FLAGS, (name, k)


# -- against a stand-in client -----------------------------------------------------------------------------------

class Client(object):
    """bench/client's get_models/build_payload/run_load: answers the task prompts by a rule."""

    build_payload = staticmethod(bench_client.build_payload)

    def __init__(self, answer, fail=()):
        self.answer = answer
        self.fail = fail
        self.sent = []

    @staticmethod
    def get_models(base_url, api_key=None, timeout=10.0):
        return ["m"], None

    def run_load(self, base_url, api, bodies, concurrency, processes=1, **kw):
        import json  # pylint: disable=import-outside-toplevel
        recs = []
        for body in bodies:
            req = json.loads(body)
            self.sent.append(req)
            prompt = req["prompt"]
            if prompt in self.fail:
                recs.append({"ok": False, "error": "http_5xx", "detail": "HTTP 500"})
            else:
                recs.append({"ok": True, "text": self.answer(prompt), "content": self.answer(prompt)})
        return recs, []


ANSWER = dict((it["prompt"], it["answer"]) for it in A.load_tasks())


def test_measure_score_and_gate_against_a_client():
    right = Client(lambda p: " " + ANSWER[p] + "\nQ: next")
    lkg = A.measure_lkg("http://x", client=right, limit=110)
    assert lkg["score"]["score"] == 1.0 and lkg["score"]["requests"] == 110
    assert all(r["temperature"] == 0.0 and r["max_tokens"] == A.SCORE_MAX_TOKENS and r["model"] == "m"
               for r in right.sent[:110])
    assert lkg["greedy"]["texts"] == lkg["greedy_repeat"]["texts"]
    # the repeat sent the same prompts in another order
    assert [r["prompt"] for r in right.sent[110:158]] != [r["prompt"] for r in right.sent[158:206]]
    wrong_math = Client(lambda p: " 0" if "What is" in p else " " + ANSWER[p])
    g = A.gate("http://x", lkg, ["score"], client=wrong_math)
    assert not g["passed"] and g["class"] == "accuracy_drop" and g["requests"] == 110
    assert "vs last-known-good 1.000 (110/110)" in g["message"]
    same = A.gate("http://x", lkg, ["score", "greedy"], client=right)
    assert same["passed"] and same["requests"] == 110 + 48
    drift = Client(lambda p: " " + ANSWER[p] + (" drift" if hash(p) % 2 else ""))
    d = A.gate("http://x", lkg, ["greedy"], client=drift)
    assert not d["passed"] and d["class"] == "greedy_divergence"


def test_failed_requests_count_wrong_and_most_failing_is_an_error():
    items = A.load_tasks(20)
    some = Client(lambda p: " " + ANSWER[p], fail=[items[0]["prompt"]])
    m = A.measure_score("http://x", limit=20, client=some)
    assert m["correct_n"] == 19 and m["errors"] == {"http_5xx": 1}
    most = Client(lambda p: " " + ANSWER[p], fail=[it["prompt"] for it in items[:15]])
    with pytest.raises(A.AccuracyError, match="15 of 20 requests failed"):
        A.measure_score("http://x", limit=20, client=most)
    g = A.gate("http://x", {"score": m}, ["score"], client=most)
    assert not g["passed"] and g["class"] == "accuracy_error"
    with pytest.raises(A.AccuracyError, match="checks: .'speed'. are not checks; allowed: score, greedy"):
        A.gate("http://x", {}, ["speed"], client=some)


def _params(**kw):
    p = {"action": "measure", "base_url": "http://x", "lkg_file": "/lkg.json", "checks": "auto", "delta": {},
         "model": None, "api": "completions", "api_key": None, "concurrency": 4, "limit": 22, "greedy_prompts": 11,
         "alpha": 0.05, "margin": 0.0, "greedy_margin": 0.1, "greedy_metric": "identical", "timeout": 10.0,
         "fail_on_gate": True}
    p.update(kw)
    return p


def test_run_module_measure_then_gate_with_compact_results():
    files = {}
    right = Client(lambda p: " " + ANSWER[p])
    res, failed, msg = A.run_module(_params(checks=["score", "greedy"]), files.__setitem__, files.__getitem__, right)
    assert not failed and res["measured"]["requests"] == 22 + 2 * 11 and files["/lkg.json"]["checks"] == ["score", "greedy"]
    assert msg.startswith("measured score, greedy on last-known-good: 44 requests")
    wrong = Client(lambda p: " 0")
    res, failed, msg = A.run_module(_params(action="gate", delta={"quantization": "fp8"}), files.__setitem__,
                                    files.__getitem__, wrong)
    assert failed and res["class"] == "accuracy_drop" and "ids" not in str(res["checks"])
    assert res["checks"]["score"]["candidate_score"] == 0.0 and res["checks"]["score"]["lkg_score"] == 1.0
    res, failed, dummy = A.run_module(_params(action="gate", delta={"quantization": "fp8"}, fail_on_gate=False),
                                      files.__setitem__, files.__getitem__, wrong)
    assert not failed and res["passed"] is False
    res, failed, dummy = A.run_module(_params(action="gate", delta={"max-running-requests": 8}), files.__setitem__,
                                      files.__getitem__, right)
    assert not failed and res["passed"] and res["checks"]["greedy"]["identical"] == 11
    res, failed, msg = A.run_module(_params(action="gate", delta={}), files.__setitem__, files.__getitem__, right)
    assert not failed and res["requests"] == 0 and msg == "no accuracy check needed"


def test_run_module_detail_and_differences_show_what_changed():
    """run_module's ``detail`` hook gets what the compact result leaves out: last-known-good's measurements, then the
    candidate's answers with the items lost and gained and the greedy outputs that differ (tune.py's evidence)."""
    files, seen = {}, []
    right = Client(lambda p: " " + ANSWER[p])
    A.run_module(_params(checks=["score", "greedy"]), files.__setitem__, files.__getitem__, right, detail=seen.append)
    assert set(seen[0]) == {"score", "greedy", "greedy_repeat"}
    first = A.load_tasks(22)[0]["prompt"]
    off = Client(lambda p: " 0" if p == first else " " + ANSWER[p])
    res, dummy, dummy2 = A.run_module(_params(action="gate", checks=["score", "greedy"], fail_on_gate=False),
                                      files.__setitem__, files.__getitem__, off, detail=seen.append)
    diff = seen[1]["differences"]
    assert diff["score"] == {"lost": [A.load_tasks(22)[0]["id"]], "gained": []}
    assert diff["greedy"]["differing"] == 1 and diff["greedy"]["n"] == 11
    assert diff["greedy"]["examples"] == [{"prompt": "A:", "lkg": " " + ANSWER[first], "candidate": " 0"}]
    assert "differences" not in res and res["checks"]["greedy"]["identical"] == 10


def test_score_power_on_a_model_that_answers_13_of_528():
    """The H200's tiny model answers ~13 of 528 items: the score check fails a model that lost 4 or more of them
    (none gained; 4 lost: mid-p 1/32), not one that lost 3 (1/16); all 13 lost: mid-p 0.5^14."""
    lkg = {"ids": list(range(528)), "correct": [i < 13 for i in range(528)]}

    def lost(k):
        return A.score_verdict({"ids": lkg["ids"], "correct": [k <= i < 13 for i in range(528)]}, lkg)

    assert lost(13)["p_value"] == 0.5 ** 14 and not lost(13)["passed"]
    assert lost(4)["p_value"] == 1 / 32.0 and not lost(4)["passed"]
    assert lost(3)["p_value"] == 1 / 16.0 and lost(3)["passed"]


def test_run_module_missing_reference_is_named():
    def missing(path):
        raise OSError("no such file")
    with pytest.raises(A.AccuracyError, match="lkg_file: /lkg.json cannot be read .no such file.; measure"):
        A.run_module(_params(action="gate", checks=["score"]), None, missing, Client(lambda p: ""))
    with pytest.raises(A.AccuracyError, match="has no greedy measurement .it has score."):
        A.run_module(_params(action="gate", checks=["greedy"]), None, lambda p: {"checks": ["score"]},
                     Client(lambda p: ""))
    with pytest.raises(A.AccuracyError, match="checks: 'all' is not auto or a list of: score, greedy"):
        A.run_module(_params(checks="all"), None, None, Client(lambda p: ""))
