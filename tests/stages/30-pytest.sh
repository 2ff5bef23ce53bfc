#!/usr/bin/env bash
# Unit and integration tests (real engine on loopback, SGLang 0.5.23's own parser, real test hosts).
set -euo pipefail
cd "$GPUHOST_ROOT"
export PATH=$GPUHOST_ROOT/.venv/bin:$PATH
# the serving role cases run in stage 50 on the sandbox host (one engine install instead of two)
python -m pytest -q -p no:cacheprovider -m "not serving_role and not long" tests/unit tests/integration
