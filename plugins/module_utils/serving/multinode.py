# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Multi-node replicas: one inventory group per replica, one SGLang process (rank) per host.

Every rank runs the same options plus ``--nnodes N --node-rank R --dist-init-addr HEAD:PORT`` (sglang
docs/references/multi_node_deployment/multi_node.md: ``--tp 16 --nnodes 2 --node-rank {0,1} --dist-init-addr
HEAD:PORT``); the NIC that NCCL and Gloo use is pinned with NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME (sglang #958:
hangs at "Init nccl begin" when the wrong interface is picked). Rank 0 is the replica's HTTP server and the one the
gate and the router talk to; the other ranks serve no HTTP API (unverified for every release; 0.5.23's
launch_server only starts the HTTP server on node_rank 0). If rank 1 dies rank 0 keeps running (sglang #3099): the
replica must be restarted as a whole, rank 0 last.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

_IFNAME_RE = re.compile(r"^[A-Za-z0-9_.:^=,-]{1,64}$")


class ReplicaError(ValueError):
    """Bad replica input; the message names the variable, its value and what is allowed."""


def _tp(options):
    for key in ("tp-size", "tp", "tensor-parallel-size"):
        if key in options:
            return key, options[key]
    return None, None


def replica_ranks(hosts, hostvars, options, port=5000, ifname=None, group="replica"):
    """Per rank (inventory order = rank order): host, rank, options, environment, head."""
    hosts = list(hosts or [])
    if len(hosts) < 2:
        raise ReplicaError("sglang_replica_group=%r has %d host(s): a multi-node replica needs 2 or more"
                           % (group, len(hosts)))
    try:
        port = int(port)
        if not 0 < port < 65536:
            raise ValueError
    except (TypeError, ValueError):
        raise ReplicaError("sglang_dist_port=%r: allowed values are integers 1-65535" % (port,))
    if ifname is not None and not _IFNAME_RE.match(str(ifname)):
        raise ReplicaError("sglang_dist_ifname=%r: allowed values are interface names or NCCL's ^/= prefixed lists "
                           "(letters, digits, _ . : ^ = , -)" % (ifname,))
    for key in ("nnodes", "node-rank", "dist-init-addr"):
        if key in (options or {}):
            raise ReplicaError("sglang_options.%s=%r: the replica renders it per rank; remove it" % (key, options[key]))
    key, tp = _tp(options or {})
    if key is not None:
        try:
            tp = int(tp)
        except (TypeError, ValueError):
            raise ReplicaError("sglang_options.%s=%r: allowed values are integers" % (key, tp))
        if tp % len(hosts):
            raise ReplicaError("sglang_options.%s=%d over %d nodes: allowed values are multiples of %d (the tensor-"
                               "parallel size spans all ranks)" % (key, tp, len(hosts), len(hosts)))
    head_vars = hostvars[hosts[0]]
    head = head_vars.get("sglang_dist_address") or head_vars.get("ansible_host") or hosts[0]
    init = ("[%s]:%d" if ":" in str(head) else "%s:%d") % (head, port)
    env = {}
    if ifname:
        env = {"NCCL_SOCKET_IFNAME": str(ifname), "GLOO_SOCKET_IFNAME": str(ifname)}
    out = []
    for rank, host in enumerate(hosts):
        opts = dict(options or {})
        opts.update({"nnodes": len(hosts), "node-rank": rank, "dist-init-addr": init})
        out.append({"host": host, "rank": rank, "options": opts, "environment": dict(env), "head": hosts[0],
                    "peers": [h for h in hosts if h != host]})
    return out
