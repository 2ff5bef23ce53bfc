# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Crash memory: which failed row rules which candidate out, and why."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpuhost.sglang.plugins.module_utils.tune import memory

RULES = memory.load_rules(None)


def cand(options, cid="c"):
    return {"id": cid, "index": 9, "name": cid, "options": options}


def failed(options, cls, cid="f", index=3):
    return {"id": cid, "index": index, "name": "failed one", "status": "startup_failed", "class": cls, "options": options}


def test_oom_rules_out_at_or_above_only():
    rows = [failed({"mem-fraction-static": 0.92}, "out_of_memory")]
    hit = memory.ruled_out(cand({"mem-fraction-static": 0.95}), rows, RULES)
    assert hit["row"] == "f" and hit["index"] == 3
    assert "mem-fraction-static at or above 0.92" in hit["reason"]
    assert memory.ruled_out(cand({"mem-fraction-static": 0.92}), rows, RULES)
    assert memory.ruled_out(cand({"mem-fraction-static": 0.85}), rows, RULES) is None


def test_graph_capture_failure_rules_out_the_same_backend_with_graphs_on():
    pair = {"dsa-decode-backend": "flashinfer_sparse_mla", "dsa-prefill-backend": "flashinfer_sparse_mla"}
    rows = [failed(dict(pair, **{"cuda-graph-max-bs-decode": 256}), "cuda_graph_capture")]
    hit = memory.ruled_out(cand(dict(pair, **{"cuda-graph-max-bs-decode": 128})), rows, RULES)
    assert hit and "same " in hit["reason"] and "dsa-decode-backend=\"flashinfer_sparse_mla\"" in hit["reason"]
    off = dict(pair, **{"cuda-graph-backend-decode": "disabled", "cuda-graph-backend-prefill": "disabled"})
    assert memory.ruled_out(cand(off), rows, RULES) is None
    assert memory.ruled_out(cand(dict(pair, **{"disable-cuda-graph": True})), rows, RULES) is None
    other = {"dsa-decode-backend": "trtllm", "dsa-prefill-backend": "trtllm"}
    assert memory.ruled_out(cand(other), rows, RULES) is None


def test_rows_that_did_not_crash_rule_nothing_out():
    rows = [dict(failed({"mem-fraction-static": 0.9}, "out_of_memory"), status="ok"),
            dict(failed({"mem-fraction-static": 0.9}, "out_of_memory"), status="rejected", id="g")]
    assert memory.ruled_out(cand({"mem-fraction-static": 0.95}), rows, RULES) is None


def test_campaign_rules_replace_the_defaults():
    rules = memory.load_rules([{"class": "timeout", "option": "chunked-prefill-size", "direction": "at_or_above"}])
    rows = [failed({"mem-fraction-static": 0.9}, "out_of_memory"), failed({"chunked-prefill-size": 8192}, "timeout", cid="t")]
    assert memory.ruled_out(cand({"mem-fraction-static": 0.95}), rows, rules) is None
    assert memory.ruled_out(cand({"chunked-prefill-size": 16384}), rows, rules)["row"] == "t"
