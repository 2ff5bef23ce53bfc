# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The controller's copy of last-known-good (plugins/plugin_utils/lkg_copy.py), on a real directory, with a record
in the shape unit_host.record writes."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import stat

import pytest

from ansible_collections.gpuhost.sglang.plugins.module_utils.serving import unit_host
from ansible_collections.gpuhost.sglang.plugins.plugin_utils import lkg_copy

UNIT = "[Service]\nExecStart=/opt/sglang/venv/bin/python -m sglang.launch_server\n"
ENV = "SGLANG_API_KEY=secret\n"


def record(argv="--tp-size 8"):
    meta = {"unit": "sglang.service", "unit_path": "/etc/systemd/system/sglang.service", "env_file": "/etc/sglang/sglang.env",
            "health_url": "http://127.0.0.1:30000/health_generate", "base_url": "http://127.0.0.1:30000", "argv": argv.split(),
            "unit_b64": unit_host.b64(UNIT), "env_b64": unit_host.b64(ENV), "venv": "/opt/sglang/venv-sglang-0.5.23"}
    return {"meta.json": json.dumps(meta, indent=2, sort_keys=True) + "\n", "sglang.service": UNIT, "env": ENV}


def test_save_writes_a_private_copy_and_keeps_the_one_it_replaces(tmp_path):
    d = str(tmp_path / "lkg" / "glm5-ct")
    assert lkg_copy.save(d, record()) == {"changed": True, "previous": ""}
    assert lkg_copy.read_copy(d) == record()
    assert stat.S_IMODE(os.stat(os.path.join(d, "env")).st_mode) == 0o600
    assert lkg_copy.save(d, record()) == {"changed": False, "previous": ""}
    newer = record("--tp-size 8 --disable-cuda-graph")
    assert lkg_copy.save(d, newer) == {"changed": True, "previous": d + ".previous"}
    assert lkg_copy.read_copy(d) == newer and lkg_copy.read_copy(d + ".previous") == record()
    assert sorted(os.listdir(str(tmp_path / "lkg"))) == ["glm5-ct", "glm5-ct.previous"]   # no temporary left


@pytest.mark.parametrize("files,why", [
    ({}, "no meta.json"),
    ({"meta.json": "{not json"}, "meta.json is not JSON"),
    ({"meta.json": "[]"}, "not a JSON object"),
    ({"meta.json": json.dumps({"unit": "sglang.service"})}, "lacks unit_path, env_file, health_url, base_url, unit_b64"),
])
def test_save_refuses_what_is_not_a_whole_record(tmp_path, files, why):
    with pytest.raises(lkg_copy.CopyError, match=why):
        lkg_copy.save(str(tmp_path / "c"), files)
    assert not (tmp_path / "c").exists()


def test_an_older_record_with_its_copies_beside_is_whole():
    rec = record()
    meta = json.loads(rec["meta.json"])
    del meta["unit_b64"], meta["env_b64"]
    assert lkg_copy.record_problem(dict(rec, **{"meta.json": json.dumps(meta)})) == ""
    assert "env_b64" in lkg_copy.record_problem({"meta.json": json.dumps(meta), "sglang.service": UNIT})


def test_restore_only_to_a_host_without_a_record_of_its_own(tmp_path):
    d = str(tmp_path / "c")
    plan = lkg_copy.restore_plan(None, record(), d)
    assert plan["restore"] and plan["reason"].startswith("last-known-good restored from %s" % d)
    kept = lkg_copy.restore_plan(record()["meta.json"], record(), d)
    assert not kept["restore"] and "has a last-known-good record of its own: kept" in kept["reason"]
    none = lkg_copy.restore_plan(None, {}, d)
    assert not none["restore"] and "no controller copy" in none["reason"]
    bad = lkg_copy.restore_plan(None, {"meta.json": "{}"}, d)
    assert not bad["restore"] and "not a whole record" in bad["reason"]


def test_names_that_are_not_plain_file_names_are_refused(tmp_path):
    with pytest.raises(lkg_copy.CopyError, match="not a plain file name"):
        lkg_copy.save(str(tmp_path / "c"), dict(record(), **{"../x": "y"}))
    with pytest.raises(lkg_copy.CopyError, match="not a plain file name"):
        lkg_copy.restore_plan(None, dict(record(), **{"a/b": "y"}), "d")


def test_checksums_match_what_the_host_read_gives(tmp_path):
    from ansible_collections.gpuhost.sglang.plugins.module_utils.serving import host_read
    for name, text in record().items():
        (tmp_path / name).write_text(text)
    tree = host_read.read_tree("", str(tmp_path))["files"]
    assert lkg_copy.checksums(record()) == dict((os.path.basename(e["path"]), e["checksum"]) for e in tree)


def test_the_same_record_restarted_is_bookkeeping_not_a_change(tmp_path):
    # unit_host.record rewrites meta.json's invocation (the process that passed the gate) without reporting a change
    # when the same configuration runs again, as after a rollback restarted last-known-good: the copy follows it
    # without a change and keeps the copy it replaced before (a rerun after a rollback reported changed=1 here)
    def with_invocation(rec, pid):
        meta = json.loads(rec["meta.json"])
        meta["invocation"] = "%032x" % pid  # systemd's InvocationID of the unit's run (unit_host.invocation)
        return dict(rec, **{"meta.json": json.dumps(meta, indent=2, sort_keys=True) + "\n"})

    d = str(tmp_path / "ct")
    lkg_copy.save(d, record("--tp-size 4"))
    first = with_invocation(record(), 101)
    assert lkg_copy.save(d, first) == {"changed": True, "previous": d + ".previous"}
    restarted = with_invocation(record(), 202)
    assert lkg_copy.difference(lkg_copy.read_copy(d), restarted) == "bookkeeping"
    assert lkg_copy.save(d, restarted) == {"changed": False, "previous": ""}
    assert lkg_copy.read_copy(d) == restarted and lkg_copy.read_copy(d + ".previous") == record("--tp-size 4")
    assert stat.S_IMODE(os.stat(os.path.join(d, "meta.json")).st_mode) == 0o600
    assert sorted(os.listdir(d)) == ["env", "meta.json", "sglang.service"]   # no temporary left
    # the configuration itself, or another file of the record, is a change
    assert lkg_copy.difference(restarted, with_invocation(record("--tp-size 2"), 202)) == "record"
    assert lkg_copy.difference(restarted, dict(restarted, env="SGLANG_API_KEY=other\n")) == "record"
    assert lkg_copy.difference(restarted, dict(restarted, **{"meta.json": "[]"})) == "record"
    assert lkg_copy.difference({}, restarted) == "record"
