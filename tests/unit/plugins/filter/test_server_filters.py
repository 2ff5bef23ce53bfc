from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuhost.sglang.plugins.filter.server import FilterModule

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
F = FilterModule().filters()


def _vars(name):
    with open(os.path.join(ROOT, "roles", "sglang", "vars", name)) as f:
        return yaml.safe_load(f)


def test_filter_names():
    assert sorted(F) == ["json_record", "served_files_changed", "server_argv", "sglang_candidates", "sglang_exposure",
                         "sglang_fallback_budget", "sglang_learned_chain", "sglang_managed_options", "sglang_option_sets",
                         "sglang_profile",
                         "sglang_profile_details", "sglang_replica_phases", "shell_quote", "systemd_exec"]


def test_learned_chain_filter_names_the_variable():
    with pytest.raises(AnsibleFilterError, match="sglang_fallback_lessons: class 'graphs': allowed"):
        F["sglang_learned_chain"]([{}], [], {}, {"graphs": {"x": 1}})


def test_fallback_budget_filter_names_the_variable():
    with pytest.raises(AnsibleFilterError, match="sglang_fallback_budget_seconds=-1 is out of range"):
        F["sglang_fallback_budget"]([{}], 60, -1)
    assert F["sglang_fallback_budget"]([{}, {"a": 1}], 60, 0, {}, False)["worst_case_seconds"] == 60


def test_server_argv_and_systemd_exec_compose():
    argv = F["server_argv"]({"served-model-name": "glm 5 100%", "tp-size": 8})
    assert argv == ["--served-model-name", "glm 5 100%", "--tp-size", "8"]
    assert F["systemd_exec"](["/v/bin/python"] + argv) == '/v/bin/python --served-model-name "glm 5 100%%" --tp-size 8'
    assert F["shell_quote"](argv) == "--served-model-name 'glm 5 100%' --tp-size 8"


def test_server_argv_precheck_with_flag_data_lists_every_problem():
    flags = _vars("flags.yml")["sglang_flags"]["sglang"]
    with pytest.raises(AnsibleFilterError) as exc:
        F["server_argv"]({"nsa-decode-backend": "trtllm", "tp": 8, "mem-fraction-static": 0.9}, flag_data=flags, engine_version="0.5.23")
    msg = str(exc.value)
    assert "use --dsa-decode-backend" in msg and "use --tp-size" in msg and "mem-fraction-static" not in msg
    # before 0.5.23 the nsa names are right; the abbreviation is still refused
    with pytest.raises(AnsibleFilterError) as exc:
        F["server_argv"]({"nsa-decode-backend": "trtllm", "tp": 8}, flag_data=flags, engine_version="0.5.15")
    assert "nsa" not in str(exc.value) and "use --tp-size" in str(exc.value)
    assert F["server_argv"]({"nsa-decode-backend": "trtllm"}, flag_data=flags, engine_version="0.5.15") == ["--nsa-decode-backend", "trtllm"]


def test_server_argv_takes_negations_from_flag_data_for_the_version():
    flags = _vars("flags.yml")["sglang_flags"]["sglang"]
    opts = {"enable-dsa-fused-indexer": False, "disable-shared-experts-fusion": False}
    assert F["server_argv"](opts, flag_data=flags, engine_version="0.5.23") == ["--no-enable-dsa-fused-indexer"]
    assert F["server_argv"](opts, flag_data=flags, engine_version="0.5.22") == []
    assert F["server_argv"](opts, flag_data=flags) == []
    assert F["server_argv"](opts, ["disable-shared-experts-fusion"], flags, "0.5.23") == ["--no-disable-shared-experts-fusion"]
    with pytest.raises(AnsibleFilterError, match=r"negatable\[0\] must be a dict"):
        F["server_argv"](opts, flag_data={"negatable": ["x"]}, engine_version="0.5.23")


@pytest.mark.parametrize("call", [
    lambda: F["server_argv"]("--tp 8"),
    lambda: F["server_argv"]({"x": [[1]]}),
    lambda: F["server_argv"]({"x": 1}, flag_data=["not", "a", "dict"]),
    lambda: F["systemd_exec"]("a b"),
    lambda: F["shell_quote"]("a b"),
    lambda: F["sglang_profile"]("sm120", "glm-dsa", "0.5.23", "not data"),
    lambda: F["sglang_candidates"]([], "not a list", {}),
    lambda: F["sglang_exposure"]("", 30000, ["/health"], True),
])
def test_bad_input_is_a_filter_error_not_a_traceback(call):
    with pytest.raises(AnsibleFilterError):
        call()


def test_sglang_profile_filters():
    data = _vars("profiles.yml")["sglang_profiles"]
    opts = F["sglang_profile"]("12.0", "glm-dsa", "0.5.23", data, {"mem-fraction-static": 0.9})
    assert opts["mem-fraction-static"] == 0.9 and opts["dsa-decode-backend"] == "flashinfer_sparse_mla"
    details = F["sglang_profile_details"]("12.0", "glm-dsa", "0.5.23", data)
    assert details["matched"] == ["sm120-dsa", "sm120-glm-dsa"] and details["evidence"]["cuda-graph-max-bs-decode"].startswith("profile sm120-dsa:")
    assert F["sglang_profile"]("none", "dense", "0.5.23", data) == {}


def test_sglang_candidates_filter_takes_the_profile_details():
    data = _vars("profiles.yml")["sglang_profiles"]
    details = F["sglang_profile_details"]("12.0", "glm-dsa", "0.5.23", data)
    chain = F["sglang_candidates"](details["fallbacks"], [{"cuda-graph-backend-decode": "disabled",
                                                          "cuda-graph-backend-prefill": "disabled"}], {"tp-size": 8})
    assert chain[0] == {} and len(chain) == 3
    assert {"dsa-prefill-backend": "triton_sparse_mla"} in chain
    assert F["sglang_candidates"]([], [], {}) == [{}]
    assert details["environment"] == {"SGLANG_ENABLE_JIT_DEEPGEMM": "0"}


def test_sglang_exposure_filter():
    engines = _vars("main.yml")["sglang_engines"]
    out = F["sglang_exposure"]("0.0.0.0", 30000, engines["sglang"]["public_path_prefixes"], True)
    assert "/metrics" in out["warning"] and out["beyond_localhost"]
    assert F["sglang_exposure"]("127.0.0.1", 30000, engines["sglang"]["public_path_prefixes"], True)["warning"] == ""


@pytest.mark.parametrize("text, record", [
    (None, {}), ("", {}), ("{not json", {}), ("[1, 2]", {}), ('{"argv": ["a"]}', {"argv": ["a"]})])
def test_json_record_is_the_object_or_nothing(text, record):
    """A record as host_read returned its text: the object, or {} when absent or damaged."""
    assert F["json_record"](text) == record
