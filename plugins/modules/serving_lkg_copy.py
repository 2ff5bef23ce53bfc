#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: serving_lkg_copy
short_description: The controller's copy of a serving host's last-known-good record
version_added: "0.1.0"
description:
  - An action plugin. O(op=save) copies the host's last-known-good record (every file of O(lkg_dir)) into
    O(controller_dir) on the controller, files 0600, the whole copy replaced in one rename, the copy it replaces kept
    as C(<controller_dir>.previous). A record that is not whole is refused; an absent one saves nothing.
  - O(op=restore) puts the copy back into O(lkg_dir) on a host that has no record of its own (a reinstalled host, a
    new container), so that the first deploy there can roll back to it; a host's own record is never replaced, and
    without a whole copy nothing is written (the result's C(msg) says why).
  - The record holds the serving unit's environment file (the API key), and the host logs the arguments of a
    module, so give the task C(no_log) as the role does; the result never holds the contents.
author:
  - gpuhost.sglang contributors (@gpuhost)
options:
  op:
    description: C(save) (host to controller) or C(restore) (controller to a host without a record).
    type: str
    required: true
    choices: [save, restore]
  lkg_dir:
    description: The record's directory on the host (the serving role's C(sglang_lkg_dir)).
    type: path
    required: true
  controller_dir:
    description: This host's copy on the controller.
    type: path
    required: true
notes:
  - It runs M(gpuhost.sglang.host_read) on the host, and M(gpuhost.sglang.host_files) to restore.
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpuhost.sglang.attributes.check_mode_full
"""

EXAMPLES = r"""
- name: Save last-known-good on the controller after a good deploy
  gpuhost.sglang.serving_lkg_copy:
    op: save
    lkg_dir: /etc/sglang/last-known-good
    controller_dir: "{{ playbook_dir }}/../reports/last-known-good/{{ inventory_hostname }}"
  no_log: true
"""

RETURN = r"""
files:
  description: The names saved (O(op=save)).
  returned: with O(op=save)
  type: list
  elements: str
restored:
  description: The names written back (O(op=restore)); empty when nothing was.
  returned: with O(op=restore)
  type: list
  elements: str
previous:
  description: Where the replaced copy went (O(op=save)); empty when none was replaced.
  returned: when a copy was saved
  type: str
controller_dir:
  description: The copy's directory on the controller.
  returned: always
  type: str
msg:
  description: What was done, or why nothing was.
  returned: always
  type: str
"""
