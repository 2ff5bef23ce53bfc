#!/usr/bin/env python3
"""Record a GPU host as it presents itself, at the lowest level the project's code reads, for tests to replay:

    python3 benchmarks/gpu/host_read.py --out DIR [--sysfs-root /] [--smi nvidia-smi]

Writes into DIR (a lent machine's call tars DIR into one file: its $OUT returns at most 8):
- sysfs.tar.xz: every NVIDIA PCI function (vendor 0x10de) and every bridge above it, as
  sys/bus/pci/devices/<bdf>/ directories of their attribute files (vendor, device, class, subsystem ids, revision,
  link speeds and widths, numa_node, local_cpulist; what plugins/module_utils/gpu/pci_arch.py scan reads and what a
  topology read needs) with the ``driver`` link kept as a link, ``upstream`` (the parent function's bdf, from the
  device's real path); the DMI identity files and /proc/cpuinfo's hypervisor flag line that
  nvml_facts.read_hypervisor reads; sys/class/infiniband's names (gpu/nccl.py ib_devices). Extract it and pass the
  folder as ``sysfs_root``.
- nvidia-smi.txt (the plain table, whose banner gpu_facts falls back to), nvidia-smi-q.xml (``-q -x``),
  nvidia-smi-topo-m.txt (``topo -m``), nvidia-smi-topo-p2p-<r|w|n|a|p>.txt (``topo -p2p`` read, write, nvlink,
  atomics, prop: the capabilities ``nvidia-smi topo -h`` lists; unverified on the H200's driver until run), each
  beginning with its command line and ending with its exit status.
- nvml.json: every NVML call gpu_facts makes (plugins/module_utils/gpu/nvml_facts.py collect) and the utilization
  reading gap.py's GPU sampler takes, recorded through record_nvml.Recorder (the one NVML recorder, in the format of
  tests/fixtures/gpu-boxes/<box>/nvml.json), with ``facts_error``, ``gpu_count`` and ``nvidia_ml_py`` beside it.
  harness.fake_nvml.CallReplayNVML answers from it (strict: an unrecorded call raises).
- host-read.json: what ran, when, how long, and each step's outcome.
"""
import argparse
import io
import json
import os
import subprocess
import sys
import tarfile
import time

from record_nvml import Recorder  # benchmarks/gpu/record_nvml.py (this folder is on sys.path when the script runs)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "collections"))

PCI_FILES = ("vendor", "device", "class", "subsystem_vendor", "subsystem_device", "revision", "current_link_speed",
             "current_link_width", "max_link_speed", "max_link_width", "numa_node", "local_cpulist", "enable")
DMI_FILES = ("sys_vendor", "product_name", "product_version", "board_vendor", "board_name", "bios_vendor")
P2P_KINDS = ("r", "w", "n", "a", "p")


def read_text(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


def add_file(tar, name, data):
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = len(data), 0, 0o444
    tar.addfile(info, io.BytesIO(data))


def add_link(tar, name, target):
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mtime = tarfile.SYMTYPE, target, 0
    tar.addfile(info)


def nvidia_functions(root):
    """The bdfs of NVIDIA PCI functions and of every PCI function above them (their real paths' parents)."""
    base = os.path.join(root, "sys", "bus", "pci", "devices")
    try:
        entries = sorted(os.listdir(base))
    except OSError:
        return [], {}
    keep, upstream = [], {}
    for bdf in entries:
        if (read_text(os.path.join(base, bdf, "vendor")) or b"").strip().lower() != b"0x10de":
            continue
        chain = [p for p in os.path.realpath(os.path.join(base, bdf)).split(os.sep) if ":" in p and "." in p]
        for parent, child in zip([None] + chain, chain):
            upstream[child] = parent
            if child not in keep:
                keep.append(child)
    return keep, upstream


def sysfs_tar(root, path):
    """The sysfs.tar.xz described in the module docstring; returns what it holds."""
    bdfs, upstream = nvidia_functions(root)
    base = os.path.join(root, "sys", "bus", "pci", "devices")
    held = {"pci": bdfs, "dmi": [], "cpuinfo_hypervisor": None, "infiniband": []}
    with tarfile.open(path, "w:xz") as tar:
        for bdf in bdfs:
            d = os.path.join(base, bdf)
            for name in PCI_FILES:
                data = read_text(os.path.join(d, name))
                if data is not None:
                    add_file(tar, "sys/bus/pci/devices/%s/%s" % (bdf, name), data)
            if os.path.islink(os.path.join(d, "driver")):
                add_link(tar, "sys/bus/pci/devices/%s/driver" % bdf,
                         "../../../../bus/pci/drivers/" + os.path.basename(os.readlink(os.path.join(d, "driver"))))
            add_file(tar, "sys/bus/pci/devices/%s/upstream" % bdf, ((upstream.get(bdf) or "") + "\n").encode())
        for name in DMI_FILES:
            data = read_text(os.path.join(root, "sys", "class", "dmi", "id", name))
            if data is not None:
                add_file(tar, "sys/class/dmi/id/" + name, data)
                held["dmi"].append(name)
        cpuinfo = read_text(os.path.join(root, "proc", "cpuinfo")) or b""
        flags = [line for line in cpuinfo.splitlines() if line.startswith(b"flags")][:1]
        if flags:  # the first processor's flags: read_hypervisor looks for "hypervisor" among them
            add_file(tar, "proc/cpuinfo", b"processor\t: 0\n" + flags[0] + b"\n")
            held["cpuinfo_hypervisor"] = b" hypervisor" in flags[0]
        try:
            held["infiniband"] = sorted(os.listdir(os.path.join(root, "sys", "class", "infiniband")))
        except OSError:
            pass
        for name in held["infiniband"]:
            add_file(tar, "sys/class/infiniband/%s/.recorded" % name, b"")
    return held


def run_smi(smi, args, path, timeout=120):
    """One nvidia-smi command into ``path``: the command line, its output, its exit status."""
    t = time.monotonic()
    try:
        p = subprocess.run([smi] + args, capture_output=True, timeout=timeout, check=False)
        out, rc = p.stdout + p.stderr, p.returncode
    except (OSError, subprocess.TimeoutExpired) as exc:
        out, rc = repr(exc).encode(), None
    with open(path, "wb") as f:
        if not path.endswith(".xml"):
            f.write(("$ %s %s\n" % (smi, " ".join(args))).encode())
        f.write(out)
        if not path.endswith(".xml"):
            f.write(("\n# exit status %s\n" % rc).encode())
    return {"args": args, "rc": rc, "seconds": round(time.monotonic() - t, 2), "bytes": len(out)}


def command_output(path):
    """What the command of a run_smi file printed (run_smi's inverse): without the command line it begins with and
    the exit status it ends with; an XML file holds the output alone."""
    with open(path, "rb") as f:
        text = f.read().decode("utf-8", "replace")
    if path.endswith(".xml"):
        return text
    return text.split("\n", 1)[1].rsplit("\n# exit status ", 1)[0]


def nvml_calls(nvml, root):
    """nvml_facts.collect through record_nvml.Recorder, then one utilization reading (gap.py's sampler)."""
    from ansible_collections.gpuhost.sglang.plugins.module_utils.gpu import nvml_facts
    rec = Recorder(nvml)
    out = {"facts_error": None}
    try:
        facts = nvml_facts.collect(rec, host=nvml_facts.read_hypervisor(root))
        out["gpu_count"] = facts.get("gpu_count")
        if facts.get("gpu_count"):
            # collect ended its NVML session: a call now answers Uninitialized (the first lent H100's recording of
            # 2026-12-05 held exactly that for nvmlDeviceGetHandleByIndex(0)), so the reading opens its own session
            rec.nvmlInit()
            try:
                rec.nvmlDeviceGetUtilizationRates(rec.nvmlDeviceGetHandleByIndex(0))
            except Exception:  # recorded in the log
                pass
            finally:
                rec.nvmlShutdown()
    except Exception as exc:  # nvmlInit refused: that answer is the recording
        out["facts_error"] = "%s: %s" % (type(exc).__name__, exc)
    out.update(rec.recording("recorded by benchmarks/gpu/host_read.py"))
    return out


def nvidia_ml_py_version():
    """The installed nvidia-ml-py's version, from its distribution metadata: its pynvml module has no __version__
    (13.610.43 on the lent H200 of 2026-12-05, where the recording said null)."""
    from importlib import metadata
    try:
        return metadata.version("nvidia-ml-py")
    except metadata.PackageNotFoundError:
        return None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--sysfs-root", default="/")
    ap.add_argument("--smi", default="nvidia-smi", help="the nvidia-smi to run")
    ap.add_argument("--no-nvml", action="store_true", help="skip the NVML recording")
    a = ap.parse_args(argv)
    os.makedirs(a.out, exist_ok=True)
    t0 = time.monotonic()
    meta = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "argv": sys.argv[1:], "steps": {}}
    meta["steps"]["sysfs"] = sysfs_tar(a.sysfs_root, os.path.join(a.out, "sysfs.tar.xz"))
    smi = {"nvidia-smi.txt": [], "nvidia-smi-q.xml": ["-q", "-x"], "nvidia-smi-topo-m.txt": ["topo", "-m"]}
    for k in P2P_KINDS:
        smi["nvidia-smi-topo-p2p-%s.txt" % k] = ["topo", "-p2p", k]
    meta["steps"]["nvidia-smi"] = dict((name, run_smi(a.smi, args, os.path.join(a.out, name)))
                                       for name, args in smi.items())
    if not a.no_nvml:
        try:
            import pynvml
        except ImportError as exc:
            log = {"facts_error": "ImportError: %s" % exc, "calls": {}, "attrs": {}, "absent": []}
        else:
            log = nvml_calls(pynvml, a.sysfs_root)
            log["nvidia_ml_py"] = nvidia_ml_py_version()
        with open(os.path.join(a.out, "nvml.json"), "w") as f:
            json.dump(log, f, indent=1, sort_keys=True)
        meta["steps"]["nvml"] = {"calls": len(log["calls"]), "facts_error": log["facts_error"]}
    meta["seconds"] = round(time.monotonic() - t0, 2)
    with open(os.path.join(a.out, "host-read.json"), "w") as f:
        json.dump(meta, f, indent=1, sort_keys=True)
    print(json.dumps(meta, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
