# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fleet helpers: the roll plan is Ansible's own serial batching; router options and worker URLs; the SMG client
against a scripted worker API (the real gateway runs in tests/integration/test_router_smg.py)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

import pytest

from ansible_collections.gpuhost.sglang.plugins.module_utils.serving import router
from ansible_collections.gpuhost.sglang.plugins.plugin_utils import fleet
from ansible_collections.gpuhost.sglang.plugins.plugin_utils import roll_plan

HOSTS = ["h%02d" % i for i in range(64)]


@pytest.mark.parametrize("serial,sizes", [
    (1, [1] * 5),
    ("40%", [2, 2, 1]),
    ([1, "50%"], [1, 2, 2]),
    ([1, 2, "100%"], [1, 2, 2]),
])
def test_batches_are_ansibles(serial, sizes):
    got = roll_plan.batches(["a", "b", "c", "d", "e"], serial)
    assert [len(b) for b in got] == sizes
    assert [h for b in got for h in b] == ["a", "b", "c", "d", "e"]


def test_plan_64_hosts_canary_then_percentages():
    plan = roll_plan.roll_plan(HOSTS, [1, "10%", "25%"], 48)
    assert [b["size"] for b in plan] == [1, 6, 16, 16, 16, 9]
    assert plan[0]["hosts"] == ["h00"]
    assert all(b["ok"] for b in plan)
    assert plan[2]["serving"] == 48
    lines = roll_plan.roll_plan_lines(plan)
    assert lines[0] == "batch 1: 1 host(s) out, 63 serving (floor 48): h00"
    assert "..." in lines[2]


def test_plan_marks_batches_below_the_floor():
    plan = roll_plan.roll_plan(HOSTS, "50%", 40)
    assert [b["ok"] for b in plan] == [False, False]
    assert "BELOW THE FLOOR" in roll_plan.roll_plan_lines(plan)[0]


@pytest.mark.parametrize("serial", ["half", [1, "x%"], -1, [1.5]])
def test_bad_serial_named(serial):
    with pytest.raises(fleet.FleetError, match=r"roll_serial="):
        roll_plan.batches(HOSTS, serial)


def test_bad_floor_named():
    with pytest.raises(fleet.FleetError, match=r"roll_capacity_floor='many'"):
        roll_plan.roll_plan(HOSTS, 1, "many")


def test_worker_urls_router_address_first():
    hv = {"a": {"ansible_host": "10.0.0.1", "sglang_port": 8000}, "b": {"ansible_host": "10.0.0.2",
          "sglang_router_address": "192.168.0.2"}, "c": {"ansible_host": "fd00::3"}}
    assert fleet.worker_urls(["a", "b", "c"], hv) == ["http://10.0.0.1:8000", "http://192.168.0.2:30000",
                                                      "http://[fd00::3]:30000"]


BASE = {"listen": "0.0.0.0", "port": 30000, "prometheus_port": 29000, "backend": "openai", "policy": "round_robin",
        "worker_urls": ["http://a:1"], "health_check": {"health-check-interval-secs": 5},
        "retry": {"retry-max-retries": 2}, "options": {"policy": "random"}}


def test_router_options_layering():
    opts = fleet.router_options(BASE)
    assert opts["worker-urls"] == ["http://a:1"]
    assert opts["health-check-interval-secs"] == 5 and opts["retry-max-retries"] == 2
    assert opts["policy"] == "random"  # router_options on top


@pytest.mark.parametrize("change,match", [
    ({"backend": "grpc"}, r"router_backend='grpc': allowed values are sglang, openai, vllm"),
    ({"worker_urls": []}, r"router_worker_urls=\[\]"),
    ({"port": "x"}, r"router_port='x'"),
    ({"prometheus_port": 30000}, r"router_prometheus_port=30000 equals router_port"),
    ({"retry": ["x"]}, r"router_retry=\['x'\]"),
])
def test_router_options_errors_name_the_variable(change, match):
    with pytest.raises(fleet.FleetError, match=match):
        fleet.router_options(dict(BASE, **change))


class Api(object):
    """Scripted SMG worker API (responses as measured from smg 1.13.0: 202 on DELETE, draining, then 404)."""

    def __init__(self, drain_polls=2):
        self.workers = [{"id": "w1", "url": "http://a:1", "status": "ready", "is_healthy": True},
                        {"id": "w2", "url": "http://b:1", "status": "ready", "is_healthy": True}]
        self.drain_polls = drain_polls
        self.calls = []

    def __call__(self, method, url, body, headers, timeout):
        path = url.split("//", 1)[1].split("/", 1)[1]
        self.calls.append((method, "/" + path))
        if method == "GET" and path == "workers":
            return 200, json.dumps({"workers": self.workers})
        if method == "DELETE":
            for w in self.workers:
                if "/" + path == "/workers/" + w["id"]:
                    w["status"] = "draining"
            return 202, "{}"
        if method == "GET" and path.startswith("workers/"):
            w = [w for w in self.workers if w["id"] == path.split("/")[1]]
            if w and w[0]["status"] == "draining":
                self.drain_polls -= 1
                if self.drain_polls < 0:
                    self.workers.remove(w[0])
                    return 404, "{}"
            return (200, json.dumps(w[0])) if w else (404, "{}")
        if method == "POST" and path == "workers":
            self.workers.append({"id": "w9", "url": json.loads(body)["url"], "status": "ready", "is_healthy": True})
            return 202, "{}"
        return 500, "unexpected"


def client(api):
    t = [0.0]

    def sleep(s):
        t[0] += s
    return router.SmgClient("http://r:30000", opener=api, sleep=sleep, clock=lambda: t[0])


def test_remove_waits_until_the_router_forgets_the_worker():
    api = Api(drain_polls=3)
    changed, waited, ids = client(api).remove("http://a:1/", drain_timeout=10)
    assert changed and ids == ["w1"] and waited == 1.5
    assert [w["url"] for w in api.workers] == ["http://b:1"]
    assert client(api).remove("http://a:1", drain_timeout=10) == (False, 0.0, [])


def test_remove_times_out_with_the_drain_timeout_named():
    with pytest.raises(router.RouterError, match=r"still draining in the router after 2s \(drain_timeout\)"):
        client(Api(drain_polls=100)).remove("http://a:1", drain_timeout=2)


def test_add_registers_once():
    api = Api()
    api.workers.pop(0)
    changed, wid = client(api).add("http://a:1", ready_timeout=5)
    assert changed and wid == "w9"
    assert client(api).add("http://a:1", ready_timeout=5) == (False, "w9")
    assert sum(1 for c in api.calls if c[0] == "POST") == 1


def test_capacity_check():
    assert router.capacity_check(["http://a:1", "http://b:1"], ["http://a:1"], 1) == ["http://b:1"]
    with pytest.raises(router.RouterError, match=r"leave 0 healthy worker\(s\) \(none\).*roll_capacity_floor is 1"):
        router.capacity_check(["http://a:1"], ["http://a:1"], 1)


METRICS = """# TYPE smg_worker_cb_outcomes_total counter
smg_worker_cb_outcomes_total{worker="http://a:1",outcome="success"} 5
smg_worker_cb_outcomes_total{worker="http://a:1",outcome="failure"} 2
smg_worker_cb_outcomes_total{worker="http://b:1",outcome="success"} 7
smg_worker_requests_total{worker="http://b:1",model="m"} 0
"""


def test_worker_successes_and_spread():
    after = router.parse_worker_successes(METRICS)
    assert after == {"http://a:1": 5, "http://b:1": 7}
    assert router.spread({"http://a:1": 2, "http://b:1": 9}, after) == {"http://a:1": 3, "http://b:1": 7}


def test_file_discovery_replaces_the_worker_list():
    opts = fleet.router_options(dict(BASE, discovery_file="/var/lib/smg/workers.json"))
    assert "worker-urls" not in opts
    assert opts["discovery-provider"] == "file" and opts["discovery-file"] == "/var/lib/smg/workers.json"


def test_manifest_edits_keep_the_other_workers_and_fields():
    text = router.manifest_text(["http://a:1/", "http://b:1"])
    assert json.loads(text) == {"version": 1, "workers": [{"url": "http://a:1"}, {"url": "http://b:1"}]}
    out, changed = router.manifest_with(text, "http://a:1", False)
    assert changed and router.manifest_urls(out) == ["http://b:1"]
    assert router.manifest_with(out, "http://a:1", False) == (out, False)
    back, changed = router.manifest_with(out, "http://a:1/", True)
    assert changed and router.manifest_urls(back) == ["http://b:1", "http://a:1"]
    assert router.manifest_with(back, "http://a:1", True) == (back, False)
    kept = json.dumps({"version": 1, "workers": [{"url": "http://b:1", "model_id": "m"}]})
    assert json.loads(router.manifest_with(kept, "http://a:1", True)[0])["workers"][0] == {"url": "http://b:1", "model_id": "m"}


@pytest.mark.parametrize("text", ["{half", '{"version": 2, "workers": []}', '{"workers": []}', "[]"])
def test_a_manifest_smg_would_refuse_is_named(text):
    with pytest.raises(router.RouterError, match="manifest"):
        router.manifest_with(text, "http://a:1", True)


def test_wait_gone_and_wait_ready_read_the_router_only():
    api = Api(drain_polls=0)
    c = client(api)
    api.workers[0]["status"] = "draining"
    t = [0]

    def sleep(s):
        t[0] += 1
        if t[0] == 2:
            api.workers.pop(0)
    c.sleep = sleep
    assert c.wait_gone("http://a:1", 10) == 0.0 and t[0] == 2
    assert c.wait_ready("http://b:1", 5) == api.workers[0]["id"]
    assert not [x for x in api.calls if x[0] != "GET"]
    with pytest.raises(router.RouterError, match=r"not ready in the router 1s after it was listed in the manifest"):
        client(Api()).wait_ready("http://z:1", 1)


def test_node_containers_are_the_serving_hosts_on_that_node_in_inventory_order():
    hostvars = {"ct-a": {"gpuhost_proxmox_node": "pve1", "proxmox_lxc_gpu_ctid": 210},
                "metal": {"ansible_host": "10.0.0.5"},
                "ct-b": {"gpuhost_proxmox_node": "pve2", "proxmox_lxc_gpu_ctid": 211},
                "ct-c": {"gpuhost_proxmox_node": "pve1", "proxmox_lxc_gpu_ctid": "212"},
                "ct-none": {"gpuhost_proxmox_node": None, "proxmox_lxc_gpu_ctid": 213}}
    hosts = ["ct-c", "metal", "ct-a", "ct-b", "ct-none"]
    assert fleet.node_containers("pve1", hosts, hostvars) == ["212", 210]
    assert fleet.node_containers("pve2", hosts, hostvars) == [211]
    assert fleet.node_containers("pve3", hosts, hostvars) == [] and fleet.node_containers("pve1", [], hostvars) == []
    hostvars["ct-a"].pop("proxmox_lxc_gpu_ctid")
    with pytest.raises(fleet.FleetError, match="ct-a runs on Proxmox node pve1 .* sets no proxmox_lxc_gpu_ctid"):
        fleet.node_containers("pve1", hosts, hostvars)
