# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Check mode on a generated 64-host inventory prints the roll's batch plan and the capacity floor per batch
without touching anything: every host's address is in TEST-NET-1 (RFC 5737, never routed), so a
single connection attempt would show up as UNREACHABLE.

``python tests/integration/test_fleet_plan.py 64 '[1, "10%", "25%"]' 48`` prints the plan for other sizes.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import re
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def inventory(path, n):
    lines = ["all:", "  children:", "    sglang_servers:", "      hosts:"]
    lines += ["        gpu%03d: {ansible_host: 192.0.2.%d}" % (i, i % 250 + 1) for i in range(n)]
    lines += ["    sglang_routers:", "      hosts:", "        router0: {ansible_host: 192.0.2.254}"]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def plan(tmpdir, n, serial, floor):
    inv = os.path.join(str(tmpdir), "fleet%d.yml" % n)
    inventory(inv, n)
    cmd = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", inv,
           os.path.join(ROOT, "playbooks", "deploy.yml"), "--check", "-e", "roll_plan_only=true",
           "-e", json.dumps({"roll_serial": serial, "roll_capacity_floor": floor})]
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    return proc.returncode, proc.stdout + proc.stderr


def test_64_hosts_plan_in_check_mode(tmp_path):
    rc, out = plan(tmp_path, 64, [1, "10%", "25%"], 48)
    assert rc == 0, out[-3000:]
    batches = re.findall(r"batch (\d+): (\d+) host\(s\) out, (\d+) serving \(floor 48\)", out)
    assert [(int(b), int(s), int(v)) for b, s, v in batches] == [
        (1, 1, 63), (2, 6, 58), (3, 16, 48), (4, 16, 48), (5, 16, 48), (6, 9, 55)], out[-3000:]
    assert "UNREACHABLE" not in out and "gpu000" in out
    assert not re.search(r"^(gpu|router)\d+\s+:", out, re.M), "a play ran on the fleet's hosts"


def test_a_plan_below_the_floor_fails_before_anything(tmp_path):
    rc, out = plan(tmp_path, 64, ["50%"], 40)
    assert rc != 0
    assert "roll_capacity_floor=40 cannot hold" in " ".join(out.split()) and "BELOW THE FLOOR" in out


if __name__ == "__main__":
    import tempfile
    rc, out = plan(tempfile.mkdtemp(), int(sys.argv[1]), json.loads(sys.argv[2]), int(sys.argv[3]))
    print(out)
    sys.exit(rc)
