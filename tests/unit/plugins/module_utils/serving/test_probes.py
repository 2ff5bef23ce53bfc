# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The probe programs of module_utils/serving/probes, run in this process (so coverage sees them) and as the
files they are (``python FILE``), plus the source the modules hand to ``python -c``."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import subprocess
import sys

import pytest

from ansible_collections.gpuhost.sglang.plugins.module_utils.serving import probes, server_args, toolchain, venv_check
from ansible_collections.gpuhost.sglang.plugins.module_utils.serving.probes import server_args_probe, venv_check_probe, venv_probe
from ansible_collections.gpuhost.sglang.tests.harness.toolchain_fake import fake_torch

PROBES = os.path.dirname(os.path.abspath(probes.__file__))
FAKE_SGLANG = os.path.join(os.path.dirname(__file__), "..", "..", "modules", "fake_sglang")


@pytest.mark.parametrize("name, constant", [("server_args_probe", server_args.PROBE_SOURCE),
                                            ("venv_probe", toolchain.VENV_PROBE),
                                            ("venv_check_probe", venv_check.PROBE)])
def test_the_modules_run_the_files_source(name, constant):
    with open(os.path.join(PROBES, name + ".py")) as f:
        assert constant == f.read() == probes.source(name)
    compile(constant, name, "exec")


def test_a_probe_that_is_not_shipped_is_an_error():
    with pytest.raises((IOError, OSError)):
        probes.source("no_such_probe")


# ---- venv_check_probe

def make_dist(site, name, version, files, keep=True):
    info = site / ("%s-%s.dist-info" % (name, version))
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: %s\nVersion: %s\n" % (name, version))
    for rel in files if keep else []:
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text("x = 1\n")
    record = ["%s,," % rel for rel in files] + ["%s/RECORD,," % info.name, "../../bin/%s,," % name]
    (info / "RECORD").write_text("\n".join(record) + "\n")


def test_venv_check_probe_in_process(tmp_path, monkeypatch, capsys):
    make_dist(tmp_path, "gpuhost-whole", "1.0", ["gpuhost_whole/__init__.py"])
    make_dist(tmp_path, "gpuhost-gone", "2.0", ["gpuhost_gone/__init__.py", "gpuhost_gone/x.py"], keep=False)
    monkeypatch.syspath_prepend(str(tmp_path))
    venv_check_probe.main(["gpuhost_whole", "gpuhost_gone", "json"])
    out = json.loads(capsys.readouterr().out)
    assert {"dist": "gpuhost-gone", "version": "2.0", "missing_files": 2, "example": "gpuhost_gone/__init__.py"} in out["dists"]
    assert not [d for d in out["dists"] if d["dist"] == "gpuhost-whole"]
    assert out["modules"] == ["gpuhost_gone"]


def test_venv_check_probe_as_a_program(tmp_path):
    make_dist(tmp_path, "gpuhost-gone", "2.0", ["gpuhost_gone/__init__.py"], keep=False)
    out = subprocess.run([sys.executable, "-S", os.path.join(PROBES, "venv_check_probe.py"), "gpuhost_gone"],
                         env=dict(os.environ, PYTHONPATH=str(tmp_path)), capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == {"dists": [{"dist": "gpuhost-gone", "version": "2.0", "missing_files": 1,
                                                 "example": "gpuhost_gone/__init__.py"}], "modules": ["gpuhost_gone"],
                                      "versions": {"gpuhost-gone": "2.0"}}


# ---- venv_probe

def test_venv_probe_in_process_reads_torch_without_importing_it(tmp_path, monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(fake_torch(tmp_path / "site", version="2.14.1", cuda="'13.0'")))
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    venv_probe.main()
    out = json.loads(capsys.readouterr().out)
    assert out["torch_version_py"] is True and out["torch_cuda"] == "13.0" and out["torch___version__"] == "2.14.1"
    assert out["dists"]["torch"] == "2.14.1"
    assert out["python_version"] == "%d.%d" % sys.version_info[:2]
    assert "torch" not in sys.modules
    assert toolchain.torch_cuda(toolchain.parse_probe(json.dumps(out))) == ("13.0", "torch/version.py")


def test_venv_probe_keeps_only_literal_assignments(tmp_path):
    path = tmp_path / "version.py"
    path.write_text("import os\n__version__ = '1.0'\ncuda = os.environ.get('X')\nhip: str = None\n")
    out = {}
    venv_probe.torch_version_py(str(path), out)
    assert out == {"torch___version__": "1.0", "torch_hip": None}


def test_venv_probe_as_a_program_without_torch(tmp_path):
    out = subprocess.run([sys.executable, "-S", os.path.join(PROBES, "venv_probe.py")], capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=str(tmp_path)), check=True)
    probe = json.loads(out.stdout)
    assert probe["torch_version_py"] is False and "torch" not in probe["dists"]


# ---- server_args_probe

@pytest.fixture(name="fake_sglang")
def fake_sglang_fixture(monkeypatch):
    monkeypatch.syspath_prepend(FAKE_SGLANG)
    yield
    for name in [m for m in sys.modules if m == "sglang" or m.startswith("sglang.")]:
        del sys.modules[name]


def serve(engine, requests):
    answers = []
    server_args_probe.serve(engine, [json.dumps(r) for r in requests], answers.append)
    return answers


def test_server_args_probe_describes_and_parses_with_the_engines_parser(fake_sglang):
    describe, parsed = serve("sglang", [{"op": "describe"}, {"op": "parse", "chunks": [["--tp-size", "2"], ["--nope"]]}])
    assert describe["prog"] == "sglang.launch_server" and describe["engine_version"] == "9.9.1"
    assert describe["options"]["--tp-size"]["canonical"] == "--tp-size"
    assert parsed["parsed"][0]["ok"] is True
    assert parsed["parsed"][1] == {"ok": False, "unknown": ["--nope"], "warnings": []}
    assert parsed["whole"]["ok"] is False


def test_server_args_probe_reports_an_invalid_value_and_an_unknown_op(fake_sglang):
    parsed, unknown = serve("sglang", [{"op": "parse", "chunks": [["--tp-size", "eight"]]}, {"op": "what"}])
    assert parsed["parsed"][0]["ok"] is False and "eight" in parsed["parsed"][0]["error"]
    assert unknown == {"fatal": "unknown op"}


def test_server_args_probe_fatal_answers(monkeypatch):
    assert serve("vllm", [{"op": "describe"}]) == [{"fatal": "unsupported engine 'vllm'"}]
    monkeypatch.setitem(sys.modules, "smg", None)  # not installed: the import fails
    (answer,) = serve("smg", [{"op": "describe"}])
    assert answer["fatal"].startswith("cannot build the smg parser: ModuleNotFoundError"), answer


def test_server_args_probe_as_a_program_keeps_the_engines_output_off_the_protocol():
    out = subprocess.run([sys.executable, os.path.join(PROBES, "server_args_probe.py"), "sglang"],
                         input=json.dumps({"op": "describe"}) + "\n", capture_output=True, text=True, check=True,
                         env=dict(os.environ, PYTHONPATH=FAKE_SGLANG))
    lines = out.stdout.splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["engine_version"] == "9.9.1"


@pytest.fixture(name="click_serve")
def click_serve_fixture():
    """A click command shaped like ``transformers serve``: a value, a choice, a negatable flag, a required option."""
    click = pytest.importorskip("click")

    @click.command()
    @click.option("--port", type=int, default=8000)
    @click.option("--attn-implementation", type=click.Choice(["eager", "sdpa"]))
    @click.option("--continuous-batching/--no-continuous-batching", default=False)
    @click.option("--model", required=True)
    def serve_cmd(**_kw):
        pass
    return serve_cmd


def test_server_args_probe_describes_a_click_command(click_serve):
    opts, required = server_args_probe.describe_click(click_serve)
    assert opts["--port"]["kind"] == "value" and opts["--port"]["choices"] is None
    assert opts["--attn-implementation"]["choices"] == ["eager", "sdpa"]
    assert opts["--continuous-batching"]["negatable"] is True
    assert opts["--no-continuous-batching"]["canonical"] == "--no-continuous-batching"
    assert required == [["--model"]]


def test_server_args_probe_parses_with_click_through_serve(click_serve, monkeypatch):
    monkeypatch.setattr(server_args_probe, "build_click", lambda: (click_serve, "5.0.0"))
    describe, parsed = serve("transformers", [{"op": "describe"}, {"op": "parse", "chunks": [
        ["--model", "m"], ["--port", "eighty"], ["--nope"], ["--attn-implementation", "flash"]]}])
    assert describe["prog"] == "transformers serve" and describe["engine_version"] == "5.0.0"
    ok, bad_value, unknown, bad_choice = parsed["parsed"]
    assert ok == {"ok": True, "warnings": []}
    assert bad_value["ok"] is False and bad_value["error"].startswith("argument --port: ")
    assert unknown["ok"] is False and unknown["unknown"] == ["--nope"]
    assert bad_choice["ok"] is False and "flash" in bad_choice["error"]
