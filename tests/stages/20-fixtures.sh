#!/usr/bin/env bash
# Fixtures the later stages need, cached under .cache/: engine wheelhouse + venv, tiny model, SGLang's parser venvs (0.5.23, the pinned release; 0.5.17, the one run on the H200).
# Each step's wall time is printed ("fixtures: STEP Ns"): on a clean clone (CI) every one is built, later runs reuse them.
set -euo pipefail
cd "$GPUHOST_ROOT"
export PATH=$GPUHOST_ROOT/.venv/bin:$PATH
step() {  # NAME COMMAND...
  local name=$1 t0
  shift
  t0=$(date +%s)
  "$@"
  echo "fixtures: $name $(( $(date +%s) - t0 ))s"
}
step make-fixtures make --no-print-directory fixtures
# after the engine venv: the parser venvs link its torch (tests/fixtures/sglang-venv.sh)
step sglang-venv-0.5.23 bash tests/fixtures/sglang-venv.sh
step sglang-venv-0.5.17 env SGLANG_VERSION=0.5.17 bash tests/fixtures/sglang-venv.sh
