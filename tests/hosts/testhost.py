#!/usr/bin/env python3
# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Real Debian 12 test hosts for the gpuhost.sglang collection (systemd-nspawn, own netns, SSH).

Runs as root on the controller, Python 3.11 stdlib only. Sub-commands:

  prepare                      build (or reuse) the cached base rootfs + SSH keypair
  create NAME [--index N] [--bind-ro SRC:DST]... [--bind SRC:DST]...
                               boot a host, print {"name","address","port","user","identity_file"}
  destroy NAME... | --all      stop and remove hosts (safe to repeat, safe after a crash)
  list                         print the known hosts as JSON
  leaks                        print every leftover kernel object / state dir of ours, exit 1 if any

Everything we create carries the tag prefix (default ``gh``; env GPUHOST_TESTHOST_TAG, two
lowercase letters), so it can be found again even when our state files are gone:
  netns ``gh-NAME``, host-side veth ``gh-NAME``, nspawn machine ``gh-NAME``
  (/run/systemd/nspawn/propagate/gh-NAME), cgroups /sys/fs/cgroup/{systemd,unified}/gh-NAME,
  state dir /var/lib/gpuhost-testhosts/gh/NAME (overlay upper/work/merged, state.json, nspawn.log).
Network: host side 10.231.N.1/24, container 10.231.N.2/24 (eth0); N is allocated in 1..199 under a
lock unless --index is given (the sandbox uses --index 200).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid

CACHE_DIR = os.environ.get("GPUHOST_TESTHOST_CACHE", "/var/cache/gpuhost-testhosts")
STATE_BASE = os.environ.get("GPUHOST_TESTHOST_STATE", "/var/lib/gpuhost-testhosts")
TAG = os.environ.get("GPUHOST_TESTHOST_TAG", "gh")
# Debian release of the test hosts: bookworm (Proxmox VE 8's base); GPUHOST_TESTHOST_SUITE=trixie builds Debian 13
# hosts (Proxmox VE 9's base), with a rootfs of their own (the suite is part of the recipe id).
SUITE = os.environ.get("GPUHOST_TESTHOST_SUITE", "bookworm")
PACKAGES = [
    "systemd", "systemd-sysv", "dbus", "python3", "python3-venv", "python3-apt", "python3-packaging", "openssh-server",
    "iproute2", "kmod", "udev", "pciutils", "ca-certificates", "procps", "sudo",
]
# Bump when the rootfs fix-ups below change: a new recipe builds a new rootfs directory.
RECIPE_VERSION = 4
SUBNET = "10.231"
AUTO_INDEX_RANGE = range(1, 200)  # 200 is the sandbox's fixed index
NAME_RE = re.compile(r"^[a-z][a-z0-9-]{0,11}$")
BOOT_TIMEOUT = float(os.environ.get("GPUHOST_TESTHOST_BOOT_TIMEOUT", "90"))
STOP_TIMEOUT = float(os.environ.get("GPUHOST_TESTHOST_STOP_TIMEOUT", "15"))
SSH_OPTS = [
    "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
    "-o", "LogLevel=ERROR", "-o", "ConnectTimeout=2", "-o", "ControlMaster=no", "-o", "ControlPath=none",
]


class HostError(Exception):
    """A failure with a message meant for the user (no traceback)."""


def log(msg: str) -> None:
    print(f"testhost: {msg}", file=sys.stderr, flush=True)


def run(cmd: list[str], check: bool = True, capture: bool = True, **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, text=True, capture_output=capture, check=False, **kw)
    if check and proc.returncode != 0:
        err = (proc.stderr or proc.stdout or "").strip() if capture else ""
        raise HostError(f"command failed ({proc.returncode}): {' '.join(cmd)}\n{err}")
    return proc


@contextlib.contextmanager
def flock(path: str):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield fd
    finally:
        os.close(fd)


def check_tag() -> None:
    if not re.fullmatch(r"[a-z]{2}", TAG):
        raise HostError(f"GPUHOST_TESTHOST_TAG={TAG!r} is invalid: allowed values are two lowercase letters (default 'gh')")


def check_name(name: str) -> None:
    if not NAME_RE.match(name):
        raise HostError(
            f"host NAME {name!r} is invalid: allowed values match [a-z][a-z0-9-]{{0,11}} "
            f"(1-12 chars, lowercase letter first) so that the veth '{TAG}-NAME' fits in 15 chars")


def require_tools(*tools: str) -> None:
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        raise HostError(
            f"missing tools on the controller: {', '.join(missing)} "
            "(apt-get install debootstrap systemd-container iproute2 openssh-client)")


def require_root() -> None:
    if os.geteuid() != 0:
        raise HostError("must run as root (mounts, network namespaces, cgroups)")


# --------------------------------------------------------------------------- paths
def key_path() -> str:
    return os.path.join(CACHE_DIR, "id_ed25519")


def state_root(tag: str = TAG) -> str:
    return os.path.join(STATE_BASE, tag)


def host_dir(name: str) -> str:
    return os.path.join(state_root(), name)


def obj(name: str) -> str:
    """Kernel object name (netns, veth, cgroup, nspawn machine) for host NAME."""
    return f"{TAG}-{name}"


def cgroup_dirs(name: str) -> list[str]:
    """Cgroup directories the host's nspawn runs in (hybrid layout, or pure cgroup2)."""
    base = "/sys/fs/cgroup"
    if os.path.isdir(os.path.join(base, "systemd")) and os.path.isdir(os.path.join(base, "unified")):
        return [os.path.join(base, "systemd", obj(name)), os.path.join(base, "unified", obj(name))]
    if os.path.exists(os.path.join(base, "cgroup.controllers")):
        return [os.path.join(base, obj(name))]
    return [os.path.join(base, "systemd", obj(name))]


def cgroup_parents() -> list[str]:
    return sorted({os.path.dirname(d) for d in cgroup_dirs("x")})


# --------------------------------------------------------------------------- prepare
def debian_mirror() -> str | None:
    """The controller's own Debian mirror (from its apt sources); None = debootstrap's default."""
    env = os.environ.get("GPUHOST_DEBIAN_MIRROR")
    if env:
        return env
    candidates: list[str] = []
    try:
        with open("/etc/apt/sources.list.d/debian.sources", encoding="utf-8") as fh:
            for stanza in fh.read().split("\n\n"):
                fields = dict(
                    (ln.split(":", 1)[0].strip(), ln.split(":", 1)[1].strip())
                    for ln in stanza.splitlines() if ":" in ln and not ln.startswith("#"))
                if SUITE in fields.get("Suites", "").split():
                    candidates.extend(fields.get("URIs", "").split())
    except OSError:
        pass
    try:
        with open("/etc/apt/sources.list", encoding="utf-8") as fh:
            for ln in fh:
                parts = ln.split()
                if len(parts) >= 3 and parts[0] == "deb" and parts[2] == SUITE:
                    candidates.append(parts[1])
    except OSError:
        pass
    return candidates[0] if candidates else None


def ensure_keypair() -> str:
    key = key_path()
    if not (os.path.exists(key) and os.path.exists(key + ".pub")):
        for p in (key, key + ".pub"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(p)
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "gpuhost-testhost", "-f", key])
    os.chmod(key, 0o600)
    with open(key + ".pub", encoding="utf-8") as fh:
        return fh.read().strip()


def recipe_id(pubkey: str) -> str:
    h = hashlib.sha256(json.dumps([RECIPE_VERSION, SUITE, PACKAGES, pubkey]).encode()).hexdigest()
    return h[:12]


def rootfs_path(rid: str) -> str:
    return os.path.join(CACHE_DIR, f"rootfs-{rid}")


def mounts_under(path: str) -> list[str]:
    path = os.path.realpath(path).rstrip("/")
    found = []
    with open("/proc/self/mountinfo", encoding="utf-8") as fh:
        for ln in fh:
            mp = ln.split()[4].encode().decode("unicode_escape")
            if mp == path or mp.startswith(path + "/"):
                found.append(mp)
    return found


def safe_rmtree(path: str) -> None:
    """rm -rf that first unmounts anything below PATH and refuses if a mount is still there."""
    if not os.path.lexists(path):
        return
    for mp in sorted(mounts_under(path), key=len, reverse=True):
        run(["umount", "-l", mp], check=False)
    left = mounts_under(path)
    if left:
        raise HostError(f"refusing to delete {path}: still mounted: {left}")
    shutil.rmtree(path, ignore_errors=False)


def write(path: str, text: str, mode: int = 0o644) -> None:
    if os.path.islink(path):
        os.unlink(path)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.chmod(path, mode)


def fix_rootfs(root: str, pubkey: str) -> None:
    """The pitfalls of docs/testing.md: DNS waits, shared machine-id, shared host keys, no key."""
    # 1. resolv.conf pointing at an unreachable nameserver and no /etc/hosts made getfqdn() wait 10 s.
    write(os.path.join(root, "etc/resolv.conf"), "")
    write(os.path.join(root, "etc/hosts"), "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n")
    write(os.path.join(root, "etc/hostname"), "testhost\n")
    # 2. one machine-id per host: empty here, written by `create`; dbus follows /etc/machine-id.
    write(os.path.join(root, "etc/machine-id"), "", 0o444)
    dbus_id = os.path.join(root, "var/lib/dbus/machine-id")
    os.makedirs(os.path.dirname(dbus_id), exist_ok=True)
    if os.path.lexists(dbus_id):
        os.unlink(dbus_id)
    os.symlink("/etc/machine-id", dbus_id)
    # 3. SSH: our key for root, host keys per host (generated by `create`), ed25519 only.
    ssh_dir = os.path.join(root, "root/.ssh")
    os.makedirs(ssh_dir, mode=0o700, exist_ok=True)
    os.chmod(ssh_dir, 0o700)
    write(os.path.join(ssh_dir, "authorized_keys"), pubkey + "\n", 0o600)
    etc_ssh = os.path.join(root, "etc/ssh")
    for f in os.listdir(etc_ssh):
        if f.startswith("ssh_host_"):
            os.unlink(os.path.join(etc_ssh, f))
    os.makedirs(os.path.join(etc_ssh, "sshd_config.d"), exist_ok=True)
    write(os.path.join(etc_ssh, "sshd_config.d/gpuhost-testhost.conf"),
          "# gpuhost.sglang test host\nHostKey /etc/ssh/ssh_host_ed25519_key\n"
          "PermitRootLogin prohibit-password\nPasswordAuthentication no\nUseDNS no\n")
    # 4. No network beyond the controller: no remote apt sources, no background apt runs
    #    (apt-daily would take the dpkg lock under a converge).
    write(os.path.join(root, "etc/apt/sources.list"),
          "# gpuhost test host: no network beyond the controller. Add a local repo in sources.list.d/.\n")
    lists = os.path.join(root, "var/lib/apt/lists")
    if os.path.isdir(lists):
        for f in os.listdir(lists):
            p = os.path.join(lists, f)
            if os.path.isfile(p) and f != "lock":
                os.unlink(p)
    sysd = os.path.join(root, "etc/systemd/system")
    for unit in ("apt-daily.timer", "apt-daily-upgrade.timer", "apt-daily.service", "apt-daily-upgrade.service",
                 "systemd-timesyncd.service", "getty@tty1.service", "console-getty.service"):
        p = os.path.join(sysd, unit)
        if os.path.lexists(p):
            os.unlink(p)
        os.symlink("/dev/null", p)
    # 5. Fast, quiet boots.
    write(os.path.join(root, "etc/fstab"), "# empty: the test host's mounts come from systemd-nspawn\n")


def cmd_prepare(_args) -> dict:
    require_root()
    require_tools("debootstrap", "systemd-nspawn", "ssh-keygen")
    os.makedirs(CACHE_DIR, mode=0o700, exist_ok=True)
    with flock(os.path.join(CACHE_DIR, "prepare.lock")) as lock_fd:
        pubkey = ensure_keypair()
        rid = recipe_id(pubkey)
        final = rootfs_path(rid)
        if os.path.exists(os.path.join(final, ".gpuhost-complete")):
            log(f"rootfs cached: {final}")
            return {"rootfs": final, "identity_file": key_path(), "cached": True}
        # We hold the lock: every other rootfs-*.tmp is from an interrupted prepare.
        for f in os.listdir(CACHE_DIR):
            if ".tmp" in f and f.startswith("rootfs-"):
                log(f"removing interrupted build {f}")
                safe_rmtree(os.path.join(CACHE_DIR, f))
        if os.path.exists(final):
            safe_rmtree(final)
        tmp = f"{final}.tmp-{os.getpid()}"
        debs = os.path.join(CACHE_DIR, "debs")
        os.makedirs(debs, exist_ok=True)
        cmd = ["debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}", f"--cache-dir={debs}",
               SUITE, tmp]
        mirror = debian_mirror()
        if mirror:
            cmd.append(mirror)
        log(f"debootstrap {SUITE} into {tmp} (a few minutes on a cold cache)")
        t0 = time.monotonic()
        # debootstrap inherits the lock: if this process is killed -9, the next prepare waits for the
        # orphaned debootstrap to finish before it removes its half-built tree.
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False,
                              pass_fds=(lock_fd,))
        if proc.returncode != 0:
            tail = "\n".join(proc.stdout.splitlines()[-20:])
            with contextlib.suppress(HostError, OSError):
                safe_rmtree(tmp)
            raise HostError(f"debootstrap failed ({proc.returncode}):\n{tail}")
        fix_rootfs(tmp, pubkey)
        write(os.path.join(tmp, ".gpuhost-complete"),
              json.dumps({"recipe": rid, "version": RECIPE_VERSION, "packages": PACKAGES,
                          "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}) + "\n")
        os.rename(tmp, final)
        log(f"rootfs built in {time.monotonic() - t0:.0f}s: {final}")
        prune_rootfs(keep=final)
        return {"rootfs": final, "identity_file": key_path(), "cached": False}


def prune_rootfs(keep: str) -> None:
    used = {st.get("rootfs") for st in all_states()}
    for f in os.listdir(CACHE_DIR):
        p = os.path.join(CACHE_DIR, f)
        if f.startswith("rootfs-") and p != keep and p not in used and ".tmp" not in f:
            log(f"removing old rootfs {p}")
            safe_rmtree(p)


def current_rootfs() -> str:
    pub = key_path() + ".pub"
    if not os.path.exists(pub):
        raise HostError(f"no cached rootfs: run `{sys.argv[0]} prepare` first ({pub} missing)")
    with open(pub, encoding="utf-8") as fh:
        rid = recipe_id(fh.read().strip())
    path = rootfs_path(rid)
    if not os.path.exists(os.path.join(path, ".gpuhost-complete")):
        raise HostError(f"no cached rootfs: run `{sys.argv[0]} prepare` first ({path} missing)")
    return path


# --------------------------------------------------------------------------- state
def read_state(name: str, tag: str = TAG) -> dict | None:
    try:
        with open(os.path.join(state_root(tag), name, "state.json"), encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def write_state(name: str, st: dict) -> None:
    path = os.path.join(host_dir(name), "state.json")
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(st, fh, indent=1)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def all_states() -> list[dict]:
    out = []
    if not os.path.isdir(STATE_BASE):
        return out
    for tag in sorted(os.listdir(STATE_BASE)):
        root = os.path.join(STATE_BASE, tag)
        if not os.path.isdir(root):
            continue
        for name in sorted(os.listdir(root)):
            st = read_state(name, tag)
            if st:
                out.append(st)
    return out


def proc_starttime(pid: int) -> str | None:
    """Start time of a live process (None if gone or a zombie): identifies a PID across reuse."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] in ("Z", "X") else fields[19]


def nspawn_alive(st: dict) -> bool:
    pid = st.get("nspawn_pid")
    return bool(pid) and proc_starttime(pid) == st.get("nspawn_start")


def used_indices() -> set[int]:
    used = {st["index"] for st in all_states() if "index" in st}
    out = run(["ip", "-o", "-4", "addr", "show"], check=False).stdout
    for m in re.finditer(rf"inet {re.escape(SUBNET)}\.(\d+)\.1/", out):
        used.add(int(m.group(1)))
    return used


def host_json(st: dict) -> dict:
    return {"name": st["name"], "address": st["address"], "port": 22, "user": "root",
            "identity_file": st["identity_file"]}


# --------------------------------------------------------------------------- create
def parse_bind(spec: str, opt: str) -> tuple[str, str]:
    parts = spec.split(":")
    if len(parts) != 2 or not parts[0] or not parts[1]:
        raise HostError(f"{opt} {spec!r} is invalid: allowed form is SRC:DST (two paths, no other ':')")
    src, dst = os.path.abspath(parts[0]), parts[1]
    if not dst.startswith("/") or "," in spec:
        raise HostError(f"{opt} {spec!r} is invalid: DST must be an absolute path inside the host, no ','")
    if not os.path.exists(src):
        raise HostError(f"{opt} {spec!r} is invalid: SRC {src} does not exist on the controller")
    return src, dst


def ssh_cmd(st: dict, remote: str, timeout: int = 2) -> list[str]:
    opts = list(SSH_OPTS)
    opts[opts.index("ConnectTimeout=2")] = f"ConnectTimeout={timeout}"
    return ["ssh", *opts, "-i", st["identity_file"], f"root@{st['address']}", remote]


def ssh_ok(st: dict) -> bool:
    return run(ssh_cmd(st, "true"), check=False).returncode == 0


def cgroup_enter_fn(dirs: list[str]):
    def enter() -> None:  # runs in the forked child before exec
        for d in dirs:
            with open(os.path.join(d, "cgroup.procs"), "w", encoding="ascii") as fh:
                fh.write("0")
    return enter


def cmd_create(args) -> dict:
    require_root()
    check_tag()
    check_name(args.name)
    if args.index is not None and not 1 <= args.index <= 254:
        raise HostError(f"--index {args.index} is invalid: allowed values are 1..254")
    binds = [(*parse_bind(s, "--bind-ro"), True) for s in args.bind_ro] + \
            [(*parse_bind(s, "--bind"), False) for s in args.bind]
    require_tools("systemd-nspawn", "ip", "ssh", "ssh-keygen", "mount", "umount")
    name = args.name
    os.makedirs(state_root(), exist_ok=True)
    # Per-name lock (never unlinked: unlinking a flock file races with its next waiter).
    with flock(os.path.join(state_root(), f".{name}.lock")):
        st = read_state(name)
        if st and st.get("phase") == "running" and nspawn_alive(st) and ssh_ok(st):
            want = sorted([list(b) for b in binds])
            if sorted(st.get("binds", [])) != want:
                raise HostError(f"host {name} already runs with other binds {st.get('binds')}; "
                                f"run `{sys.argv[0]} destroy {name}` first")
            log(f"host {name} already running")
            return host_json(st)
        if st or os.path.exists(host_dir(name)) or leftovers_of(name):
            log(f"cleaning up a stale/broken host {name} first")
            destroy_one(name)
        rootfs = current_rootfs()
        t0 = time.monotonic()
        with flock(os.path.join(STATE_BASE, ".index.lock")):
            used = used_indices()
            if args.index is not None:
                if args.index in used:
                    raise HostError(f"--index {args.index} is already used by another test host or interface")
                index = args.index
            else:
                free = [i for i in AUTO_INDEX_RANGE if i not in used]
                if not free:
                    raise HostError("no free index in 1..199: destroy some hosts")
                index = free[0]
            hd = host_dir(name)
            os.makedirs(hd)
            st = {"name": name, "tag": TAG, "index": index, "address": f"{SUBNET}.{index}.2",
                  "host_address": f"{SUBNET}.{index}.1", "identity_file": key_path(), "rootfs": rootfs,
                  "binds": sorted([list(b) for b in binds]), "phase": "creating", "created_by": os.getpid()}
            write_state(name, st)  # reserves the index before we release the lock
        try:
            boot(name, st, binds)
        except BaseException as exc:
            log(f"create {name} failed, cleaning up: {exc}")
            with contextlib.suppress(Exception):
                destroy_one(name)
            raise
        log(f"host {name} up at {st['address']} in {time.monotonic() - t0:.1f}s (create to SSH + system running)")
        return host_json(st)


def boot(name: str, st: dict, binds: list[tuple[str, str, bool]]) -> None:
    hd = host_dir(name)
    upper, work, merged = (os.path.join(hd, d) for d in ("upper", "work", "merged"))
    for d in (upper, work, merged):
        os.makedirs(d, exist_ok=True)
    run(["mount", "-t", "overlay", "overlay", "-o", f"lowerdir={st['rootfs']},upperdir={upper},workdir={work}",
         merged])
    # Per-host identity: machine-id, hostname, /etc/hosts, SSH host key.
    write(os.path.join(merged, "etc/machine-id"), uuid.uuid4().hex + "\n", 0o444)
    write(os.path.join(merged, "etc/hostname"), name + "\n")
    write(os.path.join(merged, "etc/hosts"),
          f"127.0.0.1\tlocalhost\n127.0.1.1\t{name}\n::1\tlocalhost ip6-localhost ip6-loopback\n")
    hostkey = os.path.join(merged, "etc/ssh/ssh_host_ed25519_key")
    run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"root@{name}", "-f", hostkey])
    # Network: netns + veth, the container end created directly inside the netns as eth0.
    ns, veth = obj(name), obj(name)
    run(["ip", "netns", "add", ns])
    run(["ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns])
    run(["ip", "addr", "add", f"{st['host_address']}/24", "dev", veth])
    run(["ip", "link", "set", veth, "up"])
    run(["ip", "-n", ns, "link", "set", "lo", "up"])
    run(["ip", "-n", ns, "addr", "add", f"{st['address']}/24", "dev", "eth0"])
    run(["ip", "-n", ns, "link", "set", "eth0", "up"])
    run(["ip", "-n", ns, "route", "add", "default", "via", st["host_address"]])
    # Own cgroups so that containers started with --keep-unit do not share (and see) one another's.
    dirs = cgroup_dirs(name)
    for d in dirs:
        os.makedirs(d, exist_ok=True)
    cmd = ["systemd-nspawn", "--quiet", "--register=no", "--keep-unit", f"--machine={obj(name)}",
           f"--hostname={name}", f"--network-namespace-path=/run/netns/{ns}", "--resolv-conf=off",
           "--timezone=off", "--link-journal=no", "--console=read-only", "--boot", f"--directory={merged}",
           # nspawn's own seccomp allow-list (systemd src/nspawn/nspawn-seccomp.c) lacks pidfd_getfd, which the
           # containers we stand in for allow: LXC's default profile is a short deny-list without it (lxc
           # config/common.seccomp, used by Proxmox VE). PyTorch's expandable-segments CUDA IPC calls it
           # (pytorch/pytorch#165685), so the serving unit's filter is tested against a kernel that allows it.
           "--system-call-filter=pidfd_getfd"]
    for src, dst, ro in binds:
        cmd.append(f"--bind-ro={src}:{dst}" if ro else f"--bind={src}:{dst}")
    logf = open(os.path.join(hd, "nspawn.log"), "ab")  # noqa: SIM115 - handed to the child
    try:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
                                start_new_session=True, preexec_fn=cgroup_enter_fn(dirs),  # noqa: PLW1509
                                close_fds=True)
    finally:
        logf.close()
    st.update(nspawn_pid=proc.pid, nspawn_start=proc_starttime(proc.pid), phase="booting")
    write_state(name, st)
    # Wait for SSH, then for systemd to finish booting.
    deadline = time.monotonic() + BOOT_TIMEOUT
    while True:
        if proc.poll() is not None:
            raise HostError(f"systemd-nspawn exited with {proc.returncode} while booting {name}:\n{log_tail(name)}")
        if ssh_ok(st):
            break
        if time.monotonic() > deadline:
            raise HostError(f"host {name}: SSH did not answer within {BOOT_TIMEOUT:.0f}s:\n{log_tail(name)}")
        time.sleep(0.2)
    left = max(5, int(deadline - time.monotonic()))
    res = run(["timeout", str(left), *ssh_cmd(st, "systemctl is-system-running --wait")], check=False)
    state = res.stdout.strip()
    if state != "running":
        failed = run(ssh_cmd(st, "systemctl --failed --no-legend --plain; journalctl -b -p err --no-pager -n 30"),
                     check=False).stdout
        raise HostError(f"host {name}: system state is {state or 'unknown'!r}, not 'running':\n{failed}")
    st["phase"] = "running"
    write_state(name, st)


def log_tail(name: str, lines: int = 30) -> str:
    try:
        with open(os.path.join(host_dir(name), "nspawn.log"), "rb") as fh:
            text = fh.read().decode("utf-8", "replace")
        return "\n".join(text.splitlines()[-lines:])
    except OSError:
        return "(no nspawn.log)"


# --------------------------------------------------------------------------- destroy
def cgroup_pids(d: str) -> list[int]:
    pids: list[int] = []
    for root, _dirs, files in os.walk(d):
        if "cgroup.procs" in files:
            with contextlib.suppress(OSError), open(os.path.join(root, "cgroup.procs"), encoding="ascii") as fh:
                pids.extend(int(x) for x in fh.read().split())
    return pids


def rmdir_cgroup(d: str) -> None:
    """Remove a cgroup tree bottom-up; the kernel may report EBUSY for a moment after the last exit."""
    for _attempt in range(50):
        try:
            for root, dirs, _files in os.walk(d, topdown=False):
                for sub in dirs:
                    with contextlib.suppress(FileNotFoundError):
                        os.rmdir(os.path.join(root, sub))
            with contextlib.suppress(FileNotFoundError):
                os.rmdir(d)
            return
        except OSError:
            time.sleep(0.1)
    # what is left is reported by leftovers_of()


def nspawn_pids(machine: str | None = None) -> dict[int, str]:
    """systemd-nspawn processes of ours (all tags), by machine name."""
    out = {}
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/cmdline", "rb") as fh:
                argv = fh.read().split(b"\0")
        except OSError:
            continue
        if not argv or os.path.basename(argv[0]) != b"systemd-nspawn":
            continue
        for a in argv:
            m = re.match(rb"--machine=([a-z]{2}-[a-z0-9-]+)$", a)
            if m and (machine is None or m.group(1).decode() == machine):
                out[int(p)] = m.group(1).decode()
    return out


def leftovers_of(name: str) -> list[str]:
    found = []
    o = obj(name)
    if os.path.exists(f"/run/netns/{o}"):
        found.append(f"netns {o}")
    if os.path.exists(f"/sys/class/net/{o}"):
        found.append(f"veth {o}")
    found += [f"cgroup {d}" for d in cgroup_dirs(name) if os.path.isdir(d)]
    found += [f"nspawn pid {p}" for p in nspawn_pids(o)]
    found += [f"mount {m}" for m in mounts_under(host_dir(name))]
    if os.path.exists(f"/run/systemd/nspawn/propagate/{o}"):
        found.append(f"propagate dir /run/systemd/nspawn/propagate/{o}")
    return found


def destroy_one(name: str) -> None:
    """Remove every trace of host NAME; each step tolerates the object being gone already."""
    o = obj(name)
    st = read_state(name) or {}
    dirs = cgroup_dirs(name)
    # 1. Clean shutdown: SIGTERM to systemd-nspawn (it powers the container off), then SIGKILL.
    pids = set(nspawn_pids(o))
    if st.get("nspawn_pid") and nspawn_alive(st):
        pids.add(st["nspawn_pid"])
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT
    while time.monotonic() < deadline and (any(cgroup_pids(d) for d in dirs) or
                                           any(proc_starttime(p) for p in pids)):
        time.sleep(0.1)
    # 2. Whatever is left (an nspawn killed -9 leaves its container running): SIGKILL the whole cgroup tree.
    for _attempt in range(50):
        left = {p for d in dirs for p in cgroup_pids(d)} | {p for p in pids if proc_starttime(p)}
        if not left:
            break
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)
    else:
        raise HostError(f"host {name}: processes survive SIGKILL: {sorted(left)}")
    # Reap our own children, if this process started them (create failing half-way).
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass
    for d in dirs:
        rmdir_cgroup(d)
    # 3. Network.
    if os.path.exists(f"/sys/class/net/{o}"):
        run(["ip", "link", "del", o], check=False)
    if os.path.exists(f"/run/netns/{o}"):
        run(["ip", "netns", "del", o], check=False)
    # 4. Mounts, nspawn's propagate dir, state.
    with contextlib.suppress(FileNotFoundError):
        shutil.rmtree(f"/run/systemd/nspawn/propagate/{o}")
    safe_rmtree(host_dir(name))
    left = leftovers_of(name)
    if left:
        raise HostError(f"host {name}: could not remove: {', '.join(left)}")


def known_names() -> set[str]:
    """Names of hosts of the current tag, from state dirs and from kernel objects."""
    names = set()
    if os.path.isdir(state_root()):
        names |= {n for n in os.listdir(state_root()) if not n.startswith(".")}
    pre = f"{TAG}-"
    for d in ["/run/netns", "/run/systemd/nspawn/propagate", "/sys/class/net", *cgroup_parents()]:
        with contextlib.suppress(OSError):
            names |= {n[len(pre):] for n in os.listdir(d) if n.startswith(pre)}
    names |= {m[len(pre):] for m in nspawn_pids().values() if m.startswith(pre)}
    return {n for n in names if NAME_RE.match(n)}


def cmd_destroy(args) -> dict:
    require_root()
    check_tag()
    if args.all == bool(args.names):
        raise HostError("destroy: give host NAME(s) or --all (not both)")
    names = sorted(known_names()) if args.all else args.names
    errors = []
    for name in names:
        check_name(name)
        os.makedirs(state_root(), exist_ok=True)
        with flock(os.path.join(state_root(), f".{name}.lock")):
            try:
                destroy_one(name)
                log(f"destroyed {name}")
            except HostError as exc:
                errors.append(str(exc))
    if errors:
        raise HostError("\n".join(errors))
    return {"destroyed": names}


# --------------------------------------------------------------------------- list / leaks
def cmd_list(_args) -> list:
    out = []
    for st in all_states():
        if st.get("tag") != TAG:
            continue
        out.append({**host_json(st), "index": st.get("index"), "phase": st.get("phase"),
                    "alive": nspawn_alive(st), "binds": st.get("binds", [])})
    return out


def find_leaks() -> list[str]:
    """Every object of ours (current tag) still present: netns, veths, mounts, nspawn, cgroups, state."""
    pre = f"{TAG}-"
    leaks = []
    with contextlib.suppress(OSError):
        leaks += [f"netns /run/netns/{n}" for n in sorted(os.listdir("/run/netns")) if n.startswith(pre)]
    leaks += [f"veth {n}" for n in sorted(os.listdir("/sys/class/net")) if n.startswith(pre)]
    leaks += [f"overlay mount {m}" for m in mounts_under(state_root())]
    leaks += [f"nspawn process pid {p} machine {m}" for p, m in sorted(nspawn_pids().items()) if m.startswith(pre)]
    for parent in cgroup_parents():
        with contextlib.suppress(OSError):
            leaks += [f"cgroup dir {parent}/{n}" for n in sorted(os.listdir(parent)) if n.startswith(pre)]
    with contextlib.suppress(OSError):
        leaks += [f"nspawn propagate dir /run/systemd/nspawn/propagate/{n}"
                  for n in sorted(os.listdir("/run/systemd/nspawn/propagate")) if n.startswith(pre)]
    if os.path.isdir(state_root()):
        leaks += [f"state dir {state_root()}/{n}" for n in sorted(os.listdir(state_root())) if not n.startswith(".")]
    return leaks


def cmd_leaks(_args) -> int:
    check_tag()
    leaks = find_leaks()
    for item in leaks:
        print(item)
    print(f"testhost leaks (tag {TAG}): {len(leaks)}" + ("" if leaks else " - clean"))
    return 1 if leaks else 0


# --------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="testhost.py", description=__doc__.split("\n\n", 1)[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("prepare", help="build or reuse the cached Debian 12 rootfs and SSH keypair")
    c = sub.add_parser("create", help="boot a test host and print its connection JSON")
    c.add_argument("name")
    c.add_argument("--index", type=int, help="subnet index N (10.231.N.0/24); default: first free in 1..199")
    c.add_argument("--bind-ro", action="append", default=[], metavar="SRC:DST", help="read-only bind mount")
    c.add_argument("--bind", action="append", default=[], metavar="SRC:DST", help="read-write bind mount")
    d = sub.add_parser("destroy", help="stop and remove hosts")
    d.add_argument("names", nargs="*")
    d.add_argument("--all", action="store_true", help="every host of this tag, including orphaned objects")
    sub.add_parser("list", help="list hosts as JSON")
    sub.add_parser("leaks", help="print leftovers of ours; exit 1 if any")
    args = ap.parse_args(argv)

    def on_term(signum, _frame):  # a SIGTERM'd create cleans up like an interrupted one
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGTERM, on_term)
    try:
        if args.cmd == "leaks":
            return cmd_leaks(args)
        result = {"prepare": cmd_prepare, "create": cmd_create, "destroy": cmd_destroy, "list": cmd_list}[args.cmd](args)
    except HostError as exc:
        log(f"error: {exc}")
        return 2
    except KeyboardInterrupt:
        log("interrupted")
        return 130
    except (OSError, subprocess.SubprocessError) as exc:
        log(f"error: {exc}")
        return 2
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
