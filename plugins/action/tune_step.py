# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""playbooks/tune.yml's campaign: the one loop (plugins/plugin_utils/tune_loop.py CampaignLoop), run from the
campaign's state until it needs the serving role. Its effects here: a candidate's or the winner's deploy and the
restore of last-known-good are handed to playbooks/tasks/tune_step.yml (the role's gate), whose result comes back in
``answers`` on the next calls; the GPU health readings are gpu_facts on the host; the ladder, accuracy gate, rows and
report run in this (the controller's) process."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time

from ansible.plugins.action import ActionBase

from ansible_collections.gpuhost.sglang.plugins.module_utils.tune.errors import CampaignError
from ansible_collections.gpuhost.sglang.plugins.module_utils.tune.state import CampaignState, state_path
from ansible_collections.gpuhost.sglang.plugins.plugin_utils import tune_loop

# the same options as plugins/modules/tune_step.py documents (tests/unit/plugins/action/test_tune_step.py)
ARGUMENT_SPEC = {
    "state_dir": {"type": "path", "required": True},
    "plan": {"type": "dict", "required": True},
    "verdicts": {"type": "list", "elements": "dict", "required": True},
    "base_url": {"type": "str", "required": True},
    "answers": {"type": "dict", "default": {}},
    "adopt": {"type": "bool"},
    "profile_options": {"type": "dict", "default": {}},
    "api_key": {"type": "str", "no_log": True},
    "bench": {"type": "dict", "default": {}},
    "gpu_facts": {"type": "dict"},
    "gpu_facts_after": {"type": "dict"},
    "plots": {"type": "bool", "default": True},
}


class NeedRole(Exception):
    """The loop needs the serving role: ``step`` says what (need deploy or restore) and how."""

    def __init__(self, step):
        Exception.__init__(self, step["need"])
        self.step = step


class PlaybookLoop(tune_loop.CampaignLoop):
    """The campaign loop with the playbook's effects; its control flow is CampaignLoop's, untouched."""

    def __init__(self, args, health, say):
        verdicts = args["verdicts"]
        tune_loop.CampaignLoop.__init__(
            self, None, args["state_dir"], None, None, lambda option_sets: verdicts, args["base_url"],
            profile=args["profile_options"], bench=args["bench"], plots=args["plots"], say=say, plan=args["plan"],
            adopt=args["adopt"], api_key=args["api_key"])
        self.answers = args["answers"] or {}
        self.args = args
        self.health = health

    def given(self, key):
        """What tasks/tune_step.yml answered to ``key`` ({passed, failure, message, t0}), or None."""
        return self.answers.get(key)

    def deploy(self, index, lkg_update, key):
        if key == "deploy-0":
            return None  # the base: tune.yml's deploy.yml play deployed it through the gate just before
        answer = self.given(key)
        if answer:
            if answer.get("passed"):
                return None
            return {"failure": answer.get("failure"), "message": answer.get("message") or "the deploy failed"}
        raise NeedRole({"need": "deploy", "key": key, "index": index, "lkg_update": lkg_update, "t0": time.time(),
                        "options": self.plan["candidates"][index]["options"]})

    def put_back(self):
        if self.given("restore"):
            return self.given("restore").get("message") or "last-known-good serves"
        raise NeedRole({"need": "restore", "key": "restore"})

    def gpu_health(self, when):
        return self.health(self.args["gpu_facts" if when == "before" else "gpu_facts_after"])

    def resuming(self, index):
        """A candidate this loop began in an earlier call, whose deploy the role has answered since (no row yet)."""
        cand = self.plan["candidates"][index]
        return bool(self.given("deploy-%d" % index)) and not CampaignState(
            state_path(self.state_dir, self.plan["name"])).final(cand["id"])

    def started(self, index):
        return float(self.given("deploy-%d" % index).get("t0") or time.time()) if self.resuming(index) else time.time()


def advance(args, health):
    """One call: the loop from the state until it needs the serving role (the result names the need) or is through
    (``need`` null, with the report and the adoption). ``health``: gpu_facts' result -> its health."""
    lines = []
    try:
        out = PlaybookLoop(args, health, lines.append).run()
    except NeedRole as need:
        return dict(need.step, changed=True, lines=lines)
    except (tune_loop.LoopError, CampaignError) as exc:
        return {"failed": True, "msg": str(exc), "lines": lines}
    return {"need": None, "changed": True, "lines": lines, "report": out["report"], "adopted": out["adopted"],
            "restored": out["restored"]}


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp
        dummy, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        result.update(advance(args, lambda facts: self._health(facts, task_vars)))
        return result

    def _health(self, facts, task_vars):
        """gpu_facts' health on the host (``facts``: a recorded gpu_facts result replayed instead of NVML)."""
        res = self._execute_module(module_name="gpuhost.sglang.gpu_facts", module_args={"facts": facts} if facts else {},
                                   task_vars=task_vars)
        if res.get("failed"):
            raise tune_loop.LoopError("gpu_facts failed on the host: %s" % res.get("msg"))
        return res.get("health")
