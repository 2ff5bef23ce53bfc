#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: hf_snapshot
short_description: Stage a Hugging Face model snapshot offline first, with a disk-space preflight and integrity check
version_added: "0.1.0"
description:
  - Offline first. After a verified download it writes a manifest into O(local_dir) (C(.gpuhost-snapshot.json))
    with the repository, the requested revision, the commit it resolved to, and every file's size, sha256 and mtime.
  - When the directory matches that manifest (same O(repo_id), O(revision) equal to the recorded revision or commit,
    every file of the recorded size, and any file whose mtime changed still of the recorded sha256), the result is
    C(present) with C(changed=false) and no request reaches the Hub. A branch or tag is resolved once, at the download;
    pin a commit and change O(revision) to move to another one.
  - Otherwise reads the repository's file list and sizes at O(revision) and fails before downloading anything when
    the filesystem lacks the space still needed (plus 5% headroom), or when the revision or repository does not exist
    (the message names the variable, see O(names)).
  - Downloads with huggingface_hub's snapshot_download (complete files are kept; a connection cut mid-file is resumed
    with an HTTP Range request by huggingface_hub's http_get).
  - Verifies every file's size, the sha256 of LFS files and the git blob id of the others, then writes the manifest.
  - Writes its progress to O(progress_file) while it downloads; run it with C(async) and follow it with
    M(gpuhost.sglang.async_progress). A second run into the same directory waits for the first (a lock file per
    directory), then finds its manifest.
  - Run it with the engine venv's interpreter (it needs huggingface_hub).
author:
  - gpuhost.sglang contributors (@gpuhost)
requirements:
  - huggingface_hub
options:
  repo_id:
    description: Repository id, e.g. C(lukealonso/GLM-5-NVFP4).
    type: str
    required: true
  revision:
    description: Branch, tag or commit. Pin a commit for a reproducible model.
    type: str
    default: main
  local_dir:
    description: Target directory.
    type: path
    required: true
  token:
    description:
      - Hugging Face token (from vault), for private or gated repositories.
      - With O(send_token=auto) it is sent only when the Hub answers that the repository needs one; a public
        repository is never sent a token (the Hub refuses an invalid token with 401 even there).
    type: str
  send_token:
    description: C(auto) sends O(token) only to a repository that needs it; C(always) on every request.
    type: str
    choices: [auto, always]
    default: auto
  verify:
    description: Integrity check after download (the manifest records every file's sha256 either way).
    type: str
    choices: [sha256, size]
    default: sha256
  rehash:
    description: Hash every file again before trusting the manifest (otherwise only files whose mtime changed).
    type: bool
    default: false
  progress_file:
    description: JSON progress file written every O(progress_interval) seconds while downloading.
    type: path
  progress_interval:
    description: Seconds between progress writes.
    type: float
    default: 10
  names:
    description: Variable names to use in error messages instead of the option names (keys C(repo_id), C(revision), C(token)).
    type: dict
    default: {}
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpuhost.sglang.attributes.check_mode_full
"""

EXAMPLES = r"""
- name: Stage GLM-5-NVFP4 (a public repository, no token)
  gpuhost.sglang.hf_snapshot:
    repo_id: lukealonso/GLM-5-NVFP4
    revision: 0123456789abcdef0123456789abcdef01234567   # the commit you tested
    local_dir: /srv/models/glm-5-nvfp4
    progress_file: /var/lib/sglang/model-download.json
  vars:
    ansible_python_interpreter: /opt/sglang/venv/bin/python
  async: 86400
  poll: 0
  register: job
"""

RETURN = r"""
commit:
  description: Commit sha of the staged snapshot.
  returned: always
  type: str
status:
  description: C(present) (matches its manifest), C(downloaded), C(verified) (files were there, manifest written),
    C(would download) or C(would verify).
  returned: always
  type: str
hub_requests:
  description: Whether the Hub was asked anything (false when the manifest matched).
  returned: always
  type: bool
total_bytes:
  description: Size of the snapshot.
  returned: always
  type: int
missing_bytes:
  description: Bytes that still had to be downloaded (with headroom).
  returned: when changed
  type: int
reason:
  description: Why the manifest did not match (when the Hub was asked).
  returned: when hub_requests
  type: str
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
            send_token=dict(type="str", choices=["auto", "always"], default="auto"),
            verify=dict(type="str", choices=["sha256", "size"], default="sha256"),
            rehash=dict(type="bool", default=False),
            progress_file=dict(type="path"),
            progress_interval=dict(type="float", default=10),
            names=dict(type="dict", default={}),
        ),
        supports_check_mode=True,
    )
    p = module.params
    try:
        api = hs.HubClient(p["token"], p["send_token"], p["names"])
    except ImportError:
        module.fail_json(msg="hf_snapshot needs huggingface_hub: run it with the engine venv's interpreter "
                             "(ansible_python_interpreter: <venv>/bin/python)")
    try:
        with hs.DirectoryLock(p["local_dir"], enabled=not module.check_mode) as lock:
            res = hs.stage(api, p["repo_id"], p["revision"], p["local_dir"], p["verify"], module.check_mode,
                           progress_file=p["progress_file"], progress_interval=p["progress_interval"], rehash=p["rehash"])
        res["waited_for_lock_s"] = round(lock.waited, 1)
    except hs.SnapshotError as exc:
        module.fail_json(msg="%s: %s" % (exc.cls, exc), cls=exc.cls)
    except Exception as exc:  # download errors (network, disk) carry their own message
        module.fail_json(msg="download: %s: %s" % (type(exc).__name__, exc), cls="download")
    module.exit_json(**res)


if __name__ == "__main__":
    main()
