"""gpuhost.sglang.server_args against SGLang 0.5.23's OWN parser, on CPU.

Needs the fixture venv: ``tests/fixtures/sglang-venv.sh`` (stage 20 builds it; override the path
with SGLANG_VENV). Set GPUHOST_SKIP_SGLANG=1 to skip instead of failing when it is missing.

``PYTHONPATH=collections python tests/integration/test_server_args_sglang.py --table`` prints the verdict table of the
operators' command line (docs/flags-and-profiles.md).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import subprocess
import sys

import pytest
import yaml

from ansible_collections.gpuhost.sglang.tests import harness

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
VENV = os.environ.get("SGLANG_VENV") or os.path.join(os.environ.get("GPUHOST_ROOT", ROOT), ".cache", "sglang-venv")
PY = os.path.join(VENV, "bin", "python")
PINNED = "0.5.23"


def _vars(name):
    with open(os.path.join(ROOT, "roles", "sglang", "vars", name)) as f:
        return yaml.safe_load(f)


FLAGS = _vars("flags.yml")["sglang_flags"]["sglang"]
PROFILES = _vars("profiles.yml")["sglang_profiles"]

# The operators' command line, as the structured options a user would have written from it.
OPERATORS_ARGV = ["--tp", "8", "--mem-fraction-static", "0.92", "--nsa-decode-backend", "trtllm", "--nsa-prefill-backend", "trtllm",
                  "--disable-cuda-graph", "--max-running-requests", "64", "--fp8-gemm-backend", "cutlass"]
OPERATORS = {"model-path": "/srv/models/GLM-5-NVFP4", "tp": 8, "mem-fraction-static": 0.92, "nsa-decode-backend": "trtllm",
             "nsa-prefill-backend": "trtllm", "disable-cuda-graph": True, "max-running-requests": 64, "fp8-gemm-backend": "cutlass"}


def deprecated_for(version):
    """flags.yml's deprecated entries whose range holds ``version``."""
    from ansible_collections.gpuhost.sglang.plugins.module_utils.serving.server_args import version_in_range
    return [d for d in FLAGS["deprecated"] if version_in_range(version, d.get("since"), d.get("until"))]


def require_venv(py, msg):
    """Fail when ``py`` is not an interpreter, or skip with GPUHOST_SKIP_SGLANG=1 (the fixture venv is missing)."""
    if not os.access(py, os.X_OK):
        if os.environ.get("GPUHOST_SKIP_SGLANG") == "1":
            pytest.skip(msg)
        pytest.fail(msg)


@pytest.fixture(scope="module", autouse=True)
def sglang_venv():
    require_venv(PY, "no SGLang venv at %s: run tests/fixtures/sglang-venv.sh first" % VENV)


def run_module(options, **extra):
    args = {"python": PY, "engine": "sglang", "options": options, "renames": FLAGS["renames"], "removed": FLAGS["removed"],
            "expected_version": PINNED}
    args.update(extra)
    if options is None:
        del args["options"]
    out = harness.run_module("server_args", args, timeout=300)  # args in a file: a campaign's sets exceed NAME_MAX
    assert "Traceback" not in out.stdout
    return out


@pytest.fixture(scope="module")
def operators_run():
    return run_module(OPERATORS)


@pytest.fixture(scope="module")
def bad_run():
    """One run with several different mistakes: all of them must be reported at once."""
    return run_module({"model-path": "/m", "mem-fractoin-static": 0.9, "fp8-gemm-backend": "cutlas", "dsa-decode-backend": "trtllm",
                       "max-running-requests": "sixty-four", "mem-fraction-static": "most"})


def test_operators_command_line_verdicts(operators_run):
    out = operators_run
    assert out["engine_version"] == PINNED and out["validated"] is True
    assert out["failed"] is True
    verdicts = {v["option"]: v for v in out["verdicts"]}
    assert verdicts["tp"]["verdict"] == "abbreviation" and "use --tp-size" in verdicts["tp"]["detail"]
    assert verdicts["nsa-decode-backend"]["verdict"] == "renamed" and "--dsa-decode-backend" in verdicts["nsa-decode-backend"]["detail"]
    assert verdicts["nsa-prefill-backend"]["verdict"] == "renamed" and "--dsa-prefill-backend" in verdicts["nsa-prefill-backend"]["detail"]
    assert verdicts["disable-cuda-graph"]["verdict"] == "warning" and "deprecated" in verdicts["disable-cuda-graph"]["detail"]
    for ok in ("mem-fraction-static", "max-running-requests", "fp8-gemm-backend", "model-path"):
        assert verdicts[ok]["verdict"] == "ok", verdicts[ok]
    assert sorted(e["option"] for e in out["errors"]) == ["nsa-decode-backend", "nsa-prefill-backend", "tp"]
    assert {e["option"]: e.get("replacement") for e in out["errors"]} == {
        "tp": "tp-size", "nsa-decode-backend": "dsa-decode-backend", "nsa-prefill-backend": "dsa-prefill-backend"}
    assert [w["option"] for w in out["parser_warnings"]] == ["disable-cuda-graph"]
    assert "--cuda-graph-backend-{decode,prefill}=disabled" in out["parser_warnings"][0]["warning"]
    assert "3 problem(s) in the sglang 0.5.23 options" in out["msg"]


def test_suggested_fix_passes_the_parser(operators_run):
    out = operators_run
    fixed = dict(OPERATORS)
    for e in out["errors"]:
        fixed[e["replacement"]] = fixed.pop(e["option"])
    again = run_module(fixed)
    assert not again.get("failed"), again["msg"] if "msg" in again else again
    assert again["errors"] == [] and [w["option"] for w in again["parser_warnings"]] == ["disable-cuda-graph"]
    assert again["argv"] == out["suggested_argv"]


def test_without_rename_data_nsa_is_just_unknown():
    out = run_module({"model-path": "/m", "nsa-decode-backend": "trtllm"}, renames=[], removed=[])
    assert [(e["option"], e["problem"]) for e in out["errors"]] == [("nsa-decode-backend", "unknown")]


def test_bad_run_reports_every_mistake_at_once(bad_run):
    assert sorted((e["option"], e["problem"]) for e in bad_run["errors"]) == [
        ("fp8-gemm-backend", "invalid_choice"), ("max-running-requests", "invalid_value"),
        ("mem-fraction-static", "invalid_value"), ("mem-fractoin-static", "unknown")]
    assert "4 problem(s)" in bad_run["msg"]


def test_misspelling_suggests_the_real_option(bad_run):
    err = [e for e in bad_run["errors"] if e["option"] == "mem-fractoin-static"][0]
    assert err["candidates"][0] == "mem-fraction-static"
    assert "did you mean --mem-fraction-static" in bad_run["msg"]


def test_invalid_choice_lists_the_valid_ones(bad_run):
    err = [e for e in bad_run["errors"] if e["option"] == "fp8-gemm-backend"][0]
    choices = err["choices"]
    assert "cutlass" in choices and "auto" in choices and "cutlas" not in choices
    assert "valid choices: " in bad_run["msg"]


def test_bad_int_and_bad_float(bad_run):
    assert "sixty-four" in bad_run["msg"] and "'most'" in bad_run["msg"]
    assert [v["verdict"] for v in bad_run["verdicts"] if v["option"] == "dsa-decode-backend"] == ["ok"]


def test_flags_yml_matches_the_pinned_parser():
    """Every 0.5.23 fact in flags.yml is checked against the real parser, so the data cannot rot silently."""
    from ansible_collections.gpuhost.sglang.plugins.module_utils.serving.server_args import flag_rules
    renames, removed = flag_rules(FLAGS["renames"], FLAGS["removed"], PINNED)
    assert renames and removed
    opts = {"model-path": "/m"}
    opts.update({old: 1 for old in renames})
    opts.update({name: True for name in removed})
    opts.update({abbr: 1 for abbr in FLAGS["abbreviations"]})
    out = run_module(opts)
    got = {e["option"]: (e["problem"], e.get("replacement")) for e in out["errors"]}
    for old, entry in renames.items():
        assert got[old][0] == "renamed" and got[old][1] == entry["new"]
    for name in removed:
        assert got[name][0] == "removed"
    for abbr, target in FLAGS["abbreviations"].items():
        assert got[abbr] == ("abbreviation", target), (abbr, got.get(abbr))
    # the new names and the deprecated options exist; deprecations are reported as warnings
    new_opts = {"model-path": "/m", "dsa-decode-backend": "trtllm", "dsa-prefill-backend": "trtllm", "dsa-topk-backend": "sgl-kernel",
                "cuda-graph-max-bs-decode": 256}
    deprecated = deprecated_for(PINNED)
    new_opts.update({d["option"]: True for d in deprecated})
    out = run_module(new_opts)
    assert out["errors"] == [], out["errors"]
    assert sorted(w["option"] for w in out["parser_warnings"]) == sorted(d["option"] for d in deprecated)


def test_negatable_data_matches_the_pinned_parser():
    """flags.yml's negatable list for 0.5.23 is exactly the parser's BooleanOptionalAction set: the filter
    renders what the module renders."""
    from ansible_collections.gpuhost.sglang.plugins.module_utils.serving.server_args import negatable_for, server_argv
    names = negatable_for(FLAGS["negatable"], PINNED)
    opts = {"model-path": "/m"}
    opts.update({n: False for n in names})
    out = run_module(opts)
    assert out["errors"] == []
    assert out["argv"] == server_argv(opts, negatable=names)
    assert sorted(a for a in out["argv"] if a.startswith("--no-")) == sorted("--no-" + n for n in names)
    code = ("import argparse\nfrom sglang.srt.server_args import ServerArgs\np = argparse.ArgumentParser()\n"
            "ServerArgs.add_cli_args(p)\nprint(' '.join(sorted(a.option_strings[0][2:] for a in p._actions "
            "if type(a).__name__ == 'BooleanOptionalAction')))")
    proc = subprocess.run([PY, "-c", code], capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == sorted(names)


@pytest.mark.parametrize("family", ["glm-dsa", "deepseek-dsa"])
def test_sm120_profile_and_its_fallbacks_pass_the_pinned_parser(family):
    """The profile, each fallback and each lesson, through 0.5.23's own parser: no errors, no warnings."""
    from ansible_collections.gpuhost.sglang.plugins.plugin_utils.profiles import select_profile
    sel = select_profile("12.0", family, PINNED, PROFILES)
    assert sel["options"]
    # and every lesson a later candidate applies after a failure (CUDA graphs off, triton prefill after NaN); all of
    # them in one parser import (option_sets: each set is parsed on its own, as one candidate's command line)
    extras = [{}] + [fb["options"] for fb in sel["fallbacks"]] + [lesson["options"] for lesson in sel["lessons"]]
    sets = [dict(sel["options"], **dict({"model-path": "/m", "tp-size": 8}, **extra)) for extra in extras]
    out = run_module(None, option_sets=sets)
    assert out["validated"] is True and len(out["results"]) == len(sets), out.get("msg")
    assert [(extra, r["errors"], r["parser_warnings"]) for extra, r in zip(extras, out["results"])
            if r["failed"] or r["errors"] or r["parser_warnings"]] == []


@pytest.mark.parametrize("family", ["glm-dsa", "deepseek-dsa"])
def test_sm120_profile_environment_is_read_by_the_pinned_engine(family):
    """Every SGLANG_* variable a profile sets for 0.5.23 is one 0.5.23 declares (sglang.srt.environ.Envs): an
    environment value the engine never reads would be dead data."""
    from ansible_collections.gpuhost.sglang.plugins.plugin_utils.profiles import select_profile
    env = select_profile("12.0", family, PINNED, PROFILES)["environment"]
    names = sorted(n for n in env if n.startswith("SGLANG_"))
    assert names
    code = "import json, sys\nimport sglang.srt.environ as e\nprint(json.dumps([n for n in sys.argv[1:] if not hasattr(e.Envs, n)]))"
    proc = subprocess.run([PY, "-c", code] + names, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == []


def test_ansible_playbook_rejects_the_operators_line_before_anything_changes(tmp_path):
    play = tmp_path / "play.yml"
    play.write_text("""
- hosts: localhost
  gather_facts: false
  tasks:
    - ansible.builtin.include_vars: {file: %s}
    - gpuhost.sglang.server_args:
        python: %s
        options: %s
        renames: "{{ sglang_flags.sglang.renames }}"
      register: r
      ignore_errors: true
    - ansible.builtin.assert:
        that:
          - r is failed
          - r.errors | map(attribute='option') | sort | list == ['nsa-decode-backend', 'nsa-prefill-backend', 'tp']
          - r.engine_version == '0.5.23'
""" % (os.path.join(ROOT, "roles", "sglang", "vars", "flags.yml"), PY, json.dumps(OPERATORS)))
    env = harness.ansible_env()
    venv_bin = os.path.dirname(sys.executable)
    proc = subprocess.run([os.path.join(venv_bin, "ansible-playbook"), "-i", "localhost,", "-c", "local",
                           "-e", "ansible_python_interpreter=%s" % sys.executable, str(play)],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "ok=3" in proc.stdout and "ignored=1" in proc.stdout


ENGINE_VENV = os.environ.get("ENGINE_VENV") or os.path.join(os.environ.get("GPUHOST_ROOT", ROOT), ".cache", "engine-venv")


def test_transformers_serve_cli_is_validated_by_its_click_command():
    """The sandbox's CPU engine (transformers serve, built by `make fixtures`) is validated the same way."""
    py = os.path.join(ENGINE_VENV, "bin", "python")
    if not os.access(py, os.X_OK):
        pytest.skip("no transformers engine venv at %s (make fixtures builds it)" % ENGINE_VENV)
    out = run_module({"host": "127.0.0.1", "port": 8000, "continuous-batching": True, "compile": False, "devcie": "cpu",
                      "model-timeout": "soon"}, python=py, engine="transformers", renames=[], removed=[], expected_version=None)
    assert out["validated"] is True, out.get("reason")
    assert out["argv"][0] == "--no-compile"  # typer defines --compile/--no-compile
    by = {e["option"]: e for e in out["errors"]}
    assert set(by) == {"devcie", "model-timeout"}
    assert by["devcie"]["problem"] == "unknown" and by["devcie"]["candidates"] == ["device"]
    assert by["model-timeout"]["problem"] == "invalid_value"
    ok = run_module({"host": "127.0.0.1", "port": 8000, "continuous-batching": True, "device": "cpu"}, python=py, engine="transformers",
                    renames=[], removed=[], expected_version=None)
    assert not ok.get("failed"), ok.get("msg")
    assert ok["errors"] == [] and ok["argv"] == ["--continuous-batching", "--device", "cpu", "--host", "127.0.0.1", "--port", "8000"]


def verdict_table(out):
    rows = ["| option as given | values | verdict | detail |", "|---|---|---|---|"]
    for v in out["verdicts"]:
        rows.append("| `--%s` | %s | %s | %s |" % (v["option"], " ".join(v["values"]) or "-", v["verdict"],
                                                   v["detail"].replace("|", "\\|") or "-"))
    return "\n".join(rows)


if __name__ == "__main__":
    if "--table" in sys.argv:
        result = run_module(OPERATORS)
        print("sglang %s, operators' command line: %s" % (result["engine_version"], " ".join(OPERATORS_ARGV)))
        print(verdict_table(result))
        print("\nsuggested argv: %s" % " ".join(result.get("suggested_argv", [])))


def h200_campaign_sets(name):
    """Every option set campaigns/NAME.yml would start on the lent H200: each candidate over the options
    benchmarks/gpu/sglang/tune.py's launcher owns there (MANAGED; the GPU-bound model's path and served name).
    Returns (plan, option sets)."""
    from ansible_collections.gpuhost.sglang.plugins.module_utils.tune import campaign as tune_campaign
    sys.path.insert(0, os.path.join(ROOT, "benchmarks", "gpu", "sglang"))
    try:
        import tune as device_tune  # pylint: disable=import-error
    finally:
        sys.path.pop(0)
    with open(os.path.join(ROOT, "campaigns", name + ".yml")) as f:
        plan = tune_campaign.load(yaml.safe_load(f))
    managed = dict(device_tune.MANAGED, **{"model-path": "/tmp/sglang/model-gpubound", "served-model-name": "gpubound",
                                           "port": 30000})
    del managed["max-total-tokens"]  # --max-total-tokens 0: SGLang sizes the pool
    return plan, [dict(c["options"], **managed) for c in plan["candidates"]]


def test_h200_gpubound_campaign_passes_the_pinned_parser():
    """The GPU-bound campaign's every candidate, accepted by SGLang 0.5.23's own parser (the pinned engine; the H200
    runs 0.5.17, whose parser test_server_args_sglang_0517.py runs on the same sets)."""
    plan, sets = h200_campaign_sets("h200-gpubound")
    out = run_module(None, option_sets=sets)
    assert out["validated"] is True and len(out["results"]) == len(sets), out.get("msg")
    assert [(c["index"], r["errors"]) for c, r in zip(plan["candidates"], out["results"]) if r["failed"] or r["errors"]] == []


def test_glm5_sm120_tuning_campaign_every_candidate_accepted():
    """campaigns/glm5-nvfp4-sm120.yml over the production inventory's base and its SM120 profiles: every candidate
    the campaign would start is accepted by SGLang 0.5.23's own parser."""
    from ansible_collections.gpuhost.sglang.plugins.plugin_utils.profiles import select_profile
    from ansible_collections.gpuhost.sglang.plugins.module_utils.tune import campaign as tune_campaign
    with open(os.path.join(ROOT, "inventories", "production", "group_vars", "sglang_servers.yml")) as f:
        inv = yaml.safe_load(f)
    with open(os.path.join(ROOT, "campaigns", "glm5-nvfp4-sm120.yml")) as f:
        doc = yaml.safe_load(f)
    profile = select_profile("12.0", inv["sglang_model_family"], PINNED, PROFILES)["options"]
    plan = tune_campaign.load(doc, inv["sglang_options"], profile)
    managed = {"model-path": inv["sglang_model_path"], "served-model-name": inv["sglang_model_name"],
               "host": inv["sglang_listen_address"], "port": inv["sglang_port"]}
    sets = []
    for cand in plan["candidates"]:
        opts = dict(profile)
        opts.update(cand["options"])
        opts.update(managed)
        sets.append(opts)
    out = run_module(None, option_sets=sets)  # one parser import for every candidate
    assert out["validated"] is True and len(out["results"]) == len(sets), out.get("msg")
    verdicts = [(c["index"], c["name"], r["failed"], r["errors"], r["parser_warnings"]) for c, r in zip(plan["candidates"], out["results"])]
    print("\n".join("%d %s: %s" % (i, n or "base", "REJECTED %s" % e if f else "accepted" + (" (%s)" % w if w else ""))
                    for i, n, f, e, w in verdicts))
    assert len(plan["candidates"]) == doc["max_candidates"] + 1
    assert [v for v in verdicts if v[2] or v[3]] == []
