#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import (absolute_import, division, print_function)

__metaclass__ = type

DOCUMENTATION = r"""
---
module: pve_lxc_gpu
short_description: Give a Proxmox VE LXC container the host's NVIDIA device nodes as devN entries
version_added: "0.1.0"
description:
  - Discovers the host's /dev/nvidiaN (only the GPUs in O(gpus)), /dev/nvidiactl, /dev/nvidia-modeset,
    /dev/nvidia-uvm, /dev/nvidia-uvm-tools and /dev/nvidia-caps/* nodes and makes the container's C(devN:)
    entries match them with C(pct set). Proxmox VE reads each node's major/minor when the container starts, so
    the dynamic nvidia-uvm major number is never written into the config.
  - Entries for non-NVIDIA devices are never touched; NVIDIA entries keep their index, stale ones are deleted.
  - Requires Proxmox VE 8.1 or later (C(devN) support in C(pct)).
author:
  - gpuhost.sglang contributors (@gpuhost)
extends_documentation_fragment:
  - gpuhost.sglang.host_paths
options:
  ctid:
    description: The container id (100..999999999). The container must exist.
    type: int
    required: true
  gpus:
    description:
      - PCI addresses of the GPUs the container gets (mapped to /dev/nvidiaN through
        /proc/driver/nvidia/gpus/ADDRESS/information). Omit to pass every GPU the NVIDIA driver owns.
    type: list
    elements: str
  gid:
    description:
      - Group id the nodes get inside the container (44 is Debian's C(video) group), written as C(gid=) in each entry.
      - Proxmox VE creates every node with mode 0660 unless O(mode) is given, owned by O(uid) (default 0) and this
        group (pve-container C(src/PVE/LXC.pm) C(create_passthrough_device_node)), so a non-root process in the
        container needs this group to open the GPUs.
    type: int
    default: 44
  uid:
    description: Owner uid inside the container (PVE's default is 0).
    type: int
  mode:
    description: Octal access mode inside the container, e.g. C(0666); omitted, PVE uses 0660.
    type: str
  state:
    description: C(present) sets the entries; C(absent) removes every NVIDIA entry.
    type: str
    choices: [present, absent]
    default: present
  cgroup_v1:
    description: Also render legacy C(lxc.cgroup.devices.allow) lines in RV(lxc_raw) (for plain LXC on cgroup v1 hosts).
    type: bool
    default: false
requirements:
  - Proxmox VE >= 8.1 (C(pct)) on the target
notes:
  - Supports check mode and diff mode.
  - A running container picks the new entries up at its next start; the caller restarts it.
"""

EXAMPLES = r"""
- name: Two of the four GPUs to container 101
  gpuhost.sglang.pve_lxc_gpu:
    ctid: 101
    gpus: ["0000:01:00.0", "0000:41:00.0"]
    gid: 44
"""

RETURN = r"""
entries:
  description: The container's NVIDIA devN entries after the change.
  returned: always
  type: dict
  sample: {"dev0": "/dev/nvidia0,gid=44", "dev1": "/dev/nvidiactl,gid=44"}
set:
  description: Entries written by this run.
  returned: always
  type: dict
deleted:
  description: Entries deleted by this run.
  returned: always
  type: list
  elements: str
command:
  description: The pct command run (or that would run in check mode), null when nothing changed.
  returned: always
  type: list
  elements: str
lxc_raw:
  description: The raw LXC keys PVE derives from the entries (device allow rules with the real major:minor and mounts).
  returned: always
  type: str
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuhost.sglang.plugins.module_utils.pve import lxc as pve_lxc
from ansible_collections.gpuhost.sglang.plugins.module_utils.pve import pci as pve_pci


def run(module):
    p = module.params
    try:
        ctid = pve_lxc.validate_ctid(p["ctid"])
    except pve_lxc.LxcError as e:
        module.fail_json(msg="ctid: %s" % e)
    pct = module.get_bin_path("pct", required=True)
    rc, out, err = module.run_command([pct, "config", str(ctid)])
    if rc != 0:
        module.fail_json(msg="ctid: container %d does not exist or is not an LXC container (pct config: %s)" % (ctid, (err or out).strip()))
    config = pve_lxc.parse_pve_config(out)
    nodes = pve_lxc.discover_nodes(p["dev_root"])
    if p["state"] == "absent":
        chosen = []
    else:
        minors = None
        if p["gpus"] is not None:
            gpu_dir = os.path.join(p["sysroot"], "proc/driver/nvidia/gpus")
            known = {}
            if os.path.isdir(gpu_dir):
                for d in os.listdir(gpu_dir):
                    try:
                        with open(os.path.join(gpu_dir, d, "information")) as f:
                            known[pve_pci.normalize_bdf(d)] = pve_lxc.parse_gpu_information(f.read())["minor"]
                    except (IOError, OSError, pve_pci.PciError):
                        continue
            minors = set()
            for g in p["gpus"]:
                try:
                    bdf = pve_pci.normalize_bdf(g)
                except pve_pci.PciError as e:
                    module.fail_json(msg="gpus: %s" % e)
                if bdf not in known:
                    module.fail_json(msg="gpus: %s is not a GPU driven by the NVIDIA driver on this host (allowed: %s)"
                                     % (bdf, ", ".join(sorted(known)) or "none: is the driver loaded?"))
                minors.add(known[bdf])
        try:
            chosen = pve_lxc.select_nodes(nodes, minors)
        except pve_lxc.LxcError as e:
            module.fail_json(msg=str(e))
    try:
        plan = pve_lxc.plan_dev_entries(config, chosen, gid=p["gid"], mode=p["mode"], uid=p["uid"])
        raw = pve_lxc.render_lxc_raw(plan["entries"], nodes, cgroup_v1=p["cgroup_v1"])
    except pve_lxc.LxcError as e:
        module.fail_json(msg=str(e))
    argv = pve_lxc.pct_set_argv(ctid, plan)
    result = dict(changed=argv is not None, entries=plan["entries"], set=plan["set"], deleted=plan["delete"],
                  command=argv, lxc_raw=raw)
    if module._diff and argv:
        old = "".join("%s: %s\n" % (k, v) for k, v in config.items() if k.startswith("dev"))
        new_cfg = {k: v for k, v in config.items() if k.startswith("dev") and k not in plan["delete"]}
        new_cfg.update(plan["set"])
        new = "".join("%s: %s\n" % (k, new_cfg[k]) for k in sorted(new_cfg, key=lambda k: int(k[3:])))
        result["diff"] = dict(before_header="pct config %d (dev entries)" % ctid, after_header="after", before=old, after=new)
    if argv and not module.check_mode:
        argv[0] = pct
        rc, out, err = module.run_command(argv)
        if rc != 0:
            module.fail_json(msg="%s failed (rc=%d): %s" % (" ".join(argv), rc, (err or out).strip()), **result)
    return result


def main():
    module = AnsibleModule(
        argument_spec=dict(
            ctid=dict(type="int", required=True),
            gpus=dict(type="list", elements="str"),
            gid=dict(type="int", default=44),
            uid=dict(type="int"),
            mode=dict(type="str"),
            state=dict(type="str", default="present", choices=["present", "absent"]),
            sysroot=dict(type="path", default="/"),
            dev_root=dict(type="path", default="/dev"),
            cgroup_v1=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    module.exit_json(**run(module))


if __name__ == "__main__":
    main()
