#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: serving_venv_check
short_description: Find the distributions of the engine's venv whose installed files are missing
version_added: "0.1.0"
description:
  - Runs the venv's interpreter once; compares every installed distribution's RECORD with the disk and looks up
    O(modules) without importing them, so that broken distributions can be reinstalled before anything restarts.
author:
  - gpuhost.sglang contributors (@gpuhost)
options:
  python:
    description: The venv's interpreter.
    type: path
    required: true
  modules:
    description: Top-level modules the server needs (found with C(importlib.util.find_spec), not imported).
    type: list
    elements: str
    required: true
notes:
  - Check mode is supported; the module only reads.
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpuhost.sglang.attributes.check_mode_full
"""

EXAMPLES = r"""
- name: The engine venv imports what the server needs
  gpuhost.sglang.serving_venv_check:
    python: /opt/sglang/venv/bin/python
    modules: [sglang]
  register: venv_check
"""

RETURN = r"""
ok:
  description: Every module imported.
  returned: always
  type: bool
dists:
  description: Distributions with installed files missing (dist, version, missing_files, example).
  returned: always
  type: list
  elements: dict
modules:
  description: Modules of O(modules) that were not found.
  returned: always
  type: list
  elements: str
versions:
  description: The version of every installed distribution, by its normalised name (PEP 503, e.g. C(sglang)).
  returned: always
  type: dict
reinstall:
  description: Requirement specs (name==version) of the distributions to reinstall.
  returned: always
  type: list
  elements: str
summary:
  description: One line naming what is broken.
  returned: always
  type: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuhost.sglang.plugins.module_utils.serving import venv_check as vc


def main():
    module = AnsibleModule(
        argument_spec=dict(python=dict(type="path", required=True), modules=dict(type="list", elements="str", required=True)),
        supports_check_mode=True,
    )
    res = vc.check(module.params["python"], module.params["modules"])
    module.exit_json(changed=False, ok=res["ok"], dists=res["dists"], modules=res["modules"],
                     versions=res.get("versions", {}), reinstall=vc.reinstall_specs(res), summary=vc.summary(res))


if __name__ == "__main__":
    main()
