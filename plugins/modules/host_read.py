#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: host_read
short_description: Read the small files, checksums, device nodes and accounts a role needs, in one call
version_added: "0.1.0"
description:
  - What a role reads before it changes anything, in one round trip instead of one C(ansible.builtin.slurp),
    C(stat), C(find) or C(getent) task each. The shapes are those modules' where a filter already reads them.
author:
  - gpuhost.sglang contributors (@gpuhost)
options:
  files:
    description: Text files to read (up to 1 MiB each); an absent file reads as null.
    type: list
    elements: path
    default: []
  checksums:
    description: Files whose sha1 to return; an absent file gives null.
    type: list
    elements: path
    default: []
  exists:
    description: Paths to test for existence (a dangling link exists).
    type: list
    elements: path
    default: []
  devices:
    description: Character and block device nodes to find (C(paths), C(patterns) of base names, C(depth) as in
      C(ansible.builtin.find) with C(recurse)).
    type: dict
  account:
    description: A user name whose C(getent passwd) entry to return (in RV(passwd)).
    type: str
  groups:
    description: Return the whole C(getent group) database.
    type: bool
    default: false
  units:
    description: systemd units whose C(ActiveState) and C(UnitFileState) to return (one C(systemctl show)).
    type: list
    elements: str
    default: []
  tree:
    description:
      - A directory whose every entry to return (in RV(tree)), as M(ansible.builtin.find) with C(recurse),
        C(hidden), C(file_type=any) and C(get_checksum) returns them; links are listed, not followed.
    type: path
  stat:
    description:
      - Paths whose type, mode, owner, group and sha1 to return (in RV(stat)), links followed as
        M(gpuhost.sglang.host_files) follows them. The serving role passes the paths its host_files tasks declare
        and gives the result to those tasks as their O(gpuhost.sglang.host_files#module:known).
    type: list
    elements: path
    default: []
notes:
  - Check mode is supported; the module only reads. Give a task that reads secrets C(no_log).
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpuhost.sglang.attributes.check_mode_full
"""

EXAMPLES = r"""
- name: The last-known-good record and the GPU nodes
  gpuhost.sglang.host_read:
    files: [/var/lib/sglang/lkg/meta.json]
    devices: {paths: [/dev], patterns: ["nvidia*"], depth: 2}
    account: sglang
    groups: true
  register: host
"""

RETURN = r"""
files:
  description: Path to text (null when absent).
  returned: always
  type: dict
checksums:
  description: Path to sha1 (null when absent).
  returned: always
  type: dict
exists:
  description: Path to whether it exists.
  returned: always
  type: dict
devices:
  description: Device nodes (path, mode as an octal string, uid, gid, ischr, isblk), sorted by path.
  returned: when devices is given
  type: list
  elements: dict
passwd:
  description: "{user: [password, uid, gid, gecos, home, shell]} or {user: null}."
  returned: when account is given
  type: dict
group:
  description: "{name: [password, gid, members]}."
  returned: when groups is true
  type: dict
units:
  description: "{unit: {active: ActiveState, enabled: UnitFileState}}; a unit systemd does not know reads inactive."
  returned: when units is given
  type: dict
tree:
  description:
    - "{files: [{path, isdir, isreg, islnk, mode, pw_name, gr_name, checksum}]} sorted by path (checksum: sha1, regular
      files only); no files when the directory is absent."
  returned: when tree is given
  type: dict
stat:
  description:
    - "{path: {path, isdir, isreg, islnk, mode, pw_name, gr_name, checksum} or null when absent} (checksum: sha1,
      regular files only)."
  returned: when stat is given
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuhost.sglang.plugins.module_utils.serving import host_read


def main():
    module = AnsibleModule(
        argument_spec=dict(
            files=dict(type="list", elements="path", default=[]),
            checksums=dict(type="list", elements="path", default=[]),
            exists=dict(type="list", elements="path", default=[]),
            devices=dict(type="dict"),
            account=dict(type="str"),
            groups=dict(type="bool", default=False),
            units=dict(type="list", elements="str", default=[]),
            tree=dict(type="path"),
            stat=dict(type="list", elements="path", default=[]),
        ),
        supports_check_mode=True,
    )
    p = module.params
    try:
        res = host_read.read("", p["files"], p["checksums"], p["exists"], p["devices"], p["account"], p["groups"],
                             p["units"], module.run_command, p["tree"], p["stat"])
    except (host_read.ReadError, OSError) as exc:
        module.fail_json(msg="host_read: %s" % exc)
    module.exit_json(changed=False, **res)


if __name__ == "__main__":
    main()
