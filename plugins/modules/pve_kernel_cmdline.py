#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import (absolute_import, division, print_function)

__metaclass__ = type

DOCUMENTATION = r"""
---
module: pve_kernel_cmdline
short_description: Add or remove kernel arguments for the bootloader a Proxmox VE / Debian host really uses
version_added: "0.1.0"
description:
  - With O(bootloader=grub) the arguments go into a drop-in under /etc/default/grub.d/ that appends them to
    C(GRUB_CMDLINE_LINUX_DEFAULT); the caller then runs C(update-grub) (or C(proxmox-boot-tool refresh) when
    proxmox-boot-tool manages the ESPs).
  - With O(bootloader=systemd-boot) (Proxmox VE on ZFS booted with UEFI) they are merged into the single line of
    /etc/kernel/cmdline; the caller then runs C(proxmox-boot-tool refresh).
  - Arguments this module added are remembered in O(state_file), so O(state=absent) removes only those and never
    an argument the operator had already set. A drop-in left for the other bootloader is removed.
  - Returns the commands that must run to make the change bootable in RV(refresh_commands).
  - With O(mode) the module chooses the arguments itself - vfio the vendor's IOMMU arguments O(iommu_args), every
    other mode C(iommu=pt) when O(iommu_passthrough), then O(extra_args) in every mode but C(none), which removes
    everything this module added - and fails naming O(extra_args_var) on an extra argument that is malformed or
    contradicts one of those (e.g. C(iommu=off) against C(iommu=pt)).
author:
  - gpuhost.sglang contributors (@gpuhost)
options:
  args:
    description: Kernel arguments that must be present (each a single C(key) or C(key=value)). Not with O(mode).
    type: list
    elements: str
    default: []
  mode:
    description: Host mode to choose the arguments for (see the description); instead of O(args).
    type: str
    choices: [baremetal, lxc, vfio, none]
  iommu_args:
    description: With O(mode=vfio), the IOMMU arguments for the CPU vendor (M(gpuhost.sglang.pve_host_facts) C(iommu.kernel_args)).
    type: list
    elements: str
    default: []
  iommu_passthrough:
    description: With O(mode), add C(iommu=pt) (identity DMA mapping, for GPU peer-to-peer) in every mode but C(none).
    type: bool
    default: true
  extra_args:
    description: With O(mode), more arguments for every mode but C(none).
    type: list
    elements: str
    default: []
  extra_args_var:
    description: Name of the variable O(extra_args) came from, used in error messages.
    type: str
    default: extra_args
  passthrough_var:
    description: Name of the variable O(iommu_passthrough) came from, used in error messages.
    type: str
    default: iommu_passthrough
  state:
    description: C(present) makes exactly O(args) ours; C(absent) removes every argument this module added.
    type: str
    choices: [present, absent]
    default: present
  bootloader:
    description: Which bootloader reads the command line (use M(gpuhost.sglang.pve_host_facts) to detect it).
    type: str
    choices: [grub, systemd-boot]
    required: true
  proxmox_boot_tool:
    description: Whether proxmox-boot-tool manages the ESPs (then C(proxmox-boot-tool refresh) is the refresh command).
    type: bool
    default: false
  grub_dropin:
    description: Path of the GRUB drop-in.
    type: path
    default: /etc/default/grub.d/gpuhost-sglang.cfg
  cmdline_file:
    description: The systemd-boot command line file.
    type: path
    default: /etc/kernel/cmdline
  state_file:
    description: Where the arguments this module added are recorded (JSON).
    type: path
    default: /var/lib/gpuhost-sglang/kernel-cmdline.json
notes:
  - Supports check mode and diff mode.
"""

EXAMPLES = r"""
- name: The arguments a host in lxc mode needs (iommu=pt) plus one more
  gpuhost.sglang.pve_kernel_cmdline:
    mode: lxc
    extra_args: [pcie_aspm=off]
    bootloader: "{{ pve.bootloader.bootloader }}"
    proxmox_boot_tool: "{{ pve.bootloader.proxmox_boot_tool }}"

- name: IOMMU on for VFIO, for whichever bootloader is in use
  gpuhost.sglang.pve_kernel_cmdline:
    args: [intel_iommu=on, iommu=pt]
    bootloader: "{{ pve.bootloader.bootloader }}"
    proxmox_boot_tool: "{{ pve.bootloader.proxmox_boot_tool }}"
  register: cmdline
  notify: Refresh boot configuration
"""

RETURN = r"""
bootloader:
  description: The bootloader the change was written for.
  returned: always
  type: str
added:
  description: Arguments this module now owns (recorded in the state file).
  returned: always
  type: list
  elements: str
expected_args:
  description: Arguments /proc/cmdline must contain after the next boot.
  returned: always
  type: list
  elements: str
absent_args:
  description: Arguments this module removed that must be gone from /proc/cmdline after the next boot.
  returned: always
  type: list
  elements: str
refresh_commands:
  description: Commands (argv lists) to run so the bootloader picks the change up; empty when nothing changed.
  returned: always
  type: list
  elements: list
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuhost.sglang.plugins.module_utils.pve import boot as pve_boot

MARKER = "Managed by gpuhost.sglang (pve_kernel_cmdline); do not edit"


def _read(path):
    try:
        with open(path) as f:
            return f.read()
    except (IOError, OSError):
        return None


def _write(module, path, content):
    d = os.path.dirname(path)
    if d and not os.path.isdir(d):
        os.makedirs(d, 0o755)
    tmp = path + ".gpuhost-tmp"
    with open(tmp, "w") as f:
        f.write(content)
    os.chmod(tmp, 0o644)
    module.atomic_move(tmp, path)


def run(module):
    p = module.params
    if p["mode"] is not None:
        if p["args"] or p["state"] != "present":
            module.fail_json(msg="mode: give either mode (the module chooses the arguments) or args/state, not both")
        try:
            wanted = pve_boot.kernel_args_for_mode(p["mode"], p["iommu_args"], p["iommu_passthrough"], p["extra_args"],
                                                   extra_var=p["extra_args_var"], passthrough_var=p["passthrough_var"])
        except pve_boot.BootError as e:
            module.fail_json(msg=str(e))
    else:
        try:
            wanted = pve_boot.validate_args(p["args"]) if p["state"] == "present" else []
        except pve_boot.BootError as e:
            module.fail_json(msg="args: %s" % e)
    raw_state = _read(p["state_file"])
    try:
        state = json.loads(raw_state) if raw_state else {}
    except ValueError:
        module.fail_json(msg="%s is not valid JSON; remove it only if no kernel argument of ours is set" % p["state_file"])
    prev_sdboot = state.get("systemd-boot", [])
    changes, before, after = [], {}, {}

    # systemd-boot: /etc/kernel/cmdline
    cur = _read(p["cmdline_file"])
    sd_wanted = wanted if p["bootloader"] == "systemd-boot" else []
    if cur is None:
        if sd_wanted:
            module.fail_json(msg="bootloader is systemd-boot but %s does not exist; run proxmox-boot-tool init first "
                             "or set bootloader: grub" % p["cmdline_file"])
        new_line, sd_added = None, []
    else:
        new_line, sd_added = pve_boot.plan_cmdline_change(cur, sd_wanted, prev_sdboot)
        if new_line != cur.strip():
            changes.append(p["cmdline_file"])
            before[p["cmdline_file"]] = cur
            after[p["cmdline_file"]] = new_line + "\n"

    # GRUB drop-in
    dropin_now = _read(p["grub_dropin"])
    dropin_want = pve_boot.render_grub_dropin(wanted, MARKER) if (p["bootloader"] == "grub" and wanted) else None
    if dropin_now != dropin_want:
        changes.append(p["grub_dropin"])
        before[p["grub_dropin"]] = dropin_now or ""
        after[p["grub_dropin"]] = dropin_want or ""
    prev_grub = pve_boot.parse_grub_dropin(dropin_now or "")

    new_state = {"systemd-boot": sd_added, "grub": wanted if dropin_want else []}
    removed = sorted((set(prev_sdboot) | set(prev_grub)) - set(wanted))
    refresh = []
    if changes:
        if p["proxmox_boot_tool"]:
            refresh.append(["proxmox-boot-tool", "refresh"])
        if p["grub_dropin"] in changes and not p["proxmox_boot_tool"]:
            refresh.append(["update-grub"])
    result = dict(changed=bool(changes), bootloader=p["bootloader"], added=sd_added or new_state["grub"],
                  expected_args=wanted, absent_args=removed, refresh_commands=refresh)
    if module._diff and changes:
        result["diff"] = [dict(before_header=k, after_header=k, before=before[k], after=after[k]) for k in changes]
    if changes and not module.check_mode:
        if p["cmdline_file"] in changes:
            _write(module, p["cmdline_file"], new_line + "\n")
        if p["grub_dropin"] in changes:
            if dropin_want is None:
                os.remove(p["grub_dropin"])
            else:
                _write(module, p["grub_dropin"], dropin_want)
    if not module.check_mode and new_state != state and (raw_state is not None or any(new_state.values())):
        _write(module, p["state_file"], json.dumps(new_state, sort_keys=True) + "\n")
        result["changed"] = True
    return result


def main():
    module = AnsibleModule(
        argument_spec=dict(
            args=dict(type="list", elements="str", default=[]),
            mode=dict(type="str", choices=list(pve_boot.MODES)),
            iommu_args=dict(type="list", elements="str", default=[]),
            iommu_passthrough=dict(type="bool", default=True),
            extra_args=dict(type="list", elements="str", default=[]),
            extra_args_var=dict(type="str", default="extra_args"),
            passthrough_var=dict(type="str", default="iommu_passthrough", no_log=False),
            state=dict(type="str", default="present", choices=["present", "absent"]),
            bootloader=dict(type="str", required=True, choices=list(pve_boot.BOOTLOADERS)),
            proxmox_boot_tool=dict(type="bool", default=False),
            grub_dropin=dict(type="path", default="/etc/default/grub.d/gpuhost-sglang.cfg"),
            cmdline_file=dict(type="path", default="/etc/kernel/cmdline"),
            state_file=dict(type="path", default="/var/lib/gpuhost-sglang/kernel-cmdline.json"),
        ),
        supports_check_mode=True,
    )
    module.exit_json(**run(module))


if __name__ == "__main__":
    main()
