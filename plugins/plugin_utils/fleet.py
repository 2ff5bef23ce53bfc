# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fleet settings computed in tested Python: the router's options and worker URLs, the containers of a Proxmox node.

The roll plan (controller side: it calls Ansible's executor) is plugins/plugin_utils/roll_plan.py.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

_VALID_BACKENDS = ("sglang", "openai", "vllm")


class FleetError(ValueError):
    """Bad fleet input; the message names the variable, its value and what is allowed."""


def worker_url(address, port):
    host = str(address)
    if ":" in host and not host.startswith("["):
        host = "[%s]" % host  # an IPv6 literal in a URL
    return "http://%s:%d" % (host, int(port))


def worker_urls(hosts, hostvars, default_port=30000):
    """``http://ADDRESS:sglang_port`` of each host (inventory order); ADDRESS is ``sglang_router_address`` (the
    address the router reaches the worker at, e.g. on a separate data-plane network) or else ``ansible_host``."""
    out = []
    for name in hosts or []:
        hv = hostvars[name]
        address = hv.get("sglang_router_address") or hv.get("ansible_host") or name
        out.append(worker_url(address, hv.get("sglang_port") or default_port))
    return out


def node_containers(node, hosts, hostvars):
    """The container ids (``proxmox_lxc_gpu_ctid``) of the ``hosts`` that run in a container on Proxmox VE node
    ``node`` (their ``gpuhost_proxmox_node``), in inventory order; hosts on other nodes or on bare metal are not."""
    out = []
    for name in hosts or []:
        hv = hostvars[name]
        if hv.get("gpuhost_proxmox_node") is None or hv.get("gpuhost_proxmox_node") != node:
            continue
        if hv.get("proxmox_lxc_gpu_ctid") is None:
            raise FleetError("%s runs on Proxmox node %s (gpuhost_proxmox_node) but sets no proxmox_lxc_gpu_ctid: "
                             "allowed values are its container id (100..999999999)" % (name, node))
        out.append(hv["proxmox_lxc_gpu_ctid"])
    return out


def router_options(settings):
    """The ``smg launch`` options from the router role's settings (inventory), ``options`` on top.

    settings: listen, port, prometheus_port, backend, policy, worker_urls, health_check, retry (dicts of SMG long
    option names), options; discovery_file: SMG's file discovery (the manifest the router role writes from
    worker_urls once, and smg_worker edits) instead of the worker list on the command line, so that the worker set
    outlives a restart of the router (plugins/module_utils/serving/router.py: measured with smg 1.13.0).
    """
    s = dict(settings or {})
    backend = s.get("backend")
    if backend not in _VALID_BACKENDS:
        raise FleetError("router_backend=%r: allowed values are %s" % (backend, ", ".join(_VALID_BACKENDS)))
    urls = list(s.get("worker_urls") or [])
    if not urls:
        raise FleetError("router_worker_urls=[] and the group router_worker_group has no hosts: the router needs "
                         "at least one worker")
    for name in ("port", "prometheus_port"):
        try:
            if not 0 < int(s.get(name)) < 65536:
                raise ValueError
        except (TypeError, ValueError):
            raise FleetError("router_%s=%r: allowed values are integers 1-65535" % (name, s.get(name)))
    if int(s["port"]) == int(s["prometheus_port"]):
        raise FleetError("router_prometheus_port=%r equals router_port: allowed values are any other port"
                         % s["prometheus_port"])
    opts = {"host": s.get("listen") or "0.0.0.0", "port": int(s["port"]),
            "prometheus-host": s.get("listen") or "0.0.0.0", "prometheus-port": int(s["prometheus_port"]),
            "backend": backend, "policy": s.get("policy") or "cache_aware"}
    if s.get("discovery_file"):
        opts.update({"discovery-provider": "file", "discovery-file": s["discovery_file"]})
    else:
        opts["worker-urls"] = urls
    for group in ("health_check", "retry", "options"):
        extra = s.get(group) or {}
        if not isinstance(extra, dict):
            raise FleetError("router_%s=%r: allowed values are a dict of smg launch long options" % (group, extra))
        opts.update(extra)
    return opts
