#!/usr/bin/env bash
# ansible-test sanity, and ansible-test units collecting the unit tests: both need the collection under
# ansible_collections/gpuhost/sglang.
set -euo pipefail
cd "$GPUHOST_ROOT"
# ansible-test's own venv mode downloads a pip bootstrap from outside the package registries: use --local
# in a dedicated venv with the same pinned ansible-core, so its pinned sanity requirements stay apart.
# Reused when built from the same pins and it imports them (tests/fixtures/venv-cache.sh).
atv=$GPUHOST_ROOT/.cache/ansible-test-venv
bash tests/fixtures/venv-cache.sh "$atv" 'import ansible, ansible_test, pytest, xdist, pytest_mock, mock' \
  "$(grep '^ansible-core==' requirements/dev.txt)" pytest pytest-xdist pytest-mock mock
export PATH=$atv/bin:$PATH
# ansible-core 2.19's ansible-test bootstraps pip 24.2 into its per-test venvs.
rm -rf ~/.ansible/test/venv  # a half-deleted venv from an interrupted run breaks ansible-test
mkdir -p ~/.ansible/test/cache
cp tests/fixtures/get_pip_offline.py ~/.ansible/test/cache/get_pip_24_2.py
# GPUHOST_SANITY_DIR: a private work tree (several checkouts sharing one .cache must not share it).
work=${GPUHOST_SANITY_DIR:-$GPUHOST_ROOT/.cache/ansible-test}/ansible_collections/gpuhost/sglang
rm -rf "$work" && mkdir -p "$work"
# tracked + untracked-but-not-ignored files, as a clean clone would have them
git ls-files -co --exclude-standard -z | grep -zv '^collections/' | xargs -0 cp --parents -P -t "$work"
cd "$work"
git init -q . && git add -A >/dev/null 2>&1 || true
ansible-test sanity --local --python 3.11 --requirements --color no \
  --skip-test shebang --exclude tests/hosts/ --exclude tests/fixtures/ --exclude benchmarks/ 2>&1 | grep -vE "^(WARNING: Location|Processing|Installing|Successfully|Collecting|Downloading|  Downloading|Requirement|Looking|Using cached| +━)"
# The unit tests themselves run once, in stage 30 (pytest, whose venv also has aiohttp and the engine venv that
# ansible-test's skips); here ansible-test only collects them, which proves they load under its collection layout.
ansible-test units --local --python 3.11 --requirements --color no --collect-only 2>&1 | grep -vE "^( *<|WARNING: Location|Processing|Installing|Successfully|Collecting|Downloading|  Downloading|Requirement|Looking|Using cached| +━)"
