#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: serving_unit
short_description: One step of the serving deploy transaction on the host (files and systemd)
version_added: "0.2.0"
description:
  - The host side of M(gpuhost.sglang.serving_deploy), which decides; this module does one operation per call and
    reports what it did. Not meant to be called from a play directly.
  - C(inspect) reads the last-known-good record and the unit's state; C(install) writes the unit and environment
    files; C(restart), C(stop) act on the unit; C(record) makes the live configuration last-known-good;
    C(restore) puts last-known-good back and restarts it; C(reload) reloads systemd's units; C(state) reads the
    unit's ActiveState and MainPID and, with O(state_file), a replica rank's peer-watch state.
author:
  - gpuhost.sglang contributors (@gpuhost)
options:
  op:
    description: The operation.
    type: str
    required: true
    choices: [inspect, install, restart, stop, record, restore, reload, state]
  unit:
    description: Name of the server's systemd unit.
    type: str
    required: true
  unit_dir:
    description: Directory of the unit file.
    type: path
    default: /etc/systemd/system
  env_file:
    description: The unit's environment file (secrets, mode 0600).
    type: path
  lkg_dir:
    description: Directory of the last-known-good record (meta.json and its copies).
    type: path
  unit_content:
    description: The unit file (C(install)); with O(env_content) on C(inspect), the contents whose install to preview.
    type: str
  env_content:
    description: The environment file (C(install), the C(inspect) preview); never logged.
    type: str
  stop_unit:
    description: Another unit to stop and disable before the restart (last-known-good's under another name).
    type: str
    default: ""
  disable:
    description: With C(stop), disable the unit too.
    type: bool
    default: false
  meta:
    description: The record's fields (C(record)); the unit and environment contents are added from the live files.
    type: dict
  timeout_content:
    description: The start-timeout drop-in (C(record)).
    type: str
  remove_paths:
    description: Files of a renamed unit to remove (C(record)).
    type: list
    elements: path
    default: []
  forget_unit:
    description: A renamed unit whose failed state to clear (C(record)).
    type: str
    default: ""
  install_dir:
    description: Where the engine venvs live; the ones that are not O(keep_venv) are removed (C(record)).
    type: path
  keep_venv:
    description: The live venv (C(record)).
    type: path
  lkg:
    description: The last-known-good record to restore (C(restore)), as C(inspect) returned it.
    type: dict
  restart:
    description: With C(restore), restart last-known-good (off for a replica's rank, restarted in order later).
    type: bool
    default: true
  state_file:
    description: With C(state), the peer watch's state file of a replica rank (JSON).
    type: path
  health_url:
    description:
      - With C(inspect), while the unit is active, also take M(gpuhost.sglang.serving_ready)'s one look at the server
        (its journal since this call, its unit state, this health URL), returned as C(ready).
    type: str
  api_key:
    description: The API key for O(health_url), when the server requires one.
    type: str
notes:
  - Check mode is supported; C(inspect) only reads.
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpuhost.sglang.attributes.check_mode_full
"""

EXAMPLES = r"""
- name: What is live and what last-known-good holds
  gpuhost.sglang.serving_unit:
    op: inspect
    unit: sglang.service
    env_file: /etc/sglang/sglang.env
    lkg_dir: /etc/sglang/last-known-good
"""

RETURN = r"""
lkg:
  description: The last-known-good record (C(inspect)); empty when there is none.
  returned: op=inspect
  type: dict
active:
  description: The unit's ActiveState (C(inspect)).
  returned: op=inspect
  type: str
invocation:
  description:
    - The unit's systemd InvocationID while it is active (C(inspect)), empty otherwise. C(record) stores the one
      of the process that passed the gate in the record, so a later no-op deploy can tell the same process from a
      restarted one.
  returned: op=inspect
  type: str
ready:
  description:
    - With O(health_url), while the unit is active (C(inspect)) - M(gpuhost.sglang.serving_ready)'s result of one look
      without waiting (state, cls, hint, evidence, journal_tail, health, unit_state), the journal read from this call's
      clock.
  returned: op=inspect with O(health_url) and the unit active
  type: dict
files:
  description:
    - The SHA-256 of each file a deploy owns (C(inspect)), null for one that is missing - the unit, the environment
      file, the last-known-good record (C(meta.json), the unit and C(env) copies) and the start-timeout drop-in.
  returned: op=inspect
  type: dict
preview:
  description: What C(install) of O(unit_content) and O(env_content) would change (unit_changed, env_changed).
  returned: op=inspect with O(unit_content) and O(env_content)
  type: dict
since:
  description: The host clock (epoch seconds, to the microsecond) before a restart (C(restart), C(restore)).
  returned: op=restart or op=restore
  type: float
pid:
  description: The unit's MainPID (C(state)); 0 when it runs no process.
  returned: op=state
  type: int
replica:
  description: The peer watch's state file (C(state) with O(state_file)); null when absent or not JSON.
  returned: op=state
  type: dict
paths:
  description: The paths C(record) changed.
  returned: op=record
  type: list
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuhost.sglang.plugins.module_utils.serving import ready as sr
from ansible_collections.gpuhost.sglang.plugins.module_utils.serving import unit_host


def main():
    module = AnsibleModule(
        argument_spec=dict(
            op=dict(type="str", required=True,
                    choices=["inspect", "install", "restart", "stop", "record", "restore", "reload", "state"]),
            unit=dict(type="str", required=True),
            unit_dir=dict(type="path", default="/etc/systemd/system"),
            env_file=dict(type="path"),
            lkg_dir=dict(type="path"),
            unit_content=dict(type="str"),
            env_content=dict(type="str", no_log=True),
            stop_unit=dict(type="str", default=""),
            disable=dict(type="bool", default=False),
            meta=dict(type="dict"),
            timeout_content=dict(type="str"),
            remove_paths=dict(type="list", elements="path", default=[]),
            forget_unit=dict(type="str", default=""),
            install_dir=dict(type="path"),
            keep_venv=dict(type="path"),
            lkg=dict(type="dict"),
            restart=dict(type="bool", default=True),
            state_file=dict(type="path"),
            health_url=dict(type="str"),
            api_key=dict(type="str", no_log=True),
        ),
        required_if=[
            ("op", "inspect", ("env_file", "lkg_dir")),
            ("op", "install", ("env_file", "unit_content", "env_content")),
            ("op", "record", ("env_file", "lkg_dir", "meta", "timeout_content")),
            ("op", "restore", ("env_file", "lkg")),
        ],
        supports_check_mode=True,
    )
    p, check = module.params, module.check_mode

    def run(argv):
        return module.run_command(argv)

    try:
        if p["op"] == "inspect":
            preview = {"unit_content": p["unit_content"], "env_content": p["env_content"]} \
                if p["unit_content"] is not None and p["env_content"] is not None else None
            out = unit_host.inspect("", run, p["unit"], p["unit_dir"], p["env_file"], p["lkg_dir"], preview)
            # the record carries the environment file (secrets): only whether it is there leaves the host
            lkg = out.pop("lkg")
            out["lkg"] = dict((k, v) for k, v in lkg.items() if k != "env_b64")
            out["lkg_has_env"] = "env_b64" in lkg
            if p["health_url"] and out["active"] == "active":
                # serving_ready's one look (no wait) in the same round trip: a no-op deploy needs no other call
                res = sr.wait(p["unit"], p["health_url"], out["clock"], sr.compile_signatures(sr.DEFAULT_SIGNATURES), 0,
                              api_key=p["api_key"])
                out["ready"] = dict(state=res["state"], cls=res["cls"] or "", hint=res["hint"], evidence=res["evidence"] or "",
                                    journal_tail=res["journal_tail"], health=res["health"], unit_state=res["unit"])
            module.exit_json(changed=False, **out)
        if p["op"] == "install":
            out = unit_host.install("", p["unit"], p["unit_dir"], p["unit_content"], p["env_file"], p["env_content"], check)
            diff = {"before": out.pop("unit_before"), "after": p["unit_content"],
                    "before_header": p["unit"], "after_header": p["unit"]}
            module.exit_json(changed=out["unit_changed"] or out["env_changed"], diff=diff, **out)
        if p["op"] == "restart":
            if check:
                module.exit_json(changed=True, since=0)
            module.exit_json(changed=True, since=unit_host.restart(run, p["unit"], p["stop_unit"]))
        if p["op"] == "stop":
            if check:
                module.exit_json(changed=True)
            module.exit_json(changed=True, stopped=unit_host.stop(run, p["unit"], p["disable"]))
        if p["op"] == "state":
            module.exit_json(changed=False, **unit_host.rank_state("", run, p["unit"], p["state_file"]))
        if p["op"] == "reload":
            if not check:
                rc, _out, err = unit_host.systemctl(run, "daemon-reload")
                if rc != 0:
                    raise unit_host.HostError("systemctl daemon-reload failed (rc %d): %s" % (rc, err))
            module.exit_json(changed=False)
        if p["op"] == "record":
            paths = unit_host.record("", run, p["lkg_dir"], p["meta"], p["unit"], p["unit_dir"], p["env_file"],
                                     p["timeout_content"], p["remove_paths"], p["forget_unit"], p["install_dir"],
                                     p["keep_venv"], check)
            module.exit_json(changed=bool(paths), paths=paths)
        lkg = dict(p["lkg"])
        if "env_b64" not in lkg:
            full = unit_host.inspect("", run, lkg["unit"], p["unit_dir"], lkg["env_file"], p["lkg_dir"] or "")["lkg"]
            lkg["env_b64"] = full.get("env_b64", "")
        since = unit_host.restore("", run, lkg, p["unit"], p["unit_dir"], p["env_file"], check, p["restart"])
        module.exit_json(changed=True, since=since)
    except (unit_host.HostError, KeyError, IOError, OSError) as exc:
        module.fail_json(msg="serving_unit %s on %s: %s" % (p["op"], p["unit"], exc))


if __name__ == "__main__":
    main()
