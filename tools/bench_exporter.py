#!/usr/bin/env python3
# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Serve the controller's benchmark baselines and bench history as Prometheus metrics (GET /metrics), read fresh on
every scrape (plugins/module_utils/bench/exporter.py); rendered by prometheus_client, served by aiohttp.

    .venv/bin/python tools/bench_exporter.py --listen 10.0.0.5 --port 9849 \
        --baseline-dir reports/baselines --report-dir reports

Point the monitoring role at it with monitoring_controller_targets: ["10.0.0.5:9849"] (job "controller"). Run it under
systemd on the controller (Restart=always) like any exporter; it only reads.
"""

from __future__ import absolute_import, division, print_function

import argparse
import asyncio
import os
import sys

from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "collections"))
from ansible_collections.gpuhost.sglang.plugins.module_utils.bench import exporter  # noqa: E402  pylint: disable=wrong-import-position

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class BenchCollector(object):
    def __init__(self, baseline_dir, report_dir):
        self.baseline_dir, self.report_dir = baseline_dir, report_dir

    def collect(self):
        for fam in exporter.collect(self.baseline_dir, self.report_dir):
            names = sorted(set(k for labels, dummy in fam.samples for k in labels))
            if fam.kind == "counter":
                out = CounterMetricFamily(fam.name[:-len("_total")], fam.doc, labels=names)
            else:
                out = GaugeMetricFamily(fam.name, fam.doc, labels=names)
            for labels, value in fam.samples:
                out.add_metric([labels.get(n, "") for n in names], value)
            yield out


def app(baseline_dir, report_dir):
    registry = CollectorRegistry(auto_describe=False)
    registry.register(BenchCollector(baseline_dir, report_dir))

    async def metrics(request):
        body = await asyncio.get_running_loop().run_in_executor(None, generate_latest, registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})

    application = web.Application()
    application.router.add_get("/metrics", metrics)
    return application


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--listen", default="127.0.0.1")
    p.add_argument("--port", type=int, default=9849)
    p.add_argument("--baseline-dir", default=os.path.join(ROOT, "reports", "baselines"))
    p.add_argument("--report-dir", default=os.path.join(ROOT, "reports"))
    a = p.parse_args(argv)
    for flag, path in (("--baseline-dir", a.baseline_dir), ("--report-dir", a.report_dir)):
        if not os.path.isdir(path):
            p.error("%s is %r: allowed values are existing directories (serving_bench's baseline_dir / report_dir)"
                    % (flag, path))
    web.run_app(app(a.baseline_dir, a.report_dir), host=a.listen, port=a.port, access_log=None,
                print=lambda *x: print("bench exporter on http://%s:%d/metrics" % (a.listen, a.port), flush=True))


if __name__ == "__main__":
    main()
