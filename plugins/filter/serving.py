# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpuhost.sglang.plugins.module_utils.unit_timing import start_timeout


class FilterModule(object):
    def filters(self):
        return {"start_timeout": start_timeout}
