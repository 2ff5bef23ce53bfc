#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: serving_accuracy
short_description: Accuracy gate of a serving configuration against last-known-good (exact-match score, greedy equivalence)
version_added: "0.3.0"
description:
  - "O(action=measure): measures last-known-good (the configuration serving at O(base_url) now) and writes the
    measurements to O(lkg_file): the exact-match score on the shipped task set (528 generated arithmetic and string
    items, module_utils/bench/taskset.py) and/or two greedy runs of N fixed prompts (the second in another order:
    last-known-good's agreement with itself is the tolerance)."
  - "O(action=gate): measures the candidate serving at O(base_url) and compares it with O(lkg_file). C(score) fails
    when the candidate is worse beyond chance (one-sided exact McNemar mid-p < O(alpha) on the same items, and a
    drop above O(margin)); C(greedy) fails when its agreement with last-known-good is below last-known-good's
    agreement with itself minus O(greedy_margin). The message carries both scores."
  - Which check a change needs (O(checks=auto)) comes from the options it changes (O(delta)) - scheduling and
    CUDA-graph options get C(greedy), KV-cache dtype, quantization, attention and other kernel backends, and any
    option not listed get C(score). Statistics, sources and costs in docs/bench.md, "Accuracy gate".
  - Requests are completions (or chat) at temperature 0 with a small max_tokens (8 for the score, 32 for greedy).
author:
  - gpuhost.sglang contributors (@gpuhost)
options:
  action:
    description: C(measure) last-known-good, or C(gate) a candidate.
    type: str
    required: true
    choices: [measure, gate]
  base_url:
    description: Server base URL (C(/v1) is appended when missing).
    type: str
    required: true
  lkg_file:
    description: JSON file of last-known-good's measurements (written by C(measure), read by C(gate)).
    type: path
    required: true
  checks:
    description: C(auto) (from O(delta)) or a list of C(score), C(greedy).
    type: raw
    default: auto
  delta:
    description: The options the candidate changes (option -> value), for O(checks=auto).
    type: dict
    default: {}
  model:
    description: Model name; default the first one C(/v1/models) lists.
    type: str
  api:
    description: The API the prompts go through.
    type: str
    default: completions
    choices: [completions, chat]
  api_key:
    description: Bearer token.
    type: str
  concurrency:
    description: Requests in flight.
    type: int
    default: 16
  limit:
    description: Score only the first N items (interleaved by kind); default all 528.
    type: int
  greedy_prompts:
    description: Number of fixed prompts of the greedy check.
    type: int
    default: 48
  alpha:
    description: One-sided significance level of the score check.
    type: float
    default: 0.05
  margin:
    description: A score drop must also exceed this (a share, 0.02 = 2 points) to fail.
    type: float
    default: 0.0
  greedy_margin:
    description: How far below last-known-good's agreement with itself a candidate's agreement may fall.
    type: float
    default: 0.1
  greedy_metric:
    description: C(identical) (share of identical outputs) or C(prefix) (mean shared-prefix share).
    type: str
    default: identical
    choices: [identical, prefix]
  timeout:
    description: Seconds per request.
    type: float
    default: 120
  fail_on_gate:
    description: Fail the task when the gate fails (false - return C(passed=false) and let the caller decide).
    type: bool
    default: true
notes:
  - In check mode nothing is sent and nothing is written.
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    description: Sends no request and writes nothing.
  diff_mode:
    support: none
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: Measure last-known-good
  gpuhost.sglang.serving_accuracy:
    action: measure
    base_url: http://gpu1:30000
    checks: [score, greedy]
    lkg_file: reports/accuracy/gpu1-lkg.json
  delegate_to: localhost

- name: Gate a candidate that changes the KV-cache dtype (auto -> score)
  gpuhost.sglang.serving_accuracy:
    action: gate
    base_url: http://gpu1:30000
    delta: {kv-cache-dtype: fp8_e4m3}
    lkg_file: reports/accuracy/gpu1-lkg.json
  delegate_to: localhost
"""

RETURN = r"""
passed:
  description: Whether every check passed (action=gate).
  returned: action=gate
  type: bool
class:
  description: C(ok), C(accuracy_drop), C(greedy_divergence) or C(accuracy_error) (most requests failed).
  returned: action=gate
  type: str
message:
  description: Both scores (or agreements), the test and the threshold.
  returned: action=gate
  type: str
checks:
  description: Per check - scores, discordant counts, p-value and interval (score); agreement, self-agreement and
    threshold (greedy). For action=measure the list of checks measured.
  returned: always
  type: raw
measured:
  description: What action=measure measured (score, per-kind scores, requests, seconds).
  returned: action=measure
  type: dict
requests:
  description: Requests sent (action=gate).
  returned: action=gate
  type: int
seconds:
  description: Seconds the requests took (action=gate).
  returned: action=gate
  type: float
"""

import json

from ansible.module_utils.basic import AnsibleModule, missing_required_lib
from ansible_collections.gpuhost.sglang.plugins.module_utils.bench import accuracy
from ansible_collections.gpuhost.sglang.plugins.module_utils.bench import client as bench_client
from ansible_collections.gpuhost.sglang.plugins.module_utils.bench import store as bench_store


def read_json(path):
    with open(path) as f:
        return json.load(f)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            action=dict(type="str", required=True, choices=["measure", "gate"]),
            base_url=dict(type="str", required=True),
            lkg_file=dict(type="path", required=True),
            checks=dict(type="raw", default="auto"),
            delta=dict(type="dict", default={}),
            model=dict(type="str"),
            api=dict(type="str", default="completions", choices=["completions", "chat"]),
            api_key=dict(type="str", no_log=True),
            concurrency=dict(type="int", default=16),
            limit=dict(type="int"),
            greedy_prompts=dict(type="int", default=48),
            alpha=dict(type="float", default=0.05),
            margin=dict(type="float", default=0.0),
            greedy_margin=dict(type="float", default=0.1),
            greedy_metric=dict(type="str", default="identical", choices=["identical", "prefix"]),
            timeout=dict(type="float", default=120.0),
            fail_on_gate=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    if module.check_mode:
        module.exit_json(changed=False, skipped=True, checks=[], msg="check mode: no requests sent, nothing written")
    if not bench_client.HAS_AIOHTTP:
        module.fail_json(msg=missing_required_lib("aiohttp"), exception=str(bench_client.AIOHTTP_IMPORT_ERROR))
    try:
        res, failed, msg = accuracy.run_module(module.params, bench_store.atomic_write_json, read_json)
    except accuracy.AccuracyError as e:
        module.fail_json(msg=str(e), **{"class": "accuracy_error"})
    if failed:
        module.fail_json(msg=msg, **res)
    module.exit_json(msg=msg, **res)


if __name__ == "__main__":
    main()
