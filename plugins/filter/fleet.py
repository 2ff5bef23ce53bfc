# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuhost.sglang.plugins.plugin_utils.lazy_import import LazyModule, lazy_function

router = LazyModule("ansible_collections.gpuhost.sglang.plugins.module_utils.serving.router")
fleet = LazyModule("ansible_collections.gpuhost.sglang.plugins.plugin_utils.fleet")
multinode = LazyModule("ansible_collections.gpuhost.sglang.plugins.plugin_utils.multinode")
plan = LazyModule("ansible_collections.gpuhost.sglang.plugins.plugin_utils.roll_plan")


def _wrap(module, name):
    def run(*args, **kw):
        try:
            return getattr(module, name)(*args, **kw)
        except (fleet.FleetError, multinode.ReplicaError) as exc:
            raise AnsibleFilterError(str(exc))
    return run


class FilterModule(object):
    def filters(self):
        return {"router_worker_urls": _wrap(fleet, "worker_urls"), "router_options": _wrap(fleet, "router_options"),
                "roll_plan": _wrap(plan, "roll_plan"), "roll_plan_lines": _wrap(plan, "roll_plan_lines"),
                "roll_units": _wrap(multinode, "roll_units"), "roll_unit_plan": _wrap(plan, "unit_plan"),
                "replica_heads": _wrap(multinode, "replica_heads"), "sglang_replica_rank": _wrap(multinode, "replica_rank"),
                "router_worker_successes": lazy_function(router, "parse_worker_successes"),
                "router_spread": lazy_function(router, "spread"),
                "router_manifest": lazy_function(router, "manifest_text"),
                "proxmox_node_containers": _wrap(fleet, "node_containers")}
