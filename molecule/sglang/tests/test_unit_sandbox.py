"""The serving unit's sandbox from inside, on a real host: the probe (tests/integration/files/unit_probe.py) runs
under the unit file the role deployed, with only ExecStart/ExecStartPost/Type/Restart changed, as the service user.
prepare.yml made the GPU nodes the way Proxmox VE passes them into a container (0660 root:44)."""

import json

import pytest

PROBE = "/usr/local/bin/gpuhost-unit-probe.py"
UNIT = "/etc/systemd/system/sglang.service"
PROBE_UNIT = "/etc/systemd/system/sglang-probe.service"
RESULT = "/var/lib/sglang/probe.jsonl"
NODES = ["/dev/nvidia0", "/dev/nvidia1", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools",
         "/dev/nvidia-caps/nvidia-cap1", "/dev/nvidia-caps/nvidia-cap2"]
CHANGED = ("Type=", "Restart=", "ExecStart=", "ExecStartPost=")


@pytest.fixture(scope="module")
def probe(host):
    with host.sudo():
        host.run("rm -f %s /tmp/probe-control.jsonl" % RESULT)
        derive = host.run("python3 %s derive %s %s %s" % (PROBE, UNIT, PROBE_UNIT, RESULT))
        assert derive.rc == 0, derive.stderr
        host.run("systemctl daemon-reload")
        start = host.run("systemctl start sglang-probe.service")
        show = host.check_output("systemctl show -p Result -p ExecMainCode -p ExecMainStatus sglang-probe.service")
        result = host.run("python3 %s steps %s" % (PROBE, RESULT)).stdout
        control = host.run("python3 {0} probe /tmp/probe-control.jsonl && python3 {0} steps /tmp/probe-control.jsonl"
                           .format(PROBE))
        unit = host.file(UNIT).content_string
        derived = host.file(PROBE_UNIT).content_string
        host.run("rm -f %s; systemctl daemon-reload" % PROBE_UNIT)
    return {"start": start, "show": show, "steps": json.loads(result or "{}"), "control": json.loads(control.stdout or "{}"),
            "unit": unit, "derived": derived}


def test_probe_unit_is_the_deployed_unit(probe):
    keep = [ln for ln in probe["unit"].splitlines() if not ln.startswith(CHANGED)]
    derived = [ln for ln in probe["derived"].splitlines()[1:] if not ln.startswith(CHANGED)]
    assert derived == keep


def test_control_run_outside_the_unit_succeeds(probe):
    """The host itself allows every step (so a failure inside the unit is the unit's doing)."""
    ctl = probe["control"]
    assert ctl["done"]["end"]["ok"], ctl
    for name in ("nodes", "memfd", "wx_mmap", "shm", "fork_pidfd", "denied"):
        assert ctl[name]["end"]["ok"], ctl[name]
    assert ctl["denied"]["end"]["detail"]["ret"] >= 0


def test_probe_survives_the_unit(probe):
    """No step kills the process (a filtered call without SystemCallErrorNumber= is SIGSYS)."""
    assert probe["start"].rc == 0 and "Result=success" in probe["show"], \
        "%s\nlast step started: %s" % (probe["show"], list(probe["steps"])[-1])
    assert probe["steps"]["done"]["end"]["ok"]


def test_gpu_nodes_open_as_the_service_user(probe):
    ident = probe["steps"]["identity"]["end"]["detail"]
    assert ident["uid"] != 0
    nodes = probe["steps"]["nodes"]["end"]["detail"]
    assert sorted(nodes) == sorted(NODES)
    denied = {p: r for p, r in nodes.items() if not r.startswith("opened")}
    assert not denied, "service user %s (groups %s) cannot open: %s" % (ident["uid"], ident["groups"], denied)


@pytest.mark.parametrize("step", ["memfd", "wx_mmap", "shm", "fork_pidfd"])
def test_pytorch_nccl_calls_work(probe, step):
    rec = probe["steps"][step]
    assert "end" in rec, "the process died in step %s" % step
    assert rec["end"]["ok"], rec["end"]


def test_filtered_call_returns_eperm(probe):
    rec = probe["steps"].get("denied", {})
    assert "end" in rec, "the process died before or in the filtered call (SIGSYS); last step started: %s" \
        % list(probe["steps"])[-1]
    assert rec["end"]["detail"]["ret"] == -1 and rec["end"]["detail"]["errno"] == "EPERM", rec["end"]
