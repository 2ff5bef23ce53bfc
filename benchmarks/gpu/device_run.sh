#!/usr/bin/env bash
# One batched run on a real GPU box (the lent H200 machines; no network needed there). One GPU or more:
# with one, the P2P pairs are absent, the all-reduce runs with one rank (compared on algbw), and
# gpu_link_probe must refuse with its "at least two distinct GPU indices" message.
#   OUT=/some/dir [WHL=.whl] bash benchmarks/gpu/device_run.sh
# 1. environment snapshot (nvidia-smi, topo, versions)
# 2. gpu_check.py: gpu_facts logic vs nvidia-smi field by field; gpu_link_probe logic vs independent.py (5%)
# 3. optional (when .whl/ holds ansible-core and its deps): the real modules through ansible, including a
#    deliberately impossible threshold to show the failure table on real hardware.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:?set OUT to an output folder}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
{
  date -u; uname -r; nvidia-smi; nvidia-smi topo -m; nvidia-smi nvlink -s
  python3 -c 'import torch, pynvml; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version(), "gpus", torch.cuda.device_count())'
  python3 -m pip show nvidia-ml-py cupy-cuda13x 2>/dev/null | grep -E '^(Name|Version)'
} >"$OUT/env.txt" 2>&1
python3 benchmarks/gpu/gpu_check.py --out "$OUT" 2>&1 | tee "$OUT/gpu_check.txt"
check_rc=${PIPESTATUS[0]}
echo "gpu_check rc=$check_rc"

WHL=${WHL:-.whl}
NGPU=$(nvidia-smi -L | grep -c '^GPU ')
if ls "$WHL"/ansible_core-*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$WHL"/*.whl &&
  export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH
  export ANSIBLE_CONFIG=$PWD/ansible.cfg ANSIBLE_LOCALHOST_WARNING=0 ANSIBLE_INVENTORY_UNPARSED_WARNING=0
  PY=$(command -v python3)
  {
    echo "### ansible --version"; ansible --version
    echo "### gpu_facts through ansible"
    ansible localhost -i localhost, -c local -e ansible_python_interpreter="$PY" -m gpuhost.sglang.gpu_facts -a "require_gpus=true min_gpus=$NGPU"
    echo "rc=$?"
    [ "$NGPU" -lt 2 ] && echo "### one GPU: gpu_link_probe must refuse (at least two distinct GPU indices)"
    echo "### gpu_link_probe through ansible (default thresholds)"
    ansible localhost -i localhost, -c local -e ansible_python_interpreter="$PY" -m gpuhost.sglang.gpu_link_probe \
      -a '{"p2p_size_mb": 1024}'
    echo "rc=$?"
    echo "### gpu_link_probe through ansible with an impossible floor (must FAIL with a table)"
    ansible localhost -i localhost, -c local -e ansible_python_interpreter="$PY" -m gpuhost.sglang.gpu_link_probe \
      -a '{"measure": ["p2p"], "min_p2p_gbps": 5000, "p2p_size_mb": 256}'
    echo "rc=$?"
    if [ "$NGPU" -lt 2 ]; then
      echo "### playbooks/gpu.yml --tags nccl (one GPU: the nccl role from the real facts)"
      ansible-playbook -i localhost, -c local -e ansible_python_interpreter="$PY" playbooks/gpu.yml --tags nccl
      echo "rc=$?"
      echo "### playbooks/gpu.yml --tags probe (one GPU: must fail at min_gpus 2, naming the count)"
      ansible-playbook -i localhost, -c local -e ansible_python_interpreter="$PY" playbooks/gpu.yml --tags probe
      echo "rc=$?"
    else
      echo "### playbooks/gpu.yml --tags nccl,probe (nccl role from the real facts, then the probe)"
      ansible-playbook -i localhost, -c local -e ansible_python_interpreter="$PY" playbooks/gpu.yml --tags nccl,probe
      echo "rc=$?"
    fi
    echo "### /etc/nccl.conf"; cat /etc/nccl.conf
    echo "### /etc/gpuhost/nccl.env"; cat /etc/gpuhost/nccl.env
  } >"$OUT/ansible.txt" 2>&1
  tail -c 6000 "$OUT/ansible.txt"
fi
exit "$check_rc"
