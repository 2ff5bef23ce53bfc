#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import (absolute_import, division, print_function)

__metaclass__ = type

DOCUMENTATION = r"""
---
module: pve_repositories
short_description: Proxmox VE package repositories that work with or without a subscription
version_added: "0.1.0"
description:
  - A fresh Proxmox VE host has the enterprise repositories enabled; without a subscription key C(apt-get update)
    gets HTTP 401 from them and fails (Proxmox VE admin guide, "Package Repositories").
  - Reads C(/etc/apt/sources.list) and C(/etc/apt/sources.list.d/*.list) (Proxmox VE 8, one-line format) and
    C(*.sources) (Proxmox VE 9, deb822), the Debian release (C(/etc/os-release) C(VERSION_CODENAME)) and the
    subscription state (C(pvesubscription get), C(status:) line).
  - With O(mode=no-subscription) or O(mode=mirror) the enabled enterprise entries are disabled (commented out, or
    an C(Enabled) line set to false in the stanza) only when no subscription is active, and the no-subscription repository (or
    the mirror given in O(mirror)) is added in the release's format unless an enabled entry already has it.
  - With O(mode=unmanaged) or O(mode=enterprise) nothing is changed, and the module fails naming the fix when an
    enterprise entry is enabled without an active subscription.
author:
  - gpuhost.sglang contributors (@gpuhost)
options:
  mode:
    description: What to manage (see the description).
    type: str
    choices: [no-subscription, mirror, enterprise, unmanaged]
    default: no-subscription
  mirror:
    description: With O(mode=mirror), the base URI of your mirror of the Proxmox VE repository.
    type: str
    default: ""
  releases:
    description: Debian codename -> C(pve), C(format) (C(list) or C(deb822)), C(path), C(uri), C(component), C(signed_by).
    type: dict
    required: true
  sysroot:
    description: Root of the files read and written (tests).
    type: path
    default: /
  subscription_command:
    description: Command printing the subscription state.
    type: list
    elements: str
    default: [pvesubscription, get]
"""

EXAMPLES = r"""
- name: No-subscription repository unless the host has a subscription
  gpuhost.sglang.pve_repositories:
    mode: no-subscription
    releases: "{{ proxmox_host_pve_releases }}"
"""

RETURN = r"""
release:
  description: Debian codename of the host.
  returned: always
  type: str
subscription:
  description: Whether a subscription is active.
  returned: always
  type: bool
enterprise:
  description: Files with enabled enterprise entries before the change.
  returned: always
  type: list
  elements: str
disabled:
  description: Files whose enterprise entries were disabled.
  returned: always
  type: list
  elements: str
added:
  description: Files written with the no-subscription (or mirror) repository.
  returned: always
  type: list
  elements: str
"""

import glob
import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuhost.sglang.plugins.module_utils.pve import repositories as repos


def read(path):
    with open(path) as f:
        return f.read()


def codename(sysroot):
    path = os.path.join(sysroot, "etc/os-release")
    for line in read(path).splitlines() if os.path.exists(path) else []:
        k, sep, v = line.partition("=")
        if sep and k == "VERSION_CODENAME":
            return v.strip().strip('"')
    return ""


def main():
    module = AnsibleModule(argument_spec=dict(
        mode=dict(type="str", choices=list(repos.MODES), default="no-subscription"),
        mirror=dict(type="str", default=""),
        releases=dict(type="dict", required=True),
        sysroot=dict(type="path", default="/"),
        subscription_command=dict(type="list", elements="str", default=["pvesubscription", "get"]),
    ), supports_check_mode=True)
    p = module.params
    root = p["sysroot"]
    rel = codename(root)
    rc, out, err = module.run_command(p["subscription_command"])
    active = rc == 0 and repos.subscription_active(out)
    paths = [os.path.join(root, "etc/apt/sources.list")]
    paths += sorted(glob.glob(os.path.join(root, "etc/apt/sources.list.d/*.list")))
    paths += sorted(glob.glob(os.path.join(root, "etc/apt/sources.list.d/*.sources")))
    files = dict((os.path.join("/", os.path.relpath(x, root)), read(x)) for x in paths if os.path.isfile(x))
    try:
        res = repos.plan(files, rel, active, p["mode"], p["mirror"], p["releases"])
    except repos.RepoError as e:
        module.fail_json(msg=str(e))
    result = dict(changed=bool(res["disable"] or res["add"]), release=rel, subscription=active,
                  enterprise=res["enterprise"], disabled=sorted(res["disable"]), added=sorted(res["add"]))
    if res["problems"]:
        module.fail_json(msg=" ".join(res["problems"]), **result)
    if not module.check_mode:
        for path, text in list(res["disable"].items()) + list(res["add"].items()):
            dest = os.path.join(root, path.lstrip("/"))
            tmp = dest + ".gpuhost-tmp"
            with open(tmp, "w") as f:
                f.write(text)
            os.chmod(tmp, 0o644)
            module.atomic_move(tmp, dest)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
