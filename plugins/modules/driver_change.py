#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: driver_change
short_description: One host's NVIDIA driver change as a resumable, gated transaction
version_added: "0.1.0"
description:
  - Decides every step of a driver change of one serving host and records each one in a state file on the host
    (O(state_dir)/state.json), so that an interrupted run resumes where it stopped. playbooks/driver.yml drives it;
    docs/driver-change.md is the operator's guide.
  - "Steps: drain, record, reference, install, reboot, redeploy, gate, then adopt and rejoin (pass) or pin_back,
    reboot_back, prove and rejoin (fail), then finish. O(op=run) runs the package steps here (record, install,
    pin_back, adopt); O(op=mark) records a step the playbook ran (drain, reference, reboot, redeploy, gate,
    reboot_back, prove, rejoin) with its tasks' results, from which the gates' verdict is computed."
  - The running driver's packages (dpkg-query), versions and holds (apt-mark showhold), the container's in LXC mode
    (C(pct exec)), and the nvidia_driver role's apt preferences file are recorded as driver last-known-good
    (O(state_dir)/last-known-good.json) before anything is installed; a failed change puts exactly them back.
  - A rejoin is refused unless the gate passed or the pinned-back driver was proven serving.
author:
  - gpuhost.sglang contributors (@gpuhost)
options:
  op:
    description: C(plan) starts or resumes the change and returns the next step; C(run) runs a package step;
      C(mark) records a step the playbook ran; C(finish) closes the change (fails with the class when it failed).
    type: str
    required: true
    choices: [plan, run, mark, finish]
  step:
    description: The step of O(op=run) or O(op=mark).
    type: str
  result:
    description: O(op=mark) - the registered results of the step's tasks (C(deploy), C(accuracy), C(bench)).
    type: dict
    default: {}
  target:
    description: The driver version to change to (upstream version, e.g. C(580.105.08)).
    type: str
    required: true
  packages:
    description: dpkg-query patterns of the driver's packages on the host.
    type: list
    elements: str
    required: true
  anchors:
    description: Package names whose version is the driver's version, first installed one wins.
    type: list
    elements: str
    required: true
  mode:
    description: C(host) (bare metal, VM) or C(lxc) (the host's module and the container's userspace in lockstep).
    type: str
    default: host
    choices: [host, lxc]
  container_id:
    description: The Proxmox VE container (C(pct exec)), O(mode=lxc).
    type: int
  container_packages:
    description: dpkg-query patterns of the driver's userspace in the container, O(mode=lxc).
    type: list
    elements: str
    default: []
  preferences_path:
    description: The nvidia_driver role's apt preferences file (recorded, moved to the target, restored on a pin back).
    type: path
    default: /etc/apt/preferences.d/gpuhost-nvidia
  state_dir:
    description: Where the state, the driver last-known-good record and the history live on the host.
    type: path
    default: /var/lib/gpuhost-sglang/driver-change
  retry_failed:
    description: Try a target again that failed the gate on this host before.
    type: bool
    default: false
  boot_id_path:
    description: The file whose content changes at every boot (a rerun does not reboot twice); tests with a simulated
      reboot name the stand-in's.
    type: path
    default: /proc/sys/kernel/random/boot_id
requirements:
  - Debian or Ubuntu (dpkg, apt); Proxmox VE (C(pct)) in O(mode=lxc)
notes:
  - No check mode.
"""

EXAMPLES = r"""
- name: Start or resume the change
  gpuhost.sglang.driver_change:
    op: plan
    target: 580.105.08
    packages: [nvidia-*, libnvidia-*, libcuda1]
    anchors: [nvidia-driver-cuda, libcuda1]
  register: driver_change
"""

RETURN = r"""
next:
  description: The next step (C(none) when the driver is installed already).
  returned: op plan, run, mark
  type: str
state:
  description: The transaction's state as written to the state file.
  returned: op plan, run, mark
  type: dict
failure_class:
  description: O(op=finish) of a failed change - the gate's class, or C(pin_back_failed) / the proof's class.
  returned: on a failed change
  type: str
result:
  description: O(op=finish) - the history line (target, from, result, class, pinned_back, proven, rejoined, steps).
  returned: op finish
  type: dict
"""

import os
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuhost.sglang.plugins.module_utils.bench import store
from ansible_collections.gpuhost.sglang.plugins.module_utils.gpu import driver_change as dc


class ModuleHost(object):
    """The transaction's host interface on the real host."""

    def __init__(self, module):
        self.m = module
        ctid = module.params.get("container_id")
        self.prefix = {"host": [], "container": ["pct", "exec", str(ctid), "--"] if ctid else []}

    def run(self, argv, where="host"):
        if where == "container" and not self.prefix["container"]:
            raise dc.ChangeError("container_id is required with mode=lxc", "bad_input")
        env = {"DEBIAN_FRONTEND": "noninteractive", "LC_ALL": "C"}
        full = self.prefix[where] + (["env"] + ["%s=%s" % kv for kv in sorted(env.items())] if where == "container" else []) + argv
        return self.m.run_command(full, environ_update=env)

    def read(self, path):
        try:
            with open(path) as fh:
                return fh.read()
        except (IOError, OSError):
            return None

    def write(self, path, text):
        store.atomic_write_text(path, text)

    def remove(self, path):
        try:
            os.unlink(path)
        except OSError:
            pass

    def now(self):
        return time.time()


def main():
    module = AnsibleModule(
        argument_spec=dict(
            op=dict(type="str", required=True, choices=["plan", "run", "mark", "finish"]),
            step=dict(type="str"),
            result=dict(type="dict", default={}),
            target=dict(type="str", required=True),
            packages=dict(type="list", elements="str", required=True),
            anchors=dict(type="list", elements="str", required=True),
            mode=dict(type="str", default="host", choices=list(dc.MODES)),
            container_id=dict(type="int"),
            container_packages=dict(type="list", elements="str", default=[]),
            preferences_path=dict(type="path", default="/etc/apt/preferences.d/gpuhost-nvidia"),
            state_dir=dict(type="path", default="/var/lib/gpuhost-sglang/driver-change"),
            retry_failed=dict(type="bool", default=False),
            boot_id_path=dict(type="path", default=dc.BOOT_ID),
        ),
        required_if=[("op", "run", ["step"]), ("op", "mark", ["step"]),
                     ("mode", "lxc", ["container_id", "container_packages"])],
        supports_check_mode=False,
    )
    p = dict(module.params)
    p["host"] = os.uname()[1]
    tx = dc.DriverChange(ModuleHost(module), p)
    try:
        if p["op"] == "plan":
            out = tx.plan()
        elif p["op"] == "run":
            out = tx.run(p["step"])
        elif p["op"] == "mark":
            out = tx.mark(p["step"], p["result"])
        else:
            out = tx.finish()
    except dc.ChangeError as exc:
        module.fail_json(msg="driver_change: %s" % exc, failure_class=exc.cls, changed=tx.changed)
    if out.get("failed"):
        module.fail_json(changed=tx.changed, **out)
    module.exit_json(changed=tx.changed, **out)


if __name__ == "__main__":
    main()
