"""Effects of the serving role on a real host: a running hardened service that answers, secrets kept out of
argv, unit files and logs, last-known-good recorded, and the systemd exposure score."""

import json
import re

SECRET = "hf_moleculeSecretToken123"


def test_service_runs_as_its_own_user(host):
    svc = host.service("sglang")
    assert svc.is_running and svc.is_enabled
    pid = host.check_output("systemctl show -p MainPID --value sglang")
    assert host.check_output("ps -o user= -p %s" % pid).strip() == "sglang"


def test_listens_on_localhost_only(host):
    assert host.socket("tcp://127.0.0.1:30000").is_listening
    assert not host.socket("tcp://0.0.0.0:30000").is_listening


def test_answers_a_probe(host):
    out = host.check_output(
        "python3 -c 'import json,urllib.request as u;"
        "m=json.load(u.urlopen(\"http://127.0.0.1:30000/v1/models\"))[\"data\"][0][\"id\"];"
        "r=u.Request(\"http://127.0.0.1:30000/v1/completions\",json.dumps({\"model\":m,\"prompt\":\"The capital of France is\","
        "\"max_tokens\":8,\"temperature\":0}).encode(),{\"Content-Type\":\"application/json\"});"
        "print(json.load(u.urlopen(r))[\"choices\"][0][\"text\"])'")
    assert "Paris" in out


def test_secret_only_in_the_0600_environment_file(host):
    env = host.file("/etc/sglang/sglang.env")
    assert env.mode == 0o600 and env.user == "root"
    assert SECRET in env.content_string
    assert SECRET not in host.file("/etc/systemd/system/sglang.service").content_string
    pids = host.check_output("systemctl show -p ControlGroup --value sglang")
    cmdlines = host.check_output("cat /sys/fs/cgroup%s/cgroup.procs 2>/dev/null || cat /sys/fs/cgroup/systemd%s/cgroup.procs"
                                 % (pids, pids)).split()
    for pid in cmdlines:
        cmd = host.run("tr '\\0' ' ' < /proc/%s/cmdline" % pid).stdout
        assert SECRET not in cmd
    assert SECRET not in host.check_output("journalctl -u sglang -o cat --no-pager")


def test_unit_is_hardened(host):
    unit = host.file("/etc/systemd/system/sglang.service").content_string
    for key in ("NoNewPrivileges=yes", "ProtectSystem=strict", "PrivateTmp=yes", "DevicePolicy=closed",
                "LimitMEMLOCK=infinity", "Restart=on-failure", "EnvironmentFile=/etc/sglang/sglang.env"):
        assert key in unit
    out = host.check_output("systemd-analyze security sglang.service --no-pager")
    score = float(re.search(r"Overall exposure level for sglang.service: ([0-9.]+)", out).group(1))
    print("systemd-analyze security exposure: %.1f" % score)
    assert score <= 2.5


def test_unit_file_lints_clean(host):
    res = host.run("systemd-analyze verify /etc/systemd/system/sglang.service")
    assert res.rc == 0 and res.stderr.strip() == "", res.stderr


def test_last_known_good_recorded(host):
    meta = json.loads(host.file("/etc/sglang/last-known-good/meta.json").content_string)
    assert meta["engine"] == "transformers" and meta["load_seconds"] >= 0
    assert host.file("/etc/sglang/last-known-good/sglang.service").content_string == \
        host.file("/etc/systemd/system/sglang.service").content_string
    dropin = host.file("/etc/systemd/system/sglang.service.d/10-start-timeout.conf").content_string
    assert re.search(r"TimeoutStartSec=\d+", dropin)
