# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fleet settings computed in tested Python: the router's options and worker URLs, and the roll plan.

The roll plan is Ansible's own batching: ``PlaybookExecutor._get_serialized_batches`` (ansible-core
lib/ansible/executor/playbook_executor.py, 2.19) called with the play's ``serial`` value, so that the plan printed in
check mode is the batching the rolling play will use, not a re-implementation of it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

_VALID_BACKENDS = ("sglang", "openai", "vllm")


class FleetError(ValueError):
    """Bad fleet input; the message names the variable, its value and what is allowed."""


def worker_url(address, port):
    host = str(address)
    if ":" in host and not host.startswith("["):
        host = "[%s]" % host  # an IPv6 literal in a URL
    return "http://%s:%d" % (host, int(port))


def worker_urls(hosts, hostvars, default_port=30000):
    """``http://ADDRESS:sglang_port`` of each host (inventory order); ADDRESS is ``sglang_router_address`` (the
    address the router reaches the worker at, e.g. on a separate data-plane network) or else ``ansible_host``."""
    out = []
    for name in hosts or []:
        hv = hostvars[name]
        address = hv.get("sglang_router_address") or hv.get("ansible_host") or name
        out.append(worker_url(address, hv.get("sglang_port") or default_port))
    return out


def router_options(settings):
    """The ``smg launch`` options from the router role's settings (inventory), ``options`` on top.

    settings: listen, port, prometheus_port, backend, policy, worker_urls, health_check, retry (dicts of SMG long
    option names), options.
    """
    s = dict(settings or {})
    backend = s.get("backend")
    if backend not in _VALID_BACKENDS:
        raise FleetError("router_backend=%r: allowed values are %s" % (backend, ", ".join(_VALID_BACKENDS)))
    urls = list(s.get("worker_urls") or [])
    if not urls:
        raise FleetError("router_worker_urls=[] and the group router_worker_group has no hosts: the router needs "
                         "at least one worker")
    for name in ("port", "prometheus_port"):
        try:
            if not 0 < int(s.get(name)) < 65536:
                raise ValueError
        except (TypeError, ValueError):
            raise FleetError("router_%s=%r: allowed values are integers 1-65535" % (name, s.get(name)))
    if int(s["port"]) == int(s["prometheus_port"]):
        raise FleetError("router_prometheus_port=%r equals router_port: allowed values are any other port"
                         % s["prometheus_port"])
    opts = {"host": s.get("listen") or "0.0.0.0", "port": int(s["port"]),
            "prometheus-host": s.get("listen") or "0.0.0.0", "prometheus-port": int(s["prometheus_port"]),
            "backend": backend, "policy": s.get("policy") or "cache_aware", "worker-urls": urls}
    for group in ("health_check", "retry", "options"):
        extra = s.get(group) or {}
        if not isinstance(extra, dict):
            raise FleetError("router_%s=%r: allowed values are a dict of smg launch long options" % (group, extra))
        opts.update(extra)
    return opts


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
    from ansible.executor.playbook_executor import PlaybookExecutor

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


def roll_plan_lines(plan):
    lines = []
    for b in plan:
        names = b["hosts"] if b["size"] <= 6 else b["hosts"][:3] + ["..."] + b["hosts"][-2:]
        lines.append("batch %d: %d host(s) out, %d serving (floor %d)%s: %s" % (
            b["batch"], b["size"], b["serving"], b["floor"], "" if b["ok"] else " BELOW THE FLOOR", " ".join(names)))
    return lines
