# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""serving_sandbox_probe run as Ansible runs it, with a stand-in systemd-run that counts its calls: the first run
probes and keeps its decision, the second answers from the cache without starting a transient unit, and another
request probes again."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible_collections.gpuhost.sglang.tests import harness


def test_the_decision_is_kept_and_answers_the_same_request(tmp_path):
    calls = tmp_path / "calls"
    fake = tmp_path / "systemd-run"
    fake.write_text("#!/bin/sh\necho run >> %s\nexit 0\n" % calls)
    os.chmod(str(fake), 0o755)
    args = {"groups": [{"name": "ProtectProc", "lines": ["ProtectProc=invisible"]}], "command": [str(fake)],
            "cache_file": str(tmp_path / "probe.json")}
    first = harness.run_module("serving_sandbox_probe", args, tmp_path=tmp_path)
    second = harness.run_module("serving_sandbox_probe", args, tmp_path=tmp_path)
    assert not first.get("failed") and first["cached"] is False and first["kept"] == ["ProtectProc"]
    assert second["cached"] is True and second["kept"] == ["ProtectProc"]
    assert calls.read_text().count("run") == 1
    other = dict(args, groups=[{"name": "ProtectHome", "lines": ["ProtectHome=yes"]}])
    third = harness.run_module("serving_sandbox_probe", other, tmp_path=tmp_path)
    assert third["cached"] is False and calls.read_text().count("run") == 2
    # check mode's run (write_cache false) probes and keeps nothing
    fourth = harness.run_module("serving_sandbox_probe", dict(args, cache_file=str(tmp_path / "other.json"),
                                                              write_cache=False), tmp_path=tmp_path)
    assert fourth["cached"] is False and not (tmp_path / "other.json").exists()
