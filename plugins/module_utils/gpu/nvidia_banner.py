# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one parser of /proc/driver/nvidia/version (the loaded kernel module's banner).

Formats (real captures in tests/unit/plugins/module_utils/gpu/fixtures/SOURCES.md):

* open modules, built by NVIDIA/open-gpu-kernel-modules ``utils.mk`` (GENERATE_NVIDSTRING):
  ``NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.105.08  Release Build  (user@host)  <date>``
  ("Debug Build" for debug builds; the architecture is a single word: x86_64, aarch64, ...);
* proprietary modules: ``NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.133.07  <date>``.

Every role and module that needs the loaded driver version goes through ``module_version`` (the filter
``gpuhost.sglang.nvidia_module_version``, ``pve_lxc.parse_nvidia_version``). Stdlib only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

_OPEN = re.compile(r"^NVRM version:[ \t]+NVIDIA UNIX Open Kernel Module for (?P<arch>\S+)[ \t]+(?P<version>\d+\.\d+(?:\.\d+)?)(?![\d.])",
                   re.M)
_PROPRIETARY = re.compile(r"^NVRM version:[ \t]+NVIDIA UNIX (?P<arch>\S+) Kernel Module[ \t]+(?P<version>\d+\.\d+(?:\.\d+)?)(?![\d.])",
                          re.M)


def _text(text):
    if text is None:
        return ""
    if isinstance(text, bytes):
        return text.decode("utf-8", "replace")
    return str(text)


def parse_banner(text):
    """Return {'version', 'branch', 'flavour' ('open'|'proprietary'), 'arch'}, or None without a banner line."""
    text = _text(text)
    for flavour, rx in (("open", _OPEN), ("proprietary", _PROPRIETARY)):
        m = rx.search(text)
        if m:
            version = m.group("version")
            return {"version": version, "branch": version.split(".")[0], "flavour": flavour, "arch": m.group("arch")}
    return None


def module_version(text):
    """The loaded kernel module's version ("580.105.08"), or None when the text holds no banner."""
    info = parse_banner(text)
    return info["version"] if info else None


def reboot_reasons(loaded, installed, kernel_changed=False):
    """Why the host must reboot after a driver install (empty: it need not): the kernel module packages changed, or
    the ``loaded`` module's version (``module_version``; "" when none is loaded) is not the ``installed`` one."""
    reasons = ["kernel module packages changed"] if kernel_changed else []
    if loaded and loaded != installed:
        reasons.append("loaded module %s != installed %s" % (loaded, installed))
    return reasons
