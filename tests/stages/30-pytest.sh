#!/usr/bin/env bash
# Unit and integration tests (real engine on loopback, SGLang 0.5.23's own parser, real test hosts).
set -euo pipefail
cd "$GPUHOST_ROOT"
export PATH=$GPUHOST_ROOT/.venv/bin:$PATH
python -m pytest -q -p no:cacheprovider tests/unit tests/integration
