#!/usr/bin/env bash
# Fixtures the later stages need, cached under .cache/: engine wheelhouse + venv, tiny model, SGLang's parser venvs (0.5.23, the pinned release; 0.5.17, the one run on the H200).
# make fixtures-parser-venvs runs the steps that need nothing of each other side by side (the parser venvs link the
# engine venv's torch, so they start after it, beside the tiny model) and prints each step's wall time
# ("fixtures: STEP Ns"): on a clean clone (CI) every one is built, later runs reuse them.
set -euo pipefail
cd "$GPUHOST_ROOT"
export PATH=$GPUHOST_ROOT/.venv/bin:$PATH
make --no-print-directory fixtures-parser-venvs
