# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""testinfra verify of the monitoring scenario: the real Prometheus (Debian 12 package) scrapes the engine stand-in
(SGLang's metric names), node_exporter (Debian package) and dcgm-exporter (stand-in from the fake CUDA repository);
every dashboard panel returns data; alerts fire end to end (engine stopped -> SglangServerDown, XID -> GpuXidError)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import time
import urllib.request

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
DASHBOARDS = os.path.join(ROOT, "roles", "monitoring", "files", "dashboards")
API = "http://127.0.0.1:9090/api/v1/"
SERVER_DOWN_FOR = 5.0   # monitoring_alert_server_down_for in converge.yml
SCRAPE = 1.0            # scrape and rule interval in converge.yml


def api(host, path, **params):
    """GET the Prometheus HTTP API on the test host (python3 stdlib there; nothing on the controller's network)."""
    script = ("import json,sys,urllib.parse,urllib.request;"
              "q=urllib.parse.urlencode(json.loads(sys.argv[2]));"
              "print(urllib.request.urlopen(sys.argv[1]+('?'+q if q else ''),timeout=10).read().decode())")
    out = host.check_output("python3 -c %s %s %s" % (
        json.dumps(script), json.dumps(API + path), json.dumps(json.dumps(params)).replace("$", "\\$")))
    doc = json.loads(out)
    assert doc["status"] == "success", doc
    return doc["data"]


def wait(pred, timeout, step=0.5):
    t0 = time.monotonic()
    while True:
        got = pred()
        if got:
            return got, time.monotonic() - t0
        if time.monotonic() - t0 > timeout:
            return got, time.monotonic() - t0
        time.sleep(step)


def test_dcgm_pinned_held_and_ordered(host):
    assert host.package("datacenter-gpu-manager-4-core").version == "1:4.5.2-1"
    assert host.package("datacenter-gpu-manager-exporter").version == "4.6.1-1"
    held = host.check_output("apt-mark showhold").split()
    assert {"datacenter-gpu-manager-4-core", "datacenter-gpu-manager-exporter"} <= set(held)
    prefs = host.file("/etc/apt/preferences.d/gpuhost-dcgm").content_string
    assert "Pin: version 1:4.5.2-1" in prefs and "Pin: version 4.6.1-1" in prefs
    # a dist-upgrade does not move them although 4.6.0 / 4.7.0 are published
    host.run_expect([0], "DEBIAN_FRONTEND=noninteractive apt-get -y -q dist-upgrade")
    assert host.package("datacenter-gpu-manager-exporter").version == "4.6.1-1"
    show = host.check_output("systemctl show nvidia-dcgm-exporter.service -p After -p Requires -p ExecStart")
    props = dict(line.split("=", 1) for line in show.splitlines() if line and not line.startswith("ExecStart"))
    assert "nvidia-dcgm.service" in props["After"].split() and "nvidia-dcgm.service" in props["Requires"].split(), props
    assert "-f /etc/dcgm-exporter/gpuhost-counters.csv" in show and "-r 127.0.0.1:5555" in show
    assert host.service("nvidia-dcgm.service").is_running and host.service("nvidia-dcgm-exporter.service").is_running


def test_prometheus_unit_hardened_and_configured(host):
    show = host.check_output("systemctl show prometheus.service -p ProtectSystem -p User -p SystemCallFilter")
    assert "ProtectSystem=strict" in show and "User=prometheus" in show
    args = host.check_output("cat /proc/$(systemctl show -p MainPID --value prometheus.service)/cmdline | tr '\\0' ' '")
    assert "--storage.tsdb.retention.time=15d" in args and "--web.listen-address=0.0.0.0:9090" in args
    assert host.service("prometheus-node-exporter.service").is_running


def test_targets_up_with_a_query_result_each(host):
    def all_up():
        t = api(host, "targets")["activeTargets"]
        return t if t and all(x["health"] == "up" for x in t) else None
    targets, dt = wait(all_up, 30)
    assert targets, api(host, "targets")
    jobs = sorted(x["labels"]["job"] for x in targets)
    assert jobs == ["controller", "dcgm", "node", "prometheus", "router", "sglang"], jobs
    queries = {"sglang": 'sglang_num_requests_total', "node": 'node_load1',
               "dcgm": 'DCGM_FI_DEV_GPU_TEMP', "prometheus": 'prometheus_build_info',
               "controller": 'gpuhost_baseline_ttft_p99_seconds', "router": 'smg_worker_health'}
    for x in sorted(targets, key=lambda t: t["labels"]["job"]):
        job = x["labels"]["job"]
        res = api(host, "query", query='%s{job="%s"}' % (queries[job], job))["result"]
        assert res, (job, queries[job])
        print("target %-10s %-22s up; %s = %s" % (job, x["scrapeUrl"].split("/")[2], queries[job], res[0]["value"][1]))
    # the controller's samples keep the benchmarked host (honor_labels), so they join the live series by host
    res = api(host, "query", query='gpuhost_baseline_ttft_p99_seconds{job="controller"}')["result"]
    assert res[0]["metric"]["host"] == "mon" and float(res[0]["value"][1]) == 0.2, res


def panels():
    for name in sorted(os.listdir(DASHBOARDS)):
        with open(os.path.join(DASHBOARDS, name)) as f:
            doc = json.load(f)
        for p in doc["panels"]:
            for t in p["targets"]:
                yield name, p["title"], t["expr"].replace("$host", ".*")


def test_every_dashboard_panel_returns_data(host):
    empty = []
    n = 0
    for name, title, expr in panels():
        n += 1
        res, dummy = wait(lambda: api(host, "query", query=expr)["result"], 20)
        if not res:
            empty.append("%s / %s: %s" % (name, title, expr))
    print("%d dashboard panel queries, %d without data" % (n, len(empty)))
    assert not empty, empty


def firing(host, name):
    return [a for a in api(host, "alerts")["alerts"] if a["labels"]["alertname"] == name and a["state"] == "firing"]


def test_server_down_fires_within_its_window_and_resolves(host):
    assert not firing(host, "SglangServerDown")
    host.run_expect([0], "systemctl stop sglang.service")
    try:
        got, dt = wait(lambda: firing(host, "SglangServerDown"), 60, step=0.25)
        assert got, api(host, "alerts")
        print("SglangServerDown firing %.1f s after the engine stopped (for: %.0fs, scrape/eval %.0fs)" % (
            dt, SERVER_DOWN_FOR, SCRAPE))
        assert got[0]["labels"]["host"] == "mon"
        # for: plus one scrape, one evaluation and the API's own polling
        assert SERVER_DOWN_FOR <= dt <= SERVER_DOWN_FOR + 4 * SCRAPE + 2.0, dt
    finally:
        host.run_expect([0], "systemctl start sglang.service")
    gone, dt = wait(lambda: not firing(host, "SglangServerDown"), 30)
    assert gone
    print("SglangServerDown resolved %.1f s after the engine started again" % dt)


def test_xid_error_fires(host):
    assert not firing(host, "GpuXidError")
    host.run_expect([0], "mkdir -p /etc/gpuhost-standin && echo '{\"DCGM_FI_DEV_XID_ERRORS\": 79}' "
                         "> /etc/gpuhost-standin/dcgm-values.json")
    try:
        got, dt = wait(lambda: firing(host, "GpuXidError"), 30, step=0.25)
        assert got and sorted(a["labels"]["gpu"] for a in got) == ["0", "1"], got
        print("GpuXidError firing on both GPUs %.1f s after XID 79: %s" % (dt, got[0]["annotations"]["summary"]))
    finally:
        host.run_expect([0], "rm -f /etc/gpuhost-standin/dcgm-values.json")


def grafana(path):
    """GET the Grafana stand-in on the controller's loopback (prepare.yml) with the scenario's token."""
    with open(os.path.join(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"], "grafana.port")) as f:
        port = int(f.read())
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path),
                                 headers={"Authorization": "Bearer molecule-grafana-token"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read().decode())


def test_grafana_provisioned_once_through_grafana_grafana():
    """converge + idempotence ran the role's Grafana path twice: one folder, the datasource pointing at this
    Prometheus, both dashboards in the folder at version 1 (the second run wrote nothing)."""
    assert [f["uid"] for f in grafana("/api/folders")] == ["gpuhost-sglang"]
    (ds,) = grafana("/api/datasources")
    assert (ds["name"], ds["type"], ds["url"], ds["isDefault"]) == ("Prometheus", "prometheus", "http://127.0.0.1:9090", True)
    for uid in ("gpuhost-serving", "gpuhost-gpu"):
        got = grafana("/api/dashboards/uid/" + uid)
        assert got["meta"]["folderUid"] == "gpuhost-sglang" and got["dashboard"]["version"] == 1, got["meta"]
        print("grafana dashboard %-16s in folder %s, version %d, %d panels" % (
            uid, got["meta"]["folderUid"], got["dashboard"]["version"], len(got["dashboard"]["panels"])))
