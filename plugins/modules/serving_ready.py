#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: serving_ready
short_description: Wait for an inference server unit to become ready and classify why it did not
version_added: "0.1.0"
description:
  - Polls a systemd unit running an OpenAI-compatible inference server (SGLang, vLLM, transformers serve)
    for up to O(wait) seconds.
  - Ready means the unit is active, no failure signature is in its journal since O(since), and the health
    endpoint (SGLang's C(/health_generate) actually generates a token) answers HTTP 200.
  - Failures are classified from the journal (NaN / device-side assert, CUDA-graph capture failure,
    unsupported architecture, out of memory, wedged detokenizer, bad arguments, startup failure, ...).
  - Returns C(state=starting) when still loading so that a task can retry with C(until) and show progress.
author:
  - gpuhost.sglang contributors (@gpuhost)
options:
  unit:
    description: Name of the systemd unit.
    type: str
    required: true
  health_url:
    description: Full URL of the health endpoint.
    type: str
    required: true
  since:
    description: Epoch seconds of the (re)start, to the microsecond; journal lines before it are ignored.
    type: float
    required: true
  wait:
    description: Seconds to keep polling in this call before returning C(state=starting).
    type: int
    default: 10
  signatures:
    description:
      - Failure log signatures, tried in order; the first match names the class.
      - Defaults to the built-in list (see module_utils/serving/ready.py).
    type: list
    elements: dict
  api_key:
    description: Bearer token for the health endpoint.
    type: str
  fail_on_failure:
    description: Fail the task when the server is classified as failed.
    type: bool
    default: false
notes:
  - Check mode is supported; the module only reads.
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpuhost.sglang.attributes.check_mode_full
"""

EXAMPLES = r"""
- name: Wait for the server, showing progress every 10 s
  gpuhost.sglang.serving_ready:
    unit: sglang.service
    health_url: http://127.0.0.1:30000/health_generate
    since: "{{ restart_epoch }}"
  register: ready
  until: ready.state != 'starting'
  retries: 90
  delay: 0
"""

RETURN = r"""
state:
  description: One of C(ready), C(starting), C(failed).
  returned: always
  type: str
cls:
  description: Failure class when state is C(failed).
  returned: always
  type: str
hint:
  description: What the failure class usually means and what to try.
  returned: always
  type: str
evidence:
  description: The journal line that decided the class.
  returned: always
  type: str
journal_tail:
  description: The last 30 journal lines of the unit since O(since).
  returned: always
  type: list
  elements: str
health:
  description: Result of the last health probe.
  returned: always
  type: str
unit_state:
  description: systemd properties of the unit (ActiveState, SubState, NRestarts, ...).
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuhost.sglang.plugins.module_utils.serving import ready as sr


def main():
    module = AnsibleModule(
        argument_spec=dict(
            unit=dict(type="str", required=True),
            health_url=dict(type="str", required=True),
            since=dict(type="float", required=True),
            wait=dict(type="int", default=10),
            signatures=dict(type="list", elements="dict"),
            api_key=dict(type="str", no_log=True),
            fail_on_failure=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    p = module.params
    try:
        sigs = sr.compile_signatures(p["signatures"] if p["signatures"] is not None else sr.DEFAULT_SIGNATURES)
    except ValueError as exc:
        module.fail_json(msg="signatures: %s" % exc)
    res = sr.wait(p["unit"], p["health_url"], p["since"], sigs, max(0, p["wait"]), api_key=p["api_key"])
    out = dict(changed=False, state=res["state"], cls=res["cls"] or "", hint=res["hint"],
               evidence=res["evidence"] or "", journal_tail=res["journal_tail"], health=res["health"],
               unit_state=res["unit"])
    if res["state"] == sr.STATE_FAILED and p["fail_on_failure"]:
        module.fail_json(msg="%s: %s (%s)" % (res["cls"], res["hint"], res["evidence"]), **out)
    module.exit_json(**out)


if __name__ == "__main__":
    main()
