# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A fake ``pynvml`` for unit tests: same function names and return shapes as nvidia-ml-py, driven by a
box description. Boxes: 8x RTX PRO 6000 Blackwell PCIe (SM120, PHB within a socket, SYS across, P2P
not supported across sockets), 8x H100 SXM behind NVSwitches, a 2-GPU direct NVLink bridge pair."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
from types import SimpleNamespace

MIB = 1024 * 1024


ERROR_TEXT = {1: "Uninitialized", 2: "Invalid Argument", 3: "Not Supported", 9: "Driver Not Loaded", 10: "Timeout",
              12: "NVML Shared Library Not Found"}


class FakeNVMLError(Exception):
    def __init__(self, value):
        Exception.__init__(self)
        self.value = value

    def __str__(self):
        return ERROR_TEXT.get(self.value, "Unknown Error %d" % self.value)


def _device_getter(lookup, key):
    """An ``nvmlDeviceGet*(handle)`` method answering ``self.<lookup>(handle, key)`` (FakeNVML._get, ReplayNVML._v)."""
    def getter(self, h):
        return getattr(self, lookup)(h, key)
    return getter


class FakeNVML(object):
    NVML_NVLINK_MAX_LINKS = 18

    def __init__(self, gpus, topo, p2p, driver="570.124.06", cuda=12080, init_error=None, remote_type_api=True):
        self.gpus = gpus
        self._topo = topo
        self._p2p = p2p
        self.driver = driver
        self.cuda = cuda
        self.init_error = init_error
        self.initialised = False
        self.shutdown_called = False
        if not remote_type_api:
            # older nvidia-ml-py: the attribute simply does not exist
            self.nvmlDeviceGetNvLinkRemoteDeviceType = None
            del self.nvmlDeviceGetNvLinkRemoteDeviceType

    # -- system
    def nvmlInit(self):
        if self.init_error is not None:
            raise FakeNVMLError(self.init_error)
        self.initialised = True

    def nvmlShutdown(self):
        # as the library: after the last nvmlShutdown every call answers NVML_ERROR_UNINITIALIZED (nvml.h, "NVML API
        # Reference": nvmlShutdown "Shut down NVML by releasing all GPU resources previously allocated with nvmlInit")
        self.shutdown_called = True
        self.initialised = False

    def _need_init(self):
        if not self.initialised:
            raise FakeNVMLError(1)

    def nvmlSystemGetDriverVersion(self):
        return self.driver

    def nvmlSystemGetCudaDriverVersion(self):
        return self.cuda

    def nvmlSystemGetNVMLVersion(self):
        return "12." + self.driver

    def nvmlDeviceGetCount(self):
        self._need_init()
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index):
        self._need_init()
        if index >= len(self.gpus):
            raise FakeNVMLError(2)
        return index

    def nvmlDeviceGetUtilizationRates(self, h):
        """nvmlUtilization_t (gpu, memory: percent over the last sample period) of an idle GPU; gap.py's sampler
        reads it."""
        self._need_init()
        return SimpleNamespace(gpu=0, memory=0)

    # -- per device
    def _get(self, h, key):
        value = self.gpus[h].get(key)
        if value == "NS":
            raise FakeNVMLError(3)
        return value

    def nvmlDeviceGetName(self, h):
        return self._get(h, "name")

    def nvmlDeviceGetUUID(self, h):
        return "GPU-%08d-fake" % h

    def nvmlDeviceGetCudaComputeCapability(self, h):
        return self._get(h, "cc")

    def nvmlDeviceGetMemoryInfo(self, h):
        return SimpleNamespace(total=self._get(h, "mem_mib") * MIB, used=0, free=self._get(h, "mem_mib") * MIB)

    def nvmlDeviceGetPciInfo(self, h):
        return SimpleNamespace(busId=self._get(h, "bus").encode(), pciDeviceId=self._get(h, "pci_id"))

    def nvmlDeviceGetNvLinkState(self, h, link):
        links = self.gpus[h]["nvlinks"]
        if not links:
            raise FakeNVMLError(3)  # PCIe-only boards: NotSupported on link 0
        if link >= len(links):
            raise FakeNVMLError(2)  # past the last link: InvalidArgument
        return 1

    def nvmlDeviceGetNvLinkRemotePciInfo(self, h, link):
        return SimpleNamespace(busId=self.gpus[h]["nvlinks"][link][0].encode())

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, h, link):
        return self.gpus[h]["nvlinks"][link][1]

    def nvmlDeviceGetNvLinkVersion(self, h, link):
        return 4

    # -- health (plugins/module_utils/gpu/health.py); a box's GPU dict may carry "health" overrides, defaults are a
    # healthy GPU at idle (clock event reasons 0x1, as the nvidia-h200 machine reads at idle)
    HEALTHY = {"clock_events": 0x1, "violation_power_ns": 0, "violation_thermal_ns": 0,
               "ecc": {(0, 0): 0, (0, 1): 0, (1, 0): 0, (1, 1): 0}, "retired_pending": "NS",
               "remapped_rows": (0, 0, 0, 0), "xid_events": []}

    def _health(self, h, key):
        value = self.gpus[h].get("health", {}).get(key, self.HEALTHY[key])
        if value == "NS":
            raise FakeNVMLError(3)
        return value

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        return self._health(h, "clock_events")

    def nvmlDeviceGetViolationStatus(self, h, policy):
        # nvmlViolationTime_t: referenceTime (us), violationTime (ns)
        return SimpleNamespace(referenceTime=0, violationTime=self._health(
            h, {0: "violation_power_ns", 1: "violation_thermal_ns"}[policy]))

    def nvmlDeviceGetTotalEccErrors(self, h, error_type, counter_type):
        ecc = self._health(h, "ecc")
        if ecc == "NS":
            raise FakeNVMLError(3)
        return ecc[(error_type, counter_type)]

    def nvmlDeviceGetRetiredPagesPendingStatus(self, h):
        return self._health(h, "retired_pending")

    def nvmlDeviceGetRemappedRows(self, h):
        return self._health(h, "remapped_rows")

    def nvmlEventSetCreate(self):
        return {"registered": [], "queue": []}

    def nvmlDeviceRegisterEvents(self, h, types, event_set):
        event_set["registered"].append((h, types))
        # NVML delivers only events after registration; the fake queues the GPU's scripted ones then
        for xid in self._health(h, "xid_events"):
            event_set["queue"].append(SimpleNamespace(device=h, eventType=0x8, eventData=xid))

    def nvmlEventSetWait_v2(self, event_set, timeout_ms):
        if not event_set["queue"]:
            raise FakeNVMLError(10)  # NVML_ERROR_TIMEOUT
        return event_set["queue"].pop(0)

    def nvmlEventSetFree(self, event_set):
        event_set["freed"] = True

    def nvmlDeviceGetTopologyCommonAncestor(self, a, b):
        return self._topo(a, b)

    def nvmlDeviceGetP2PStatus(self, a, b, cap):
        if not isinstance(cap, int):
            raise TypeError("p2p index must be an int (nvidia-ml-py's READ constant is a tuple)")
        return self._p2p(a, b, cap)


_FAKE_GETTERS = (("CurrPcieLinkGeneration", "gen_cur"), ("MaxPcieLinkGeneration", "gen_max"),
                 ("CurrPcieLinkWidth", "w_cur"), ("MaxPcieLinkWidth", "w_max"), ("PersistenceMode", "pm"),
                 ("PowerManagementLimit", "power_mw"), ("VirtualizationMode", "virt"))
for _name, _key in _FAKE_GETTERS:
    setattr(FakeNVML, "nvmlDeviceGet" + _name, _device_getter("_get", _key))


RTX_BUSES = ["00000000:18:00.0", "00000000:2A:00.0", "00000000:3A:00.0", "00000000:5D:00.0",
             "00000000:9A:00.0", "00000000:AB:00.0", "00000000:BA:00.0", "00000000:DB:00.0"]


def rtx_pro_6000_box(virt=0, gen_cur=5, throttled_width=None):
    """8x RTX PRO 6000 Blackwell Server Edition, PCIe gen5 x16, two sockets of four."""
    gpus = []
    for i, bus in enumerate(RTX_BUSES):
        gpus.append({"name": "NVIDIA RTX PRO 6000 Blackwell Server Edition", "cc": (12, 0), "mem_mib": 97887,
                     "bus": bus, "pci_id": 0x2BB510DE, "gen_cur": gen_cur, "gen_max": 5,
                     "w_cur": throttled_width or 16, "w_max": 16, "pm": 1, "power_mw": 600000, "virt": virt, "nvlinks": []})

    def topo(a, b):
        return 30 if a // 4 == b // 4 else 50  # PHB within a socket, SYS across

    def p2p(a, b, cap):
        if cap in (2, 3):  # nvlink, atomics
            return 5  # NOT_SUPPORTED
        return 0 if a // 4 == b // 4 else 3  # OK within a socket, IOH topology not supported across

    return FakeNVML(gpus, topo, p2p)


def h100_sxm_box(remote_type_api=True):
    """8x H100 80GB HBM3 SXM5, 18 NVLinks each into 4 NVSwitches."""
    switches = ["00000000:%02X:00.0" % b for b in (0x05, 0x06, 0x07, 0x08)]
    gpus = []
    buses = ["00000000:%02X:00.0" % b for b in (0x19, 0x3B, 0x4C, 0x5D, 0x9B, 0xBB, 0xCB, 0xDB)]
    for bus in buses:
        gpus.append({"name": "NVIDIA H100 80GB HBM3", "cc": (9, 0), "mem_mib": 81559, "bus": bus, "pci_id": 0x233010DE,
                     "gen_cur": 5, "gen_max": 5, "w_cur": 16, "w_max": 16, "pm": 1, "power_mw": 700000, "virt": 0,
                     "nvlinks": [(switches[k % 4], 2) for k in range(18)]})
    return FakeNVML(gpus, lambda a, b: 40 if a // 4 == b // 4 else 50, lambda a, b, cap: 0, driver="550.90.07", cuda=12040,
                    remote_type_api=remote_type_api)


def nvlink_bridge_pair():
    """2x A100 PCIe joined by an NVLink bridge (4 direct links), P2P over NVLink."""
    buses = ["00000000:17:00.0", "00000000:65:00.0"]
    gpus = []
    for i, bus in enumerate(buses):
        gpus.append({"name": "NVIDIA A100 80GB PCIe", "cc": (8, 0), "mem_mib": 81920, "bus": bus, "pci_id": 0x20B510DE,
                     "gen_cur": 4, "gen_max": 4, "w_cur": 16, "w_max": 16, "pm": 0, "power_mw": "NS", "virt": 0,
                     "nvlinks": [(buses[1 - i], 0)] * 4})
    return FakeNVML(gpus, lambda a, b: 50, lambda a, b, cap: 0 if cap != 3 else 5)


# -- failure states for plugins/module_utils/gpu/health.py. Each is what NVML returns in that state:
# PCIe link trained down (rtx6kpro PR #88: a box ran 3.5 h at gen2 with nothing logged), thermal throttle
# (nvmlClocksEventReasonSwThermalSlowdown 0x20 | HwThermalSlowdown 0x40 with the thermal violation counter
# running), an XID in the kernel log (79 "GPU has fallen off the bus", NVIDIA XID guide), uncorrectable ECC
# (volatile and aggregate counts), a pending row remap (nvmlDeviceGetRemappedRows isPending = 1, Ampere+).
KMSG_XID_79 = "3,1234,5678901234,-;NVRM: Xid (PCI:0000:2a:00): 79, pid=4242, name=python3, GPU has fallen off the bus."


def h200_box(count=1, **health):
    """H200 (Hopper, SXM, 141 GB) as the nvidia-h200 machine reads at idle: gen5 x16, clock events 0x1, ECC 0,
    no rows pending, retired pages NotSupported (Ampere+ remap rows instead). ``health`` overrides GPU 0."""
    gpus = []
    for i in range(count):
        gpus.append({"name": "NVIDIA H200", "cc": (9, 0), "mem_mib": 143771, "bus": "00000000:%02X:00.0" % (0x18 + i),
                     "pci_id": 0x233510DE, "gen_cur": 5, "gen_max": 5, "w_cur": 16, "w_max": 16, "pm": 1,
                     "power_mw": 700000, "virt": 0, "nvlinks": [], "health": dict(health) if i == 0 else {}})
    return FakeNVML(gpus, lambda a, b: 40, lambda a, b, cap: 0, driver="580.95.05", cuda=13000)


def gen_downtrained_box():
    """GPU 1 of eight RTX PRO 6000 trained to gen2 while busy (not idle)."""
    box = rtx_pro_6000_box()
    box.gpus[1]["gen_cur"] = 2
    box.gpus[1]["health"] = {"clock_events": 0x4}  # sw_power_cap: loaded, not idle
    return box


def thermal_throttle_box(violation_s=12.5):
    return h200_box(clock_events=0x20 | 0x40, violation_thermal_ns=int(violation_s * 1e9))


def ecc_box(uncorrected=2):
    return h200_box(ecc={(0, 0): 5, (0, 1): 40, (1, 0): uncorrected, (1, 1): uncorrected})


def remap_pending_box():
    return h200_box(remapped_rows=(0, 1, 1, 0), ecc={(0, 0): 0, (0, 1): 0, (1, 0): 1, (1, 1): 1})


def xid_event_box(xid=79):
    """An XID that NVML's event set delivers (the fallback when the kernel log is unreadable)."""
    return h200_box(xid_events=[xid])


class ReplayNVML(object):
    """NVML answering from a recorded reading (tests/unit/plugins/module_utils/gpu/fixtures/h200_nvml_health_raw.json:
    each getter's value ``{"v": ...}`` or error text ``{"e": "Not Supported"}``, as pynvml returned them on a real
    GPU). Only the getters gpu/health.py calls."""

    ERRORS = {"Not Supported": 3, "Timeout": 10, "Invalid Argument": 2}

    def __init__(self, reading):
        self.reading = reading

    def _v(self, h, key):
        rec = self.reading["gpus"][h][key]
        if "e" in rec:
            raise FakeNVMLError(self.ERRORS.get(rec["e"], 999))
        return rec["v"]

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        pass

    def nvmlDeviceGetCount(self):
        return self.reading["count"]

    def nvmlDeviceGetHandleByIndex(self, index):
        return index

    def nvmlDeviceGetUUID(self, h):
        return self._v(h, "UUID")

    def nvmlDeviceGetPciInfo(self, h):
        return SimpleNamespace(busId=self._v(h, "PciInfo")["busId"].encode())

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        return self._v(h, "CurrentClocksEventReasons")

    def nvmlDeviceGetViolationStatus(self, h, policy):
        return SimpleNamespace(referenceTime=0, violationTime=self._v(h, "Violation%d" % policy)["violationTime"])

    def nvmlDeviceGetTotalEccErrors(self, h, error_type, counter_type):
        return self._v(h, "Ecc%d%d" % (error_type, counter_type))

    def nvmlEventSetCreate(self):
        return {}

    def nvmlDeviceRegisterEvents(self, h, types, event_set):
        return self._v(h, "Register")

    def nvmlEventSetWait_v2(self, event_set, timeout_ms):
        raise FakeNVMLError(self.ERRORS[self.reading["gpus"][0]["Wait"]["e"]])

    def nvmlEventSetFree(self, event_set):
        pass


for _name in ("CurrPcieLinkGeneration", "MaxPcieLinkGeneration", "CurrPcieLinkWidth", "MaxPcieLinkWidth",
              "RetiredPagesPendingStatus", "RemappedRows", "PersistenceMode"):
    setattr(ReplayNVML, "nvmlDeviceGet" + _name, _device_getter("_v", _name))


class UnrecordedCall(AssertionError):
    """The code made an NVML call the recording does not hold (strict replay)."""


class CallReplayNVML(object):
    """NVML answering from a JSON of the calls gpu_facts makes (tests/fixtures/gpu-boxes/<box>/nvml.json, written by
    benchmarks/gpu/record_nvml.py's Recorder, alone or through benchmarks/gpu/host_read.py, on a real box, or by
    tests/fixtures/gpu-boxes/assemble.py). Each call, written
    ``nvmlDeviceGetName(0)`` (handles are their index), maps to what nvidia-ml-py returned: a value, a list for a
    tuple, a dict for a ctypes structure, or ``{"error": "Not Supported"}`` for an NVMLError. A call the file
    does not hold raises UnrecordedCall, naming it: no answer nobody recorded. The
    optional ``attrs`` (constants the recording read) answer as attributes; ``absent`` (functions the recorded
    nvidia-ml-py lacked) are absent here too."""

    NVML_NVLINK_MAX_LINKS = 18
    NVMLError = FakeNVMLError

    def __init__(self, calls, attrs=None, absent=()):
        self._calls = calls
        self._absent = set(absent)
        self.__dict__.update(attrs or {})  # the recorded constants, over the class's defaults
        self.made = []

    @classmethod
    def from_file(cls, path):
        with open(path) as fh:
            return cls.from_recording(json.load(fh))

    @classmethod
    def from_recording(cls, recording):
        """From an nvml.json's content (benchmarks/gpu/record_nvml.py Recorder.recording)."""
        return cls(recording["calls"], attrs=recording.get("attrs"), absent=recording.get("absent") or ())

    def answer(self, name, args):
        key = "%s(%s)" % (name, ",".join(str(a) for a in args))
        self.made.append(key)
        if key not in self._calls:
            if name in ("nvmlInit", "nvmlShutdown"):
                return None
            if name == "nvmlDeviceGetHandleByIndex":
                return args[0]
            raise UnrecordedCall("NVML call %s is not in the recording" % key)
        value = self._calls[key]
        if isinstance(value, dict) and set(value) == {"error"}:
            codes = dict((text, code) for code, text in ERROR_TEXT.items())
            raise FakeNVMLError(codes.get(value["error"], 999))
        if isinstance(value, dict):
            return SimpleNamespace(**value)
        if isinstance(value, list):
            return tuple(value)
        return value

    def __getattr__(self, name):
        if name.startswith("_") or name in self._absent:
            raise AttributeError(name)
        if not name.startswith("nvml"):
            raise AttributeError(name)
        return lambda *args: self.answer(name, args)
