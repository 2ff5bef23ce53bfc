# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""model_files_differ (plugins/plugin_utils/model_files.py): the copy of a model from the controller runs exactly
when it would change something on the host."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpuhost.sglang.plugins.filter.serving import model_files_differ
from ansible_collections.gpuhost.sglang.plugins.plugin_utils.model_files import ModelFilesError, model_files_differ as differ

SRC, DST = "/ctl/models/../models/tiny", "/var/lib/sglang/models/tiny"


def src():
    return {"files": [{"path": "/ctl/models/tiny/config.json", "isreg": True, "checksum": "a1"},
                      {"path": "/ctl/models/tiny/sub", "isdir": True},
                      {"path": "/ctl/models/tiny/sub/model.safetensors", "isreg": True, "checksum": "b2"}]}


def dst(**change):
    files = [{"path": DST + "/config.json", "isreg": True, "checksum": "a1", "mode": "0644", "pw_name": "root", "gr_name": "sglang"},
             {"path": DST + "/sub", "isdir": True, "mode": "0755", "pw_name": "root", "gr_name": "sglang"},
             {"path": DST + "/sub/model.safetensors", "isreg": True, "checksum": "b2", "mode": "0644", "pw_name": "root",
              "gr_name": "sglang"},
             {"path": DST + "/extra.txt", "isreg": True, "checksum": "zz", "mode": "0600", "pw_name": "x", "gr_name": "x"}]
    for f in files:
        if f["path"].endswith(change.get("name", "\0")):
            f.update(change["set"])
    return {"files": [f for f in files if f.get("keep", True)]}


def test_a_host_that_holds_the_model_as_copied_needs_no_copy():
    # a file only on the host is left alone, as the copy leaves it
    assert differ(src(), dst(), SRC, DST, "root", "sglang", "0644") == []


@pytest.mark.parametrize("name,change", [
    ("model.safetensors", {"checksum": "b3"}),
    ("model.safetensors", {"mode": "0600"}),
    ("model.safetensors", {"pw_name": "sglang"}),
    ("model.safetensors", {"gr_name": "root"}),
    ("model.safetensors", {"isreg": False, "islnk": True}),
    ("model.safetensors", {"keep": False}),
])
def test_each_difference_the_copy_would_fix_is_found(name, change):
    assert differ(src(), dst(name=name, set=change), SRC, DST, "root", "sglang", "0644") == ["sub/model.safetensors"]


def test_a_missing_host_directory_needs_the_whole_copy():
    assert differ(src(), {"failed": True, "msg": "no such directory"}, SRC, DST, "root", "sglang") == \
        ["config.json", "sub", "sub/model.safetensors"]
    assert differ(src(), dst(name="sub", set={"isdir": False, "isreg": True}), SRC, DST, "root", "sglang") == ["sub"]


def test_bad_input_is_named():
    with pytest.raises(ModelFilesError, match="the controller's files must be an ansible.builtin.find result"):
        differ("x", dst(), SRC, DST)
    with pytest.raises(Exception, match=r"model_files_differ: the host's files lists /elsewhere/a, which is not under"):
        model_files_differ(src(), {"files": [{"path": "/elsewhere/a"}]}, SRC, DST)


def test_both_sides_read_by_host_read_s_reader_agree_on_a_real_tree(tmp_path):
    """The controller's directory read here (None input) and the host's by host_read's tree (the same reader):
    a copy as the role makes it needs nothing; a changed byte, mode or missing file is named."""
    import grp
    import os
    import pwd
    from ansible_collections.gpuhost.sglang.plugins.module_utils.serving.host_read import read_tree
    me, mine = pwd.getpwuid(os.getuid()).pw_name, grp.getgrgid(os.getgid()).gr_name
    for side in ("ctl", "host"):
        (tmp_path / side / "sub").mkdir(parents=True)
        (tmp_path / side / "config.json").write_text('{"a": 1}')
        (tmp_path / side / ".hidden").write_text("h")
        (tmp_path / side / "sub" / "w.bin").write_bytes(b"\0" * 100)
    for f in ("config.json", ".hidden", "sub/w.bin"):
        os.chmod(str(tmp_path / "host" / f), 0o644)
    ctl, host = str(tmp_path / "ctl"), str(tmp_path / "host")
    assert differ(None, read_tree("", host), ctl, host, me, mine, "0644") == []
    (tmp_path / "host" / "sub" / "w.bin").write_bytes(b"\1" * 100)
    os.chmod(str(tmp_path / "host" / ".hidden"), 0o600)
    (tmp_path / "host" / "config.json").unlink()
    assert differ(None, read_tree("", host), ctl, host, me, mine, "0644") == [".hidden", "config.json", "sub/w.bin"]
    assert read_tree("", str(tmp_path / "absent")) == {"files": []}
