#!/usr/bin/env bash
# GPU stack gates that run without a GPU: the stand-in NVIDIA apt repository builds (it is what the
# nvidia_driver molecule scenario installs from), the GPU unit tests, and the link probe's real
# multi-process all-reduce plumbing on CPUs (torch gloo backend, one process per rank).
# The real-GPU check is benchmarks/gpu/device_run.sh (needs GPUs; results in docs/gpu-stack.md).
set -euo pipefail
cd "$GPUHOST_ROOT"
export PATH=$GPUHOST_ROOT/.venv/bin:$PATH

missing=()
for p in dpkg-dev gpg; do
  dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
bash tests/fixtures/nvidia-apt-repo.sh

# A CPU-only torch for the probe's process plumbing, kept apart from the controller venv; reused when built from
# the same pins and it imports them (tests/fixtures/venv-cache.sh).
tv=$GPUHOST_ROOT/.cache/gpu-torch-venv
if [ ! -f "$tv/.installed" ]; then
  rm -rf "$tv"
  python3 -m venv "$tv"
  "$tv/bin/pip" install -q "torch==2.13.0+cpu" numpy
  touch "$tv/.installed"
fi
site=$("$tv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')

python -m py_compile benchmarks/gpu/gpu_check.py benchmarks/gpu/independent.py
PYTHONPATH=$site python -m pytest -q -p no:cacheprovider -rs \
  tests/unit/plugins/module_utils/gpu/test_nvml_facts.py tests/unit/plugins/module_utils/gpu/test_link_probe.py \
  tests/unit/plugins/module_utils/gpu/test_nccl.py tests/unit/plugins/module_utils/gpu/test_pci_arch.py \
  tests/unit/plugins/modules/test_gpu_facts.py tests/unit/plugins/modules/test_gpu_link_probe.py
# the plumbing test must have run, not been skipped
out=$(PYTHONPATH=$site python -m pytest -q -p no:cacheprovider tests/unit/plugins/module_utils/gpu/test_link_probe.py -k gloo 2>&1)
echo "$out" | tail -1
case "$out" in *"1 passed"*) ;; *) echo "gloo all-reduce plumbing test did not run" >&2; exit 1 ;; esac
