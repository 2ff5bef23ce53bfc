# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The shared input rules: relations, keys of mappings, durations, and every role's ranges.yml."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import glob
import os

import pytest
import yaml

from ansible_collections.gpuhost.sglang.plugins.plugin_utils.inputs import input_names, range_error

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), *[".."] * 4))
ROLES = sorted(os.path.basename(os.path.dirname(os.path.dirname(p)))
               for p in glob.glob(os.path.join(ROOT, "roles", "*", "vars", "ranges.yml")))


def role_data(role):
    with open(os.path.join(ROOT, "roles", role, "vars", "ranges.yml")) as fh:
        rules = yaml.safe_load(fh)[role + "_input_rules"]
    with open(os.path.join(ROOT, "roles", role, "defaults", "main.yml")) as fh:
        defaults = yaml.safe_load(fh)
    return rules, defaults


def test_every_role_with_numeric_inputs_has_rules():
    assert set(ROLES) >= {"sglang", "router", "monitoring", "dcgm_exporter", "nvidia_driver", "proxmox_host",
                          "proxmox_lxc_gpu"}


@pytest.mark.parametrize("role", ROLES)
def test_role_defaults_pass_and_name_real_variables(role):
    rules, defaults = role_data(role)
    assert range_error(defaults, rules) == ""
    missing = [n for n in input_names(rules) if n not in defaults]
    assert not missing, "%s/vars/ranges.yml names variables without a default: %s" % (role, missing)
    for rule in rules:
        if rule.get("key") is not None and rule["name"] in defaults and rule["name"].endswith("_default_options"):
            assert rule["key"] in defaults[rule["name"]], rule


@pytest.mark.parametrize("role", ROLES)
def test_role_rules_reject_one_step_outside(role):
    """Each bound is enforced: one past it gives one message naming that variable (and key) and the bound."""
    rules, defaults = role_data(role)
    for rule in rules:
        if rule.get("relation") or rule.get("type") == "duration":
            continue
        for bound, step in (("min", -1), ("max", 1)):
            if rule.get(bound) is None:
                continue
            values = dict(defaults)
            bad = rule[bound] + step * (0.5 if rule.get("type") == "float" else 1)
            if rule.get("key") is not None:
                values[rule["name"]] = dict(values[rule["name"]] or {}, **{rule["key"]: bad})
                label = "%s.%s=%s" % (rule["name"], rule["key"], bad)
            else:
                values[rule["name"]] = bad
                label = "%s=%s" % (rule["name"], bad)
            msg = range_error(values, rules)
            assert msg.startswith(label + " is out of range: allowed "), (rule, msg)
            assert str(rule[bound]) in msg


def test_ports_that_must_differ():
    rules, defaults = role_data("router")
    msg = range_error(dict(defaults, router_prometheus_port=30000, router_port=30000), rules)
    assert msg == ("router_prometheus_port=30000 must be different from router_port=30000"
                   " (smg serves both on router_listen_address).")
    # given on the command line (-e router_port=29000): text compares as the number it is
    assert range_error(dict(defaults, router_port="29000"), rules).startswith("router_prometheus_port=29000 must be")


def test_a_timeout_that_must_exceed_another_inside_a_mapping():
    rules, defaults = role_data("router")
    msg = range_error(dict(defaults, router_ready_timeout=5), rules)
    assert msg == ("router_ready_timeout=5 must be greater than router_health_check.health-check-interval-secs=5"
                   " (a worker is healthy only after one health-check interval).")
    retry = dict(defaults["router_retry"], **{"retry-initial-backoff-ms": 5000})
    assert range_error(dict(defaults, router_retry=retry), rules).startswith(
        "router_retry.retry-initial-backoff-ms=5000 must be at most router_retry.retry-max-backoff-ms=2000")


def test_relation_with_a_condition():
    rules, defaults = role_data("monitoring")
    same = dict(defaults, monitoring_node_port=9090)
    assert range_error(same, rules).startswith("monitoring_node_port=9090 must be different from monitoring_port=9090")
    assert range_error(dict(same, monitoring_node_exporter=False), rules) == ""
    assert range_error(dict(same, monitoring_node_exporter="false"), rules) == ""
    rules, defaults = role_data("sglang")
    assert range_error(dict(defaults, sglang_start_limit_interval_sec=0, sglang_restart_sec=10), rules) == ""
    assert range_error(dict(defaults, sglang_start_limit_interval_sec=5, sglang_restart_sec=10), rules) == (
        "sglang_start_limit_interval_sec=5 must be greater than sglang_restart_sec=10 (0 disables the limit;"
        " otherwise the window must hold more than one RestartSec).")


@pytest.mark.parametrize("value,msg", [
    ("0s", "monitoring_scrape_interval=0s is out of range: allowed a duration (Prometheus format, e.g. 15s, 1m30s),"
           " 1 to 86400 seconds."),
    ("2d", "monitoring_scrape_interval=2d is out of range: allowed a duration (Prometheus format, e.g. 15s, 1m30s),"
           " 1 to 86400 seconds."),
    ("15 s", "monitoring_scrape_interval='15 s' is not a duration (Prometheus format, e.g. 15s, 1m30s): allowed a"
             " duration (Prometheus format, e.g. 15s, 1m30s), 1 to 86400 seconds."),
    ("1m30s", ""), ("500ms", "monitoring_scrape_interval=500ms is out of range: allowed a duration (Prometheus format,"
                             " e.g. 15s, 1m30s), 1 to 86400 seconds."),
])
def test_durations(value, msg):
    rules, defaults = role_data("monitoring")
    assert range_error(dict(defaults, monitoring_scrape_interval=value), rules) == msg


def test_duration_relation_compares_seconds():
    rules, defaults = role_data("monitoring")
    assert range_error(dict(defaults, monitoring_alert_for="1m", monitoring_evaluation_interval="30s"), rules) == ""
    assert range_error(dict(defaults, monitoring_alert_for="10s", monitoring_evaluation_interval="1m"), rules) == (
        "monitoring_alert_for=10s must be at least monitoring_evaluation_interval=1m"
        " (an alert must hold for at least one evaluation).")


def test_fractions():
    rules, defaults = role_data("monitoring")
    assert range_error(dict(defaults, monitoring_alert_token_usage=95), rules) == (
        "monitoring_alert_token_usage=95 is out of range: allowed a number, 0.0 to 1.0 (a fraction of the KV cache).")


def test_keys_absent_from_a_mapping_are_not_checked_and_a_wrong_type_is_named():
    rules, defaults = role_data("proxmox_lxc_gpu")
    assert range_error(dict(defaults, proxmox_lxc_gpu_options={"hostname": "x"}), rules) == ""
    assert range_error(dict(defaults, proxmox_lxc_gpu_options={"cores": "many"}), rules) == (
        "proxmox_lxc_gpu_options.cores='many' is not an integer: allowed an integer, 1 to 8192.")


def test_optional_values_and_names():
    rules = [{"name": "a", "optional": True, "min": 1}, {"name": "b", "relation": "<", "other": "c", "if": "d"}]
    assert range_error({"a": "", "b": 1, "c": 0, "d": False}, rules) == ""
    assert range_error({"a": None, "b": 1, "c": 0, "d": True}, rules) == "b=1 must be less than c=0."
    assert input_names(rules) == ["a", "b", "c", "d"]
