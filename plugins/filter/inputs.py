# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpuhost.sglang.plugins.plugin_utils.inputs import input_names, range_error


class FilterModule(object):
    def filters(self):
        return {"range_error": range_error, "input_names": input_names}
