#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: smg_worker
short_description: Drain, remove, add back and check workers of SGLang's model gateway (SMG) through its worker API
version_added: "0.2.0"
description:
  - Talks to the worker API of an SMG router (PyPI C(smg)); run it on the router host (C(delegate_to)).
  - C(state=absent) removes every registration of O(url) (SMG drains it first, no new requests, in-flight requests
    finish) and waits until the router forgets it, at most O(drain_timeout) seconds.
  - C(state=present) registers O(url) unless a ready registration exists, waits until SMG reports it ready, and with
    O(probe) sends requests through the router until one is counted as a success on that worker.
  - C(state=query) lists the workers; with O(batch) and O(capacity_floor) it fails when taking the batch out would
    leave fewer than O(capacity_floor) healthy workers.
author:
  - gpuhost.sglang contributors (@gpuhost)
options:
  router_url:
    description: Base URL of the router's HTTP API.
    type: str
    default: http://127.0.0.1:30000
  metrics_url:
    description: The router's Prometheus endpoint (C(--prometheus-port)); needed by O(probe).
    type: str
    default: http://127.0.0.1:29000/metrics
  url:
    description: The worker's URL as the router reaches it, e.g. C(http://10.0.0.5:30000). Required unless C(state=query).
    type: str
  state:
    description: What to do.
    type: str
    choices: [present, absent, query]
    default: present
  drain_timeout:
    description: Seconds to wait for a removed worker's in-flight requests to finish.
    type: int
    default: 120
  ready_timeout:
    description: Seconds to wait until an added worker is ready in the router.
    type: int
    default: 60
  manifest:
    description:
      - The router's file-discovery manifest (C(router_worker_discovery=file) of the router role), on the router
        host. Then the manifest is the worker set, kept across restarts of the router; C(state=absent) removes
        O(url) from it (SMG drains and removes the worker) and C(state=present) lists it (SMG registers it); the
        worker API is only read. Without it, workers are removed and added through the worker API.
    type: path
  probe:
    description: After C(state=present), prove that a request through the router reaches this worker.
    type: bool
    default: true
  probe_model:
    description: The C(model) field of the probe requests (transformers serve wants the served path).
    type: str
    default: default
  probe_attempts:
    description: Probe requests sent at most (the policy decides where each lands).
    type: int
    default: 16
  batch:
    description: Worker URLs about to be taken out (C(state=query) with O(capacity_floor)).
    type: list
    elements: str
    default: []
  capacity_floor:
    description: Fewest healthy workers that must stay in the router while O(batch) is out.
    type: int
    default: 0
  api_key:
    description: Bearer token of the router (C(--api-key)).
    type: str
notes:
  - Check mode is supported; C(absent) and C(present) only report what they would do.
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpuhost.sglang.attributes.check_mode_full
"""

EXAMPLES = r"""
- name: Drain this host out of the router
  gpuhost.sglang.smg_worker:
    url: "http://{{ ansible_host }}:30000"
    state: absent
    drain_timeout: 300
  delegate_to: "{{ groups['sglang_routers'][0] }}"
"""

RETURN = r"""
workers:
  description: The router's workers after the call (id, url, status, is_healthy).
  returned: always
  type: list
  elements: dict
healthy:
  description: URLs of the ready, healthy workers.
  returned: always
  type: list
  elements: str
drained_seconds:
  description: Seconds from the removal request until the router forgot the worker (C(state=absent)).
  returned: when state is absent
  type: float
probe_requests:
  description: Requests sent through the router until one reached this worker (C(state=present), O(probe)).
  returned: when state is present and probe is true
  type: int
"""


import os
import tempfile
import uuid

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuhost.sglang.plugins.module_utils.serving.router import (
    RouterError, SmgClient, capacity_check, manifest_with, metrics_text, parse_worker_successes)


def edit_manifest(path, url, present):
    """List ``url`` in the manifest or not, atomically, keeping the file's owner and mode; returns changed."""
    try:
        with open(path) as fh:
            text = fh.read()
        st = os.stat(path)
    except (IOError, OSError) as exc:
        raise RouterError("manifest %s cannot be read (%s): the router role writes it with router_worker_discovery=file"
                          % (path, exc))
    new, changed = manifest_with(text, url, present)
    if changed:
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".workers.")
        with os.fdopen(fd, "w") as fh:
            fh.write(new)
        os.chown(tmp, st.st_uid, st.st_gid)
        os.chmod(tmp, st.st_mode & 0o7777)
        os.rename(tmp, path)
    return changed


def probe(client, p, url):
    """Requests through the router until one is counted on ``url``. Each prompt is new: under the cache_aware
    policy (the router role's default) a prompt the router has seen goes back to the worker that served it, so
    a fixed prompt never reached a worker added back after another one (measured with smg 1.13.0 in
    tests/integration/test_fleet_roll.py); a prompt no worker has cached goes to the one with the least cached."""
    base = parse_worker_successes(metrics_text(p["metrics_url"])).get(url, 0)
    for n in range(1, p["probe_attempts"] + 1):
        body = {"model": p["probe_model"], "messages": [{"role": "user", "content": "%s ping" % uuid.uuid4().hex}],
                "max_tokens": 1}
        client.call("POST", "/v1/chat/completions", body)
        if parse_worker_successes(metrics_text(p["metrics_url"])).get(url, 0) > base:
            return n
    raise RouterError("%d requests through the router %s: none reached %s" % (p["probe_attempts"], client.base, url))


def main():
    module = AnsibleModule(
        argument_spec=dict(
            router_url=dict(type="str", default="http://127.0.0.1:30000"),
            metrics_url=dict(type="str", default="http://127.0.0.1:29000/metrics"),
            url=dict(type="str"),
            state=dict(type="str", choices=["present", "absent", "query"], default="present"),
            drain_timeout=dict(type="int", default=120),
            ready_timeout=dict(type="int", default=60),
            probe=dict(type="bool", default=True),
            probe_model=dict(type="str", default="default"),
            probe_attempts=dict(type="int", default=16),
            batch=dict(type="list", elements="str", default=[]),
            capacity_floor=dict(type="int", default=0),
            api_key=dict(type="str", no_log=True),
            manifest=dict(type="path"),
        ),
        required_if=[("state", "present", ["url"]), ("state", "absent", ["url"])],
        supports_check_mode=True,
    )
    p = module.params
    url = (p["url"] or "").rstrip("/")
    client = SmgClient(p["router_url"], api_key=p["api_key"])
    result = dict(changed=False)
    try:
        if p["state"] == "query":
            capacity_check(client.healthy_urls(), [b.rstrip("/") for b in p["batch"]], p["capacity_floor"])
        elif module.check_mode:
            present = bool(client.find(url))
            result["changed"] = present if p["state"] == "absent" else not present
        elif p["manifest"] and p["state"] == "absent":
            result["changed"] = edit_manifest(p["manifest"], url, False)
            result["drained_seconds"] = client.wait_gone(url, p["drain_timeout"])
        elif p["state"] == "absent":
            result["changed"], result["drained_seconds"], result["removed_ids"] = client.remove(url, p["drain_timeout"])
        else:
            if p["manifest"]:
                result["changed"] = edit_manifest(p["manifest"], url, True)
                result["worker_id"] = client.wait_ready(url, p["ready_timeout"])
            else:
                result["changed"], result["worker_id"] = client.add(url, p["ready_timeout"])
            if p["probe"]:
                result["probe_requests"] = probe(client, p, url)
        result["workers"] = [dict((k, w.get(k)) for k in ("id", "url", "status", "is_healthy")) for w in client.workers()]
        result["healthy"] = client.healthy_urls()
    except RouterError as exc:
        module.fail_json(msg=str(exc), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
