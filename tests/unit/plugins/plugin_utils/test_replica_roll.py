# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Multi-node replicas: each rank's options and environment, the replica as the unit of the roll (Ansible's own
serial over hosts reproduces the unit batches), only rank 0 behind the router; the peer watch and the stand-in
rank (roles/sglang/files/gpuhost_replica.py) on loopback: ordering, readiness after all joined, a lost peer."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from ansible_collections.gpuhost.sglang.plugins.plugin_utils import multinode
from ansible_collections.gpuhost.sglang.plugins.plugin_utils.multinode import ReplicaError
from ansible_collections.gpuhost.sglang.plugins.plugin_utils import roll_plan

FILES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "roles", "sglang", "files")
HV = {"a0": {"sglang_replica_group": "rep_a", "ansible_host": "10.0.0.10", "sglang_dist_address": "10.1.0.10"},
      "a1": {"sglang_replica_group": "rep_a", "ansible_host": "10.0.0.11"},
      "b0": {"sglang_replica_group": "rep_b"}, "b1": {"sglang_replica_group": "rep_b"},
      "s1": {}, "s2": {}}
GROUPS = {"rep_a": ["a0", "a1"], "rep_b": ["b1", "b0"]}


def test_rank_options_and_environment():
    r1 = multinode.replica_rank("a1", GROUPS["rep_a"], HV, {"tp-size": 16}, 5757, "eth1", "rep_a", 5999, 300)
    assert r1["managed_options"] == {"nnodes": 2, "node-rank": 1, "dist-init-addr": "10.1.0.10:5757"}
    assert r1["environment"] == {"NCCL_SOCKET_IFNAME": "eth1", "GLOO_SOCKET_IFNAME": "eth1",
                                 "GPUHOST_REPLICA": "rank=1 nnodes=2 head=10.1.0.10 port=5999 join_timeout=300",
                                 "GPUHOST_REPLICA_STATE": "/var/lib/sglang/replica.json"}
    r0 = multinode.replica_rank("a0", GROUPS["rep_a"], HV, {"tp-size": 16}, 5757, "eth1", "rep_a", 5999, 300)
    assert r0["rank"] == 0 and r0["managed_options"]["dist-init-addr"] == "10.1.0.10:5757"


@pytest.mark.parametrize("args,match", [
    (("a0", None, HV, {}, 5000, None, "rep_x"), r"sglang_replica_group='rep_x': no such inventory group"),
    (("s1", ["a0", "a1"], HV, {}, 5000, None, "rep_a"), r"sglang_replica_group='rep_a' does not contain s1"),
    (("a0", ["a0", "a1"], HV, {}, 5000, None, "rep_a", 5000), r"sglang_replica_watch_port=5000: allowed values"),
    (("a0", ["a0", "a1"], HV, {}, 5000, None, "rep_a", 5999, "soon"), r"sglang_replica_join_timeout='soon'"),
    (("a0", ["a0", "b0"], HV, {}, 5000, None, "rep_a"), r"sglang_replica_group of b0 is 'rep_b', not 'rep_a'"),
    (("a0", ["a0", "a1"], HV, {"dist-init-addr": "x:1"}, 5000, None, "rep_a"), r"sglang_options.dist-init-addr"),
])
def test_bad_rank_input_names_the_variable(args, match):
    with pytest.raises(ReplicaError, match=match):
        multinode.replica_rank(*args)


def test_units_keep_replicas_whole_in_rank_order():
    servers = ["s1", "a0", "a1", "b0", "b1", "s2"]
    units = multinode.roll_units(servers, HV, GROUPS)
    assert units == [["s1"], ["a0", "a1"], ["b1", "b0"], ["s2"]]
    out = roll_plan.unit_plan(units, [1, "50%"], 2)
    assert [b["hosts"] for b in out["plan"]] == [["s1"], ["a0", "a1", "b1", "b0"], ["s2"]]
    assert out["serial"] == [1, 4, 1] and out["hosts"] == ["s1", "a0", "a1", "b1", "b0", "s2"]
    assert [b["serving"] for b in out["plan"]] == [3, 2, 3] and all(b["ok"] for b in out["plan"])
    # Ansible's serial with these sizes over these hosts: the same batches, no replica split
    assert [list(b) for b in roll_plan.batches(out["hosts"], out["serial"])] == [b["hosts"] for b in out["plan"]]
    assert roll_plan.roll_plan_lines(out["plan"])[1] == "batch 2: 2 unit(s) out, 2 serving (floor 2): [a0 a1] [b1 b0]"
    # per host, batch 2 would have split replica a (a0 a1 b0 | b1 ...)
    assert [len(b) for b in roll_plan.batches(servers, [1, "50%"])] == [1, 3, 2]


def test_a_replica_partly_outside_the_play_is_refused():
    with pytest.raises(ReplicaError, match=r"sglang_replica_group='rep_a' \(host a0\): ranks a1 are not"):
        multinode.roll_units(["a0", "s1"], HV, GROUPS)


def test_only_rank_0_is_a_router_worker():
    assert multinode.replica_heads(["s1", "a0", "a1", "b0", "b1"], HV, GROUPS) == ["s1", "a0", "b1"]


def _free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _rank(rank, dist, watch, http, tmp_path, timeout="20"):
    env = dict(os.environ, GPUHOST_REPLICA="rank=%d nnodes=2 head=127.0.0.1 port=%d join_timeout=%s" % (rank, watch, timeout),
               GPUHOST_REPLICA_STATE=str(tmp_path / ("r%d.json" % rank)), GPUHOST_STANDIN_COLLECTIVE_TIMEOUT="600")
    cmd = [sys.executable, os.path.join(FILES, "gpuhost-launch.py"), "-m", "gpuhost_replica", "--nnodes", "2",
           "--node-rank", str(rank), "--dist-init-addr", "127.0.0.1:%d" % dist, "--host", "127.0.0.1", "--port", str(http)]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _wait(pred, timeout=15):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.1)
    return False


def _http_up(port):
    try:
        return json.load(urllib.request.urlopen("http://127.0.0.1:%d/v1/models" % port, timeout=1))["data"]
    except OSError:
        return None


def test_ordering_readiness_and_a_lost_peer(tmp_path):
    dist, watch, http = _free_port(), _free_port(), _free_port()
    r1 = _rank(1, dist, watch, http + 1, tmp_path)
    try:
        time.sleep(1.5)
        assert r1.poll() is None, "rank 1 must block until rank 0 is there, not exit"
        assert not os.path.exists(tmp_path / "r1.json") or not json.load(open(tmp_path / "r1.json"))["joined"]
        r0 = _rank(0, dist, watch, http, tmp_path)
        try:
            assert _wait(lambda: _http_up(http)), "rank 0 never served after rank 1 joined"
            state = json.load(open(tmp_path / "r0.json"))
            assert state["all_joined"] and state["joined"] == [0, 1]
            assert _http_up(http + 1) is None, "rank 1 serves no HTTP"
            r1.kill()
            r1.wait()
            # the peer watch aborts rank 0 (SIGABRT) although the stand-in alone would hang for 600 s (sglang #3099)
            assert r0.wait(timeout=15) == -6
            assert "peer watch: rank 1 lost; aborting" in r0.stdout.read()
        finally:
            if r0.poll() is None:
                r0.kill()
    finally:
        if r1.poll() is None:
            r1.kill()


def test_rank_0_alone_gives_up_after_the_join_timeout(tmp_path):
    r0 = _rank(0, _free_port(), _free_port(), _free_port(), tmp_path, timeout="2")
    assert r0.wait(timeout=20) == -6
    assert "ranks [1] did not join within 2 s" in r0.stdout.read()
