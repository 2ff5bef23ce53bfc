#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import (absolute_import, division, print_function)

__metaclass__ = type

DOCUMENTATION = r"""
---
module: pve_template
short_description: The container template a Proxmox VE host creates containers from, downloaded with pveam when missing
version_added: "0.1.0"
description:
  - With O(template) empty, the newest template of the family for the host's Debian release (O(families), e.g.
    C(debian-13-standard) on Proxmox VE 9 / trixie) that C(pveam available --section system) offers after
    C(pveam update); offline, the newest already in O(storage).
  - A named template (C(local:vztmpl/NAME) or C(NAME)) is used as it is, and downloaded when O(storage) lacks it.
  - Downloads with C(pveam download STORAGE NAME) only when C(pveam list STORAGE) does not list it.
author:
  - gpuhost.sglang contributors (@gpuhost)
options:
  template:
    description: Template volid or name; empty = the newest of the release's family.
    type: str
    default: ""
  storage:
    description: Storage holding templates (content vztmpl).
    type: str
    default: local
  families:
    description: Debian codename -> template family (C(debian-12-standard)).
    type: dict
    required: true
  sysroot:
    description: Root of /etc/os-release (tests).
    type: path
    default: /
  template_var:
    description: Variable named in messages.
    type: str
    default: proxmox_lxc_gpu_template
"""

EXAMPLES = r"""
- name: Template for pct create
  gpuhost.sglang.pve_template:
    families: {bookworm: debian-12-standard, trixie: debian-13-standard}
  register: tmpl
"""

RETURN = r"""
volid:
  description: The template's volume id for pct create.
  returned: success
  type: str
  sample: local:vztmpl/debian-13-standard_13.1-2_amd64.tar.zst
downloaded:
  description: Whether pveam downloaded it now (or would, in check mode).
  returned: success
  type: bool
release:
  description: The host's Debian codename.
  returned: always
  type: str
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuhost.sglang.plugins.module_utils.pve import templates as tpl


def codename(sysroot):
    path = os.path.join(sysroot, "etc/os-release")
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                k, sep, v = line.strip().partition("=")
                if sep and k == "VERSION_CODENAME":
                    return v.strip('"')
    return ""


def main():
    module = AnsibleModule(argument_spec=dict(
        template=dict(type="str", default=""),
        storage=dict(type="str", default="local"),
        families=dict(type="dict", required=True),
        sysroot=dict(type="path", default="/"),
        template_var=dict(type="str", default="proxmox_lxc_gpu_template"),
    ), supports_check_mode=True)
    p = module.params
    rel = codename(p["sysroot"])
    family = p["families"].get(rel)
    if not p["template"] and not family:
        module.fail_json(msg="%s is empty and the host's Debian release %r has no template family (known: %s); set %s"
                         % (p["template_var"], rel, ", ".join("%s: %s" % kv for kv in sorted(p["families"].items())),
                            p["template_var"]), release=rel)
    pveam = module.get_bin_path("pveam", required=True)
    rc, out, err = module.run_command([pveam, "list", p["storage"]])
    if rc != 0:
        module.fail_json(msg="pveam list %s failed: %s" % (p["storage"], (err or out).strip()), release=rel)
    listed = tpl.parse_list(out)
    available = []
    if not p["template"] or not any(v.endswith("/" + p["template"].split("/")[-1]) for v in listed):
        if not module.check_mode:
            module.run_command([pveam, "update"])   # best effort: an offline host still has its old index
        rc, out, err = module.run_command([pveam, "available", "--section", "system"])
        available = tpl.parse_available(out) if rc == 0 else []
    try:
        res = tpl.choose(p["template"], p["storage"], family or "", listed, available, p["template_var"])
    except tpl.TemplateError as e:
        module.fail_json(msg=str(e), release=rel)
    if res["download"] and not module.check_mode:
        rc, out, err = module.run_command([pveam, "download", p["storage"], res["name"]])
        if rc != 0:
            module.fail_json(msg="pveam download %s %s failed: %s" % (p["storage"], res["name"], (err or out).strip()),
                             release=rel)
    module.exit_json(changed=res["download"], volid=res["volid"], downloaded=res["download"], release=rel)


if __name__ == "__main__":
    main()
