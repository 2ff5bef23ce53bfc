# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A fake ``pynvml`` for unit tests: same function names and return shapes as nvidia-ml-py, driven by a
box description. Boxes: 8x RTX PRO 6000 Blackwell PCIe (SM120, PHB within a socket, SYS across, P2P
not supported across sockets), 8x H100 SXM behind NVSwitches, a 2-GPU direct NVLink bridge pair."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from types import SimpleNamespace

MIB = 1024 * 1024


class FakeNVMLError(Exception):
    def __init__(self, value):
        Exception.__init__(self)
        self.value = value

    def __str__(self):
        return {1: "Uninitialized", 2: "Invalid Argument", 3: "Not Supported", 9: "Driver Not Loaded",
                12: "NVML Shared Library Not Found"}.get(self.value, "Unknown Error %d" % self.value)


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
        self.shutdown_called = True

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

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h):
        return self._get(h, "gen_cur")

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h):
        return self._get(h, "gen_max")

    def nvmlDeviceGetCurrPcieLinkWidth(self, h):
        return self._get(h, "w_cur")

    def nvmlDeviceGetMaxPcieLinkWidth(self, h):
        return self._get(h, "w_max")

    def nvmlDeviceGetPersistenceMode(self, h):
        return self._get(h, "pm")

    def nvmlDeviceGetPowerManagementLimit(self, h):
        return self._get(h, "power_mw")

    def nvmlDeviceGetVirtualizationMode(self, h):
        return self._get(h, "virt")

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

    def nvmlDeviceGetTopologyCommonAncestor(self, a, b):
        return self._topo(a, b)

    def nvmlDeviceGetP2PStatus(self, a, b, cap):
        if not isinstance(cap, int):
            raise TypeError("p2p index must be an int (nvidia-ml-py's READ constant is a tuple)")
        return self._p2p(a, b, cap)


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
