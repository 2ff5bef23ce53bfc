# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""device_access: GPU / RDMA nodes found on the target -> groups to grant the serving unit, or problems."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuhost.sglang.plugins.module_utils.serving.device_access import DeviceAccessError, from_ansible


def device_access(find_files, passwd_entry, group_db, extra_groups=None, user="sglang", var_name="sglang_device_groups"):
    try:
        return from_ansible(find_files, passwd_entry, group_db, extra_groups, user, var_name)
    except (DeviceAccessError, ValueError, TypeError, IndexError) as exc:
        raise AnsibleFilterError("device_access: %s" % exc)


class FilterModule(object):
    def filters(self):
        return {"device_access": device_access}
