# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuhost.sglang.plugins.plugin_utils.lazy_import import LazyModule, lazy_function

model_files = LazyModule("ansible_collections.gpuhost.sglang.plugins.plugin_utils.model_files")
unit_timing = LazyModule("ansible_collections.gpuhost.sglang.plugins.plugin_utils.unit_timing")
pip_sources = LazyModule("ansible_collections.gpuhost.sglang.plugins.plugin_utils.pip_sources")


def model_files_differ(src_find, dst_find, src_dir, dst_dir, owner="root", group="root", mode="0644"):
    try:
        return model_files.model_files_differ(src_find, dst_find, src_dir, dst_dir, owner, group, mode)
    except model_files.ModelFilesError as exc:
        raise AnsibleFilterError("model_files_differ: %s" % exc)


class FilterModule(object):
    def filters(self):
        return {"start_timeout": lazy_function(unit_timing, "start_timeout"), "model_files_differ": model_files_differ,
                "pip_source_args": lazy_function(pip_sources, "source_args")}
