#!/usr/bin/env bash
# Unit and integration tests (real engine on loopback, SGLang 0.5.23's own parser, real test hosts).
set -euo pipefail
cd "$GPUHOST_ROOT"
export PATH=$GPUHOST_ROOT/.venv/bin:$PATH
# GPUHOST_PYTEST_WORKERS pytest-xdist workers (default 3 on CI's 2 cores: most of the time goes to waiting on
# ansible-playbook subprocesses, engines and test hosts). Each test file runs whole in one worker, the files
# that use test hosts one after the other (tests/conftest.py); a failure still prints its test id and
# traceback. GPUHOST_PYTEST_WORKERS=0 runs in this process, in order. Tests marked `timing` (latency baselines
# against reruns, wall-time bounds) run alone in 50-timing: the other workers' load made them fail (2026-12-01).
# 31-sandbox runs beside this stage (tests/run-all.sh).
workers=${GPUHOST_PYTEST_WORKERS:-3}
[[ "$workers" =~ ^[0-9]+$ ]] || { echo "GPUHOST_PYTEST_WORKERS=$workers is invalid: allowed values are integers >= 0"; exit 1; }
par=()
[ "$workers" -eq 0 ] || par=(-n "$workers" --dist loadgroup)
# the serving role cases run in 31-sandbox on the sandbox host (one engine install instead of two)
sel="not serving_role and not long and not timing"
# the GPU unit test files run once, in stage 35-gpu (with torch, for the gloo plumbing test): tests/stages/gpu-tests
ignore=()
while read -r f; do ignore+=(--ignore "$f"); done < <(grep -v '^#' tests/stages/gpu-tests | grep .)
# --durations: the slowest tests in the log (tests/stages/pytest-seconds orders the files by them)
exec python -m pytest -q -p no:cacheprovider --durations=20 "${par[@]}" "${ignore[@]}" -m "$sel" tests/unit tests/integration
