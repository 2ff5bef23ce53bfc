# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The host_files action plugin: answered on the controller when host_read's stat shows everything as declared,
the module called (without ``known``) otherwise."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

from unittest import mock

from ansible_collections.gpuhost.sglang.plugins.action.host_files import ActionModule
from ansible_collections.gpuhost.sglang.plugins.module_utils.serving import host_files, host_read

MODULE_RESULT = {"changed": True, "paths": {"/etc/app/app.conf": ["content"]}}


def action(args):
    task = mock.MagicMock(args=args, async_val=0, check_mode=False, diff=False)
    play_context = mock.MagicMock(check_mode=False)
    connection = mock.MagicMock()
    connection._shell.tmpdir = "/tmp/x"
    act = ActionModule(task, connection, play_context, loader=None, templar=None, shared_loader_obj=None)
    act._execute_module = mock.MagicMock(return_value=dict(MODULE_RESULT))
    return act


def tree(tmp_path):
    dirs = [{"path": str(tmp_path / "etc/app"), "mode": "0750"}]
    files = [{"dest": str(tmp_path / "etc/app/app.conf"), "content": "a=1\n", "mode": "0640"}]
    host_files.ensure("", dirs, files)
    return dirs, files, host_read.stat_paths("", [dirs[0]["path"], files[0]["dest"]])


def test_unchanged_paths_are_answered_without_a_module_call(tmp_path):
    dirs, files, known = tree(tmp_path)
    act = action({"directories": dirs, "files": files, "known": known})
    res = act.run(task_vars={})
    assert act._execute_module.call_count == 0
    assert res["changed"] is False and res["paths"] == {} and res["compared_on_controller"]


def test_a_difference_or_no_read_calls_the_module_without_known(tmp_path):
    dirs, files, known = tree(tmp_path)
    (tmp_path / "etc/app/app.conf").write_text("edited\n")   # after the read: the read still says unchanged
    changed = [dict(files[0], content="a=2\n")]
    for args in ({"directories": dirs, "files": changed, "known": known}, {"directories": dirs, "files": files}):
        act = action(dict(args))
        res = act.run(task_vars={})
        assert act._execute_module.call_count == 1
        sent = act._execute_module.call_args[1]
        assert sent["module_name"] == "gpuhost.sglang.host_files" and "known" not in sent["module_args"]
        assert sent["module_args"]["files"] == args["files"]
        assert res["changed"] is True and res["paths"] == MODULE_RESULT["paths"]
