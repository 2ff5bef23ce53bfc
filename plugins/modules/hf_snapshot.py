#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: hf_snapshot
short_description: Stage a Hugging Face model snapshot with a disk-space preflight and integrity check
version_added: "0.1.0"
description:
  - Reads the repository's file list and sizes first and fails before downloading anything when the
    filesystem lacks the space still needed (plus 5% headroom).
  - Downloads with huggingface_hub's snapshot_download, which resumes interrupted files.
  - Verifies every file's size and, for LFS files, its sha256; records the verified commit in a marker file so
    that later runs are idempotent (C(changed=false)) without re-hashing.
  - Run it with the engine venv's interpreter (it needs huggingface_hub).
author:
  - gpuhost.sglang contributors (@gpuhost)
requirements:
  - huggingface_hub
options:
  repo_id:
    description: Repository id, e.g. C(zai-org/GLM-5-NVFP4).
    type: str
    required: true
  revision:
    description: Branch, tag or commit.
    type: str
    default: main
  local_dir:
    description: Target directory.
    type: path
    required: true
  token:
    description: Hugging Face token (from vault).
    type: str
  verify:
    description: Integrity check after download.
    type: str
    choices: [sha256, size]
    default: sha256
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpuhost.sglang.attributes.check_mode_full
"""

EXAMPLES = r"""
- name: Stage GLM-5-NVFP4
  gpuhost.sglang.hf_snapshot:
    repo_id: zai-org/GLM-5-NVFP4
    local_dir: /srv/models/glm-5-nvfp4
    token: "{{ vault_hf_token }}"
  vars:
    ansible_python_interpreter: /opt/sglang/venv/bin/python
  no_log: true
"""

RETURN = r"""
commit:
  description: Commit sha of the staged snapshot.
  returned: always
  type: str
status:
  description: C(present), C(downloaded) or C(would download).
  returned: always
  type: str
total_bytes:
  description: Size of the snapshot.
  returned: always
  type: int
missing_bytes:
  description: Bytes that still had to be downloaded (with headroom).
  returned: when changed
  type: int
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuhost.sglang.plugins.module_utils.serving import hf_snapshot as hs


def main():
    module = AnsibleModule(
        argument_spec=dict(
            repo_id=dict(type="str", required=True),
            revision=dict(type="str", default="main"),
            local_dir=dict(type="path", required=True),
            token=dict(type="str", no_log=True),
            verify=dict(type="str", choices=["sha256", "size"], default="sha256"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    try:
        api = hs.HubClient()
    except ImportError:
        module.fail_json(msg="hf_snapshot needs huggingface_hub: run it with the engine venv's interpreter "
                             "(ansible_python_interpreter: <venv>/bin/python)")
    try:
        res = hs.stage(api, p["repo_id"], p["revision"], p["local_dir"], p["token"], p["verify"], module.check_mode)
    except hs.SnapshotError as exc:
        module.fail_json(msg="%s: %s" % (exc.cls, exc), cls=exc.cls)
    except Exception as exc:  # hub errors (auth, 404, network) carry their own message
        module.fail_json(msg="download: %s: %s" % (type(exc).__name__, exc), cls="download")
    module.exit_json(**res)


if __name__ == "__main__":
    main()
