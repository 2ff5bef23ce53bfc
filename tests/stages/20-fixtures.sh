#!/usr/bin/env bash
# Fixtures the later stages need, cached under .cache/: engine wheelhouse + venv, tiny model, SGLang's parser venv.
set -euo pipefail
cd "$GPUHOST_ROOT"
export PATH=$GPUHOST_ROOT/.venv/bin:$PATH
make --no-print-directory fixtures
bash tests/fixtures/sglang-venv.sh
