#!/usr/bin/env bash
# The day-one GPU read on a real machine: the collection's gpu_facts module run by the machine's system python3 the way
# Ansible runs a module (its arguments in a JSON file), once as the machine is and once with pynvml hidden, which is
# what a fresh Proxmox VE host presents (no nvidia-ml-py in the system Python: shared/research real-box-review-3, F1).
#   OUT=$OUT bash benchmarks/gpu/day_one_facts.sh      (carry .device: Ansible's module_utils, device.sh ansible-zip)
# Writes $OUT/day-one-facts-{nvml,no-nvml}.json (the module's result) and .err (its stderr).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:?set OUT}
mkdir -p "$OUT"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/hide"
# an import that fails the way a missing package does (the module catches ImportError)
echo 'raise ImportError("No module named pynvml (hidden by day_one_facts.sh)")' >"$tmp/hide/pynvml.py"
echo '{"ANSIBLE_MODULE_ARGS": {"gpu_arch": "auto"}}' >"$tmp/args.json"
path=$ROOT/collections:$ROOT/.device/ansible-module-utils.zip
for mode in nvml no-nvml; do
  hide=
  [ "$mode" = no-nvml ] && hide=$tmp/hide:
  PYTHONPATH=$hide$path python3 "$ROOT/plugins/modules/gpu_facts.py" "$tmp/args.json" \
    >"$OUT/day-one-facts-$mode.json" 2>"$OUT/day-one-facts-$mode.err"
  echo "gpu_facts ($mode): rc $?, $(wc -c <"$OUT/day-one-facts-$mode.json") bytes"
done
