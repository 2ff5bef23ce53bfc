# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Grafana annotations for deploys, rollbacks and tuning adoptions (module grafana_annotation).

Grafana HTTP API, annotations (legacy /api, docs/grafana/<version>/http_api/annotations): POST /api/annotations with
``{"text", "tags", "time", "timeEnd", "dashboardUID", "panelId"}`` (times in epoch milliseconds) answers
``{"message": "Annotation added", "id": N}``; an annotation without dashboardUID is an organization annotation that any
dashboard shows through a tag filter. Auth: ``Authorization: Bearer <service account token>``. A refusal is an
error that names what to fix (the token, its permissions, the dashboard UID), never the token itself.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import time

from ansible.module_utils.six.moves.urllib.error import HTTPError, URLError
from ansible.module_utils.urls import open_url


class GrafanaError(Exception):
    pass


# What an HTTP status from Grafana means for the operator (the message Grafana sent is appended).
_HINTS = {
    400: "Grafana rejected the annotation (an unknown dashboard UID or an empty text)",
    401: "Grafana refused the token: set monitoring_grafana_token to a valid service account token",
    403: "the token may not create annotations: give its service account the Editor role (annotations:create)",
    404: "no annotations API at this address: is monitoring_grafana_url Grafana's root URL?",
}


def _now_ms():
    return int(time.time() * 1000)


class AnnotationClient(object):
    def __init__(self, url, token, timeout=10, validate_certs=True, opener=open_url):
        if not url or not url.startswith(("http://", "https://")):
            raise GrafanaError("monitoring_grafana_url is %r: allowed values are http:// or https:// URLs of "
                               "Grafana (or monitoring_annotations: false to post none)" % (url,))
        if not token:
            raise GrafanaError("monitoring_grafana_token is empty: Grafana needs a service account token to accept "
                               "annotations (Bearer auth)")
        self.url = url.rstrip("/")
        self._token = token
        self.timeout = timeout
        self.validate_certs = validate_certs
        self._open = opener

    def _call(self, method, path, body=None):
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Authorization": "Bearer " + self._token, "Content-Type": "application/json",
                   "Accept": "application/json", "User-Agent": "gpuhost.sglang"}
        try:
            resp = self._open(self.url + path, data=data, headers=headers, method=method, timeout=self.timeout,
                              validate_certs=self.validate_certs)
            return json.loads(resp.read().decode() or "null")
        except HTTPError as exc:
            try:
                said = json.loads(exc.read().decode()).get("message", "")
            except (ValueError, AttributeError):
                said = ""
            raise GrafanaError("Grafana at %s refused %s %s: HTTP %d%s: %s" % (
                self.url, method, path.split("?")[0], exc.code, (" (%s)" % said) if said else "",
                _HINTS.get(exc.code, "unexpected answer")))
        except (URLError, OSError) as exc:
            raise GrafanaError("Grafana at %s is not reachable (%s): check monitoring_grafana_url" % (
                self.url, getattr(exc, "reason", exc)))

    def post(self, text, tags=(), dashboard_uid="", panel_id=0, time_ms=None, time_end_ms=None):
        """Create one annotation; returns the annotation as Grafana stored it (id included)."""
        if not text:
            raise GrafanaError("the annotation text is empty")
        body = {"text": text, "tags": [str(t) for t in tags], "time": int(time_ms or _now_ms())}
        body["timeEnd"] = int(time_end_ms or body["time"])
        if dashboard_uid:
            body["dashboardUID"] = dashboard_uid
        if panel_id:
            body["panelId"] = int(panel_id)
        got = self._call("POST", "/api/annotations", body)
        if not isinstance(got, dict) or "id" not in got:
            raise GrafanaError("Grafana at %s answered POST /api/annotations without an id: %r" % (self.url, got))
        body["id"] = got["id"]
        return body

    def post_all(self, text, tags=(), dashboard_uids=(), **kw):
        """One annotation per dashboard UID (or one organization annotation when there are none)."""
        return [self.post(text, tags, uid, **kw) for uid in (list(dashboard_uids) or [""])]
