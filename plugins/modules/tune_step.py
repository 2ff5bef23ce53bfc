#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: tune_step
short_description: Run a tuning campaign's loop until it needs the serving role
version_added: "0.4.0"
description:
  - The loop of C(playbooks/tune.yml) (an action plugin over C(plugins/plugin_utils/tune_loop.py) C(CampaignLoop), the
    same loop C(benchmarks/gpu/sglang/tune.py) runs on a machine without Ansible). From the campaign's state it
    resumes, asks crash memory, runs each candidate's ladder (M(gpuhost.sglang.serving_bench) between two
    M(gpuhost.sglang.gpu_facts) health readings), its accuracy gate and its row, decides against the measured noise
    and writes the report (M(gpuhost.sglang.tune_campaign)).
  - When the loop needs the serving role (a candidate's or the winner's deploy through the gate, the restore of
    last-known-good) it returns RV(need); the caller does that and calls again with the result added to O(answers).
author:
  - gpuhost.sglang contributors (@gpuhost)
options:
  state_dir:
    description: Controller directory of campaign state (M(gpuhost.sglang.tune_campaign)'s).
    type: path
    required: true
  plan:
    description: The plan M(gpuhost.sglang.tune_campaign) returned with O(gpuhost.sglang.tune_campaign#module:action=plan).
    type: dict
    required: true
  verdicts:
    description: The M(gpuhost.sglang.server_args) results of every candidate, in the plan's order (one parser call).
    type: list
    elements: dict
    required: true
  base_url:
    description: The server's URL the ladder and the accuracy gate load.
    type: str
    required: true
  answers:
    description:
      - What the caller did for each RV(need) so far, by its RV(key) - C(passed), C(failure) (the deploy
        transaction's failed attempt), C(message), C(t0) (the RV(t0) it got). Empty on the first call.
    type: dict
    default: {}
  adopt:
    description: Adopt a winner (overrides the campaign's C(adopt.enabled); unset, the campaign's).
    type: bool
  profile_options:
    description: The serving role's profile options of this host.
    type: dict
    default: {}
  api_key:
    description: The server's API key.
    type: str
  bench:
    description: Further M(gpuhost.sglang.serving_bench) options of every ladder level (C(load_checks), ...).
    type: dict
    default: {}
  gpu_facts:
    description: A gpu_facts result replayed instead of reading NVML before each ladder.
    type: dict
  gpu_facts_after:
    description: A gpu_facts result replayed instead of reading NVML after each ladder.
    type: dict
  plots:
    description: Write the Pareto plot.
    type: bool
    default: true
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpuhost.sglang.attributes.check_mode_none
"""

EXAMPLES = r"""
- name: Campaign | the loop runs until it needs the serving role
  gpuhost.sglang.tune_step:
    state_dir: "{{ tune_state_dir }}"
    plan: "{{ tune_p }}"
    verdicts: "{{ tune_verdicts }}"
    base_url: "{{ tune_bench_url }}"
    answers: "{{ tune_answers }}"
  register: tune_step
"""

RETURN = r"""
need:
  description: C(deploy), C(restore), or null when the campaign is through.
  returned: always
  type: str
key:
  description: The key of the caller's answer in O(answers) (C(deploy-N), C(adopt-N), C(restore)).
  returned: when RV(need) is set
  type: str
index:
  description: The candidate to deploy.
  returned: when RV(need) is C(deploy)
  type: int
options:
  description: Its C(sglang_options).
  returned: when RV(need) is C(deploy)
  type: dict
lkg_update:
  description: Whether the deploy records it as last-known-good (the winner's adoption).
  returned: when RV(need) is C(deploy)
  type: bool
t0:
  description: When the candidate began (its row's duration).
  returned: when RV(need) is C(deploy)
  type: float
lines:
  description: What the loop said.
  returned: always
  type: list
  elements: str
report:
  description: M(gpuhost.sglang.tune_campaign)'s report (table, winner, reason, snippet, files).
  returned: when RV(need) is null
  type: dict
adopted:
  description: The adoption (adopted, index, message), or null when none was tried.
  returned: when RV(need) is null
  type: dict
restored:
  description: The restore's message, or null.
  returned: when RV(need) is null
  type: str
"""
