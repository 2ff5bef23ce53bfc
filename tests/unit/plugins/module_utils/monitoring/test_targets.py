# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function

import pytest

from ansible_collections.gpuhost.sglang.plugins.module_utils.monitoring import targets as t

HV = {
    "glm5-ct": {"ansible_host": "192.0.2.50", "gpuhost_proxmox_node": "pve-gpu1", "sglang_port": 30001},
    "pve-gpu1": {"ansible_host": "pve-gpu1.example.internal"},
    "metal": {"ansible_host": "10.0.0.5"},
    "cpu": {"ansible_host": "10.0.0.6", "sglang_engine": "transformers", "monitoring_gpu": False},
}


def by_job(jobs):
    return dict((j["job_name"], [(c["targets"][0], c["labels"]["host"]) for c in j["static_configs"]]) for j in jobs)


def test_proxmox_container_gpu_telemetry_from_the_node():
    jobs = by_job(t.scrape_jobs(["glm5-ct", "metal", "cpu"], HV, routers=["10.0.0.9:29000"]))
    assert jobs["sglang"] == [("192.0.2.50:30001", "glm5-ct"), ("10.0.0.5:30000", "metal")]  # transformers: none
    assert jobs["dcgm"] == [("pve-gpu1.example.internal:9400", "pve-gpu1"), ("10.0.0.5:9400", "metal")]
    assert jobs["node"] == [("192.0.2.50:9100", "glm5-ct"), ("pve-gpu1.example.internal:9100", "pve-gpu1"),
                            ("10.0.0.5:9100", "metal"), ("10.0.0.6:9100", "cpu")]
    assert jobs["router"] == [("10.0.0.9:29000", "10.0.0.9")]


def test_bad_inputs_name_the_variable():
    with pytest.raises(t.TargetError, match="monitoring_serving_hosts names nope, not in the inventory"):
        t.scrape_jobs(["nope"], HV)
    with pytest.raises(t.TargetError, match="monitoring_serving_hosts is 'metal'"):
        t.scrape_jobs("metal", HV)
    with pytest.raises(t.TargetError, match="repeats job_name node"):
        t.scrape_jobs(["metal"], HV, extra=[{"job_name": "node", "static_configs": []}])


def test_controller_bench_exporter_job_keeps_the_benchmarked_host_label():
    jobs = t.scrape_jobs(["metal"], HV, controllers=["10.231.4.1:9849"])
    (ctl,) = [j for j in jobs if j["job_name"] == "controller"]
    assert ctl["honor_labels"] is True and ctl["static_configs"] == [{"targets": ["10.231.4.1:9849"]}]
    assert "controller" not in [j["job_name"] for j in t.scrape_jobs(["metal"], HV)]
    with pytest.raises(t.TargetError, match="monitoring_controller_targets entry '10.231.4.1': allowed values are host:port"):
        t.scrape_jobs(["metal"], HV, controllers=["10.231.4.1"])
