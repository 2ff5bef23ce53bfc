# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whether what Grafana has differs from what the monitoring role provisions (roles/monitoring tasks/grafana.yml),
from the answers of Grafana's HTTP API as ansible.builtin.uri registers them ({status, json}).

Grafana HTTP API (legacy /api, docs/grafana/<version>/http_api/dashboard, .../data_source): GET
/api/dashboards/uid/:uid answers {dashboard, meta: {folderUid, ...}} or 404; the stored dashboard carries Grafana's own
``id`` and ``version``, which are not ours to compare. GET /api/datasources/name/:name answers the datasource with
Grafana's fields besides the ones we set (id, uid, orgId, ...), or 404. Stdlib only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# keys Grafana adds to a stored dashboard (its database id and its edit counter)
DASHBOARD_OWN_KEYS = ("id", "version")


def dashboard_outdated(have, want, folder_uid):
    """True when Grafana has no such dashboard (404), has it in another folder than ``folder_uid``, or has it with
    other content than ``want`` (the role's JSON), Grafana's own keys left out on both sides."""
    if have.get("status") == 404:
        return True
    body = have.get("json") or {}
    if (body.get("meta") or {}).get("folderUid", "") != folder_uid:
        return True
    ours = dict((k, v) for k, v in (want or {}).items() if k not in DASHBOARD_OWN_KEYS)
    theirs = dict((k, v) for k, v in (body.get("dashboard") or {}).items() if k not in DASHBOARD_OWN_KEYS)
    return theirs != ours


def datasource_outdated(have, want):
    """True when Grafana has no such datasource (404) or one whose fields that ``want`` sets differ from it."""
    if have.get("status") == 404:
        return True
    body = have.get("json") or {}
    return dict((k, body[k]) for k in want if k in body) != want
