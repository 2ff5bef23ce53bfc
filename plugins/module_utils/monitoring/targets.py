# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Prometheus scrape jobs generated from the inventory (roles/monitoring).

Every serving host contributes its engine's /metrics (SGLang with --enable-metrics; the address is the host's
``ansible_host`` and ``sglang_port``) and node_exporter. GPU telemetry (dcgm-exporter, port 9400, NVIDIA
dcgm-exporter packaging/config-files/systemd/nvidia-dcgm-exporter.service) is scraped where the driver lives: on a
Proxmox VE box that is the node the container runs on (``gpuhost_proxmox_node``), not the container. Routers
(SMG, ``--prometheus-port`` default 29000, sglang docs advanced_features/sgl_model_gateway.md) are listed
explicitly, and so is the controller's bench exporter (tools/bench_exporter.py: baselines and bench history).
Every target carries a ``host`` label (the inventory name) the alert rules and dashboards group by.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class TargetError(Exception):
    pass


def _addr(name, hostvars, port):
    hv = hostvars.get(name) or {}
    return "%s:%d" % (hv.get("ansible_host") or name, int(port))


def scrape_jobs(serving_hosts, hostvars, engine_port=30000, node_port=9100, dcgm_port=9400, metrics=True,
                routers=None, extra=None, controllers=None):
    """List of Prometheus scrape_config dicts (job_name, metrics_path, static_configs)."""
    if not isinstance(serving_hosts, (list, tuple)):
        raise TargetError("monitoring_serving_hosts is %r: allowed values are a list of inventory host names"
                          % (serving_hosts,))
    missing = [h for h in serving_hosts if h not in hostvars]
    if missing:
        raise TargetError("monitoring_serving_hosts names %s, not in the inventory" % ", ".join(missing))
    engine, node, gpu, seen_gpu, seen_node = [], [], [], set(), set()
    for h in serving_hosts:
        hv = hostvars[h]
        if metrics and hv.get("sglang_metrics", True) and hv.get("sglang_engine", "sglang") == "sglang":
            engine.append({"targets": [_addr(h, hostvars, hv.get("sglang_port", engine_port))], "labels": {"host": h}})
        gpu_host = hv.get("gpuhost_proxmox_node") or h
        for name in ([h, gpu_host] if gpu_host != h else [h]):
            if name not in seen_node and (name in hostvars or name == h):
                seen_node.add(name)
                node.append({"targets": [_addr(name, hostvars, node_port)], "labels": {"host": name}})
        if hv.get("monitoring_gpu", True) and gpu_host not in seen_gpu:
            seen_gpu.add(gpu_host)
            gpu.append({"targets": [_addr(gpu_host, hostvars, dcgm_port)], "labels": {"host": gpu_host}})
    jobs = []
    for name, static in (("sglang", engine), ("node", node), ("dcgm", gpu)):
        if static:
            jobs.append({"job_name": name, "metrics_path": "/metrics", "static_configs": static})
    if routers:
        jobs.append({"job_name": "router", "metrics_path": "/metrics",
                     "static_configs": [{"targets": [r], "labels": {"host": r.rsplit(":", 1)[0]}} for r in routers]})
    if controllers:
        # tools/bench_exporter.py: its samples carry the benchmarked host's name as ``host``; honor_labels keeps it
        # (the target's own address is ``instance``), so dashboards join baselines to live series by host.
        bad = [c for c in controllers if not isinstance(c, str) or ":" not in c]
        if bad:
            raise TargetError("monitoring_controller_targets entry %r: allowed values are host:port strings"
                              % (bad[0],))
        jobs.append({"job_name": "controller", "metrics_path": "/metrics", "honor_labels": True,
                     "static_configs": [{"targets": list(controllers)}]})
    for job in extra or []:
        if not isinstance(job, dict) or not job.get("job_name"):
            raise TargetError("monitoring_extra_scrape_configs entry %r: allowed values are Prometheus "
                              "scrape_config mappings with a job_name" % (job,))
        jobs.append(job)
    names = [j["job_name"] for j in jobs]
    dups = sorted(set(n for n in names if names.count(n) > 1))
    if dups:
        raise TargetError("monitoring_extra_scrape_configs repeats job_name %s" % ", ".join(dups))
    return jobs
