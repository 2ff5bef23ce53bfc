# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The roll plan: Ansible's own batching, ``PlaybookExecutor._get_serialized_batches`` (ansible-core
lib/ansible/executor/playbook_executor.py, 2.19) called with the play's ``serial`` value, so that the plan printed in
check mode is the batching the rolling play uses, not a re-implementation of it. Controller side only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.executor.playbook_executor import PlaybookExecutor

from ansible_collections.gpuhost.sglang.plugins.plugin_utils.fleet import FleetError


class _Inventory(object):
    def __init__(self, hosts):
        self.hosts = list(hosts)

    def get_hosts(self, pattern, order=None):
        return list(self.hosts)


class _Play(object):
    def __init__(self, serial):
        self.hosts = "all"
        self.order = None
        self.serial = serial


def batches(hosts, serial):
    """The batches Ansible makes of ``hosts`` for ``serial`` (an int, "N%" or a list of those)."""
    if not isinstance(serial, (list, tuple)):
        serial = [serial]
    for item in serial:
        text = str(item)
        if not (text.rstrip("%").isdigit() and (text.endswith("%") or text.isdigit())):
            raise FleetError("roll_serial=%r: allowed values are integers, percentages like '25%%' or a list of "
                             "those (Ansible's serial)" % (serial,))

    class _Executor(object):
        _inventory = _Inventory(hosts)

    return PlaybookExecutor._get_serialized_batches(_Executor(), _Play(list(serial)))


def roll_plan(hosts, serial, floor=0):
    """Each batch with the hosts serving while it is out; a batch below the capacity floor is marked."""
    hosts = list(hosts or [])
    try:
        floor = int(floor)
    except (TypeError, ValueError):
        raise FleetError("roll_capacity_floor=%r: allowed values are integers >= 0" % (floor,))
    if floor < 0:
        raise FleetError("roll_capacity_floor=%r: allowed values are integers >= 0" % (floor,))
    plan = []
    for i, batch in enumerate(batches(hosts, serial)):
        serving = len(hosts) - len(batch)
        plan.append({"batch": i + 1, "hosts": list(batch), "size": len(batch), "serving": serving,
                     "floor": floor, "ok": serving >= floor})
    return plan


def unit_plan(units, serial, floor=0):
    """The roll over serving units (a host, or a multi-node replica's hosts, multinode.roll_units): Ansible's own
    batching applied to the units, then the play's ``hosts`` (the units' hosts, batch after batch) and its
    ``serial`` (each batch's host count), so that Ansible's serial over hosts makes exactly these batches and never
    splits a replica. ``floor`` counts serving units."""
    units = [list(u) for u in units or []]
    names = ["unit%d" % i for i in range(len(units))]
    plan = roll_plan(names, serial, floor)
    hosts, sizes = [], []
    for b in plan:
        members = [units[int(n[4:])] for n in b["hosts"]]
        b["units"] = [m[0] if len(m) == 1 else "[%s]" % " ".join(m) for m in members]
        b["replicas"] = any(len(m) > 1 for m in members)
        b["hosts"] = [h for m in members for h in m]
        hosts += b["hosts"]
        sizes.append(len(b["hosts"]))
    again = [list(x) for x in batches(hosts, sizes)]
    if again != [b["hosts"] for b in plan]:  # pragma: no cover (Ansible changed its batching)
        raise FleetError("Ansible's serial over %r does not reproduce the replica batches %r" % (sizes, again))
    return {"plan": plan, "hosts": hosts, "serial": sizes or [1]}


def roll_plan_lines(plan):
    lines = []
    for b in plan:
        names = b["hosts"] if b["size"] <= 6 else b["hosts"][:3] + ["..."] + b["hosts"][-2:]
        if "units" in b:
            names = b["units"] if len(b["units"]) <= 6 else b["units"][:3] + ["..."] + b["units"][-2:]
        lines.append("batch %d: %d %s out, %d serving (floor %d)%s: %s" % (
            b["batch"], b["size"], "unit(s)" if b.get("replicas") else "host(s)", b["serving"], b["floor"],
            "" if b["ok"] else " BELOW THE FLOOR", " ".join(names)))
    return lines
