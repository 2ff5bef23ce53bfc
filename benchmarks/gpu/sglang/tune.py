#!/usr/bin/env python3
"""playbooks/tune.yml's campaign against the real SGLang on the lent H200 machine (no systemd, no Ansible there):
tune.yml's own loop (plugins/plugin_utils/tune_loop.py CampaignLoop), its deploys and restores over a process
launcher in place of the unit instead of the serving role. It starts its own servers
(device.sh start is not needed); the bundle must be unpacked (device.sh tune does that).
    OUT=DIR bash benchmarks/gpu/sglang/device.sh tune [--restage STATE.tgz] campaigns/h200-tiny-a.yml [...]
Campaigns run in order, sharing one state directory (crash memory carries from one to the next). No candidate
starts once --deadline-s is near: the campaign is cut off there and resumes on the next run, from /tmp when the
machine stayed up, else from --restage (the previous run's OUT/tune-state.tgz). Writes OUT/tune.log,
OUT/tune-state.tgz (the state directory: state, reports, bench runs, server logs) and, per campaign,
OUT/<name>-results.md, -results.json and -pareto.png. A campaign with the accuracy gate on also leaves, in the
state, accuracy-lkg.json (last-known-good's measurements) and accuracy-<index>-<id>.json per candidate (its answers,
greedy outputs and what differs); tune.log has the differing outputs.
"""
import argparse
import json
import os
import shutil
import signal
import sys
import tarfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, os.path.join(ROOT, "collections"))
# no Ansible on the device: its module_utils (and PyYAML, in case) travel as a zip (device.sh ansible-zip), last on
# the path so that the machine's own packages win
sys.path.append(os.path.join(ROOT, ".device", "ansible-module-utils.zip"))
from ansible_collections.gpuhost.sglang.plugins.module_utils.tune.errors import CampaignError  # noqa: E402
from ansible_collections.gpuhost.sglang.plugins.plugin_utils import tune_loop  # noqa: E402

# what the launcher owns (the serving role's managed options): the trimmed bundle's model, sampling and grammar
# backends (device.sh start's launch), the address, metrics
MANAGED = {"served-model-name": "tiny", "host": "127.0.0.1", "enable-metrics": True, "sampling-backend": "pytorch",
           "grammar-backend": "none", "dtype": "bfloat16", "max-total-tokens": 65536}


class Log(object):
    def __init__(self, path):
        self.f = open(path, "a")

    def __call__(self, line):
        text = "%s %s" % (time.strftime("%H:%M:%S", time.gmtime()), line)
        print(text, flush=True)
        self.f.write(text + "\n")
        self.f.flush()


def restage(state_dir, tgz, say):
    if any(os.path.isfile(os.path.join(state_dir, d, "state.jsonl")) for d in os.listdir(state_dir)):
        say("state kept from this machine's earlier run (%s); %s not unpacked" % (state_dir, tgz))
        return
    with tarfile.open(tgz) as t:
        # our own archive of the previous run, its top folder the state directory's name
        t.extractall(os.path.dirname(state_dir), **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    say("state re-staged from %s" % tgz)


def save(state_dir, out, say):
    """OUT/tune-state.tgz and each campaign's table, JSON and plot (at most 8 files come back: two campaigns)."""
    with tarfile.open(os.path.join(out, "tune-state.tgz"), "w:gz") as t:
        t.add(state_dir, arcname=os.path.basename(state_dir))
    for name in sorted(os.listdir(state_dir)):
        for src, dst in (("results.md", "results.md"), ("results.json", "results.json"), ("pareto.png", "pareto.png")):
            path = os.path.join(state_dir, name, src)
            if os.path.isfile(path):
                shutil.copy(path, os.path.join(out, "%s-%s" % (name, dst)))
    say("saved %s" % sorted(os.listdir(out)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("campaigns", nargs="+", help="campaign YAML files, run in order")
    ap.add_argument("--out", required=True)
    ap.add_argument("--state-dir", default="/tmp/sglang/tune", help="survives between runs while the machine stays up")
    ap.add_argument("--restage", help="a previous run's tune-state.tgz, unpacked when --state-dir holds no state")
    ap.add_argument("--model", default="/tmp/sglang/model")
    ap.add_argument("--campaign-model", action="store_true",
                    help="the campaign's options name the model (model-path; the accuracy experiment's damaged copies, "
                         "device.sh damage); without it the launcher sets --model")
    ap.add_argument("--port", type=int, default=30000)
    ap.add_argument("--max-total-tokens", type=int, default=MANAGED["max-total-tokens"],
                    help="the KV pool's tokens (the tiny model's 65536); 0: SGLang sizes it from mem-fraction-static")
    ap.add_argument("--served-name", default=MANAGED["served-model-name"], help="--served-model-name")
    ap.add_argument("--deadline-s", type=float, default=480, help="no candidate starts after this many seconds")
    ap.add_argument("--estimate-s", type=float, default=150, help="a candidate's time until one is measured")
    ap.add_argument("--ready-timeout", type=int, default=180)
    ap.add_argument("--min-duration-s", type=float, default=2.0, help="serving_bench: a trial's shortest duration")
    ap.add_argument("--no-restore", action="store_true", help="leave the last candidate running at the end")
    ap.add_argument("--report-only", action="store_true",
                    help="only the decision, tables and plots from --state-dir's state (here, when the device lacked matplotlib)")
    a = ap.parse_args()
    t0 = time.monotonic()
    os.makedirs(a.out, exist_ok=True)
    os.makedirs(a.state_dir, exist_ok=True)
    say = Log(os.path.join(a.out, "tune.log"))
    if a.restage:
        if not os.path.isfile(a.restage):
            ap.error("--restage %s: no such file (expected a previous run's tune-state.tgz)" % a.restage)
        restage(a.state_dir, a.restage, say)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("SIGTERM: cut off (the state resumes on the next run)"))
    host = tune_loop.LauncherHost(os.path.join(a.state_dir, "launcher"), lkg_dir=os.path.join(a.state_dir, "last-known-good"),
                                  say=say)
    parser = tune_loop.EngineParser(sys.executable)
    managed = dict(MANAGED, port=a.port, **{"served-model-name": a.served_name, "max-total-tokens": a.max_total_tokens})
    if not a.max_total_tokens:
        del managed["max-total-tokens"]
    if not a.campaign_model:
        managed["model-path"] = a.model
    summary = []
    try:
        for path in a.campaigns:
            loop = tune_loop.CampaignLoop(path, a.state_dir, host, [sys.executable, "-m", "sglang.launch_server"], parser,
                                          "http://127.0.0.1:%d" % a.port, managed=managed, say=say,
                                          bench={"min_duration_s": a.min_duration_s, "min_requests": 8},
                                          ready_timeout=a.ready_timeout, deadline=t0 + a.deadline_s,
                                          estimate_s=a.estimate_s, restore=not a.no_restore,
                                          meta={"engine": "sglang", "model_path": a.model})
            res = loop.report_only() if a.report_only else loop.run()
            summary.append({"campaign": res["plan"]["name"], "reason": res["report"]["reason"], "cut_off": res["cut_off"],
                            "restored": res["restored"], "adopted": res.get("adopted")})
            if res["cut_off"]:
                break
    except (tune_loop.LoopError, CampaignError) as exc:
        say("campaign stopped: %s" % exc)
        summary.append({"error": str(exc)})
    finally:
        host.stop(tune_loop.UNIT)
        say("summary %s; %.0f s" % (json.dumps(summary), time.monotonic() - t0))
        save(a.state_dir, a.out, say)


if __name__ == "__main__":
    main()
