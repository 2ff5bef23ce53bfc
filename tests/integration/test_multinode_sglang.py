# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The two-node GLM-5 replica (2 hosts x 8 RTX PRO 6000, tp 16): each rank's command line, rendered by
plugins/plugin_utils/multinode.py from the SM120 GLM-5 profile, is accepted by SGLang 0.5.23's own parser.

``python tests/integration/test_multinode_sglang.py`` prints the two command lines.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# sglang_venv is a fixture, reused here
from test_server_args_sglang import PINNED, PROFILES, run_module, sglang_venv  # noqa: E402,F401 pylint: disable=unused-import

from ansible_collections.gpuhost.sglang.plugins.plugin_utils.multinode import ReplicaError, replica_ranks  # noqa: E402
from ansible_collections.gpuhost.sglang.plugins.plugin_utils.profiles import select_profile  # noqa: E402
from ansible_collections.gpuhost.sglang.plugins.module_utils.serving.server_args import server_argv  # noqa: E402

pytestmark = [pytest.mark.sglang]

HOSTVARS = {"glm5-a0": {"ansible_host": "10.20.0.10", "sglang_dist_address": "10.30.0.10"},
            "glm5-a1": {"ansible_host": "10.20.0.11"}}


def glm5_ranks():
    sel = select_profile("12.0", "glm-dsa", PINNED, PROFILES)
    opts = dict(sel["options"], **{"model-path": "/srv/models/GLM-5-NVFP4", "tp-size": 16, "host": "0.0.0.0",
                                   "port": 30000})
    return replica_ranks(["glm5-a0", "glm5-a1"], HOSTVARS, opts, port=5757, ifname="enp65s0f0np0", group="glm5_a")


def test_glm5_two_node_ranks_pass_the_pinned_parser():
    # The ranks' options differ in node-rank only (checked below), so one parser run (an import of sglang costs
    # tens of seconds on a loaded CI machine) covers both; `python THIS_FILE` runs the parser on every rank.
    ranks = glm5_ranks()
    a, b = (server_argv(r["options"]) for r in ranks)
    assert [x for x in zip(a, b) if x[0] != x[1]] == [("0", "1")]
    out = run_module(ranks[1]["options"])
    assert not out.get("failed"), out.get("msg")
    assert out["validated"] and out["engine_version"] == PINNED and out["errors"] == []
    argv = out["argv"]
    assert argv == b
    assert argv[argv.index("--nnodes") + 1] == "2"
    assert argv[argv.index("--node-rank") + 1] == "1"
    assert argv[argv.index("--dist-init-addr") + 1] == "10.30.0.10:5757"
    assert ranks[1]["environment"] == {"NCCL_SOCKET_IFNAME": "enp65s0f0np0", "GLOO_SOCKET_IFNAME": "enp65s0f0np0"}


@pytest.mark.parametrize("hosts,opts,match", [
    (["a"], {}, r"sglang_replica_group='g' has 1 host\(s\)"),
    (["a", "b", "c"], {"tp-size": 16}, r"sglang_options.tp-size=16 over 3 nodes"),
    (["a", "b"], {"node-rank": 1}, r"sglang_options.node-rank=1: the replica renders it per rank"),
])
def test_bad_replica_input_is_named(hosts, opts, match):
    with pytest.raises(ReplicaError, match=match):
        replica_ranks(hosts, {h: {} for h in hosts}, opts, group="g")


if __name__ == "__main__":
    from ansible_collections.gpuhost.sglang.plugins.module_utils.serving.server_args import shell_quote
    for r in glm5_ranks():
        out = run_module(r["options"])
        env = " ".join("%s=%s" % kv for kv in sorted(r["environment"].items()))
        print("# %s rank %d: validated=%s by sglang %s, errors=%s" % (
            r["host"], r["rank"], out["validated"], out["engine_version"], out["errors"]))
        print("%s python -m sglang.launch_server %s" % (env, shell_quote(out["argv"])))
