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
replica must be restarted as a whole. The role does that with a peer watch in every rank's own process
(roles/sglang/files/gpuhost_replica.py: a lost peer aborts the rank, systemd's Restart= brings it back, rank >= 1
waits for rank 0), and restarts a changed replica rank 0 first; deploy.yml rolls whole replicas (roll_units below).
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
                    "head_address": str(head), "dist_port": port, "nnodes": len(hosts),
                    "peers": [h for h in hosts if h != host]})
    return out


def _port(value, var):
    try:
        value = int(value)
        if not 0 < value < 65536:
            raise ValueError
    except (TypeError, ValueError):
        raise ReplicaError("%s=%r: allowed values are integers 1-65535" % (var, value))
    return value


def replica_rank(host, hosts, hostvars, options, port=5000, ifname=None, group="replica", watch_port=5999,
                 join_timeout=600, state_file="/var/lib/sglang/replica.json"):
    """This host's rank: the options SGLang gets (nnodes, node-rank, dist-init-addr; the rest are the replica's
    options, the same on every rank) and its unit's environment (NCCL/Gloo interface, the peer watch's
    GPUHOST_REPLICA). ``hosts`` is the replica's inventory group, rank order (None: no such group)."""
    if hosts is None:
        raise ReplicaError("sglang_replica_group=%r: no such inventory group (a replica is one group, its hosts in "
                           "rank order)" % (group,))
    hosts = list(hosts)
    if host not in hosts:
        raise ReplicaError("sglang_replica_group=%r does not contain %s (hosts: %s)" % (group, host, ", ".join(hosts)))
    watch_port = _port(watch_port, "sglang_replica_watch_port")
    if watch_port == _port(port, "sglang_dist_port"):
        raise ReplicaError("sglang_replica_watch_port=%d: allowed values are ports other than sglang_dist_port "
                           "(rank 0's engine binds that one)" % watch_port)
    try:
        join_timeout = int(join_timeout)
        if join_timeout < 1:
            raise ValueError
    except (TypeError, ValueError):
        raise ReplicaError("sglang_replica_join_timeout=%r: allowed values are integers >= 1 (seconds)" % (join_timeout,))
    for other in hosts:
        theirs = hostvars[other].get("sglang_replica_group") if other in hostvars else group
        if theirs != group:
            raise ReplicaError("sglang_replica_group of %s is %r, not %r: a host is a rank of one replica only" % (
                other, theirs, group))
    entry = [r for r in replica_ranks(hosts, hostvars, options, port, ifname, group) if r["host"] == host][0]
    entry["managed_options"] = dict((k, entry["options"][k]) for k in ("nnodes", "node-rank", "dist-init-addr"))
    entry["environment"]["GPUHOST_REPLICA"] = "rank=%d nnodes=%d head=%s port=%d join_timeout=%d" % (
        entry["rank"], entry["nnodes"], entry["head_address"], watch_port, join_timeout)
    entry["environment"]["GPUHOST_REPLICA_STATE"] = state_file
    entry.update({"watch_port": watch_port, "group": group, "hosts": hosts})
    return entry


def replica_heads(hosts, hostvars, groups):
    """``hosts`` without the ranks >= 1 of replicas: only rank 0 serves HTTP, so only rank 0 is a router worker."""
    out = []
    for host in hosts or []:
        group = (hostvars[host].get("sglang_replica_group") if host in hostvars else "") or ""
        if not group or list(groups.get(group) or [host])[0] == host:
            out.append(host)
    return out


def roll_units(servers, hostvars, groups):
    """The units a rolling deploy takes out together: a host of its own, or a whole replica (its group's hosts in
    rank order, the group's order). Every rank of a replica must be among ``servers``."""
    servers = list(servers or [])
    units, seen = [], set()
    for host in servers:
        group = (hostvars[host].get("sglang_replica_group") if host in hostvars else "") or ""
        if not group:
            units.append([host])
            continue
        if group in seen:
            continue
        seen.add(group)
        members = list(groups.get(group) or [])
        missing = [h for h in members if h not in servers]
        if not members or missing:
            raise ReplicaError("sglang_replica_group=%r (host %s): %s; every rank of a replica must be in the serving "
                               "group and the play (a replica rolls as a whole)" % (
                                   group, host, "no such inventory group" if not members
                                   else "ranks %s are not" % ", ".join(missing)))
        units.append(members)
    return units
