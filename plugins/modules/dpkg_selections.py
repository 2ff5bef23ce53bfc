#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: dpkg_selections
short_description: The dpkg selection (hold, install) of several packages in one call
version_added: "0.1.0"
description:
  - Sets the dpkg selection of every package in O(names) that does not have it yet, as
    M(ansible.builtin.dpkg_selections) does for one package, in one C(dpkg --get-selections) and at most one
    C(dpkg --set-selections) call instead of one module run per package.
author:
  - gpuhost.sglang contributors (@gpuhost)
options:
  names:
    description: Package names (a name dpkg does not know yet counts as C(not present) and is set too).
    type: list
    elements: str
    required: true
  selection:
    description: The selection to set.
    type: str
    required: true
    choices: [install, hold, deinstall, purge]
notes:
  - Check mode is supported; the result says which packages would change.
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpuhost.sglang.attributes.check_mode_full
"""

EXAMPLES = r"""
- name: Hold the driver packages
  gpuhost.sglang.dpkg_selections:
    names: [nvidia-driver-cuda, libcuda1]
    selection: hold
"""

RETURN = r"""
changed_names:
  description: The packages whose selection was (or, in check mode, would be) set, in the order given.
  returned: always
  type: list
  elements: str
before:
  description: Package name to its selection before the call (C(not present) for a name dpkg does not know).
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuhost.sglang.plugins.module_utils.gpu import dpkg_selections


def main():
    module = AnsibleModule(
        argument_spec=dict(
            names=dict(type="list", elements="str", required=True),
            selection=dict(type="str", required=True, choices=list(dpkg_selections.SELECTIONS)),
        ),
        supports_check_mode=True,
    )
    try:
        res = dpkg_selections.apply(module.run_command, module.params["names"], module.params["selection"],
                                    module.check_mode)
    except dpkg_selections.SelectionError as exc:
        module.fail_json(msg="dpkg_selections: %s" % exc)
    module.exit_json(**res)


if __name__ == "__main__":
    main()
