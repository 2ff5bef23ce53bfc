from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import os

import pytest
import yaml

from ansible_collections.gpuhost.sglang.plugins.module_utils.profiles import ProfileError, normalize_arch, select_profile
from ansible_collections.gpuhost.sglang.plugins.module_utils.server_args import server_argv

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))


def _load(name):
    with open(os.path.join(ROOT, "roles", "sglang", "vars", name)) as f:
        return yaml.safe_load(f)


DATA = _load("profiles.yml")["sglang_profiles"]
FLAGS = _load("flags.yml")["sglang_flags"]


def test_every_profile_value_has_evidence():
    for p in DATA["profiles"]:
        for name, spec in p["options"].items():
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
    assert sel["arch"] == "sm120" and sel["matched"] == ["sm120-dsa"]
    assert sel["options"] == {
        "dsa-decode-backend": "flashinfer_sparse_mla",
        "dsa-prefill-backend": "flashinfer_sparse_mla",
        "dsa-topk-backend": "sgl-kernel",
        "cuda-graph-max-bs-decode": 256,
        "disable-shared-experts-fusion": True,
        "mem-fraction-static": 0.92,
        "fp8-gemm-backend": "cutlass",
    }
    assert "#29580" in sel["evidence"]["dsa-decode-backend"]
    assert "seeds" in sel["evidence"]["mem-fraction-static"]
    assert [f["name"] for f in sel["fallbacks"]] == ["dsa-trtllm", "no-cuda-graph"]
    assert sel["fallbacks"][0]["options"] == {"dsa-decode-backend": "trtllm", "dsa-prefill-backend": "trtllm"}


def test_sm120_dsa_before_0_5_23_is_the_seeds_configuration():
    sel = select_profile("sm120", "deepseek-dsa", "0.5.15.post1", DATA)
    assert sel["matched"] == ["sm120-dsa-nsa-era"]
    assert sel["options"]["nsa-decode-backend"] == "trtllm" and sel["options"]["nsa-prefill-backend"] == "trtllm"
    assert sel["options"]["cuda-graph-max-bs"] == 256
    assert "dsa-decode-backend" not in sel["options"]


def test_profile_options_never_use_names_flags_yml_marks_renamed_for_that_range():
    from ansible_collections.gpuhost.sglang.plugins.module_utils.server_args import flag_rules, precheck
    for version in ("0.5.15", "0.5.22", "0.5.23", "0.6.0"):
        for fam in DATA["model_families"]:
            sel = select_profile("sm120", fam, version, DATA)
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
    assert sel["matched"] == ["sm120-any", "sm120-dsa"]
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
    sel = select_profile("9.0", "deepseek-dsa", "0.5.23", DATA)
    assert sel["matched"] == ["datacenter-dsa"] and sel["options"] == {} and sel["notes"]


@pytest.mark.parametrize("mutate,needle", [
    (lambda d: d["profiles"][0]["options"]["mem-fraction-static"].pop("evidence"), "every value needs an evidence note"),
    (lambda d: d["profiles"][0].pop("gpu_archs"), "gpu_archs must be a non-empty list"),
    (lambda d: d["profiles"][0].__setitem__("since", "soon"), "cannot parse version"),
    (lambda d: d["gpu_archs"][0].pop("arch"), "gpu_archs[0] must have keys"),
    (lambda d: d["profiles"][1]["fallbacks"][0].pop("evidence"), "fallbacks[0] must be"),
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
