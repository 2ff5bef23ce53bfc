#!/usr/bin/env bash
# Fixtures the later stages need, cached under .cache/: engine wheelhouse + venv, tiny model, SGLang's parser venvs (0.5.23, the pinned release; 0.5.17, the one run on the H200).
set -euo pipefail
cd "$GPUHOST_ROOT"
export PATH=$GPUHOST_ROOT/.venv/bin:$PATH
make --no-print-directory fixtures
bash tests/fixtures/sglang-venv.sh
SGLANG_VERSION=0.5.17 bash tests/fixtures/sglang-venv.sh
