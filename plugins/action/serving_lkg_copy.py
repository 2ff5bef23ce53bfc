# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin of gpuhost.sglang.serving_lkg_copy: the host's last-known-good record to the controller
(O(op=save)) or back (O(op=restore), only to a host without a record of its own). The host is read with module
host_read and written with module host_files; the decisions are plugins/plugin_utils/lkg_copy.py's.
Documentation: plugins/modules/serving_lkg_copy.py."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import posixpath

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.gpuhost.sglang.plugins.plugin_utils import lkg_copy

OPS = ("save", "restore")


class ActionModule(ActionBase):

    _supports_check_mode = True

    def _module(self, name, args, task_vars):
        res = self._execute_module(module_name=name, module_args=args, task_vars=task_vars)
        if res.get("failed"):
            raise AnsibleActionFail("%s: %s" % (name, res.get("msg", "failed")))
        return res

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        args = self._task.args
        op, lkg_dir, directory = args.get("op"), args.get("lkg_dir") or "", args.get("controller_dir") or ""
        try:
            if op not in OPS:
                raise AnsibleActionFail("op=%r is invalid: allowed values are %s" % (op, ", ".join(OPS)))
            if not posixpath.isabs(lkg_dir):
                raise AnsibleActionFail("lkg_dir=%r must be an absolute path on the host" % lkg_dir)
            if not directory:
                raise AnsibleActionFail("controller_dir is empty: name the controller directory of this host's copy")
            directory = os.path.abspath(os.path.expanduser(directory))
            if op == "save":
                result.update(self._save(lkg_dir, directory, task_vars))
            else:
                result.update(self._restore(lkg_dir, directory, task_vars))
        except lkg_copy.CopyError as exc:
            raise AnsibleActionFail(str(exc))
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)
        result["controller_dir"] = directory
        return result

    def _save(self, lkg_dir, directory, task_vars):
        tree = self._module("gpuhost.sglang.host_read", {"tree": lkg_dir}, task_vars)["tree"]["files"]
        entries = [e for e in tree if e.get("isreg") and posixpath.dirname(e["path"]) == lkg_dir.rstrip("/")]
        paths = [e["path"] for e in entries]
        if not paths:
            return {"changed": False, "files": [], "msg": "no last-known-good record in %s: nothing saved" % lkg_dir}
        # a copy whose every file has the host's checksum is current: no second read (a no-op deploy's round trip)
        copy = lkg_copy.read_copy(directory)
        if lkg_copy.checksums(copy) == dict((posixpath.basename(e["path"]), e.get("checksum")) for e in entries):
            return {"changed": False, "files": sorted(copy), "msg": "the controller copy in %s is current" % directory}
        texts = self._module("gpuhost.sglang.host_read", {"files": paths}, task_vars)["files"]
        files = dict((posixpath.basename(p), t) for p, t in texts.items() if t is not None)
        if self._task.check_mode:
            return {"changed": lkg_copy.difference(lkg_copy.read_copy(directory), files) == "record",
                    "files": sorted(files)}
        out = lkg_copy.save(directory, files)
        return {"changed": out["changed"], "files": sorted(files), "previous": out["previous"],
                "msg": "last-known-good of %s saved in %s" % (lkg_dir, directory) if out["changed"]
                else "the controller copy in %s is current" % directory}

    def _restore(self, lkg_dir, directory, task_vars):
        meta = posixpath.join(lkg_dir, lkg_copy.META)
        host_meta = self._module("gpuhost.sglang.host_read", {"files": [meta]}, task_vars)["files"][meta]
        copy = lkg_copy.read_copy(directory)
        plan = lkg_copy.restore_plan(host_meta, copy, directory)
        if not plan["restore"]:
            return {"changed": False, "restored": [], "msg": plan["reason"]}
        written = self._module("gpuhost.sglang.host_files", {
            "directories": [{"path": lkg_dir, "mode": "0700"}],
            "files": [{"dest": posixpath.join(lkg_dir, name), "content": text, "mode": "0600"} for name, text in sorted(copy.items())],
        }, task_vars)
        return {"changed": written.get("changed", False), "restored": sorted(copy), "msg": plan["reason"]}
