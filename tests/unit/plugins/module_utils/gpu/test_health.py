# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os

from ansible_collections.gpuhost.sglang.plugins.module_utils.gpu import health
from ansible_collections.gpuhost.sglang.tests.harness import fake_nvml as fake

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")


def test_healthy_h200_at_idle():
    h = health.read(fake.h200_box(), kernel_log=([], None))
    gpu = h["gpus"][0]
    assert h["state"] == "ok" and h["problems"] == [] and h["xid_source"] == "kernel_log"
    assert gpu["clock_event_mask"] == "0x1" and gpu["clock_events"] == ["gpu_idle"]
    assert (gpu["pcie_gen_current"], gpu["pcie_gen_max"], gpu["pcie_width_current"]) == (5, 5, 16)
    assert gpu["ecc"] == {"corrected_volatile": 0, "corrected_aggregate": 0, "uncorrected_volatile": 0,
                          "uncorrected_aggregate": 0}
    assert gpu["retired_pages_pending"] is None and "gpu0 retired pages pending: Not Supported" in h["errors"]
    assert gpu["remapped_rows"] == {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False}
    assert gpu["persistence_mode"] is True and h["p2p"] is None


def test_decode_clock_events_all_bits_and_unknown():
    assert health.decode_clock_events(0x0) == []
    assert health.decode_clock_events(0x64) == ["sw_power_cap", "sw_thermal_slowdown", "hw_thermal_slowdown"]
    assert health.decode_clock_events(0x8 | 0x800) == ["hw_slowdown", "bit_0x800"]
    assert health.decode_clock_events(None) is None


def test_older_pynvml_throttle_reasons_name():
    class OldPynvml(object):  # nvidia-ml-py before the R535 rename has only the ClocksThrottleReasons name
        @staticmethod
        def nvmlDeviceGetCurrentClocksThrottleReasons(handle):
            return 0x20

    assert health._clock_events(OldPynvml(), 0) == 0x20


def test_gen_downtrained_under_load_is_a_problem_but_not_at_idle():
    h = health.read(fake.gen_downtrained_box(), kernel_log=([], None))
    assert h["state"] == "degraded"
    assert h["problems"] == ["gpu1: pcie gen 2 below max 5"]
    idle = fake.gen_downtrained_box()
    idle.gpus[1]["health"] = {}  # clock events 0x1: an idle link may drop its generation to save power
    assert health.read(idle, kernel_log=([], None))["state"] == "ok"


def test_width_downtrained_is_a_problem_even_at_idle():
    h = health.read(fake.rtx_pro_6000_box(throttled_width=8), kernel_log=([], None))
    assert "gpu0: pcie width x8 below max x16" in h["problems"]


def test_thermal_throttle():
    h = health.read(fake.thermal_throttle_box(), kernel_log=([], None))
    assert h["problems"] == ["gpu0: clock event reasons: sw_thermal_slowdown, hw_thermal_slowdown"]
    assert h["gpus"][0]["violation_ns"]["thermal"] == 12500000000


def test_power_cap_alone_is_recorded_not_judged():
    h = health.read(fake.h200_box(clock_events=0x4), kernel_log=([], None))
    assert h["state"] == "ok" and h["gpus"][0]["clock_events"] == ["sw_power_cap"]


def test_xid_from_kernel_log_matched_by_bus():
    lines = ["6,1,2,-;nvidia: loading out-of-tree module", fake.KMSG_XID_79.split(";", 1)[1]]
    h = health.read(fake.rtx_pro_6000_box(), kernel_log=(lines, None))
    assert h["gpus"][1]["xids"] == [79] and h["problems"] == ["gpu1: xid 79"]


def test_xid_from_real_kmsg_file(tmp_path):
    log = tmp_path / "kmsg"
    log.write_text(fake.KMSG_XID_79 + "\n")
    lines, why = health.read_kernel_log(str(log))
    assert why is None and health.parse_kernel_xids(lines) == [
        {"bus": "0000:2a:00", "xid": 79, "detail": "pid=4242, name=python3, GPU has fallen off the bus."}]


def test_unreadable_kernel_log_falls_back_to_dmesg_then_nvml_events(tmp_path):
    missing = str(tmp_path / "nope")
    lines, why = health.read_kernel_log(missing, run=lambda argv: (1, "", "dmesg: read kernel buffer failed"))
    assert lines is None and "nope" in why and "read kernel buffer failed" in why
    h = health.read(fake.xid_event_box(31), kernel_log=(lines, why))
    assert h["xid_source"] == "nvml_events" and h["gpus"][0]["xids"] == [31]
    assert h["problems"] == ["gpu0: xid 31"]
    assert any("NVML events only since this read" in e for e in h["errors"])


def test_ecc_and_remap_pending():
    h = health.read(fake.ecc_box(), kernel_log=([], None))
    assert h["problems"] == ["gpu0: ecc uncorrected volatile 2"]
    assert h["gpus"][0]["ecc"]["corrected_aggregate"] == 40
    h = health.read(fake.remap_pending_box(), kernel_log=([], None))
    assert "gpu0: remapped rows pending (reset needed)" in h["problems"]


def test_p2p_state_from_link_probe():
    probe = {"pairs": [{"src": 0, "dst": 1}, {"src": 1, "dst": 0}], "slow_pairs": [{"src": 1, "dst": 0}],
             "failed_thresholds": True}
    h = health.read(fake.nvlink_bridge_pair(), kernel_log=([], None), link_probe=probe)
    assert h["p2p"] == {"state": "slow", "slow_pairs": ["1->0"], "pairs": 2}
    assert "p2p: slow pairs 1->0" in h["problems"]
    assert health.read(fake.h200_box(), kernel_log=([], None), link_probe=probe)["p2p"] is None  # one GPU


def test_degradation_between_readings():
    before = health.read(fake.h200_box(), kernel_log=([], None))
    assert health.degradation(before, before) == []
    after = health.read(fake.thermal_throttle_box(3.0), kernel_log=([], None))
    assert health.degradation(before, after) == [
        "gpu0: clock event reasons: sw_thermal_slowdown, hw_thermal_slowdown",
        "gpu0: thermal violation 3.0 s during the run"]
    after = health.read(fake.ecc_box(1), kernel_log=([], None))
    assert "gpu0: ecc uncorrected volatile 0 -> 1" in health.degradation(before, after)


def test_state_equal_for_equal_health_and_differs_when_degraded():
    ok = health.state(health.read(fake.h200_box(), kernel_log=([], None)))
    assert ok == health.state(health.read(fake.h200_box(violation_power_ns=5), kernel_log=([], None)))
    assert ok != health.state(health.read(fake.ecc_box(), kernel_log=([], None)))
    assert ok["state"] == "ok" and ok["gpus"][0]["pcie_max"] == "gen5 x16"


def test_read_safely_without_library_or_driver():
    assert health.read_safely(None)["state"] == "unknown"
    out = health.read_safely(fake.FakeNVML([], None, None, init_error=9))
    assert out["state"] == "unknown" and "Driver Not Loaded" in out["reason"]


def test_real_h200_reading_replayed_through_the_health_code():
    """NVML as read on the nvidia-h200 machine (fixtures/h200_nvml_health_raw.json, benchmarks/results/
    2026-12-02-h200-gpu_health.txt): idle before, 10 s of bf16 matmuls, read again."""
    with open(os.path.join(FIXTURES, "h200_nvml_health_raw.json")) as fh:
        raw = json.load(fh)
    before = health.read(fake.ReplayNVML(raw["before"]), kernel_log=([], None))
    after = health.read(fake.ReplayNVML(raw["after_load"]), kernel_log=([], None))
    gpu = before["gpus"][0]
    assert (gpu["pcie_gen_current"], gpu["pcie_gen_max"], gpu["pcie_width_current"], gpu["pcie_width_max"]) == (5, 5, 16, 16)
    assert gpu["clock_event_mask"] == "0x1" and gpu["clock_events"] == ["gpu_idle"]
    assert gpu["remapped_rows"] == {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False}
    assert gpu["retired_pages_pending"] is None and gpu["persistence_mode"] is True
    assert before["state"] == "ok" and after["state"] == "ok"
    # at full load the H200 runs at its power limit: sw_power_cap and power violation time, recorded, not judged
    assert after["gpus"][0]["clock_events"] == ["sw_power_cap"]
    assert after["gpus"][0]["violation_ns"] == {"power": 9839755424, "thermal": 0}
    assert health.degradation(before, after) == []
    assert health.state(before) == health.state(after)
