# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters exposing the tested Proxmox VE container logic (module_utils/pve) to the proxmox_lxc_gpu role.

pct_create_argv  (container id, template volid, hostname, default options, options) -> the pct create command line
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuhost.sglang.plugins.plugin_utils.lazy_import import LazyModule

lxc = LazyModule("ansible_collections.gpuhost.sglang.plugins.module_utils.pve.lxc")


def pct_create_argv(ctid, volid, hostname, defaults=None, options=None):
    try:
        return lxc.pct_create_argv(ctid, volid, hostname, defaults, options)
    except lxc.LxcError as exc:
        raise AnsibleFilterError("proxmox_lxc_gpu_ctid: %s" % exc)


class FilterModule(object):
    def filters(self):
        return {"pct_create_argv": pct_create_argv}
