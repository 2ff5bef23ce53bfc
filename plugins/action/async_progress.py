# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin of gpuhost.sglang.async_progress: waits for an async job (``async: N`` and ``poll: 0`` on the task
that started it), printing the job's progress file's ``line`` whenever it changed. The loop is
plugins/plugin_utils/async_poll.py. Documentation: plugins/modules/async_progress.py."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import json

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.gpuhost.sglang.plugins.plugin_utils import async_poll

display = Display()


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def _status(self, jid, task_vars):
        # as ansible-core's own async_status action does (ansible/plugins/action/async_status.py): the async dir from
        # the shell option, passed to the module as _async_dir
        async_dir = self._remote_expand_user(self.get_shell_option("async_dir", default="~/.ansible_async"))
        return self._execute_module(module_name="ansible.legacy.async_status", task_vars=task_vars,
                                    module_args={"jid": jid, "mode": "status", "_async_dir": async_dir})

    def _cleanup(self, jid, task_vars):
        async_dir = self._remote_expand_user(self.get_shell_option("async_dir", default="~/.ansible_async"))
        self._execute_module(module_name="ansible.legacy.async_status", task_vars=task_vars,
                             module_args={"jid": jid, "mode": "cleanup", "_async_dir": async_dir})

    def _progress(self, path, task_vars):
        if not path:
            return None
        res = self._execute_module(module_name="ansible.legacy.slurp", module_args={"src": path}, task_vars=task_vars)
        if res.get("failed") or "content" not in res:
            return None
        try:
            return json.loads(base64.b64decode(res["content"]).decode("utf-8")).get("line")
        except (ValueError, AttributeError):
            return None

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        dummy, args = self.validate_argument_spec(argument_spec={
            "jid": {"type": "str", "required": True},
            "progress_file": {"type": "str"},
            "interval": {"type": "float", "default": 15.0},
            "timeout": {"type": "int", "default": 86400},
        })
        host = task_vars.get("inventory_hostname", "") if task_vars else ""
        finished, res = async_poll.wait(
            status=lambda: self._status(args["jid"], task_vars),
            progress=lambda: self._progress(args["progress_file"], task_vars),
            show=lambda line: display.display("%s: %s" % (host, line)),
            interval=args["interval"], timeout=args["timeout"])
        if finished:
            self._cleanup(args["jid"], task_vars)
        result.update(res)
        return result
