#!/usr/bin/python3
# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Probe the serving unit's sandbox from inside it (Python 3 stdlib only, runs on the test host).

``unit_probe.py derive UNIT PROBE_UNIT RESULT [PROBE_ARGS...]`` (as root): copy the unit file the role rendered
to PROBE_UNIT with exactly four keys changed: ExecStart= runs this probe, ExecStartPost= (the readiness waiter)
is dropped, Type=oneshot (so ``systemctl start`` returns when the probe has finished) and Restart=no. Every other
line (user, groups, sandboxing, seccomp, device rules, dependencies) stays byte for byte; the derived file lists
what it changed in its first comment so the test can check nothing else drifted.

``unit_probe.py probe RESULT`` (inside the unit): runs each step PyTorch, NCCL and CUDA need and writes one JSON
line per step to RESULT *before* and after it runs, so a step that kills the process (SIGSYS from a seccomp
filter without SystemCallErrorNumber=) is named by the last "start" line:
  fork       a child that creates a memfd holding a known payload
  pidfd_open of the child (systemd group @process)
  pidfd_getfd  of the child's memfd, then read the payload through the copy (group @debug; PyTorch
             expandable-segments CUDA IPC, pytorch/pytorch#165685)
  memfd      memfd_create + write + mmap (CUDA / NCCL cuMem handles)
  wx_mmap    an anonymous PROT_WRITE|PROT_EXEC mapping that is executed (Triton/Inductor JIT; forbidden by
             MemoryDenyWriteExecute=)
  shm        a file in /dev/shm and a POSIX shared memory segment (NCCL's SHM transport, torch.multiprocessing)
  nodes      open O_RDWR every GPU / RDMA node present now: /dev/nvidia*, /dev/nvidia-caps/*, /dev/infiniband/*.
             ENXIO/ENODEV (a node with no driver behind it) counts as opened; EACCES/EPERM does not.
  denied     setfsuid(-1): a pure query (an invalid id changes nothing; it returns the current fsuid, for any
             unprivileged process) that the unit's SystemCallFilter=~@privileged denies (systemd-analyze
             syscall-filter @privileged lists setfsuid). It must return -1/EPERM and the probe must live on
             (SystemCallErrorNumber=EPERM); without it the filter kills the process with SIGSYS. Chosen because the
             test hosts' systemd-nspawn allows it (src/nspawn/nspawn-seccomp.c), unlike @cpu-emulation/@obsolete
             calls, which nspawn itself already refuses.
Run outside the unit (``probe`` as root or any user) it is the control: every step, including ``denied``, succeeds.

``unit_probe.py steps RESULT`` prints RESULT as one JSON object, {step: {phase: record}} (``{}`` when the probe
never wrote it); the tests read results only through it.
"""

import ctypes
import errno
import glob
import json
import mmap
import os
import platform
import signal
import sys
import time

NR_PIDFD_GETFD = 438   # the same number on every architecture (include/uapi/asm-generic/unistd.h)
NR_SETFSUID = {"x86_64": 122, "aarch64": 151}  # arch/x86/entry/syscalls/syscall_64.tbl, asm-generic/unistd.h
NODE_GLOBS = ("/dev/nvidia*", "/dev/nvidia-caps/*", "/dev/infiniband/*")
PAYLOAD = b"gpuhost-probe-payload"

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long


def _syscall(*args):
    ctypes.set_errno(0)
    ret = libc.syscall(*[ctypes.c_long(a) for a in args])
    return ret, ctypes.get_errno()


def _err(num):
    return errno.errorcode.get(num, str(num))


class Recorder(object):
    def __init__(self, path):
        self.fh = open(path, "w")

    def write(self, record):
        self.fh.write(json.dumps(record, sort_keys=True) + "\n")
        self.fh.flush()
        os.fsync(self.fh.fileno())

    def step(self, name, func):
        self.write({"step": name, "phase": "start"})
        try:
            detail = func()
            self.write({"step": name, "phase": "end", "ok": True, "detail": detail})
        except Exception as exc:  # every failure is data for the test
            self.write({"step": name, "phase": "end", "ok": False, "error": "%s: %s" % (type(exc).__name__, exc)})


def step_identity():
    groups = sorted(os.getgroups())
    return {"uid": os.getuid(), "gid": os.getgid(), "groups": groups, "pid": os.getpid()}


def step_fork_pidfd():
    """fork + pidfd_open + pidfd_getfd: the child makes a memfd, tells its number, waits to be killed."""
    rd, wr = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        try:
            os.close(rd)
            fd = os.memfd_create("probe-child")
            os.write(fd, PAYLOAD)
            os.write(wr, str(fd).encode())
            os.close(wr)
            time.sleep(60)
        finally:
            os._exit(0)
    os.close(wr)
    child_fd = int(os.read(rd, 32).decode())
    os.close(rd)
    out = {"child": pid}
    try:
        try:
            pidfd = os.pidfd_open(pid)
        except OSError as exc:
            raise RuntimeError("pidfd_open failed: %s" % _err(exc.errno))
        out["pidfd_open"] = "ok"
        got, err = _syscall(NR_PIDFD_GETFD, pidfd, child_fd, 0)
        if got < 0:
            raise RuntimeError("pidfd_getfd failed: %s" % _err(err))
        data = os.pread(got, len(PAYLOAD), 0)
        if data != PAYLOAD:
            raise RuntimeError("pidfd_getfd gave a descriptor that does not read the child's memfd: %r" % data)
        out["pidfd_getfd"] = "ok"
        os.close(got)
        os.close(pidfd)
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    return out


def step_memfd():
    fd = os.memfd_create("probe")
    try:
        os.write(fd, PAYLOAD)
        with mmap.mmap(fd, len(PAYLOAD), prot=mmap.PROT_READ) as m:
            if m[:] != PAYLOAD:
                raise RuntimeError("memfd mapping does not read back")
    finally:
        os.close(fd)
    return "ok"


def step_wx_mmap():
    machine = platform.machine()
    code = {"x86_64": b"\xb8\x2a\x00\x00\x00\xc3",            # mov eax, 42; ret
            "aarch64": b"\x40\x05\x80\x52\xc0\x03\x5f\xd6"}.get(machine)  # mov w0, #42; ret
    m = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    if code is None:
        m.close()
        return "mapped (no code to run on %s)" % machine
    m.write(code)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
    ret = ctypes.CFUNCTYPE(ctypes.c_int)(addr)()
    if ret != 42:
        raise RuntimeError("JIT stub returned %r" % ret)
    return "executed"


def step_shm():
    from multiprocessing import shared_memory
    path = "/dev/shm/gpuhost-probe-%d" % os.getpid()
    with open(path, "wb") as fh:
        fh.write(PAYLOAD)
    with open(path, "rb") as fh:
        ok = fh.read() == PAYLOAD
    os.unlink(path)
    seg = shared_memory.SharedMemory(create=True, size=4096)
    seg.buf[:len(PAYLOAD)] = PAYLOAD
    seg.close()
    seg.unlink()
    if not ok:
        raise RuntimeError("/dev/shm file does not read back")
    return "ok"


def step_nodes():
    result = {}
    for pattern in NODE_GLOBS:
        for path in sorted(glob.glob(pattern)):
            if os.path.isdir(path):
                continue
            try:
                os.close(os.open(path, os.O_RDWR))
                result[path] = "opened"
            except OSError as exc:
                result[path] = "opened (%s: no driver)" % _err(exc.errno) if exc.errno in (errno.ENXIO, errno.ENODEV) \
                    else "denied (%s)" % _err(exc.errno)
    return result


def step_denied():
    nr = NR_SETFSUID.get(platform.machine())
    if nr is None:
        raise RuntimeError("no setfsuid number for %s" % platform.machine())
    ret, err = _syscall(nr, -1)
    return {"call": "setfsuid(-1)", "ret": ret, "errno": _err(err) if ret < 0 else None}


def probe(result_path):
    rec = Recorder(result_path)
    # the steps a seccomp kill would end come last, so that one run shows every other result too
    for name, func in (("identity", step_identity), ("nodes", step_nodes), ("memfd", step_memfd),
                       ("wx_mmap", step_wx_mmap), ("shm", step_shm), ("fork_pidfd", step_fork_pidfd),
                       ("denied", step_denied)):
        rec.step(name, func)
    rec.write({"step": "done", "phase": "end", "ok": True})
    return 0


def steps(result_path):
    out = {}
    if os.path.exists(result_path):
        with open(result_path) as fh:
            for line in fh.read().splitlines():
                rec = json.loads(line)
                out.setdefault(rec["step"], {})[rec["phase"]] = rec
    sys.stdout.write(json.dumps(out, sort_keys=True) + "\n")
    return 0


CHANGED = ("Type", "Restart", "ExecStart", "ExecStartPost")


def derive(unit_path, probe_unit_path, result_path, probe_path=None):
    probe_path = probe_path or os.path.abspath(__file__)
    with open(unit_path) as fh:
        lines = fh.read().splitlines()
    out = ["# derived by unit_probe.py from %s; changed: %s" % (unit_path, " ".join(CHANGED))]
    for line in lines:
        key = line.split("=", 1)[0].strip() if "=" in line and not line.lstrip().startswith("#") else None
        if key in ("ExecStartPost",):
            continue
        if key == "Type":
            line = "Type=oneshot"
        elif key == "Restart":
            line = "Restart=no"
        elif key == "ExecStart":
            line = "ExecStart=/usr/bin/python3 %s probe %s" % (probe_path, result_path)
        out.append(line)
    with open(probe_unit_path, "w") as fh:
        fh.write("\n".join(out) + "\n")
    return 0


def main(argv):
    if len(argv) >= 2 and argv[1] == "probe" and len(argv) == 3:
        return probe(argv[2])
    if len(argv) == 3 and argv[1] == "steps":
        return steps(argv[2])
    if len(argv) in (5, 6) and argv[1] == "derive":
        return derive(*argv[2:])
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
