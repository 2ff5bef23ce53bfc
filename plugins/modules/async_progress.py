#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: async_progress
short_description: Wait for an async job and print its progress as it goes
version_added: "0.3.0"
description:
  - An action plugin. Polls the async job O(jid) (a task started with C(async) and C(poll=0)) every O(interval) seconds
    with C(async_status), reads the JSON file O(progress_file) the job writes, and prints its C(line) in the play
    output whenever it changed.
  - Returns the job's own result when it finished (failed when the job failed). The job runs detached on the host
    (Ansible's async wrapper), so a dropped connection or an interrupted play leaves it running; a new run of the
    job that waits for the running one (as M(gpuhost.sglang.hf_snapshot) does) picks it up.
  - Remove a progress file an earlier job left before starting the job (a job still running writes it again at its
    next update); otherwise its last line is printed first.
  - Polls 1, 2, 4 ... seconds apart up to O(interval), so a job that ends at once is not waited for a whole interval.
  - After O(timeout) seconds it fails and leaves the job running.
author:
  - gpuhost.sglang contributors (@gpuhost)
options:
  jid:
    description: The job id (C(ansible_job_id) of the registered result of the task that started the job).
    type: str
    required: true
  progress_file:
    description: JSON file on the host with a C(line) key (the progress line); nothing is printed without it.
    type: str
  interval:
    description: Seconds between two polls.
    type: float
    default: 15
  timeout:
    description: Seconds to wait at most.
    type: int
    default: 86400
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpuhost.sglang.attributes.check_mode_none
"""

EXAMPLES = r"""
- name: Download (runs detached, survives a dropped connection)
  gpuhost.sglang.hf_snapshot:
    repo_id: lukealonso/GLM-5-NVFP4
    revision: 0123456789abcdef0123456789abcdef01234567
    local_dir: /srv/models/glm-5-nvfp4
    progress_file: /var/lib/sglang/model-download.json
  async: 86400
  poll: 0
  register: job

- name: Download progress
  gpuhost.sglang.async_progress:
    jid: "{{ job.ansible_job_id }}"
    progress_file: /var/lib/sglang/model-download.json
    interval: 30
"""

RETURN = r"""
progress_lines:
  description: How many progress lines were printed.
  returned: always
  type: int
msg:
  description: The job's message, or why the wait ended without its result.
  returned: on failure
  type: str
"""
