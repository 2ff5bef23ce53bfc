# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    """The host paths of the modules that read a Proxmox VE host's /proc and device nodes (pve_nvidia_nodes,
    pve_lxc_gpu); each module's argument spec declares them with the same types and defaults."""

    # ansible-test's yamllint reads every attribute of this class as a string literal (see attributes.py).
    DOCUMENTATION = r"""
options:
  sysroot:
    description: Prefix for /proc reads; leave C(/) on real hosts (tests point it at a fake tree).
    type: path
    default: /
  dev_root:
    description: Directory holding the host's device nodes.
    type: path
    default: /dev
"""
