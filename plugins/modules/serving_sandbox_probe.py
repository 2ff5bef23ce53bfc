#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

DOCUMENTATION = r"""
---
module: serving_sandbox_probe
short_description: Find the sandboxing properties of a unit that this host (container) refuses, before the unit is written
version_added: "0.2.0"
description:
  - Starts transient units (C(systemd-run --wait --collect -p NAME=VALUE ... /bin/true)) with the given groups of
    sandboxing properties - all together first, then each group alone when that fails - and decides which groups
    this host refuses (C(plugins/module_utils/serving/sandbox.py)).
  - Inside an LXC container a hardened unit can fail at its start with C(226/NAMESPACE) ("Failed to set up mount
    namespacing", lxc/lxc #4052, systemd/systemd #17866); an older systemd refuses an unknown property outright.
  - With O(policy=drop) the refused groups are returned in RV(dropped) with a warning naming each; with O(policy=fail)
    the module fails naming each. It fails as well when systemd-run cannot start a transient unit at all, or when
    the kept properties still fail together. Nothing on the host changes (the transient units are collected).
author:
  - gpuhost.sglang contributors (@gpuhost)
options:
  groups:
    description:
      - The unit's sandboxing properties in groups that are kept or dropped together, each C({name, lines}) with
        C(lines) a list of C(Key=value) unit lines (for example C(DevicePolicy=closed) with its C(DeviceAllow=) lines).
    type: list
    elements: dict
    required: true
  device_allow:
    description:
      - The unit's C(DeviceAllow=) entries (nodes and classes), added as C(DeviceAllow=X rw) to the group whose
        C(device_allow) key is true.
    type: list
    elements: str
    default: []
  probe:
    description: Start the transient units; C(false) keeps every group without a check.
    type: bool
    default: true
  policy:
    description: What a refused group does (role variable C(sglang_sandbox_refused)).
    type: str
    choices: [drop, fail]
    default: drop
  user:
    description: Run the transient units as this user (the server's), as the unit would.
    type: str
  unit:
    description: The unit the properties are for (named in messages).
    type: str
    default: the unit
  command:
    description: The systemd-run command (argv prefix); a test can put a stand-in here.
    type: list
    elements: str
    default: [systemd-run]
  timeout:
    description: Seconds each transient unit may take.
    type: int
    default: 60
  cache_file:
    description:
      - Where a decision without error is kept, with what it was made for (the groups, the user, the policy, the
        command's binary) and the host's boot id. A later run with the same key answers from it without starting a
        transient unit (RV(cached)); a changed container (restarted, so a new boot id), an upgraded systemd-run or
        another request probes again. Unset, every run probes.
    type: path
  write_cache:
    description: Write O(cache_file) after a probe (the role passes false in check mode).
    type: bool
    default: true
"""

EXAMPLES = r"""
- name: Which sandboxing properties this container refuses
  gpuhost.sglang.serving_sandbox_probe:
    groups:
      - {name: ProtectProc, lines: [ProtectProc=invisible]}
      - {name: DevicePolicy, lines: [DevicePolicy=closed, "DeviceAllow=/dev/nvidiactl rw"]}
    user: sglang
    unit: sglang.service
  register: probe
"""

RETURN = r"""
cached:
  description: Whether the decision came from O(cache_file) (no transient unit started).
  returned: always
  type: bool
groups:
  description: The groups as the unit writes them, C({name, lines}), the C(DeviceAllow=) lines added.
  returned: always
  type: list
  elements: dict
kept:
  description: Names of the groups the unit keeps.
  returned: always
  type: list
  elements: str
dropped:
  description: The refused groups, each C({name, lines, evidence}) (the failed start's own words).
  returned: always
  type: list
  elements: dict
warnings_text:
  description: One warning per dropped group (also shown as module warnings).
  returned: always
  type: list
  elements: str
runs:
  description: Every transient unit started, C({lines, ok, evidence}).
  returned: always
  type: list
  elements: dict
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuhost.sglang.plugins.module_utils.serving import sandbox
from ansible_collections.gpuhost.sglang.plugins.module_utils.serving import unit_host


BOOT_ID = "/proc/sys/kernel/random/boot_id"


def _binary_stamp(command):
    """Size and mtime of the systemd-run binary: an upgrade changes what it accepts."""
    path = command if os.path.isabs(command) else next(
        (os.path.join(d, command) for d in os.environ.get("PATH", "/usr/bin:/bin").split(os.pathsep)
         if os.path.isfile(os.path.join(d, command))), None)
    try:
        st = os.stat(path) if path else None
    except OSError:
        st = None
    return "%s:%d:%d" % (path, st.st_size, int(st.st_mtime)) if st else "absent"


def main():
    module = AnsibleModule(
        argument_spec=dict(
            groups=dict(type="list", elements="dict", required=True),
            device_allow=dict(type="list", elements="str", default=[]),
            probe=dict(type="bool", default=True),
            policy=dict(type="str", choices=list(sandbox.POLICIES), default="drop"),
            user=dict(type="str"),
            unit=dict(type="str", default="the unit"),
            command=dict(type="list", elements="str", default=["systemd-run"]),
            timeout=dict(type="int", default=60),
            cache_file=dict(type="path"),
            write_cache=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    p = module.params
    try:
        groups = sandbox.expand(p["groups"], p["device_allow"])
    except sandbox.SandboxError as exc:
        module.fail_json(msg=str(exc))
    if not p["probe"]:
        module.exit_json(changed=False, cached=False, groups=groups, kept=[g["name"] for g in groups], dropped=[],
                         warnings_text=[], runs=[])
    counter = [0]

    def run(lines):
        counter[0] += 1
        name = sandbox.PROBE_UNIT % (os.getpid(), counter[0])
        argv = list(p["command"]) + ["--wait", "--collect", "--unit=%s" % name,
                                     "--property=RuntimeMaxSec=%d" % p["timeout"]]
        if p["user"]:
            argv.append("--uid=%s" % p["user"])
        argv += ["--property=%s" % line for line in lines] + ["/bin/true"]
        rc, out, err = module.run_command(argv)
        if rc == 0:
            return True, ""
        # Not "-u NAME": that matches the transient unit's own processes by _SYSTEMD_UNIT=, which journald reads from
        # /proc/PID/cgroup and loses when the process has exited first (systemd/systemd #2913; with systemd 255's
        # executor the line can even name init.scope, #30886). The failed child's own words ("Failed to set up mount
        # namespacing: ...") are exactly such a line; systemd writes them with UNIT=NAME, which journald keeps.
        _jrc, jout, _jerr = module.run_command(["journalctl", "--no-pager", "-o", "cat", "-n", "20",
                                                "_SYSTEMD_UNIT=%s" % name, "+", "UNIT=%s" % name])
        return False, "\n".join([out or "", err or "", jout or ""])

    key = sandbox.cache_key(groups, p["user"], p["policy"], p["command"], unit_host.read_text("", BOOT_ID),
                            _binary_stamp(p["command"][0]))
    res = sandbox.cached(unit_host.read_text("", p["cache_file"]) if p["cache_file"] else None, key)
    cached = res is not None
    if not cached:
        res = sandbox.decide(groups, run, p["policy"], p["unit"])
        if p["cache_file"] and p["write_cache"] and not res["error"]:
            unit_host.write_atomic("", p["cache_file"], sandbox.cache_record(key, res), 0o644)
    result = dict(changed=False, cached=cached, groups=groups, kept=res["kept"], dropped=res["dropped"],
                  warnings_text=res["warnings"], runs=res["runs"])
    if res["error"]:
        module.fail_json(msg=res["error"], **result)
    for w in res["warnings"]:
        module.warn(w)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
