# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin of gpuhost.sglang.host_files: with O(known) (module host_read's ``stat`` of the same host, read
earlier in the play) showing every declared path as declared, the task is answered on the controller, unchanged,
without a module call (a no-op deploy's round trips: each costs the module's transfer and a Python start on the
host); otherwise, and always without O(known), the module runs on the host and decides. Documentation:
plugins/modules/host_files.py."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.gpuhost.sglang.plugins.module_utils.serving.host_files import known_difference

display = Display()


class ActionModule(ActionBase):

    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        args = dict(self._task.args)
        known = args.pop("known", None)
        difference = known_difference(args.get("directories") or [], args.get("files") or [], known)
        if difference is None:
            result.update(changed=False, paths={}, compared_on_controller=True)
            return result
        if known:
            display.vvv("host_files: %s may differ from the read given as known: the module decides" % difference)
        result.update(self._execute_module(module_name="gpuhost.sglang.host_files", module_args=args,
                                           task_vars=task_vars))
        self._remove_tmp_path(self._connection._shell.tmpdir)   # as ansible.builtin.normal does
        return result
