#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import (absolute_import, division, print_function)

__metaclass__ = type

DOCUMENTATION = r"""
---
module: apt_key_fingerprint
short_description: Check a repository signing key file's primary fingerprint before apt is told to trust it
version_added: "0.1.0"
description:
  - Reads the OpenPGP public key in O(path) (ASCII-armored or binary; no gpg needed, a Debian 13 host verifies with
    sqv) and compares its primary key fingerprint with O(fingerprint).
  - On a mismatch the key file is removed (apt must not trust it through a sources file written earlier) and the
    task fails naming O(fingerprint_var), its value and the key's actual fingerprint.
  - With O(fingerprint) empty it only reports the fingerprint (a repository of one's own, its key not in the data).
author:
  - gpuhost.sglang contributors (@gpuhost)
options:
  path:
    description: The key file on the host.
    type: path
    required: true
  fingerprint:
    description: Expected primary key fingerprint (hex, spaces and case ignored); empty = report only.
    type: str
    default: ""
  fingerprint_var:
    description: The variable named in the failure message.
    type: str
    default: nvidia_driver_repo_key_fingerprint
  source:
    description: Where the key came from (URL or controller file), for the message.
    type: str
    default: ""
"""

EXAMPLES = r"""
- name: The key is NVIDIA's debian13 key
  gpuhost.sglang.apt_key_fingerprint:
    path: /usr/share/keyrings/gpuhost-nvidia-cuda.asc
    fingerprint: 02182E60104FCDC26EAE1B8597A5D4CB8793F200
"""

RETURN = r"""
fingerprint:
  description: The key's primary fingerprint (upper-case hex).
  returned: when the file holds a key
  type: str
checked:
  description: Whether it was compared with an expected fingerprint.
  returned: success
  type: bool
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuhost.sglang.plugins.module_utils.gpu import openpgp


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            fingerprint=dict(type="str", default=""),
            fingerprint_var=dict(type="str", default="nvidia_driver_repo_key_fingerprint"),
            source=dict(type="str", default=""),
        ),
        supports_check_mode=True,
    )
    p = module.params
    where = " (from %s)" % p["source"] if p["source"] else ""
    expected = openpgp.normalise(p["fingerprint"])
    if not os.path.isfile(p["path"]):
        if module.check_mode:  # the key is placed by a task check mode did not run
            module.exit_json(changed=False, checked=False, fingerprint="")
        module.fail_json(msg="repository key %s%s does not exist" % (p["path"], where))
    with open(p["path"], "rb") as fh:
        data = fh.read()
    try:
        actual = openpgp.primary_fingerprint(data)
    except openpgp.NotAKey as exc:
        actual = ""
        problem = "holds no OpenPGP public key (%s)" % exc
    else:
        problem = "" if not expected or actual == expected else "has the primary key fingerprint %s" % actual
    if problem:
        removed = not module.check_mode
        if removed:
            os.unlink(p["path"])
        msg = ("%s=%s: the repository key %s%s %s; apt was not told to trust it%s. Set %s to the fingerprint of the "
               "key this repository is really signed with (hex, 40 characters for an OpenPGP v4 key), or point the "
               "key URL at the right key.")
        module.fail_json(msg=msg % (p["fingerprint_var"], p["fingerprint"] or '""', p["path"], where, problem,
                                    " and it was removed" if removed else "", p["fingerprint_var"]),
                         fingerprint=actual, checked=bool(expected), changed=removed)
    module.exit_json(changed=False, checked=bool(expected), fingerprint=actual)


if __name__ == "__main__":
    main()
