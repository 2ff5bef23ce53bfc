#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import (absolute_import, division, print_function)

__metaclass__ = type

DOCUMENTATION = r"""
---
module: pve_lxc_lockstep
short_description: Check that a Proxmox VE container's NVIDIA userspace matches the host's kernel module
version_added: "0.1.0"
description:
  - Reads the host's NVIDIA kernel module version from /proc/driver/nvidia/version, then runs a probe in the
    container with C(pct exec) that lists its libnvidia-ml.so.* and runs C(nvidia-smi).
  - "A version difference, or NVML's C(Failed to initialize NVML: Driver/library version mismatch), is reported with
    the fix (upgrade order host driver, reboot, container libraries); with O(fail=true) the task fails."
  - Changes nothing; safe in check mode.
author:
  - gpuhost.sglang contributors (@gpuhost)
options:
  ctid:
    description: The running container to probe.
    type: int
    required: true
  fail:
    description: Fail the task on a mismatch or missing libraries (otherwise only report).
    type: bool
    default: true
  allow_missing_libs:
    description: Do not fail when the container has no NVIDIA libraries at all yet (fresh container).
    type: bool
    default: false
  sysroot:
    description: Prefix for /proc reads; leave C(/) on real hosts.
    type: path
    default: /
requirements:
  - Proxmox VE (C(pct)) on the target
notes:
  - Supports check mode.
"""

EXAMPLES = r"""
- name: Host and container driver versions agree
  gpuhost.sglang.pve_lxc_lockstep:
    ctid: 101
"""

RETURN = r"""
host_version:
  description: The host's NVIDIA kernel module version.
  returned: always
  type: str
container_version:
  description: The container's NVML library version (null when none is installed).
  returned: always
  type: str
state:
  description: ok, mismatch, no_host_driver or no_container_libs.
  returned: always
  type: str
message:
  description: What was found.
  returned: always
  type: str
fix:
  description: What to do about it (empty when ok).
  returned: always
  type: str
smi_output:
  description: nvidia-smi's output inside the container.
  returned: always
  type: str
"""

import os
import re

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuhost.sglang.plugins.module_utils.pve import lxc as pve_lxc

PROBE = ('for f in /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.* /usr/lib64/libnvidia-ml.so.* /usr/lib/libnvidia-ml.so.*; '
         'do [ -e "$f" ] && echo "lib $f"; done; echo "smi_begin"; nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>&1; '
         'echo "smi_rc=$?"')


def main():
    module = AnsibleModule(
        argument_spec=dict(
            ctid=dict(type="int", required=True),
            fail=dict(type="bool", default=True),
            allow_missing_libs=dict(type="bool", default=False),
            sysroot=dict(type="path", default="/"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    try:
        ctid = pve_lxc.validate_ctid(p["ctid"])
    except pve_lxc.LxcError as e:
        module.fail_json(msg="ctid: %s" % e)
    try:
        with open(os.path.join(p["sysroot"], "proc/driver/nvidia/version")) as f:
            host_version = pve_lxc.parse_nvidia_version(f.read())
    except (IOError, OSError):
        host_version = None
    pct = module.get_bin_path("pct", required=True)
    rc, out, err = module.run_command([pct, "exec", str(ctid), "--", "sh", "-c", PROBE])
    if rc != 0 and "smi_rc=" not in out:
        module.fail_json(msg="pct exec %d failed (rc=%d): %s; is the container running?" % (ctid, rc, (err or out).strip()))
    libs = "\n".join(line[4:] for line in out.splitlines() if line.startswith("lib "))
    smi = out.split("smi_begin", 1)[-1]
    m = re.search(r"smi_rc=(\d+)", smi)
    smi_rc = int(m.group(1)) if m else None
    smi_text = re.sub(r"smi_rc=\d+\s*$", "", smi).strip()
    cver = pve_lxc.container_lib_version(libs)
    st = pve_lxc.lockstep_status(host_version, cver, smi_rc, smi_text)
    result = dict(changed=False, host_version=host_version, container_version=cver, state=st["state"],
                  message=st["message"], fix=st["fix"], smi_output=smi_text)
    allowed = st["ok"] or (p["allow_missing_libs"] and st["state"] == "no_container_libs")
    if p["fail"] and not allowed:
        module.fail_json(msg="container %d: %s. Fix: %s" % (ctid, st["message"], st["fix"]), **result)
    if not st["ok"]:
        module.warn("container %d: %s. Fix: %s" % (ctid, st["message"], st["fix"]))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
