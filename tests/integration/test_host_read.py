# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""benchmarks/gpu/host_read.py, the day-one host read for the lent H200 (its GPU's sysfs PCI entries, nvidia-smi's
readings, the NVML calls gpu_facts makes), here on a recorded-shape sysfs tree, a stand-in nvidia-smi and the
harness's fake NVML: what it records replays (harness.fake_nvml.CallReplayNVML, the extracted sysfs.tar.xz) to the same
facts the project's code read from the original."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import subprocess
import sys
import tarfile
from types import SimpleNamespace

import pytest

from ansible_collections.gpuhost.sglang.plugins.module_utils.gpu import nvml_facts, pci_arch
from ansible_collections.gpuhost.sglang.tests.harness import fake_nvml

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
SCRIPT = os.path.join(ROOT, "benchmarks", "gpu", "host_read.py")


def host_read():
    sys.path.insert(0, os.path.join(ROOT, "benchmarks", "gpu"))
    try:
        import host_read as mod  # pylint: disable=import-error
    finally:
        sys.path.pop(0)
    return mod


def test_the_nvml_recording_replays_to_the_same_facts():
    hr = host_read()
    errors = []
    for box in (fake_nvml.h200_box(), fake_nvml.h100_sxm_box(remote_type_api=False)):
        rec = hr.Recorder(box)
        facts = nvml_facts.collect(rec)
        log = json.loads(json.dumps(rec.recording()))  # as nvml.json holds it
        assert len(log["calls"]) > 10 and "nvmlInit()" in log["calls"]
        replay = fake_nvml.CallReplayNVML.from_recording(log)
        assert nvml_facts.collect(replay) == facts
        errors += [k.split("(")[0] for k, v in log["calls"].items() if isinstance(v, dict) and set(v) == {"error"}]
        # strict: a call the recording does not hold fails the replay, naming it
        with pytest.raises(fake_nvml.UnrecordedCall, match=r"nvmlDeviceGetUtilizationRates\(0\)"):
            replay.nvmlDeviceGetUtilizationRates(replay.nvmlDeviceGetHandleByIndex(0))
    assert "nvmlDeviceGetNvLinkState" in errors  # a refusal is an answer too: recorded, replayed
    # a function the machine's nvidia-ml-py lacks is recorded as absent, and absent in the replay
    rec = hr.Recorder(SimpleNamespace(NVML_NVLINK_MAX_LINKS=12))
    assert not hasattr(rec, "nvmlDeviceGetNvLinkRemoteDeviceType") and rec.NVML_NVLINK_MAX_LINKS == 12
    replay = fake_nvml.CallReplayNVML.from_recording(json.loads(json.dumps(rec.recording())))
    assert not hasattr(replay, "nvmlDeviceGetNvLinkRemoteDeviceType") and replay.NVML_NVLINK_MAX_LINKS == 12


def test_the_host_reads_nvml_recording_replays_and_holds_its_utilization_reading(tmp_path):
    """host_read.nvml_calls on NVML as the library behaves (calls after the last nvmlShutdown answer Uninitialized):
    the first lent H100's recording (2026-12-05) held nvmlDeviceGetHandleByIndex(0) -> Uninitialized from the
    utilization reading made after collect's session, and that one answer broke every replay of the box."""
    hr = host_read()
    root = tmp_path / "root"
    make_sysfs(str(root))
    box = fake_nvml.h200_box()
    facts = nvml_facts.collect(box, host=nvml_facts.read_hypervisor(str(root)))
    out = json.loads(json.dumps(hr.nvml_calls(fake_nvml.h200_box(), str(root))))
    assert out["facts_error"] is None and out["gpu_count"] == 1
    bad = dict((k, v) for k, v in out["calls"].items() if isinstance(v, dict) and v.get("error") == "Uninitialized")
    assert bad == {}, bad
    replay = fake_nvml.CallReplayNVML.from_recording(out)
    assert nvml_facts.collect(replay, host=nvml_facts.read_hypervisor(str(root))) == facts
    reading = replay.nvmlDeviceGetUtilizationRates(replay.nvmlDeviceGetHandleByIndex(0))
    assert (reading.gpu, reading.memory) == (0, 0)


def test_a_call_keeps_its_first_answer_and_handles_are_their_lookup_index():
    """Each nvmlDeviceGetHandleByIndex returns a new handle object (nvidia-ml-py: a c_nvmlDevice_t pointer), so a
    second lookup of GPU 0 is still GPU 0; an answer given later (NVML shut down) does not replace the first."""
    hr = host_read()
    state = {"up": False, "n": 0}

    def init():
        state["up"] = True

    def shutdown():
        state["up"] = False

    def handle(index):
        if not state["up"]:
            raise fake_nvml.FakeNVMLError(1)
        return object()

    def name(h):
        state["n"] += 1
        return "GPU (answer %d)" % state["n"]

    rec = hr.Recorder(SimpleNamespace(nvmlInit=init, nvmlShutdown=shutdown, nvmlDeviceGetHandleByIndex=handle,
                                      nvmlDeviceGetName=name))
    rec.nvmlInit()
    rec.nvmlDeviceGetName(rec.nvmlDeviceGetHandleByIndex(0))
    rec.nvmlDeviceGetName(rec.nvmlDeviceGetHandleByIndex(0))
    rec.nvmlShutdown()
    with pytest.raises(fake_nvml.FakeNVMLError):
        rec.nvmlDeviceGetHandleByIndex(0)
    assert rec.calls["nvmlDeviceGetHandleByIndex(0)"] == 0
    assert rec.calls["nvmlDeviceGetName(0)"] == "GPU (answer 1)" and "nvmlDeviceGetName(1)" not in rec.calls


def test_the_recording_names_the_nvidia_ml_py_version_from_its_metadata(monkeypatch):
    """nvidia-ml-py's pynvml has no __version__: the H200 recording of 2026-12-05 said null for 13.610.43."""
    from importlib import metadata
    hr = host_read()
    real = metadata.version
    monkeypatch.setattr(metadata, "version", lambda name: "13.610.43" if name == "nvidia-ml-py" else real(name))
    assert hr.nvidia_ml_py_version() == "13.610.43"

    def missing(name):
        raise metadata.PackageNotFoundError(name)
    monkeypatch.setattr(metadata, "version", missing)
    assert hr.nvidia_ml_py_version() is None


def make_sysfs(root):
    """An H200 behind a root port, as the lent machine's PCI tree is shaped (bus ids from its NVML recording)."""
    dev = os.path.join(root, "sys", "devices", "pci0000:00", "0000:00:01.0", "0000:00:06.0")
    os.makedirs(dev)
    os.makedirs(os.path.join(root, "sys", "bus", "pci", "devices"))
    os.makedirs(os.path.join(root, "sys", "bus", "pci", "drivers", "nvidia"))
    for bdf, path, vals in (("0000:00:06.0", dev, {"vendor": "0x10de", "device": "0x2335", "class": "0x030200",
                                                   "current_link_speed": "32.0 GT/s PCIe", "current_link_width": "16"}),
                            ("0000:00:01.0", os.path.dirname(dev), {"vendor": "0x8086", "device": "0x1234",
                                                                    "class": "0x060400"})):
        for k, v in vals.items():
            with open(os.path.join(path, k), "w") as f:
                f.write(v + "\n")
        os.symlink(os.path.relpath(path, os.path.join(root, "sys", "bus", "pci", "devices")),
                   os.path.join(root, "sys", "bus", "pci", "devices", bdf))
    os.symlink(os.path.join(root, "sys", "bus", "pci", "drivers", "nvidia"), os.path.join(dev, "driver"))
    os.makedirs(os.path.join(root, "proc"))
    with open(os.path.join(root, "proc", "cpuinfo"), "w") as f:
        f.write("processor\t: 0\nflags\t\t: fpu vme hypervisor\n\nprocessor\t: 1\nflags\t\t: fpu vme hypervisor\n")


def test_the_host_read_records_sysfs_and_nvidia_smi_as_replayable_files(tmp_path):
    root = tmp_path / "root"
    make_sysfs(str(root))
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho \"stand-in nvidia-smi $*\"\n[ \"$1\" = topo ] && [ \"$3\" = n ] && exit 3\nexit 0\n")
    smi.chmod(0o755)
    out = tmp_path / "out"
    p = subprocess.run([sys.executable, SCRIPT, "--out", str(out), "--sysfs-root", str(root), "--smi", str(smi),
                        "--no-nvml"], capture_output=True, text=True, timeout=120, check=False)
    assert p.returncode == 0, p.stderr[-2000:]
    meta = json.loads((out / "host-read.json").read_text())
    assert meta["steps"]["sysfs"]["pci"] == ["0000:00:01.0", "0000:00:06.0"]  # the GPU and the port above it
    assert meta["steps"]["sysfs"]["cpuinfo_hypervisor"] is True
    steps = meta["steps"]["nvidia-smi"]
    assert steps["nvidia-smi-topo-p2p-n.txt"]["rc"] == 3 and steps["nvidia-smi-q.xml"]["rc"] == 0
    assert sorted(steps) == sorted(["nvidia-smi.txt", "nvidia-smi-q.xml", "nvidia-smi-topo-m.txt"] +
                                   ["nvidia-smi-topo-p2p-%s.txt" % k for k in "rwnap"])
    topo = (out / "nvidia-smi-topo-p2p-r.txt").read_text()
    assert topo.startswith("$ %s topo -p2p r\n" % smi) and topo.endswith("# exit status 0\n")
    hr = host_read()
    assert hr.command_output(str(out / "nvidia-smi-topo-p2p-r.txt")) == "stand-in nvidia-smi topo -p2p r\n"
    assert hr.command_output(str(out / "nvidia-smi-q.xml")) == "stand-in nvidia-smi -q -x\n"
    assert (out / "nvidia-smi-q.xml").read_text() == "stand-in nvidia-smi -q -x\n"  # the XML as it came
    replay = tmp_path / "replay"
    with tarfile.open(str(out / "sysfs.tar.xz")) as t:
        t.extractall(str(replay))
    assert pci_arch.scan(str(replay), []) == pci_arch.scan(str(root), []) != []
    assert nvml_facts.read_hypervisor(str(replay)) == nvml_facts.read_hypervisor(str(root))
    assert (replay / "sys/bus/pci/devices/0000:00:06.0/upstream").read_text() == "0000:00:01.0\n"
