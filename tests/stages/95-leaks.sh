#!/usr/bin/env bash
# Last stage: every leftover of the test hosts (netns, veths, overlay mounts, nspawn processes,
# cgroup dirs, nspawn propagate dirs, state dirs), for the default tag (gh: molecule, sandbox)
# and the integration tests' tags (it, ir, iu, tt). Fails if anything is left.
set -euo pipefail
cd "$GPUHOST_ROOT"
export PATH=$GPUHOST_ROOT/.venv/bin:$PATH
rc=0
for tag in gh it ir iu tt im; do
  GPUHOST_TESTHOST_TAG=$tag python3 tests/hosts/testhost.py leaks || rc=1
done
if [ "$rc" -ne 0 ]; then
  echo "leftovers found: clean up with 'make clean-hosts' (and GPUHOST_TESTHOST_TAG=it python3 tests/hosts/testhost.py destroy --all)"
fi
exit "$rc"
