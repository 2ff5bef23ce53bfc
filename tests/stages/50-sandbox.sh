#!/usr/bin/env bash
# README command 1 end to end on a fresh sandbox host, then the serving role's cases on it (the first of them
# redeploys the same playbook and inventory: the second deploy, which must report changed=0).
set -euo pipefail
cd "$GPUHOST_ROOT"
export PATH=$GPUHOST_ROOT/.venv/bin:$PATH
trap 'make --no-print-directory sandbox-destroy >/dev/null 2>&1 || true' EXIT
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

# The regression gate with its defaults on the real engine: unchanged rerun passes, a 2x slowdown (SIGSTOP/SIGCONT
# duty cycle on the engine process) fails naming the metric.
start=$(date +%s)
GPUHOST_BENCH_SLOWDOWN_SANDBOX=1 python -m pytest -q -p no:cacheprovider -s tests/integration/test_serving_bench_slowdown.py
echo "slowdown gate: $(( $(date +%s) - start ))s"

# The tuning campaign (playbooks/tune.yml) on this host: check mode prints the plan with the parser's verdicts
# and changes nothing; then campaigns/sandbox-cpu-ci.yml end to end (a candidate that serves but loses, one the
# parser rejects, one that fails to start; rows, results.md/CSV/JSON/pareto.png, the served files byte-identical
# afterwards, the probes). The full campaign interrupted and resumed, and the adoption with the changed=0 deploy
# after it, are marked `long`: `-m long` on a quiet machine.
start=$(date +%s)
GPUHOST_ROLE_TEST_SANDBOX=1 python -m pytest -q -s -p no:cacheprovider -m "not long" tests/integration/test_tune_sandbox.py
echo "tuning campaign tests: $(( $(date +%s) - start ))s"
