"""The server_args module end to end (subprocess, like Ansible runs it) against a stand-in sglang
package (fake_sglang/) run by a real second interpreter: probe protocol, verdicts, failure messages,
check mode. The real SGLang 0.5.23 parser is exercised in tests/integration/test_server_args_sglang.py."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import sys

import pytest

from ansible_collections.gpuhost.sglang.tests import harness

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture
def fake_python(tmp_path):
    """An 'engine venv interpreter' whose sglang is the stand-in package."""
    exe = tmp_path / "python"
    exe.write_text("#!/bin/sh\nPYTHONPATH=%s exec %s \"$@\"\n" % (os.path.join(HERE, "fake_sglang"), sys.executable))
    exe.chmod(0o755)
    return str(exe)


def run_module(args, check_mode=False):
    out = harness.run_module("server_args", args, check_mode=check_mode, timeout=120)
    assert "Traceback" not in out.stdout + out.stderr
    return out


OPERATORS = {"model-path": "/m", "tp": 8, "mem-fraction-static": 0.92, "nsa-decode-backend": "trtllm",
             "disable-cuda-graph": True, "max-running-requests": 64}
RENAMES = [{"old": "nsa-decode-backend", "new": "dsa-decode-backend", "since": "0.5.23"}]


def test_good_options_pass_with_warnings_and_negation(fake_python):
    options = {"model-path": "/m", "tp-size": 2, "disable-cuda-graph": True, "enable-dsa-fused-indexer": False,
               "cuda-graph-bs-decode": [1, 2], "disable-shared-experts-fusion": False, "max-running-requests": None}
    out = run_module({"python": fake_python, "options": options})
    assert not out.get("failed"), out
    assert out["validated"] is True and out["engine_version"] == "9.9.1"
    assert out["argv"] == ["--cuda-graph-bs-decode", "1", "2", "--disable-cuda-graph", "--no-enable-dsa-fused-indexer",
                           "--model-path", "/m", "--tp-size", "2"]
    assert out["errors"] == []
    assert out["parser_warnings"] == [{"option": "disable-cuda-graph",
                                       "warning": "'--disable-cuda-graph' is deprecated and will be removed in a future release."}]
    assert out["changed"] is False


def test_all_errors_reported_at_once_with_replacements(fake_python):
    out = run_module({"python": fake_python, "options": OPERATORS, "renames": RENAMES})
    assert out["failed"] is True
    # renames apply from 0.5.23 and the stand-in says 9.9.1
    by = {e["option"]: e for e in out["errors"]}
    assert by["tp"]["problem"] == "abbreviation" and by["tp"]["replacement"] == "tp-size"
    assert by["nsa-decode-backend"]["problem"] == "renamed" and by["nsa-decode-backend"]["replacement"] == "dsa-decode-backend"
    assert set(by) == {"tp", "nsa-decode-backend"}
    assert "2 problem(s)" in out["msg"] and "use --tp-size" in out["msg"] and "use --dsa-decode-backend" in out["msg"]
    assert "--tp-size" in out["suggested_argv"] and "--dsa-decode-backend" in out["suggested_argv"]


def test_false_or_null_values_of_unknown_options_are_still_reported(fake_python):
    out = run_module({"python": fake_python, "options": {"model-path": "/m", "enable-dsa-fused-indexr": False, "tp": None}})
    by = {e["option"]: e for e in out["errors"]}
    assert by["enable-dsa-fused-indexr"]["problem"] == "unknown"
    assert by["enable-dsa-fused-indexr"]["candidates"] == ["enable-dsa-fused-indexer"]
    assert by["tp"]["problem"] == "abbreviation"
    assert out["suggested_argv"] == ["--model-path", "/m"]


def test_new_name_on_a_version_before_the_rename_points_back_to_the_old_name(fake_python):
    # the stand-in (9.9.1) only knows --dsa-decode-backend; pretend the rename to it happens in 10.0
    out = run_module({"python": fake_python, "options": {"model-path": "/m", "tp-size": 1, "nsa-decode-backend": "trtllm"},
                      "renames": [{"old": "dsa-decode-backend", "new": "nsa-decode-backend", "since": "10.0"}]})
    err = out["errors"][0]
    assert (err["option"], err["problem"], err["replacement"]) == ("nsa-decode-backend", "renamed", "dsa-decode-backend")
    assert "predates the rename" in err["evidence"]


def test_rename_outside_its_version_range_is_just_unknown(fake_python):
    out = run_module({"python": fake_python, "options": {"model-path": "/m", "nsa-decode-backend": "trtllm"},
                      "renames": [dict(RENAMES[0], until="1.0")]})
    assert out["errors"][0]["problem"] == "unknown"


def test_invalid_choice_and_value_and_missing_required(fake_python):
    out = run_module({"python": fake_python, "options": {"dsa-decode-backend": "cutlas", "tp-size": "eight"}})
    by = {e["option"]: e for e in out["errors"]}
    assert by["dsa-decode-backend"]["problem"] == "invalid_choice"
    assert by["dsa-decode-backend"]["choices"] == ["flashmla_sparse", "fa3", "trtllm", "flashinfer_sparse_mla"]
    assert by["tp-size"]["problem"] == "invalid_value"
    assert by["model-path"]["problem"] == "missing"


def test_check_mode_validates_too(fake_python):
    out = run_module({"python": fake_python, "options": {"model-path": "/m", "tp": 2}}, check_mode=True)
    assert out["failed"] is True and out["errors"][0]["problem"] == "abbreviation"


def test_expected_version_mismatch_fails(fake_python):
    out = run_module({"python": fake_python, "options": {"model-path": "/m"}, "expected_version": "0.5.23"})
    assert out["failed"] is True and "expected_version is 0.5.23" in out["msg"] and "9.9.1" in out["msg"]


def test_bad_inputs_fail_early_and_clearly(fake_python, tmp_path):
    out = run_module({"python": str(tmp_path / "nope"), "options": {"tp-size": 1}})
    assert out["failed"] and "is not an executable file" in out["msg"]
    out = run_module({"python": fake_python, "options": {"-x": 1}})
    assert out["failed"] and "invalid option name '-x'" in out["msg"]
    out = run_module({"python": fake_python, "options": {}, "renames": "nsa->dsa"})
    assert out["failed"] and "renames must be a list" in out["msg"]
    out = run_module({"python": fake_python, "options": {}, "engine": "vllm"})
    assert out["failed"] and "engine" in out["msg"] and "sglang" in out["msg"]


def test_missing_engine_is_a_clear_failure(tmp_path):
    exe = tmp_path / "python"
    exe.write_text("#!/bin/sh\nexec %s -I \"$@\"\n" % sys.executable)  # isolated: no sglang importable
    exe.chmod(0o755)
    out = run_module({"python": str(exe), "options": {"model-path": "/m"}})
    assert out["failed"] and "cannot build the sglang parser" in out["msg"] and "No module named 'sglang'" in out["msg"]


def test_transformers_without_introspectable_cli_is_not_validated(tmp_path):
    exe = tmp_path / "python"
    exe.write_text("#!/bin/sh\nexec %s -I \"$@\"\n" % sys.executable)
    exe.chmod(0o755)
    out = run_module({"python": str(exe), "engine": "transformers", "options": {"port": 8000, "continuous-batching": True}})
    assert not out.get("failed"), out
    assert out["validated"] is False and "cannot introspect the transformers serve CLI" in out["reason"]
    assert out["argv"] == ["--continuous-batching", "--port", "8000"]


def test_option_sets_one_interpreter_one_result_each(fake_python, tmp_path):
    """A campaign's candidates in one call: each set gets its own verdict, the bad one is named, the interpreter
    starts once (the stand-in logs each start)."""
    log = tmp_path / "starts"
    exe = tmp_path / "python-counting"
    exe.write_text("#!/bin/sh\necho start >> %s\nexec %s \"$@\"\n" % (log, fake_python))
    exe.chmod(0o755)
    sets = [{"model-path": "/m", "tp-size": 2}, {"model-path": "/m", "mem-fraction-static": "most"},
            {"model-path": "/m", "disable-cuda-graph": True}]
    out = run_module({"python": str(exe), "option_sets": sets})
    assert out["failed"] is True
    assert [r["failed"] for r in out["results"]] == [False, True, False]
    assert out["results"][0]["engine_version"] == out["engine_version"] and out["results"][0]["engine"] == "sglang"
    assert "set 1:" in out["msg"] and "set 0:" not in out["msg"] and "mem-fraction-static" in out["results"][1]["msg"]
    assert out["results"][0]["argv"] == ["--model-path", "/m", "--tp-size", "2"]
    assert out["results"][2]["parser_warnings"], out["results"][2]
    assert log.read_text().count("start") == 1


def test_options_and_option_sets_are_exclusive(fake_python):
    out = run_module({"python": fake_python, "options": {"model-path": "/m"}, "option_sets": [{"model-path": "/m"}]})
    assert out["failed"] and "mutually exclusive" in out["msg"]
