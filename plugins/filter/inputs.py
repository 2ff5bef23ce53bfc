# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpuhost.sglang.plugins.plugin_utils.lazy_import import LazyModule, lazy_function

inputs = LazyModule("ansible_collections.gpuhost.sglang.plugins.plugin_utils.inputs")


class FilterModule(object):
    def filters(self):
        return {"range_error": lazy_function(inputs, "range_error"), "input_names": lazy_function(inputs, "input_names")}
