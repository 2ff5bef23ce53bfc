# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

import pytest
import yaml

from ansible_collections.gpuhost.sglang.plugins.module_utils.gpu import pci_arch as pa

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", ".."))


@pytest.fixture(scope="module")
def table():
    """The collection's one device-ID table (what gpu_facts uses when given none)."""
    return [dict(start=r["start"], end=r["end"], arch=r["arch"]) for r in pa.PCI_GPU_TABLE]


def test_one_device_id_table_no_role_keeps_its_own():
    """Two tables drift: no role's vars or defaults carry a device-ID table, and no task passes one to gpu_facts."""
    found = []
    for role in sorted(os.listdir(os.path.join(ROOT, "roles"))):
        for sub in ("vars", "defaults", "tasks"):
            d = os.path.join(ROOT, "roles", role, sub)
            for name in sorted(os.listdir(d)) if os.path.isdir(d) else []:
                with open(os.path.join(d, name)) as fh:
                    doc = yaml.safe_load(fh)
                for task in doc if isinstance(doc, list) else []:
                    if "pci_arch_table" in (task.get("gpuhost.sglang.gpu_facts") or {}):
                        found.append("%s/%s/%s: %s" % (role, sub, name, task.get("name")))
                if isinstance(doc, dict):
                    found += ["%s/%s/%s: %s" % (role, sub, name, k) for k, v in doc.items()
                              if isinstance(v, list) and v and isinstance(v[0], dict) and {"start", "end", "arch"} <= set(v[0])]
    assert found == []


@pytest.mark.parametrize("device,arch", [
    ("2bb5", "Blackwell"),   # RTX PRO 6000 Blackwell
    ("2b85", "Blackwell"),   # RTX 5090
    ("2901", "Blackwell"),   # B200
    ("2335", "Hopper"),      # H200
    ("2330", "Hopper"),      # H100 SXM
    ("26b9", "Ada Lovelace"),  # L40S
    ("20b5", "Ampere"),      # A100 80GB PCIe
    ("1eb8", "Turing"),      # T4
    ("1db4", "Volta"),       # V100
    ("0fff", "unknown"),
])
def test_arch_for_known_devices(table, device, arch):
    assert pa.arch_for_device(device, pa.validate_table(table)) == arch


def test_table_ranges_do_not_overlap(table):
    rows = sorted(pa.validate_table(table))
    for (s1, e1, a1), (s2, e2, a2) in zip(rows, rows[1:]):
        assert e1 < s2, "%s 0x%04x-0x%04x overlaps %s 0x%04x" % (a1, s1, e1, a2, s2)


@pytest.mark.parametrize("bad", [[{"start": "0x10"}], [{"start": "zz", "end": "0x1", "arch": "x"}],
                                 [{"start": "0x20", "end": "0x10", "arch": "x"}], ["nope"]])
def test_validate_table_rejects(bad):
    with pytest.raises(ValueError, match=r"pci_arch_table\[0\]"):
        pa.validate_table(bad)


def make_dev(root, bdf, vendor, device, cls, driver=None):
    d = root / "sys" / "bus" / "pci" / "devices" / bdf
    d.mkdir(parents=True)
    (d / "vendor").write_text(vendor + "\n")
    (d / "device").write_text(device + "\n")
    (d / "class").write_text(cls + "\n")
    if driver:
        target = root / "sys" / "bus" / "pci" / "drivers" / driver
        target.mkdir(parents=True, exist_ok=True)
        (d / "driver").symlink_to(target)


def test_scan_sysfs(tmp_path, table):
    make_dev(tmp_path, "0000:18:00.0", "0x10de", "0x2bb5", "0x030200", driver="vfio-pci")
    make_dev(tmp_path, "0000:18:00.1", "0x10de", "0x22e8", "0x040300")  # HDMI audio function: not a GPU
    make_dev(tmp_path, "0000:05:00.0", "0x10de", "0x22a3", "0x068000")  # NVSwitch
    make_dev(tmp_path, "0000:31:00.0", "0x15b3", "0x1021", "0x020000")  # NIC
    gpus = pa.scan(str(tmp_path), table)
    assert gpus == [{"bus_id": "0000:18:00.0", "vendor_id": "10de", "device_id": "2bb5", "arch": "Blackwell",
                     "compute_capability": "12.0", "numa_node": None, "driver": "vfio-pci"}]
    assert [d["device_id"] for d in pa.scan(str(tmp_path), [], kind="nvswitch")] == ["22a3"]
    assert pa.scan(str(tmp_path / "missing"), table) == []


def test_parse_lspci(table):
    text = ("18:00.0 3D controller [0302]: NVIDIA Corporation GB202GL [RTX PRO 6000 Blackwell Server Edition] [10de:2bb5] (rev a1)\n"
            "0000:ab:00.0 VGA compatible controller [0300]: NVIDIA Corporation Device [10de:2335]\n"
            "31:00.0 Ethernet controller [0200]: Mellanox Technologies MT2892 [15b3:101d]\n")
    assert [(g["bus_id"], g["arch"]) for g in pa.parse_lspci_nn(text, table)] == [("0000:18:00.0", "Blackwell"), ("0000:ab:00.0", "Hopper")]
