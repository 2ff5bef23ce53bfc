#!/usr/bin/env bash
# The gates that measure time, alone on the machine (nothing runs beside this stage): the tests marked `timing`
# (latency baselines against reruns, wall-time bounds: the other pytest workers' load made them fail, 2026-12-01),
# then the regression gate and the tuning campaign on the sandbox host that 31-sandbox deployed (made here when this
# stage runs without it). The sandbox is destroyed at the end.
set -euo pipefail
cd "$GPUHOST_ROOT"
export PATH=$GPUHOST_ROOT/.venv/bin:$PATH
rc=0
# (the GPU unit test files of stage 35 have no test marked timing: nothing of them is selected here)
start=$(date +%s)
python -m pytest -q -p no:cacheprovider --durations=10 -m "not serving_role and not long and timing" \
  tests/unit tests/integration || rc=$?
echo "tests marked timing: $(( $(date +%s) - start ))s"

trap 'make --no-print-directory sandbox-destroy >/dev/null 2>&1 || true' EXIT
# `create` is idempotent (a running host only prints its JSON); a host whose engine does not listen is deployed
make --no-print-directory sandbox-host >/dev/null
if ! timeout 5 bash -c '</dev/tcp/10.231.200.2/30000' 2>/dev/null; then
  echo "no engine on the sandbox host (31-sandbox did not run here): deploying it"
  make --no-print-directory sandbox-deploy
fi

# The regression gate with its defaults on the real engine: unchanged rerun passes, a 2x slowdown (SIGSTOP/SIGCONT
# duty cycle on the engine process) fails naming the metric.
start=$(date +%s)
GPUHOST_BENCH_SLOWDOWN_SANDBOX=1 python -m pytest -q -p no:cacheprovider -s tests/integration/test_serving_bench_slowdown.py || rc=$?
echo "slowdown gate: $(( $(date +%s) - start ))s"

# The tuning campaign (playbooks/tune.yml) on this host: check mode prints the plan with the parser's verdicts
# and changes nothing; then campaigns/sandbox-cpu-ci.yml end to end (a candidate that serves but loses, one the
# parser rejects, one that fails to start; rows, results.md/CSV/JSON/pareto.png, the served files byte-identical
# afterwards, the probes). The full campaign interrupted and resumed, and the adoption with the changed=0 deploy
# after it, are marked `long`: `-m long` on a quiet machine.
start=$(date +%s)
GPUHOST_ROLE_TEST_SANDBOX=1 python -m pytest -q -s -p no:cacheprovider -m "not long" tests/integration/test_tune_sandbox.py || rc=$?
echo "tuning campaign tests: $(( $(date +%s) - start ))s"
exit "$rc"
