# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""GPU health from NVML (pynvml / nvidia-ml-py): the fields that make a measurement wrong.

Per GPU: PCIe link generation and width now and max, clock event reasons decoded, thermal and power violation
time, XID errors since boot (kernel log where readable, NVML events otherwise), ECC volatile and aggregate counts,
retired pages pending and remapped rows pending, persistence mode; for the box, the P2P state a link probe measured.

``read(nvml, ...)`` returns plain data; ``problems(gpu)`` names what is wrong with one GPU now;
``state(health)`` is the comparable summary a benchmark records in its fingerprint; ``degradation(before, after)``
names what got worse between two readings. Like nvml_facts, this file takes the pynvml module as a parameter and
imports only the stdlib, so it can be loaded by path (benchmarks/gpu/gpu_health.py).

NVML sources (NVML API Reference, https://docs.nvidia.com/deploy/nvml-api/):
  PCIe link        nvmlDeviceGetCurrPcieLinkGeneration / MaxPcieLinkGeneration / CurrPcieLinkWidth / MaxPcieLinkWidth
                   (group__nvmlDeviceQueries.html)
  clock events     nvmlDeviceGetCurrentClocksEventReasons (R535+; nvmlDeviceGetCurrentClocksThrottleReasons before,
                   same bits), bits in group__nvmlClocksEventReasons.html
  violation time   nvmlDeviceGetViolationStatus(device, nvmlPerfPolicyType_t) -> nvmlViolationTime_t.violationTime, ns
                   (group__nvmlDeviceQueries.html, structnvmlViolationTime__t.html)
  ECC counts       nvmlDeviceGetTotalEccErrors(device, nvmlMemoryErrorType_t, nvmlEccCounterType_t)
                   (group__nvmlDeviceQueries.html, group__nvmlDeviceEnumvs.html)
  retired pages    nvmlDeviceGetRetiredPagesPendingStatus (Kepler+; pre-Ampere boards retire pages)
  remapped rows    nvmlDeviceGetRemappedRows -> (corrRows, uncRows, isPending, failureOccurred) (Ampere+)
  persistence      nvmlDeviceGetPersistenceMode
  XID events       nvmlEventSetCreate, nvmlDeviceRegisterEvents(nvmlEventTypeXidCriticalError), nvmlEventSetWait_v2
                   (group__nvmlEvents.html, group__nvmlEventType.html); only events after registration
  XID in the log   "NVRM: Xid (PCI:0000:18:00): 79, pid=..., GPU has fallen off the bus." (the kernel log line the
                   driver writes; NVIDIA XID Errors guide, https://docs.nvidia.com/deploy/xid-errors/)
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re
import subprocess

# nvmlClocksEventReasons bits (group__nvmlClocksEventReasons.html); the ClocksThrottleReason names are the same bits
CLOCK_EVENT_BITS = (
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
    (0x200, "board_limit"),
    (0x400, "reliability"),
)
# the reasons that mean the clocks are held down by heat or by the hardware: a measurement under them is wrong.
# sw_power_cap is the normal state of a GPU at full load (it runs at its power limit) and is recorded, not judged.
DEGRADING_CLOCK_EVENTS = ("hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown",
                          "reliability")

# nvmlPerfPolicyType_t (group__nvmlDeviceEnumvs.html): NVML_PERF_POLICY_POWER = 0, NVML_PERF_POLICY_THERMAL = 1
PERF_POLICY = {"power": 0, "thermal": 1}
# nvmlMemoryErrorType_t: CORRECTED = 0, UNCORRECTED = 1; nvmlEccCounterType_t: VOLATILE = 0, AGGREGATE = 1
ECC_TYPES = {"corrected": 0, "uncorrected": 1}
ECC_COUNTERS = {"volatile": 0, "aggregate": 1}
# nvmlEventTypeXidCriticalError (group__nvmlEventType.html)
EVENT_XID = 0x8

# "NVRM: Xid (PCI:0000:18:00): 79, pid=1234, name=python3, GPU has fallen off the bus."
_XID_RE = re.compile(r"NVRM: Xid \(PCI:([0-9a-fA-F:.]+)\): (\d+),(.*)$")


def _text(value):
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _bus_key(bus_id):
    """Compare PCI addresses on domain:bus:device, lower case, 4-digit domain ('00000000:18:00.0' and the kernel
    log's 'PCI:0000:18:00' are the same GPU)."""
    text = _text(bus_id).strip().lower()
    if text.startswith("pci:"):
        text = text[4:]
    parts = text.split(":")
    if len(parts) == 3:
        domain, bus, dev = parts
    elif len(parts) == 2:
        domain, bus, dev = "0", parts[0], parts[1]
    else:
        return text
    return "%04x:%s:%s" % (int(domain, 16), bus, dev.split(".")[0])


def decode_clock_events(mask):
    """Bitmask -> sorted reason names; unknown bits as 'bit_0x...'."""
    if mask is None:
        return None
    mask = int(mask)
    names = [name for bit, name in CLOCK_EVENT_BITS if mask & bit]
    known = 0
    for bit, dummy in CLOCK_EVENT_BITS:
        known |= bit
    rest = mask & ~known
    bit = 1
    while rest:
        if rest & bit:
            names.append("bit_0x%x" % bit)
            rest &= ~bit
        bit <<= 1
    return names


def parse_kernel_xids(lines):
    """XID records from kernel log lines: [{'bus', 'xid', 'detail'}] in log order."""
    out = []
    for line in lines:
        match = _XID_RE.search(line)
        if match:
            out.append({"bus": _bus_key(match.group(1)), "xid": int(match.group(2)),
                        "detail": match.group(3).strip()})
    return out


def read_kernel_log(path="/dev/kmsg", run=None):
    """Kernel log lines since boot, or (None, why). /dev/kmsg is read without blocking (needs root or
    kernel.dmesg_restrict=0); when it cannot be opened, ``run(['dmesg'])`` -> (rc, out, err) is tried."""
    why = None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        fd = None
        why = "%s: %s" % (path, exc.strerror or exc)
    if fd is not None:
        lines = []
        try:
            while True:
                try:
                    chunk = os.read(fd, 8192)
                except BlockingIOError:
                    break
                except OSError as exc:  # EPIPE: a record was overwritten while reading; go on
                    if getattr(exc, "errno", None) == 32:
                        continue
                    break
                if not chunk:
                    break
                lines.append(chunk.decode("utf-8", "replace").split(";", 1)[-1].rstrip("\n"))
        finally:
            os.close(fd)
        return lines, None
    if run is not None:
        rc, out, err = run(["dmesg"])
        if rc == 0:
            return out.splitlines(), None
        why += "; dmesg: %s" % ((err or "").strip() or "rc %d" % rc)
    return None, why


def read_nvml_xids(nvml, handles, timeout_ms=0):
    """XID events NVML holds for a freshly registered set: only events after registration (NVML keeps no
    history), so this is the fallback when the kernel log is unreadable. Returns (index -> [xid], error)."""
    found = dict((i, []) for i in range(len(handles)))
    try:
        event_set = nvml.nvmlEventSetCreate()
    except Exception as exc:
        return found, "nvmlEventSetCreate: %s" % exc
    try:
        for i, handle in enumerate(handles):
            try:
                nvml.nvmlDeviceRegisterEvents(handle, EVENT_XID, event_set)
            except Exception as exc:  # NotSupported on some boards
                return found, "nvmlDeviceRegisterEvents gpu%d: %s" % (i, exc)
        for dummy in range(64):
            try:
                data = nvml.nvmlEventSetWait_v2(event_set, timeout_ms)
            except Exception:  # NVMLError_Timeout: nothing pending
                break
            for i, handle in enumerate(handles):
                if data.device == handle:
                    found[i].append(int(data.eventData))
        return found, None
    finally:
        try:
            nvml.nvmlEventSetFree(event_set)
        except Exception:
            pass


def _call(errors, where, func, *args):
    try:
        return func(*args)
    except Exception as exc:  # NVMLError_NotSupported and the like
        errors.append("%s: %s" % (where, exc))
        return None


def _clock_events(nvml, handle):
    func = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
    if func is None:  # nvidia-ml-py before the R535 rename
        func = nvml.nvmlDeviceGetCurrentClocksThrottleReasons
    return func(handle)


def _gpu(nvml, index, errors):
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    where = "gpu%d " % index
    gpu = {"index": index, "uuid": _text(nvml.nvmlDeviceGetUUID(handle))}
    pci = _call(errors, where + "pci", nvml.nvmlDeviceGetPciInfo, handle)
    gpu["pci_bus_id"] = _text(pci.busId).lower() if pci is not None else None
    for key, func in (("pcie_gen_current", "nvmlDeviceGetCurrPcieLinkGeneration"),
                      ("pcie_gen_max", "nvmlDeviceGetMaxPcieLinkGeneration"),
                      ("pcie_width_current", "nvmlDeviceGetCurrPcieLinkWidth"),
                      ("pcie_width_max", "nvmlDeviceGetMaxPcieLinkWidth")):
        value = _call(errors, where + key, getattr(nvml, func), handle)
        gpu[key] = int(value) if value is not None else None
    mask = _call(errors, where + "clock event reasons", _clock_events, nvml, handle)
    gpu["clock_event_mask"] = "0x%x" % int(mask) if mask is not None else None
    gpu["clock_events"] = decode_clock_events(mask)
    gpu["violation_ns"] = {}
    for name, policy in PERF_POLICY.items():
        status = _call(errors, where + "violation " + name, nvml.nvmlDeviceGetViolationStatus, handle, policy)
        gpu["violation_ns"][name] = int(status.violationTime) if status is not None else None
    gpu["ecc"] = {}
    for etype, evalue in ECC_TYPES.items():
        for counter, cvalue in ECC_COUNTERS.items():
            count = _call(errors, "%secc %s %s" % (where, etype, counter), nvml.nvmlDeviceGetTotalEccErrors, handle,
                          evalue, cvalue)
            gpu["ecc"]["%s_%s" % (etype, counter)] = int(count) if count is not None else None
    pending = _call(errors, where + "retired pages pending", nvml.nvmlDeviceGetRetiredPagesPendingStatus, handle)
    gpu["retired_pages_pending"] = None if pending is None else bool(pending)
    rows = _call(errors, where + "remapped rows", nvml.nvmlDeviceGetRemappedRows, handle)
    if rows is not None:
        gpu["remapped_rows"] = {"correctable": int(rows[0]), "uncorrectable": int(rows[1]),
                                "pending": bool(rows[2]), "failure": bool(rows[3])}
    else:
        gpu["remapped_rows"] = None
    pm = _call(errors, where + "persistence", nvml.nvmlDeviceGetPersistenceMode, handle)
    gpu["persistence_mode"] = None if pm is None else bool(pm)
    gpu["xids"] = []
    return handle, gpu


def p2p_state(link_probe):
    """The P2P state a gpu_link_probe result measured: 'ok', 'slow' (pairs below threshold, listed) or None."""
    if not link_probe or not isinstance(link_probe, dict) or "pairs" not in link_probe:
        return None
    slow = ["%s->%s" % (p.get("src"), p.get("dst")) for p in link_probe.get("slow_pairs") or []]
    return {"state": "slow" if slow or link_probe.get("failed_thresholds") else "ok", "slow_pairs": slow,
            "pairs": len(link_probe.get("pairs") or [])}


def read(nvml, kernel_log=None, link_probe=None, xid_timeout_ms=0):
    """Health of every GPU. ``kernel_log``: (lines, why) from read_kernel_log (None: do not read it; NVML
    events are used). Raises what nvmlInit raises. NotSupported getters give null fields, listed in ``errors``."""
    errors = []
    nvml.nvmlInit()
    try:
        count = int(nvml.nvmlDeviceGetCount())
        handles, gpus = [], []
        for index in range(count):
            handle, gpu = _gpu(nvml, index, errors)
            handles.append(handle)
            gpus.append(gpu)
        lines, why = kernel_log if kernel_log is not None else (None, "kernel log not read")
        if lines is not None:
            by_bus = dict((_bus_key(g["pci_bus_id"]), g) for g in gpus if g["pci_bus_id"])
            for rec in parse_kernel_xids(lines):
                gpu = by_bus.get(rec["bus"])
                if gpu is not None:
                    gpu["xids"].append(rec["xid"])
            xid_source = "kernel_log"
        else:
            found, err = read_nvml_xids(nvml, handles, xid_timeout_ms)
            for i, xids in found.items():
                gpus[i]["xids"] = xids
            xid_source = "nvml_events" if err is None else None
            errors.append("xid: %s%s" % (why, "; %s" % err if err else "; NVML events only since this read"))
        health = {"gpu_count": count, "gpus": gpus, "xid_source": xid_source,
                  "p2p": p2p_state(link_probe) if count > 1 else None, "errors": errors}
        for gpu in gpus:
            gpu["problems"] = problems(gpu)
        health["problems"] = ["gpu%d: %s" % (g["index"], p) for g in gpus for p in g["problems"]]
        if health["p2p"] and health["p2p"]["state"] != "ok":
            health["problems"].append("p2p: %s" % ("slow pairs " + ", ".join(health["p2p"]["slow_pairs"])
                                                   if health["p2p"]["slow_pairs"] else "below threshold"))
        health["state"] = "degraded" if health["problems"] else "ok"
        return health
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:
            pass


def problems(gpu):
    """What is wrong with one GPU now (empty when nothing is)."""
    out = []
    gen, gen_max = gpu.get("pcie_gen_current"), gpu.get("pcie_gen_max")
    width, width_max = gpu.get("pcie_width_current"), gpu.get("pcie_width_max")
    # an idle GPU may drop its link to gen1 to save power (ASPM / dynamic link speed): only a loaded link's
    # generation is judged; the width does not change with load
    idle = "gpu_idle" in (gpu.get("clock_events") or [])
    if gen is not None and gen_max is not None and gen < gen_max and not idle:
        out.append("pcie gen %d below max %d" % (gen, gen_max))
    if width is not None and width_max is not None and width < width_max:
        out.append("pcie width x%d below max x%d" % (width, width_max))
    hot = [r for r in gpu.get("clock_events") or [] if r in DEGRADING_CLOCK_EVENTS]
    if hot:
        out.append("clock event reasons: %s" % ", ".join(hot))
    if gpu.get("xids"):
        out.append("xid %s" % ", ".join(str(x) for x in sorted(set(gpu["xids"]))))
    ecc = gpu.get("ecc") or {}
    if ecc.get("uncorrected_volatile"):
        out.append("ecc uncorrected volatile %d" % ecc["uncorrected_volatile"])
    if gpu.get("retired_pages_pending"):
        out.append("retired pages pending (reset needed)")
    rows = gpu.get("remapped_rows") or {}
    if rows.get("pending"):
        out.append("remapped rows pending (reset needed)")
    if rows.get("failure"):
        out.append("row remapping failed")
    return out


def state(health):
    """The comparable summary a benchmark records beside its result: per GPU the link as trained (max gen when
    loaded is not known from an idle reading, so the width and max gen), persistence mode and the problems.
    Two runs are comparable only when their states are equal."""
    if not health:
        return None
    gpus = []
    for g in health.get("gpus") or []:
        gpus.append({"index": g["index"], "pcie_max": "gen%s x%s" % (g.get("pcie_gen_max"), g.get("pcie_width_max")),
                     "pcie_width": g.get("pcie_width_current"), "persistence_mode": g.get("persistence_mode"),
                     "problems": list(g.get("problems") or [])})
    p2p = health.get("p2p") or {}
    return {"state": health.get("state"), "gpus": gpus, "p2p": p2p.get("state")}


def _grew(before, after):
    return before is not None and after is not None and after > before


def degradation(before, after):
    """What got worse between two readings of the same box (a run's before and after): new problems, XIDs,
    ECC counts, thermal violation time, a link that trained down. Empty when nothing did."""
    if not before or not after:
        return []
    out = []
    old = dict((g["index"], g) for g in before.get("gpus") or [])
    for g in after.get("gpus") or []:
        b = old.get(g["index"])
        tag = "gpu%d: " % g["index"]
        if b is None:
            out.append(tag + "not in the reading before the run")
            continue
        for p in g.get("problems") or []:
            if p not in (b.get("problems") or []):
                out.append(tag + p)
        if len(g.get("xids") or []) > len(b.get("xids") or []):
            out.append(tag + "%d new xid event(s)" % (len(g["xids"]) - len(b.get("xids") or [])))
        for key in ("uncorrected_volatile", "corrected_volatile"):
            if _grew((b.get("ecc") or {}).get(key), (g.get("ecc") or {}).get(key)):
                out.append(tag + "ecc %s %d -> %d" % (key.replace("_", " "), b["ecc"][key], g["ecc"][key]))
        vb, va = (b.get("violation_ns") or {}).get("thermal"), (g.get("violation_ns") or {}).get("thermal")
        if _grew(vb, va):
            out.append(tag + "thermal violation %.1f s during the run" % ((va - vb) / 1e9))
        if _grew(g.get("pcie_width_current"), b.get("pcie_width_current")):
            out.append(tag + "pcie width x%d -> x%d" % (b["pcie_width_current"], g["pcie_width_current"]))
    if len(after.get("gpus") or []) < len(before.get("gpus") or []):
        out.append("gpu count %d -> %d" % (len(before["gpus"]), len(after["gpus"])))
    seen = set()
    return [x for x in out if not (x in seen or seen.add(x))]


def read_safely(nvml, **kwargs):
    """read() that never raises: a missing library or driver gives {'state': 'unknown', 'reason': ...}."""
    if nvml is None:
        return {"state": "unknown", "reason": "python module pynvml (nvidia-ml-py) is not installed", "gpus": [],
                "gpu_count": 0, "problems": [], "errors": []}
    try:
        return read(nvml, **kwargs)
    except Exception as exc:
        return {"state": "unknown", "reason": "NVML could not be initialised: %s" % exc, "gpus": [], "gpu_count": 0,
                "problems": [], "errors": []}


def run_command(argv):
    """(rc, stdout, stderr) of a command, for read_kernel_log's dmesg fallback outside Ansible."""
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except OSError as exc:
        return 127, "", str(exc)
    out, err = proc.communicate()
    return proc.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
