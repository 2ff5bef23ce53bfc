# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of playbooks/tune.yml.

tune_plan_line   [candidate, server_args result] -> one line of the plan with the parser's verdict
tune_merge       (candidate options, profile options, managed options) -> what the serving role renders
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuhost.sglang.plugins.plugin_utils.lazy_import import LazyModule

report = LazyModule("ansible_collections.gpuhost.sglang.plugins.module_utils.tune.report")
profiles = LazyModule("ansible_collections.gpuhost.sglang.plugins.plugin_utils.profiles")


def tune_plan_line(pair):
    if not isinstance(pair, (list, tuple)) or len(pair) != 2 or not isinstance(pair[0], dict):
        raise AnsibleFilterError("tune_plan_line expects [candidate, server_args result], got %r" % (pair,))
    return report.plan_line(pair[0], pair[1])


def tune_merge(options, profile=None, managed=None):
    """The serving role's merge order: the profile under the candidate's options, the role-managed ones on top."""
    for name, value in (("options", options), ("profile", profile), ("managed", managed)):
        if value is not None and not isinstance(value, dict):
            raise AnsibleFilterError("tune_merge: %s must be a mapping, got %s" % (name, type(value).__name__))
    try:
        return profiles.merge_options(profile, options, None, managed)
    except profiles.ProfileError as exc:
        raise AnsibleFilterError("tune_merge: %s" % exc)


class FilterModule(object):
    def filters(self):
        return {"tune_plan_line": tune_plan_line, "tune_merge": tune_merge}
