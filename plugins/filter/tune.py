# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of playbooks/tune.yml.

tune_plan_line   [candidate, server_args result] -> one line of the plan with the parser's verdict
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuhost.sglang.plugins.module_utils.tune.report import plan_line


def tune_plan_line(pair):
    if not isinstance(pair, (list, tuple)) or len(pair) != 2 or not isinstance(pair[0], dict):
        raise AnsibleFilterError("tune_plan_line expects [candidate, server_args result], got %r" % (pair,))
    return plan_line(pair[0], pair[1])


class FilterModule(object):
    def filters(self):
        return {"tune_plan_line": tune_plan_line}
