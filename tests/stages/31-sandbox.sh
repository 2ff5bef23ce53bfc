#!/usr/bin/env bash
# README command 1 end to end on a fresh sandbox host, then the serving role's cases on it (the first of them
# redeploys the same playbook and inventory: the second deploy, which must report changed=0). Runs beside
# 30-pytest (tests/run-all.sh): both wait on engines and readiness about half the time, and neither times anything
# (the gates that measure time run alone in 50-timing). The sandbox stays up for 50-timing, which destroys it; on a
# failure here it is destroyed at once.
set -euo pipefail
cd "$GPUHOST_ROOT"
export PATH=$GPUHOST_ROOT/.venv/bin:$PATH
trap 'rc=$?; [ "$rc" -eq 0 ] || make --no-print-directory sandbox-destroy >/dev/null 2>&1 || true' EXIT
make --no-print-directory sandbox-destroy >/dev/null 2>&1 || true
start=$(date +%s)
make --no-print-directory sandbox
echo "sandbox (cold host): $(( $(date +%s) - start ))s"

# No separate second deploy here: the cases below begin with two deploys of playbooks/deploy.yml with
# inventories/sandbox/hosts.yml on this host (test_good_config_passes_the_gate, then
# test_second_run_changes_nothing, which asserts rc 0 and changed=0); --durations shows what each deploy took.
# The serving role's gate cases (bad flag, start failure, NaN and random models, fallback chain) and the deploy
# faults that fit CI's time (bad inputs before any change, the port taken by another process) on this host. The
# cases marked `long` (crash after several deploys, SIGKILL/SIGINT during the gate, disk full, broken venv, check
# mode) run with `GPUHOST_ROLE_TEST_SANDBOX=1 python -m pytest -m long tests/integration/test_serving_role.py`.
start=$(date +%s)
GPUHOST_ROLE_TEST_SANDBOX=1 python -m pytest -q -p no:cacheprovider --durations=5 -m "serving_role and not long" \
  tests/integration/test_serving_role.py
echo "serving role cases: $(( $(date +%s) - start ))s"
