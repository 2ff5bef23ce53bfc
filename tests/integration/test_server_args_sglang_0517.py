"""gpuhost.sglang.server_args against SGLang 0.5.17's OWN parser, on CPU: the release run on the lent H200 machine
(torch 2.11.0 there), beside the pinned 0.5.23 (test_server_args_sglang.py).

Needs the fixture venv: ``SGLANG_VERSION=0.5.17 tests/fixtures/sglang-venv.sh`` (stage 20 builds it; override the
path with SGLANG_VENV_0517). GPUHOST_SKIP_SGLANG=1 skips instead of failing when it is missing.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import subprocess
import sys

import pytest

from ansible_collections.gpuhost.sglang.tests import harness

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_server_args_sglang import (  # noqa: E402 pylint: disable=wrong-import-position
    FLAGS, PROFILES, ROOT, deprecated_for, h200_campaign_sets, require_venv)

VERSION = "0.5.17"
VENV = os.environ.get("SGLANG_VENV_0517") or os.path.join(os.environ.get("GPUHOST_ROOT", ROOT), ".cache",
                                                          "sglang-venv-0.5.17")
PY = os.path.join(VENV, "bin", "python")
# The launch of every recorded H200 run (benchmarks/gpu/sglang/device.sh start; tests/fixtures/sglang-0.5.17/README.md)
# and the gap experiment's per-request export (benchmarks/gpu/sglang/gap.py).
H200_LAUNCH = {"model-path": "/tmp/sglang/model", "served-model-name": "tiny", "attention-backend": "triton",
               "sampling-backend": "pytorch", "grammar-backend": "none", "disable-cuda-graph": True, "dtype": "bfloat16",
               "mem-fraction-static": 0.3, "max-total-tokens": 65536, "max-running-requests": 256, "host": "127.0.0.1",
               "port": 30000, "enable-metrics": True, "export-metrics-to-file": True,
               "export-metrics-to-file-dir": "/tmp/sglang/reqmetrics"}


@pytest.fixture(scope="module", autouse=True)
def sglang_venv():
    require_venv(PY, "no SGLang 0.5.17 venv at %s: run SGLANG_VERSION=0.5.17 tests/fixtures/sglang-venv.sh first" % VENV)


def case_sets():
    """{case: [option sets]} of every case below that asks the parser, in one list for one import of 0.5.17's parser
    (4-5 s each on CI, the file's whole cost when each case imported it)."""
    launch = dict(H200_LAUNCH, **{"cuda-graph-backend-decode": "disabled", "cuda-graph-backend-prefill": "disabled"})
    del launch["disable-cuda-graph"]
    cases = {
        "h200": [H200_LAUNCH, launch],
        "spellings": [
            {"model-path": "/m", "nsa-decode-backend": "trtllm", "nsa-prefill-backend": "trtllm",
             "dsa-topk-backend": "torch", "disable-cuda-graph": True, "cuda-graph-max-bs": 256},
            {"model-path": "/m", "dsa-decode-backend": "trtllm", "dsa-prefill-backend": "trtllm",
             "cuda-graph-max-bs-decode": 256}],
        "gpubound": [gpubound_launch()] + h200_campaign_sets("h200-gpubound")[1],
        "mistake": [{"model-path": "/m", "attention-backend": "fa9", "mem-fractoin-static": 0.3}],
    }
    for family in HOPPER_FAMILIES:
        cases["hopper-" + family] = hopper_sets(family)[1]
    return cases


@pytest.fixture(scope="module")
def verdicts():
    """{case: [verdict per option set]} from one server_args call over every case's sets (a set with errors fails
    the module, which still returns every verdict)."""
    cases = case_sets()
    sets = [o for group in cases.values() for o in group]
    args = {"python": PY, "engine": "sglang", "renames": FLAGS["renames"], "removed": FLAGS["removed"],
            "expected_version": VERSION, "option_sets": sets}
    out = harness.run_module("server_args", args, timeout=300)
    assert "Traceback" not in out.stdout
    assert out["validated"] is True and out["engine_version"] == VERSION and len(out["results"]) == len(sets), out.get("msg")
    got, at = {}, 0
    for name, group in cases.items():
        got[name], at = out["results"][at:at + len(group)], at + len(group)
    return got


def test_the_h200_launch_passes_0_5_17s_own_parser(verdicts):
    out, again = verdicts["h200"]
    assert not out["failed"], out.get("msg")
    assert out["errors"] == []
    # 0.5.17 already calls --disable-cuda-graph deprecated (flags.yml), and accepts what it names instead
    assert [w["option"] for w in out["parser_warnings"]] == ["disable-cuda-graph"]
    assert "--cuda-graph-backend-{decode,prefill}=disabled" in out["parser_warnings"][0]["warning"]
    assert again["errors"] == [] and again["parser_warnings"] == []


def test_0_5_17_has_both_spellings_and_warns_on_the_old_one(verdicts):
    """flags.yml for 0.5.17: the --nsa-* names are deprecated aliases (a warning, not the 0.5.23 rename error), the
    --dsa-* names exist, --disable-cuda-graph and --cuda-graph-max-bs are deprecated already."""
    deprecated = sorted(d["option"] for d in deprecated_for(VERSION))
    assert deprecated == ["cuda-graph-max-bs", "disable-cuda-graph", "nsa-decode-backend", "nsa-prefill-backend"]
    old, new = verdicts["spellings"]
    assert old["errors"] == [], old["errors"]
    assert sorted(w["option"] for w in old["parser_warnings"]) == deprecated
    assert new["errors"] == [] and new["parser_warnings"] == []


def launch_options(path):
    """An args file (one argument a line, '#' comments) as the structured options: a flag without a value is True."""
    with open(path) as f:
        argv = [line.strip() for line in f if line.strip() and not line.startswith("#")]
    opts = {}
    for i, arg in enumerate(argv):
        if arg.startswith("--"):
            nxt = argv[i + 1] if i + 1 < len(argv) else "--"
            opts[arg[2:]] = True if nxt.startswith("--") else nxt
    return opts


GPUBOUND_ARGS = os.path.join(ROOT, "benchmarks", "gpu", "sglang", "launch-gpubound.args")


def gpubound_launch():
    """benchmarks/gpu/sglang/launch-gpubound.args with the model and address device.sh start adds (LAUNCH=gpubound)."""
    return dict(launch_options(GPUBOUND_ARGS), **{"model-path": "/tmp/sglang/model-gpubound", "host": "127.0.0.1",
                                                  "port": 30000})


def test_the_gpubound_launch_and_campaign_pass_0_5_17s_own_parser(verdicts):
    """What the H200 runs: benchmarks/gpu/sglang/launch-gpubound.args (device.sh start with LAUNCH=gpubound adds the
    model and address) and every candidate of campaigns/h200-gpubound.yml over tune.py's managed options, accepted
    by 0.5.17's parser with no error and no warning (CUDA graphs off spelt per phase, not the deprecated flag); the
    launch file is the campaign's base."""
    import yaml
    opts = launch_options(GPUBOUND_ARGS)
    assert opts["sleep-on-idle"] is True and opts["served-model-name"] == "gpubound" and "disable-cuda-graph" not in opts
    plan = h200_campaign_sets("h200-gpubound")[0]
    names = ["launch-gpubound.args"] + ["candidate %d" % c["index"] for c in plan["candidates"]]
    assert len(names) == len(verdicts["gpubound"])
    bad = [(name, r["errors"], r["parser_warnings"]) for name, r in zip(names, verdicts["gpubound"])
           if r["failed"] or r["errors"] or r["parser_warnings"]]
    assert bad == []
    with open(os.path.join(ROOT, "campaigns", "h200-gpubound.yml")) as f:
        base = yaml.safe_load(f)["base"]
    assert dict((k, v) for k, v in opts.items() if k in base) == dict((k, v if v is True else str(v)) for k, v in base.items())


def test_a_mistake_is_named_by_0_5_17s_parser(verdicts):
    out, = verdicts["mistake"]
    assert out["failed"] is True
    got = {e["option"]: e for e in out["errors"]}
    assert {k: e["problem"] for k, e in got.items()} == {"attention-backend": "invalid_choice",
                                                         "mem-fractoin-static": "unknown"}
    assert "triton" in got["attention-backend"]["choices"] and "fa3" in got["attention-backend"]["choices"]
    assert got["mem-fractoin-static"]["candidates"][0] == "mem-fraction-static"
    assert "2 problem(s) in the sglang 0.5.17 options" in out["msg"]


def test_negatable_data_matches_0_5_17s_parser():
    from ansible_collections.gpuhost.sglang.plugins.module_utils.serving.server_args import negatable_for
    names = negatable_for(FLAGS["negatable"], VERSION)
    code = ("import argparse\nfrom sglang.srt.server_args import ServerArgs\np = argparse.ArgumentParser()\n"
            "ServerArgs.add_cli_args(p)\nprint(' '.join(sorted(a.option_strings[0][2:] for a in p._actions "
            "if type(a).__name__ == 'BooleanOptionalAction')))")
    proc = subprocess.run([PY, "-c", code], capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == sorted(names) and names


HOPPER_FAMILIES = ("dense", "glm-dsa")


def hopper_sets(family):
    """(each fallback's own change, {} first; the option sets) of the Hopper profile of ``family`` for 0.5.17."""
    from ansible_collections.gpuhost.sglang.plugins.plugin_utils.profiles import select_profile
    sel = select_profile("9.0", family, VERSION, PROFILES)
    extras = [{}] + [fb["options"] for fb in sel["fallbacks"]]
    return extras, [dict(sel["options"], **dict(extra, **{"model-path": "/m"})) for extra in extras]


@pytest.mark.parametrize("family", HOPPER_FAMILIES)
def test_hopper_profile_and_its_fallbacks_pass_0_5_17s_parser(family, verdicts):
    extras = hopper_sets(family)[0]
    assert len(extras) > 1, "the profile has no fallbacks"
    assert [(extra, r["errors"], r["parser_warnings"]) for extra, r in zip(extras, verdicts["hopper-" + family])
            if r["failed"] or r["errors"] or r["parser_warnings"]] == []
