#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: host_files
short_description: Directories and small text files, as declared, in one call
version_added: "0.1.0"
description:
  - Makes each directory and file as declared (content, owner, group, mode) and reports which paths changed and
    how. Only what differs is written; a file is replaced by a rename in its directory, so a reader sees the old
    file or the new one.
  - One call instead of one C(ansible.builtin.file) per directory and two round trips per
    C(ansible.builtin.copy) or C(ansible.builtin.template), where the roles' no-op runs spent their time.
author:
  - gpuhost.sglang contributors (@gpuhost)
options:
  directories:
    description: Directories, made first and in this order.
    type: list
    elements: dict
    default: []
    suboptions:
      path: {description: Absolute path., type: path, required: true}
      owner: {description: User name., type: str, default: root}
      group: {description: Group name., type: str, default: root}
      mode: {description: Octal mode as a string., type: str, default: "0755"}
      create_only:
        description:
          - Owner, group and mode apply only when the directory is made; an existing one is left as it is (a directory
            the role does not own, such as the parent of a model directory on a dataset the host bind-mounts).
        type: bool
        default: false
  files:
    description: Text files, written after the directories.
    type: list
    elements: dict
    default: []
    suboptions:
      dest: {description: Absolute path., type: path, required: true}
      content: {description: The whole text of the file., type: str, required: true}
      owner: {description: User name., type: str, default: root}
      group: {description: Group name., type: str, default: root}
      mode: {description: Octal mode as a string., type: str, default: "0644"}
  known:
    description:
      - What M(gpuhost.sglang.host_read) read of these paths earlier in the play (its RV(gpuhost.sglang.host_read#module:stat)).
        When it shows every declared directory and file as declared (type, owner, group, mode, and the sha1 of
        the content), the action plugin answers unchanged on the controller and the module does not run; otherwise
        the module compares and writes on the host as without it.
      - The module itself ignores it.
    type: dict
notes:
  - In check mode nothing is written and the result says what would change; a user or group that the play has not
    created yet is accepted there (its ownership then counts as unchanged).
  - With C(--diff), each file whose content changes is shown before and after (give secrets with no_log).
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpuhost.sglang.attributes.files_full
"""

EXAMPLES = r"""
- name: The launcher and its directory
  gpuhost.sglang.host_files:
    directories:
      - {path: /opt/sglang/bin, mode: "0755"}
    files:
      - {dest: /opt/sglang/bin/launch.py, content: "{{ lookup('ansible.builtin.file', 'launch.py') }}", mode: "0755"}
  register: files
"""

RETURN = r"""
paths:
  description: Each path that changed (or would in check mode), with what changed (created, content, owner, group, mode).
  returned: always
  type: dict
  sample: {"/etc/nccl.conf": ["content"]}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuhost.sglang.plugins.module_utils.serving import host_files


def main():
    owned = dict(owner=dict(type="str", default=host_files.OWNER), group=dict(type="str", default=host_files.GROUP))
    module = AnsibleModule(
        argument_spec=dict(
            directories=dict(type="list", elements="dict", default=[], options=dict(
                path=dict(type="path", required=True), mode=dict(type="str", default=host_files.DIRECTORY_MODE),
                create_only=dict(type="bool", default=False), **owned)),
            files=dict(type="list", elements="dict", default=[], options=dict(
                dest=dict(type="path", required=True), content=dict(type="str", required=True),
                mode=dict(type="str", default=host_files.FILE_MODE), **owned)),
            known=dict(type="dict"),
        ),
        supports_check_mode=True,
    )
    try:
        res = host_files.ensure("", module.params["directories"], module.params["files"], module.check_mode)
    except (host_files.FilesError, OSError) as exc:
        module.fail_json(msg="host_files: %s" % exc)
    out = dict(changed=res["changed"], paths=res["paths"])
    if module._diff and res["diff"]:
        out["diff"] = res["diff"]
    module.exit_json(**out)


if __name__ == "__main__":
    main()
