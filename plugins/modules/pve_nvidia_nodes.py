#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import (absolute_import, division, print_function)

__metaclass__ = type

DOCUMENTATION = r"""
---
module: pve_nvidia_nodes
short_description: Plan the nvidia-modprobe calls that recreate a host's NVIDIA device nodes at boot
version_added: "0.1.0"
description:
  - Reads the GPUs' device minors (/proc/driver/nvidia/gpus/*/information), the NVIDIA nodes under /dev now and the
    MIG capability minors (/proc/driver/nvidia-caps/mig-minors), and returns the nvidia-modprobe command lines that
    create every GPU node, /dev/nvidiactl, /dev/nvidia-uvm, /dev/nvidia-uvm-tools and the boot-time capability nodes
    (/dev/nvidia-caps/nvidia-cap1 and 2). A boot unit ordered before C(pve-guests.service) runs them, so a
    container's C(devN:) entries find their paths (Proxmox VE refuses to start the container otherwise).
  - Changes nothing.
author:
  - gpuhost.sglang contributors (@gpuhost)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpuhost.sglang.attributes.check_mode_full
  - gpuhost.sglang.host_paths
options:
  nvidia_modprobe:
    description: Path of nvidia-modprobe on the host.
    type: path
    default: /usr/bin/nvidia-modprobe
"""

EXAMPLES = r"""
- name: Node creation commands for the boot unit
  gpuhost.sglang.pve_nvidia_nodes:
  register: nodes
"""

RETURN = r"""
commands:
  description:
    - One entry per kernel module, C(module) (nvidia, nvidia_uvm), C(argv) (the nvidia-modprobe call) and
      C(udev_run) (the same call as a udev C(RUN+=) value).
  returned: always
  type: list
  elements: dict
  sample: [{"module": "nvidia", "argv": ["/usr/bin/nvidia-modprobe", "-c", "0", "-c", "255"],
            "udev_run": "/usr/bin/nvidia-modprobe -c 0 -c 255"},
           {"module": "nvidia_uvm", "argv": ["/usr/bin/nvidia-modprobe", "-u", "-c", "0"],
            "udev_run": "/usr/bin/nvidia-modprobe -u -c 0"}]
nodes:
  description: The device paths the commands create.
  returned: always
  type: list
  elements: str
skipped:
  description: NVIDIA nodes present now that cannot be created at boot (MIG instance capabilities), with the reason.
  returned: always
  type: list
  elements: dict
"""

import glob
import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuhost.sglang.plugins.module_utils.pve import lxc as pve_lxc
from ansible_collections.gpuhost.sglang.plugins.module_utils.pve import nvidia_nodes


def _read(path):
    try:
        with open(path) as f:
            return f.read()
    except (IOError, OSError):
        return ""


def run(module):
    p = module.params
    root = p["sysroot"]
    minors = [pve_lxc.parse_gpu_information(_read(f))["minor"]
              for f in sorted(glob.glob(os.path.join(root, "proc/driver/nvidia/gpus/*/information")))]
    paths = [n["path"] for n in pve_lxc.discover_nodes(p["dev_root"]) if n["type"] == "c"]
    caps = [c for c in (nvidia_nodes.cap_proc_path(n) for n in nvidia_nodes.BOOT_CAPS)
            if os.path.isfile(os.path.join(root, c.lstrip("/")))]
    try:
        plan = nvidia_nodes.plan_boot_commands(minors, paths, _read(os.path.join(root, "proc/driver/nvidia-caps/mig-minors")),
                                               caps, p["nvidia_modprobe"])
    except nvidia_nodes.NodesError as e:
        module.fail_json(msg="nvidia_modprobe: %s" % e)
    return dict(changed=False, **plan)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            nvidia_modprobe=dict(type="path", default="/usr/bin/nvidia-modprobe"),
            sysroot=dict(type="path", default="/"),
            dev_root=dict(type="path", default="/dev"),
        ),
        supports_check_mode=True,
    )
    module.exit_json(**run(module))


if __name__ == "__main__":
    main()
