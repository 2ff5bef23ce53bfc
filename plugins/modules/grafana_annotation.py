#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: grafana_annotation
short_description: Post a Grafana annotation (a deploy, a rollback, a tuning adoption)
version_added: "0.1.0"
description:
  - Posts one annotation per dashboard UID in O(dashboard_uids) (or one organization annotation when the list is
    empty) through Grafana's HTTP API C(POST /api/annotations), times in epoch milliseconds.
  - A refusal by Grafana (HTTP 401 bad token, 403 missing permission, 400 unknown dashboard UID) or an unreachable
    Grafana fails the task with a message naming what to fix; with O(on_error=warn) it is a warning instead (used
    on the rollback path, whose own failure message must stay the one the operator reads).
  - The token is never logged (C(no_log)).
author:
  - gpuhost.sglang contributors (@gpuhost)
options:
  url:
    description: Grafana's root URL, e.g. C(https://grafana.example:3000).
    type: str
    required: true
  token:
    description: Service account token (Bearer); its role must allow C(annotations:create) (Editor).
    type: str
    required: true
  text:
    description: The annotation text.
    type: str
    required: true
  tags:
    description: Tags (Grafana filters organization annotations by tag).
    type: list
    elements: str
    default: []
  dashboard_uids:
    description: Dashboards to annotate; empty for one organization annotation.
    type: list
    elements: str
    default: []
  time_ms:
    description: Start, epoch milliseconds; default now.
    type: int
  time_end_ms:
    description: End of a region annotation, epoch milliseconds; default the start.
    type: int
  timeout:
    description: Seconds per HTTP request.
    type: int
    default: 10
  validate_certs:
    description: Verify Grafana's TLS certificate.
    type: bool
    default: true
  on_error:
    description: What a refusal or an unreachable Grafana does.
    type: str
    choices: [fail, warn]
    default: fail
notes:
  - In check mode nothing is posted.
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpuhost.sglang.attributes.check_mode_full
"""

EXAMPLES = r"""
- name: Deploy done, on the serving dashboard
  gpuhost.sglang.grafana_annotation:
    url: "{{ monitoring_grafana_url }}"
    token: "{{ monitoring_grafana_token }}"
    text: "deploy sglang 0.5.23 on gpu1"
    tags: [gpuhost, deploy, gpu1]
    dashboard_uids: [gpuhost-serving]
  delegate_to: localhost
"""

RETURN = r"""
annotations:
  description: The annotations posted (text, tags, time, timeEnd, dashboardUID, id).
  returned: always
  type: list
  elements: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuhost.sglang.plugins.module_utils.monitoring import grafana


def main():
    module = AnsibleModule(
        argument_spec=dict(
            url=dict(type="str", required=True),
            token=dict(type="str", required=True, no_log=True),
            text=dict(type="str", required=True),
            tags=dict(type="list", elements="str", default=[]),
            dashboard_uids=dict(type="list", elements="str", default=[]),
            time_ms=dict(type="int"),
            time_end_ms=dict(type="int"),
            timeout=dict(type="int", default=10),
            validate_certs=dict(type="bool", default=True),
            on_error=dict(type="str", choices=["fail", "warn"], default="fail"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    try:
        client = grafana.AnnotationClient(p["url"], p["token"], p["timeout"], p["validate_certs"])
        if module.check_mode:
            module.exit_json(changed=True, annotations=[])
        posted = client.post_all(p["text"], p["tags"], p["dashboard_uids"], time_ms=p["time_ms"],
                                 time_end_ms=p["time_end_ms"])
    except grafana.GrafanaError as exc:
        if p["on_error"] == "warn":
            module.warn("annotation not posted: %s" % exc)
            module.exit_json(changed=False, annotations=[])
        module.fail_json(msg=str(exc), annotations=[])
    module.exit_json(changed=True, annotations=posted)


if __name__ == "__main__":
    main()
