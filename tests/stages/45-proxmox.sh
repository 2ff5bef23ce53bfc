#!/usr/bin/env bash
# Proxmox/bare-metal layer gates not covered by the generic stages (units run in 30-pytest, the
# molecule/proxmox_* scenarios in 40-molecule, the syntax-check of every playbook against both inventories in
# 30-pytest: tests/integration/test_production_inventory.py::test_syntax_check):
#   a REAL LXC container booted from the generated devN entries sees the GPU nodes
#   (tests/fixtures/pve-standins/lxc-device-check.sh), needs Debian's lxc package
set -euo pipefail
cd "$GPUHOST_ROOT"
export PATH=$GPUHOST_ROOT/.venv/bin:$PATH
export ANSIBLE_CONFIG=$GPUHOST_ROOT/ansible.cfg

if ! dpkg-query -W -f='${Status}\n' lxc 2>/dev/null | grep -q '^install ok installed'; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq lxc >/dev/null
fi

echo "--- real LXC container from the generated devN entries"
bash tests/fixtures/pve-standins/lxc-device-check.sh
