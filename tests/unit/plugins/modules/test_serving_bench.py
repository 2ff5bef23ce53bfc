# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""serving_bench: input parsing/validation in-process, and the module run as Ansible runs it (own
interpreter, JSON args) for bad input, check mode, report mode and a closed port."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import socket

import pytest

from ansible_collections.gpuhost.sglang.plugins.modules import serving_bench as sb
from ansible_collections.gpuhost.sglang.tests import harness

MODULE = harness.module_path("serving_bench")


def run(tmp_path, **args):
    return harness.run_module("serving_bench", args, tmp_path=tmp_path, timeout=120)


@pytest.mark.parametrize("value,expected", [
    (256, [256]), ("256", [256]), ("1,16,256", [1, 16, 256]), ("[1, 4]", [1, 4]), ([4, 1], [1, 4]),
    (["8", 2], [2, 8]), (" 3 , 1 ", [1, 3]),
])
def test_parse_concurrency(value, expected):
    assert sb.parse_concurrency(value) == expected


@pytest.mark.parametrize("value", [0, -1, "abc", "1,x", [], "", None, True, 1.5, {"a": 1}, 100001, [4, 1, 4], "8,8"])
def test_parse_concurrency_rejects(value):
    with pytest.raises(ValueError) as e:
        sb.parse_concurrency(value)
    assert "concurrency" in str(e.value)


def test_bad_input_fails_early_naming_variable_and_allowed_values(tmp_path):
    res = run(tmp_path, base_url="http://127.0.0.1:1", concurrency="0,abc", trials=0, tolerance=-1,
              max_error_rate=2, probes=[{"prompt": "x"}], confirm_regressions=-1)
    assert res["failed"] and res["failure_class"] == "invalid_input"
    msg = res["msg"]
    for needle in ("concurrency", "trials=0 is invalid: allowed an int >= 1", "tolerance=-1.0 is invalid",
                   "max_error_rate=2.0 is invalid: allowed a number between 0 and 1", "probes[0] is invalid",
                   "confirm_regressions=-1 is invalid: allowed an int from 0 to 5"):
        assert needle in msg, (needle, msg)
    assert "Traceback" not in json.dumps(res)


def test_bad_choice_and_url(tmp_path):
    res = run(tmp_path, base_url="127.0.0.1:30000", api="generate")
    assert res["failed"] and "api" in res["msg"] and "completions" in res["msg"]
    res = run(tmp_path, base_url="127.0.0.1:30000")
    assert res["failed"] and "base_url='127.0.0.1:30000' is invalid: allowed an http:// or https:// URL" in res["msg"]


def test_check_mode_sends_nothing(tmp_path):
    res = run(tmp_path, base_url="http://127.0.0.1:1", _ansible_check_mode=True, report_dir=str(tmp_path / "r"))
    assert res.get("skipped") and not res["changed"] and not os.path.exists(str(tmp_path / "r"))


def test_closed_port_is_connection_refused(tmp_path):
    pytest.importorskip("aiohttp")
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    res = run(tmp_path, base_url="http://127.0.0.1:%d" % port, probes_only=True)
    assert res["failed"] and res["failure_class"] == "connection_refused"
    assert res["msg"].startswith("serving_bench failed [connection_refused]")


def test_report_mode_needs_an_existing_run(tmp_path):
    res = run(tmp_path, base_url="http://x:1", mode="report", report_dir=str(tmp_path), run_id="nope")
    assert res["failed"] and "no run file for run_id nope" in res["msg"]
    res = run(tmp_path, base_url="http://x:1", mode="report")
    assert res["failed"] and "mode=report needs report_dir and run_id" in res["msg"]


def test_missing_aiohttp_is_a_clear_failure(tmp_path):
    try:
        import aiohttp  # noqa: F401  pylint: disable=unused-import
    except ImportError:
        res = run(tmp_path, base_url="http://127.0.0.1:1", probes_only=True)
        assert res["failed"] and res["failure_class"] == "missing_library" and "aiohttp" in res["msg"]
        return
    # aiohttp is installed here: hide it from a child interpreter to exercise the guarded import
    blocker = tmp_path / "block"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(
        "import sys\nclass _Block:\n    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'aiohttp' or name.startswith('aiohttp.'):\n            raise ImportError('blocked')\n"
        "        return None\nsys.meta_path.insert(0, _Block())\n")
    res = harness.run_module("serving_bench", {"base_url": "http://127.0.0.1:1", "probes_only": True}, tmp_path=tmp_path,
                             pythonpath=[blocker], timeout=120)
    assert res["failed"] and res["failure_class"] == "missing_library" and "aiohttp" in res["msg"]
    assert "Traceback" not in res["msg"]


def test_documentation_matches_argspec():
    import yaml
    doc = yaml.safe_load(sb.DOCUMENTATION)["options"]
    spec = sb.argument_spec()
    assert set(spec) == set(doc), set(spec) ^ set(doc)
    for name, opt in spec.items():
        assert opt.get("default") == doc[name].get("default"), name
        assert opt["type"] == doc[name]["type"], name


def test_api_key_with_a_line_break_is_refused_without_showing_it(tmp_path):
    res = run(tmp_path, base_url="http://127.0.0.1:1", api_key="sk-one\r\nX-Injected: 1")
    assert res["failed"] and res["failure_class"] == "invalid_input"
    assert "api_key is invalid: allowed printable ASCII" in res["msg"] and "sk-one" not in json.dumps(res)
