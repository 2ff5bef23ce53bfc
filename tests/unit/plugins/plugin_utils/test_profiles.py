from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import os

import pytest
import yaml

from ansible_collections.gpuhost.sglang.plugins.plugin_utils import profiles
from ansible_collections.gpuhost.sglang.plugins.plugin_utils.profiles import ProfileError, normalize_arch, select_profile
from ansible_collections.gpuhost.sglang.plugins.module_utils.serving.server_args import server_argv

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))


def _load(name):
    with open(os.path.join(ROOT, "roles", "sglang", "vars", name)) as f:
        return yaml.safe_load(f)


DATA = _load("profiles.yml")["sglang_profiles"]
FLAGS = _load("flags.yml")["sglang_flags"]


def test_every_profile_value_has_evidence():
    for p in DATA["profiles"]:
        for name, spec in list(p["options"].items()) + list((p.get("environment") or {}).items()):
            assert spec.get("evidence", "").strip(), "%s.%s has no evidence" % (p["name"], name)
        for fb in p.get("fallbacks", []):
            assert fb["evidence"].strip()


@pytest.mark.parametrize("given,arch", [
    ("12.0", "sm120"), (12.0, "sm120"), ("10.0", "sm100"), ("9.0", "sm90"), ("sm_120", "sm120"),
    ("SM120", "sm120"), ("sm90a", "sm90"), ("Hopper", "sm90"),
])
def test_compute_capability_and_names_map_to_arch(given, arch):
    assert normalize_arch(given, DATA)[0] == arch


def test_sm120_glm_dsa_on_0_5_23():
    sel = select_profile("12.0", "glm-dsa", "0.5.23", DATA)
    assert sel["arch"] == "sm120" and sel["matched"] == ["sm120-dsa", "sm120-glm-dsa"]
    assert sel["options"] == {
        "dsa-decode-backend": "flashinfer_sparse_mla",
        "dsa-prefill-backend": "flashinfer_sparse_mla",
        "dsa-topk-backend": "sgl-kernel",
        "kv-cache-dtype": "fp8_e4m3",
        "cuda-graph-max-bs-decode": 256,
        "disable-shared-experts-fusion": True,
        "disable-custom-all-reduce": True,
        "mem-fraction-static": 0.92,
        "fp8-gemm-backend": "cutlass",
        # the operators' one working launch had CUDA graphs off: the first candidate too (graphs on is a tuning candidate)
        "cuda-graph-backend-decode": "disabled",
        "cuda-graph-backend-prefill": "disabled",
    }
    assert "#29580" in sel["evidence"]["dsa-decode-backend"]
    assert "operator log" in sel["evidence"]["mem-fraction-static"]
    # 0.5.23 accepts flashinfer_sparse_mla only with an FP8 KV cache for GLM on SM120 (its own source)
    assert "flash_mla_sm120.py" in sel["evidence"]["kv-cache-dtype"]
    assert "voipmonitor/rtx6kpro" in sel["evidence"]["disable-custom-all-reduce"]
    # DeepGEMM off through the environment, with the guide as evidence and what 0.5.23 does not read said so
    assert sel["environment"] == {"SGLANG_ENABLE_JIT_DEEPGEMM": "0"}
    assert "voipmonitor/rtx6kpro" in sel["environment_evidence"]["SGLANG_ENABLE_JIT_DEEPGEMM"]
    assert "unverified" in sel["environment_evidence"]["SGLANG_ENABLE_JIT_DEEPGEMM"].lower()
    assert [f["name"] for f in sel["fallbacks"]] == ["dsa-triton-prefill"]
    assert [(lesson["class"], lesson["name"]) for lesson in sel["lessons"]] == [
        ("cuda_graph_capture", "no-cuda-graph"), ("nan", "dsa-triton-prefill")]


def test_sm120_has_no_trtllm_fallback_with_its_evidence():
    """FlashInfer's TRTLLM-gen FMHA runner refuses SM120 ("Unsupported architecture", flashinfer #5290, sglang #29562):
    a trtllm candidate would cost a full model load to fail."""
    sel = select_profile("12.0", "glm-dsa", "0.5.23", DATA)
    assert not [f for f in sel["fallbacks"] if "trtllm" in f["options"].values()], sel["fallbacks"]
    note = " ".join(sel["notes"])
    assert "#5290" in note and "#29562" in note and "Unsupported architecture" in note


def test_glm_only_backends_do_not_reach_deepseek_dsa_on_sm120():
    """0.5.23 refuses flashinfer_sparse_mla for any model but GLM DSA (flash_mla_sm120.py)."""
    sel = select_profile("12.0", "deepseek-dsa", "0.5.23", DATA)
    assert sel["matched"] == ["sm120-dsa"]
    assert "dsa-decode-backend" not in sel["options"] and "kv-cache-dtype" not in sel["options"]
    assert sel["options"]["disable-custom-all-reduce"] is True
    assert sel["environment"] == {"SGLANG_ENABLE_JIT_DEEPGEMM": "0"}
    assert any("GLM" in n and "flashinfer_sparse_mla" in n for n in sel["notes"]), sel["notes"]


def test_sm120_before_0_5_23_pins_bf16_kv_and_both_deepgemm_switches():
    sel = select_profile("sm120", "glm-dsa", "0.5.15.post1", DATA)
    assert sel["options"]["kv-cache-dtype"] == "bf16"
    assert "garbled" in sel["evidence"]["kv-cache-dtype"]
    assert sel["environment"] == {"SGLANG_ENABLE_JIT_DEEPGEMM": "0", "SGLANG_ENABLE_DEEP_GEMM": "0"}


def test_profile_environment_merges_like_options_and_is_text():
    data = copy.deepcopy(DATA)
    data["profiles"].append({"name": "sm120-any", "gpu_archs": ["sm120"],
                             "environment": {"SGLANG_ENABLE_JIT_DEEPGEMM": {"value": 1, "evidence": "test"},
                                             "NCCL_DEBUG": {"value": "WARN", "evidence": "test"}}})
    sel = select_profile("sm120", "glm-dsa", "0.5.23", data)
    assert sel["environment"] == {"SGLANG_ENABLE_JIT_DEEPGEMM": "0", "NCCL_DEBUG": "WARN"}   # family profile wins
    assert sel["environment_evidence"]["NCCL_DEBUG"] == "profile sm120-any: test"
    assert select_profile("sm120", "dense", "0.5.23", data)["environment"] == {"SGLANG_ENABLE_JIT_DEEPGEMM": "1", "NCCL_DEBUG": "WARN"}
    assert select_profile("none", "glm-dsa", "0.5.23", data)["environment"] == {}


PRODUCTION_CHAIN = []


def test_candidate_chain_appends_the_profiles_fallbacks_after_the_hosts():
    sel = select_profile("12.0", "glm-dsa", "0.5.23", DATA)
    chain = profiles.candidate_chain(sel["fallbacks"], PRODUCTION_CHAIN, {"tp-size": 8})
    assert chain == [{}, {"dsa-prefill-backend": "triton_sparse_mla"}]
    # a host chain entry first, then the profile's; an entry equal to the host's is tried once
    graphs_off = {"cuda-graph-backend-decode": "disabled", "cuda-graph-backend-prefill": "disabled"}
    fallbacks = sel["fallbacks"] + [{"name": "x", "options": graphs_off, "evidence": "t"}]
    assert profiles.candidate_chain(fallbacks, [graphs_off], {}) == [{}, graphs_off, {"dsa-prefill-backend": "triton_sparse_mla"}]


def test_candidate_chain_keeps_what_the_host_pinned():
    """A profile fallback never changes an option the host set itself in sglang_options."""
    sel = select_profile("12.0", "glm-dsa", "0.5.23", DATA)
    chain = profiles.candidate_chain(sel["fallbacks"], [], {"dsa_prefill_backend": "flashinfer_sparse_mla"})
    assert chain == [{}]
    # the host's own chain may change its own options
    own = [{"dsa-prefill-backend": "triton_sparse_mla"}]
    assert profiles.candidate_chain([], own, {"dsa-prefill-backend": "flashinfer_sparse_mla"}) == [{}] + own


def test_candidate_chain_dedupes_spellings_of_one_option():
    chain = profiles.candidate_chain([{"name": "x", "options": {"cuda_graph_backend_decode": "disabled"}, "evidence": "t"}],
                                     [{"cuda-graph-backend-decode": "disabled"}], None)
    assert chain == [{}, {"cuda-graph-backend-decode": "disabled"}]


@pytest.mark.parametrize("args,needle", [
    (([], "not a list", {}), "sglang_fallback_chain must be a list of option mappings"),
    (([], [["--tp", "8"]], {}), "sglang_fallback_chain[0] must be a mapping"),
    (([{"name": "x"}], [], {}), "profile fallbacks[0] must be {name, options, evidence}"),
    (([], [], ["--tp"]), "sglang_options must be a mapping"),
    (([], [{"bad name": 1}], {}), "sglang_fallback_chain[0]"),
])
def test_candidate_chain_bad_input_names_the_variable(args, needle):
    with pytest.raises(ProfileError) as exc:
        profiles.candidate_chain(*args)
    assert needle in str(exc.value)


def test_sm120_dsa_before_0_5_23_is_the_operators_configuration():
    sel = select_profile("sm120", "deepseek-dsa", "0.5.15.post1", DATA)
    assert sel["matched"] == ["sm120-dsa-nsa-era"]
    assert sel["options"]["nsa-decode-backend"] == "trtllm" and sel["options"]["nsa-prefill-backend"] == "trtllm"
    assert sel["options"]["cuda-graph-max-bs"] == 256
    assert "dsa-decode-backend" not in sel["options"]


def test_profile_options_never_use_names_flags_yml_marks_renamed_for_that_range():
    from ansible_collections.gpuhost.sglang.plugins.module_utils.serving.server_args import flag_rules, precheck
    for version, arch in [(v, a) for v in ("0.5.15", "0.5.17", "0.5.22", "0.5.23", "0.6.0") for a in ("sm120", "sm90")]:
        for fam in DATA["model_families"]:
            sel = select_profile(arch, fam, version, DATA)
            errs = precheck(sel["options"], FLAGS["sglang"]["renames"], FLAGS["sglang"]["removed"],
                            FLAGS["sglang"]["abbreviations"], version)
            assert errs == [], (version, fam, errs)
            for fb in sel["fallbacks"]:
                assert precheck(fb["options"], FLAGS["sglang"]["renames"], FLAGS["sglang"]["removed"], None, version) == []
    assert flag_rules(FLAGS["sglang"]["renames"], None, "0.5.23")[0]


def test_host_overrides_win_and_null_removes():
    overrides = {"mem-fraction-static": 0.88, "dsa_decode_backend": "trtllm", "fp8-gemm-backend": None}
    sel = select_profile("sm120", "glm-dsa", "0.5.23", DATA, overrides=overrides)
    assert sel["options"]["mem-fraction-static"] == 0.88
    assert sel["options"]["dsa-decode-backend"] == "trtllm"
    assert sel["evidence"]["mem-fraction-static"] == "host override"
    assert "--fp8-gemm-backend" not in server_argv(sel["options"])


def test_arch_only_profile_comes_before_the_family_profile():
    data = copy.deepcopy(DATA)
    data["profiles"].insert(len(data["profiles"]), {"name": "sm120-any", "gpu_archs": ["sm120"],
                                                    "options": {"mem-fraction-static": {"value": 0.8, "evidence": "test"},
                                                                "watchdog-timeout": {"value": 600, "evidence": "test"}}})
    sel = select_profile("sm120", "glm-dsa", "0.5.23", data)
    assert sel["matched"] == ["sm120-any", "sm120-dsa", "sm120-glm-dsa"]
    assert sel["options"]["mem-fraction-static"] == 0.92      # family profile wins over arch-only
    assert sel["options"]["watchdog-timeout"] == 600           # arch-only value still applies
    assert select_profile("sm120", "dense", "0.5.23", data)["options"] == {"mem-fraction-static": 0.8, "watchdog-timeout": 600}


@pytest.mark.parametrize("arch,family,version,needle", [
    ("sm75", "glm-dsa", "0.5.23", "'sm75' is not in the profile data"),
    ("7.5", "glm-dsa", "0.5.23", "compute capability 7.5 is not in"),
    ("sm120", "llama-moe", "0.5.23", "model family 'llama-moe' is not in the profile data"),
    ("sm120", "dense", "0.5.23", "no profile for sm120 + dense"),
    ("none", "glm-dsa", "0.5.23", "no GPU architecture given"),
    (None, "glm-dsa", "0.5.23", "no GPU architecture given"),
    ("sm120", "glm-dsa", None, "engine version unknown"),
    ("sm120", "glm-dsa", "nightly", "not parseable"),
])
def test_unknown_inputs_give_an_empty_profile_with_a_note(arch, family, version, needle):
    sel = select_profile(arch, family, version, DATA)
    assert sel["options"] == {}
    assert any(needle in n for n in sel["notes"]), sel["notes"]


def test_other_engines_get_no_sglang_profile():
    assert select_profile("sm120", "glm-dsa", "5.24.0", DATA, engine="transformers")["options"] == {}


def test_datacenter_dsa_profile_is_known_but_empty():
    sel = select_profile("10.0", "deepseek-dsa", "0.5.23", DATA)
    assert sel["matched"] == ["datacenter-dsa"] and sel["options"] == {} and sel["notes"]
    sel = select_profile("9.0", "deepseek-dsa", "0.5.23", DATA)
    assert sel["matched"] == ["sm90", "sm90-since-0.5.17", "datacenter-dsa"] and sel["options"] == {}


@pytest.mark.parametrize("version, chain", [
    ("0.5.15", ["triton-attention"]),
    ("0.5.17", ["triton-attention", "triton-attention-no-cuda-graph"]),
    ("0.5.23", ["triton-attention", "triton-attention-no-cuda-graph"]),
])
def test_hopper_profile_adds_the_h200s_measured_fallbacks_only(version, chain):
    for fam in ("dense", "glm-dsa", None):
        sel = select_profile("9.0", fam, version, DATA)
        assert sel["arch"] == "sm90" and sel["options"] == {}, sel
        assert [fb["name"] for fb in sel["fallbacks"]] == chain
        assert sel["fallbacks"][0]["options"] == {"attention-backend": "triton"}


def test_hopper_profile_evidence_names_recorded_h200_files_that_exist():
    """The SM90 values carry the H200 runs: every file their evidence names is in the repository."""
    import re
    hopper = [p for p in DATA["profiles"] if p["gpu_archs"] == ["sm90"]]
    texts = [fb["evidence"] for p in hopper for fb in p.get("fallbacks", [])] + [n for p in hopper for n in p.get("notes", [])]
    cited = set(re.findall(r"((?:benchmarks|tests)/[\w./-]+\.(?:txt|log|jsonl|md))", " ".join(texts)))
    assert len(cited) >= 3 and any("2026-12-02-h200" in c for c in cited), cited
    missing = [c for c in cited if not os.path.exists(os.path.join(ROOT, c))]
    assert missing == []


@pytest.mark.parametrize("mutate,needle", [
    (lambda d: d["profiles"][0]["options"]["mem-fraction-static"].pop("evidence"), "every value needs an evidence note"),
    (lambda d: d["profiles"][0].pop("gpu_archs"), "gpu_archs must be a non-empty list"),
    (lambda d: d["profiles"][0].__setitem__("since", "soon"), "cannot parse version"),
    (lambda d: d["gpu_archs"][0].pop("arch"), "gpu_archs[0] must have keys"),
    (lambda d: d["profiles"][2]["fallbacks"][0].pop("evidence"), "fallbacks[0] must be"),
    (lambda d: d["profiles"][1]["lessons"][0].pop("evidence"), "lessons[0] must be"),
    (lambda d: d["profiles"][1]["lessons"][0].__setitem__("class", "graphs"), "lessons[0].class='graphs': allowed"),
    (lambda d: d["profiles"][1].__setitem__("environment", {"SGLANG_X": {"value": "0"}}), "environment.SGLANG_X must be"),
    (lambda d: d["profiles"][1].__setitem__("environment", {"sglang-x": {"value": "0", "evidence": "t"}}),
     "environment name 'sglang-x' must match"),
    (lambda d: d["profiles"][1].__setitem__("environment", {"SGLANG_X": {"value": {"a": 1}, "evidence": "t"}}),
     "environment.SGLANG_X value must be a string, number or boolean"),
    (lambda d: d["profiles"][1].__setitem__("environment", ["SGLANG_X=0"]), "environment must be a dict"),
])
def test_malformed_data_is_an_error_naming_the_key(mutate, needle):
    data = copy.deepcopy(DATA)
    mutate(data)
    with pytest.raises(ProfileError) as exc:
        select_profile("sm120", "glm-dsa", "0.5.23", data)
    assert needle in str(exc.value)


def test_bad_data_types():
    with pytest.raises(ProfileError, match="must be a dict"):
        select_profile("sm120", "glm-dsa", "0.5.23", ["x"])
    with pytest.raises(ProfileError, match="overrides"):
        select_profile("sm120", "glm-dsa", "0.5.23", DATA, overrides=["--tp", "8"])
