# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""device_access: GPU / RDMA nodes found on the target -> groups to grant the serving unit, or problems.
device_classes_check: DeviceAllow=char-NAME classes against the registered names (registry, /proc/devices)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuhost.sglang.plugins.plugin_utils.lazy_import import LazyModule

access = LazyModule("ansible_collections.gpuhost.sglang.plugins.module_utils.serving.device_access")
classes_ = LazyModule("ansible_collections.gpuhost.sglang.plugins.module_utils.serving.device_classes")


def device_access(find_files, passwd_entry, group_db, extra_groups=None, user="sglang", var_name="sglang_device_groups"):
    try:
        return access.from_ansible(find_files, passwd_entry, group_db, extra_groups, user, var_name)
    except (access.DeviceAccessError, ValueError, TypeError, IndexError) as exc:
        raise AnsibleFilterError("device_access: %s" % exc)


def device_classes_check(classes, registry, proc_devices="", var_name="sglang_device_classes"):
    try:
        return classes_.check_device_classes(classes, registry, proc_devices, var_name)
    except (classes_.DeviceClassError, TypeError) as exc:
        raise AnsibleFilterError("device_classes_check: %s" % exc)


class FilterModule(object):
    def filters(self):
        return {"device_access": device_access, "device_classes_check": device_classes_check}
