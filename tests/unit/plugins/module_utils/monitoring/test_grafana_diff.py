# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the monitoring role writes back to Grafana (plugins/module_utils/monitoring/grafana_diff.py): the role's own
dashboards against Grafana's answers in the shapes of tests/fixtures/grafana_standin.py (tests/integration/test_grafana.py
runs the role's tasks against the stand-in itself)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import json
import os

from ansible_collections.gpuhost.sglang.plugins.module_utils.monitoring.grafana_diff import (
    dashboard_outdated, datasource_outdated)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), *[os.pardir] * 5))
with open(os.path.join(ROOT, "roles", "monitoring", "files", "dashboards", "gpuhost-serving.json")) as fh:
    WANT = json.load(fh)
FOLDER = "gpuhost-sglang"


def stored(dashboard, folder=FOLDER, version=3):
    """uri's result of GET /api/dashboards/uid/:uid for a dashboard Grafana stored (its id and version added)."""
    dash = dict(copy.deepcopy(dashboard), id=7, version=version)
    return {"status": 200, "json": {"dashboard": dash, "meta": {"folderUid": folder, "version": version, "slug": "s"}}}


def test_a_dashboard_as_provisioned_is_left_alone_whatever_its_id_and_version():
    assert not dashboard_outdated(stored(WANT), WANT, FOLDER)
    assert not dashboard_outdated(stored(WANT, version=12), dict(WANT, version=0), FOLDER)


def test_missing_moved_or_edited_dashboards_are_written():
    assert dashboard_outdated({"status": 404, "json": {"message": "Dashboard not found"}}, WANT, FOLDER)
    assert dashboard_outdated(stored(WANT, folder="other"), WANT, FOLDER)
    assert dashboard_outdated({"status": 200, "json": {"dashboard": dict(WANT)}}, WANT, FOLDER)   # no folder at all
    assert dashboard_outdated(stored(dict(WANT, title="edited")), WANT, FOLDER)
    panels = copy.deepcopy(WANT["panels"])
    panels[0]["title"] = "edited in Grafana"
    assert dashboard_outdated(stored(dict(WANT, panels=panels)), WANT, FOLDER)


DS = {"name": "Prometheus", "type": "prometheus", "access": "proxy", "url": "http://127.0.0.1:9090", "isDefault": True}


def test_a_datasource_compares_the_fields_the_role_sets():
    grafana = dict(DS, id=1, uid="abc", orgId=1, basicAuth=False, jsonData={})
    assert not datasource_outdated({"status": 200, "json": grafana}, DS)
    assert datasource_outdated({"status": 200, "json": dict(grafana, url="http://10.1.2.3:9090")}, DS)
    assert datasource_outdated({"status": 200, "json": dict((k, v) for k, v in grafana.items() if k != "isDefault")}, DS)
    assert datasource_outdated({"status": 404, "json": {"message": "Data source not found"}}, DS)
