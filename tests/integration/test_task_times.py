# Copyright: (c) 2026, gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The task-timing callback (tests/harness/callback/task_times.py) that measures where a deploy's time goes: a real
ansible-playbook run on localhost writes one record per task with its status, and a slow task is the slowest."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from ansible_collections.gpuhost.sglang.tests import harness

PLAY = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: quick
      ansible.builtin.debug: {msg: hi}
    - name: slow
      ansible.builtin.command: sleep 1.2
      changed_when: true
    - name: never
      ansible.builtin.debug: {msg: no}
      when: false
"""


def test_records_every_task_with_its_time_and_status(tmp_path):
    (tmp_path / "play.yml").write_text(PLAY)
    out = tmp_path / "times.jsonl"
    env = harness.ansible_env(ANSIBLE_CALLBACK_PLUGINS=os.path.join(harness.ROOT, "tests", "harness", "callback"),
                              ANSIBLE_CALLBACKS_ENABLED="task_times", GPUHOST_TASK_TIMES=str(out))
    proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", "localhost,",
                           "-c", "local", "-e", "ansible_python_interpreter=" + sys.executable,
                           str(tmp_path / "play.yml")],
                          env=env, capture_output=True, text=True, check=False, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    records = {r["task"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert list(records) == ["quick", "slow", "never"]
    assert records["slow"]["statuses"] == {"changed": 1} and records["slow"]["seconds"] >= 1.2
    assert records["never"]["statuses"] == {"skipped": 1}
    assert records["quick"]["statuses"] == {"ok": 1} and records["quick"]["seconds"] < records["slow"]["seconds"]
    summary = proc.stdout[proc.stdout.index("task_times:"):].splitlines()
    assert summary[0].startswith("task_times: 3 tasks, 2 ran") and "1 only skipped" in summary[0]
    assert summary[1].endswith(" slow")
