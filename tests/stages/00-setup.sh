#!/usr/bin/env bash
# Controller toolchain: Debian packages and the pinned Python venv.
set -euo pipefail
cd "$GPUHOST_ROOT"
make --no-print-directory setup
