#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import (absolute_import, division, print_function)

__metaclass__ = type

DOCUMENTATION = r"""
---
module: pve_host_facts
short_description: Read what a Proxmox VE / bare-metal GPU host offers for GPU sharing and passthrough
version_added: "0.1.0"
description:
  - Reads CPU virtualization flags and ACPI DMAR/IVRS tables (IOMMU evidence), the running kernel command line,
    the bootloader that reads it (GRUB or systemd-boot through C(proxmox-boot-tool)), PCI devices with their ACS
    control per bridge (C(lspci -D -nn -vvv)) and bound driver, the NVIDIA kernel module version and GPU minors,
    the host's /dev/nvidia* device nodes with their real major/minor numbers, the Proxmox guest ids, and a P2P
    readiness report.
  - Changes nothing; safe in check mode.
author:
  - gpuhost.sglang contributors (@gpuhost)
options:
  mode:
    description:
      - Host mode the P2P readiness report and the preflight checks are computed for
        (C(baremetal), C(lxc), C(vfio) or C(none)); anything else is reported in RV(problems).
    type: str
    default: none
  vfio_gpus:
    description: PCI addresses requested for VFIO passthrough; checked and normalized into RV(requested).
    type: list
    elements: str
    default: []
  lxc_gpus:
    description: PCI addresses requested for LXC containers; checked and normalized into RV(requested).
    type: list
    elements: str
    default: []
  lxc_gpus_var:
    description: Variable name used for O(lxc_gpus) in problem messages.
    type: str
    default: proxmox_host_lxc_gpus
  ctid:
    description: Container id requested for the serving container; a QEMU VM id is reported in RV(problems).
    type: str
  acs_disable:
    description: Whether the ACS-disable oneshot is requested (not allowed with O(mode=vfio)).
    type: bool
    default: false
  sysroot:
    description:
      - Prefix for /proc and /sys reads. Leave C(/) on real hosts; tests point it at a fake tree.
    type: path
    default: /
  dev_root:
    description: Directory holding the device nodes.
    type: path
    default: /dev
  pve_etc:
    description: The Proxmox cluster file system mount (guest configs and C(.vmlist)).
    type: path
    default: /etc/pve
  boot_uuids_file:
    description: File whose presence says proxmox-boot-tool manages the ESPs.
    type: path
    default: /etc/kernel/proxmox-boot-uuids
requirements:
  - pciutils (C(lspci)) on the target for the PCI and ACS part
notes:
  - Supports check mode.
"""

EXAMPLES = r"""
- name: Read the host
  gpuhost.sglang.pve_host_facts:
    mode: lxc
  register: pve
- name: Show the P2P warnings
  ansible.builtin.debug:
    var: pve.p2p.warnings
"""

RETURN = r"""
cpu:
  description: CPU vendor and virtualization flags.
  returned: always
  type: dict
  sample: {vendor: amd, vmx: false, svm: true}
iommu:
  description: IOMMU evidence (capable, vendor, reason), running mode, number of IOMMU groups and the kernel_args to enable it.
  returned: always
  type: dict
cmdline:
  description: The running kernel command line.
  returned: always
  type: str
bootloader:
  description: Detected bootloader (bootloader, proxmox_boot_tool, evidence).
  returned: always
  type: dict
pci:
  description: PCI devices from lspci with ACS state and driver (empty when lspci is missing).
  returned: always
  type: list
  elements: dict
pci_addresses:
  description: Every PCI address present under /sys/bus/pci/devices.
  returned: always
  type: list
  elements: str
pci_drivers:
  description: PCI address to bound driver name (null when unbound), from sysfs.
  returned: always
  type: dict
nvidia_version:
  description: NVIDIA kernel module version from /proc/driver/nvidia/version, or null.
  returned: always
  type: str
nvidia_gpus:
  description: PCI address to /dev/nvidiaN minor, from /proc/driver/nvidia/gpus/*/information.
  returned: always
  type: dict
device_nodes:
  description: NVIDIA device nodes on the host with type, major and minor.
  returned: always
  type: list
  elements: dict
guests:
  description: Proxmox guest ids by type (qemu, lxc), from .vmlist or the config directories.
  returned: always
  type: dict
  sample: {qemu: [100], lxc: [101]}
pve_version:
  description: Output of pveversion, or null on a non-Proxmox host.
  returned: always
  type: str
virtualization:
  description: Output of systemd-detect-virt (none on bare metal).
  returned: always
  type: str
p2p:
  description: P2P readiness report (iommu_mode, bridges with ACS state, gpus, warnings).
  returned: always
  type: dict
problems:
  description: Preflight problems with the request (each names the variable and the allowed values); empty when fine.
  returned: always
  type: list
  elements: str
requested:
  description: The requested vfio_gpus and lxc_gpus in canonical DOMAIN:BUS:DEVICE.FUNCTION form.
  returned: always
  type: dict
"""

import glob
import json
import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuhost.sglang.plugins.module_utils.pve import boot as pve_boot
from ansible_collections.gpuhost.sglang.plugins.module_utils.pve import lxc as pve_lxc
from ansible_collections.gpuhost.sglang.plugins.module_utils.pve import pci as pve_pci


def _read(path, default=""):
    try:
        with open(path) as f:
            return f.read()
    except (IOError, OSError):
        return default


def _sys(sysroot, path):
    return os.path.join(sysroot, path.lstrip("/"))


def guests(pve_etc):
    out = {"qemu": [], "lxc": []}
    vmlist = _read(os.path.join(pve_etc, ".vmlist"))
    if vmlist:
        try:
            for vmid, info in json.loads(vmlist).get("ids", {}).items():
                if info.get("type") in out:
                    out[info["type"]].append(int(vmid))
        except (ValueError, AttributeError):
            vmlist = ""
    if not vmlist:
        for kind, sub in (("qemu", "qemu-server"), ("lxc", "lxc")):
            for conf in glob.glob(os.path.join(pve_etc, sub, "*.conf")):
                name = os.path.basename(conf)[:-5]
                if name.isdigit():
                    out[kind].append(int(name))
    return {k: sorted(v) for k, v in out.items()}


def gather(module):
    p = module.params
    sysroot = p["sysroot"]
    res = {}
    cpu = pve_pci.cpu_virt_flags(_read(_sys(sysroot, "/proc/cpuinfo")))
    tables_dir = _sys(sysroot, "/sys/firmware/acpi/tables")
    tables = sorted(os.listdir(tables_dir)) if os.path.isdir(tables_dir) else []
    groups_dir = _sys(sysroot, "/sys/kernel/iommu_groups")
    ngroups = len(os.listdir(groups_dir)) if os.path.isdir(groups_dir) else 0
    cmdline = _read(_sys(sysroot, "/proc/cmdline")).strip()
    iommu = pve_pci.iommu_evidence(cpu, tables, ngroups)
    iommu["mode"] = pve_pci.iommu_mode_from_cmdline(cmdline)
    iommu["groups"] = ngroups
    iommu["kernel_args"] = pve_pci.iommu_kernel_args(cpu["vendor"]) if cpu["vendor"] in ("intel", "amd") else []
    res.update(cpu=cpu, iommu=iommu, cmdline=cmdline)

    pbt = module.get_bin_path("proxmox-boot-tool")
    pbt_rc, pbt_out = None, ""
    if pbt:
        pbt_rc, out, err = module.run_command([pbt, "status"])
        pbt_out = out + err
    res["bootloader"] = pve_boot.detect_bootloader(pbt_rc, pbt_out, os.path.exists(p["boot_uuids_file"]))

    lspci = module.get_bin_path("lspci")
    devices = []
    if lspci:
        rc, out, err = module.run_command([lspci, "-D", "-nn", "-vvv"])
        if rc != 0:
            module.fail_json(msg="lspci -D -nn -vvv failed (rc=%d): %s" % (rc, err.strip()))
        devices = pve_pci.parse_lspci(out)
    res["pci"] = devices
    pci_dir = _sys(sysroot, "/sys/bus/pci/devices")
    addrs = sorted(os.listdir(pci_dir)) if os.path.isdir(pci_dir) else sorted(d["address"] for d in devices)
    res["pci_addresses"] = addrs
    drivers = {}
    for a in addrs:
        link = os.path.join(pci_dir, a, "driver")
        drivers[a] = os.path.basename(os.readlink(link)) if os.path.islink(link) else None
    for d in devices:
        drivers.setdefault(d["address"], d["driver"])
    res["pci_drivers"] = drivers

    res["nvidia_version"] = pve_lxc.parse_nvidia_version(_read(_sys(sysroot, "/proc/driver/nvidia/version")))
    gpus = {}
    for info in glob.glob(os.path.join(_sys(sysroot, "/proc/driver/nvidia/gpus"), "*", "information")):
        minor = pve_lxc.parse_gpu_information(_read(info))["minor"]
        try:
            gpus[pve_pci.normalize_bdf(os.path.basename(os.path.dirname(info)))] = minor
        except pve_pci.PciError:
            continue
    res["nvidia_gpus"] = gpus
    res["device_nodes"] = pve_lxc.discover_nodes(p["dev_root"])
    res["guests"] = guests(p["pve_etc"])

    pvever = module.get_bin_path("pveversion")
    res["pve_version"] = module.run_command([pvever])[1].strip() if pvever else None
    sdv = module.get_bin_path("systemd-detect-virt")
    virt = module.run_command([sdv])[1].strip() if sdv else "unknown"
    res["virtualization"] = virt or "none"
    res["p2p"] = pve_pci.p2p_report(p["mode"], iommu["mode"], devices, res["virtualization"])
    nvidia_addrs = sorted(set(res["p2p"]["gpus"]) | set(gpus))
    res["problems"], res["requested"] = pve_pci.preflight_problems(
        p["mode"], p["vfio_gpus"], p["lxc_gpus"], addrs, iommu, nvidia_addrs, p["acs_disable"], p["ctid"], res["guests"],
        lxc_var=p["lxc_gpus_var"])
    return res


def main():
    module = AnsibleModule(
        argument_spec=dict(
            mode=dict(type="str", default="none"),
            vfio_gpus=dict(type="list", elements="str", default=[]),
            lxc_gpus=dict(type="list", elements="str", default=[]),
            lxc_gpus_var=dict(type="str", default="proxmox_host_lxc_gpus"),
            ctid=dict(type="str"),
            acs_disable=dict(type="bool", default=False),
            sysroot=dict(type="path", default="/"),
            dev_root=dict(type="path", default="/dev"),
            pve_etc=dict(type="path", default="/etc/pve"),
            boot_uuids_file=dict(type="path", default="/etc/kernel/proxmox-boot-uuids"),
        ),
        supports_check_mode=True,
    )
    module.exit_json(changed=False, **gather(module))


if __name__ == "__main__":
    main()
