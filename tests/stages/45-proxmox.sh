#!/usr/bin/env bash
# Proxmox/bare-metal layer gates not covered by the generic stages (units run in 30-pytest, the
# molecule/proxmox_* scenarios in 40-molecule):
#   1. playbooks/host.yml and playbooks/rebuild.yml syntax-check against both inventories
#   2. a REAL LXC container booted from the generated devN entries sees the GPU nodes
#      (tests/fixtures/pve-standins/lxc-device-check.sh), needs Debian's lxc package
set -euo pipefail
cd "$GPUHOST_ROOT"
export PATH=$GPUHOST_ROOT/.venv/bin:$PATH
export ANSIBLE_CONFIG=$GPUHOST_ROOT/ansible.cfg

if ! dpkg-query -W -f='${Status}\n' lxc 2>/dev/null | grep -q '^install ok installed'; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq lxc >/dev/null
fi

for inv in inventories/sandbox inventories/production; do
  for pb in playbooks/host.yml playbooks/rebuild.yml; do
    echo "--- syntax-check $pb -i $inv"
    ansible-playbook --syntax-check -i "$inv" "$pb" >/dev/null
  done
done

echo "--- real LXC container from the generated devN entries"
bash tests/fixtures/pve-standins/lxc-device-check.sh
