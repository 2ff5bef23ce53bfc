# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuhost.sglang.plugins.plugin_utils.lazy_import import LazyModule, lazy_function

alert_thresholds = LazyModule("ansible_collections.gpuhost.sglang.plugins.module_utils.bench.alert_thresholds")
targets = LazyModule("ansible_collections.gpuhost.sglang.plugins.module_utils.monitoring.targets")
grafana_diff = LazyModule("ansible_collections.gpuhost.sglang.plugins.module_utils.monitoring.grafana_diff")


def monitoring_thresholds(baseline_dir, factor=1.5):
    try:
        return alert_thresholds.from_dir(baseline_dir, float(factor))
    except (alert_thresholds.ThresholdError, ValueError, TypeError) as exc:
        raise AnsibleFilterError(str(exc))


def monitoring_scrape_jobs(serving_hosts, hostvars, engine_port=30000, node_port=9100, dcgm_port=9400, metrics=True,
                           routers=None, extra=None, controllers=None):
    try:
        return targets.scrape_jobs(list(serving_hosts), dict((h, hostvars[h]) for h in hostvars), engine_port,
                                   node_port, dcgm_port, metrics, routers, extra, controllers)
    except targets.TargetError as exc:
        raise AnsibleFilterError(str(exc))


class FilterModule(object):
    def filters(self):
        return {"monitoring_thresholds": monitoring_thresholds, "monitoring_scrape_jobs": monitoring_scrape_jobs,
                "grafana_dashboard_outdated": lazy_function(grafana_diff, "dashboard_outdated"),
                "grafana_datasource_outdated": lazy_function(grafana_diff, "datasource_outdated")}
