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

# The link probe's gloo plumbing test needs torch: the engine venv's (torch==2.13.0+cpu; tests/fixtures/engine-venv.sh,
# built by stage 20 and reused when the hash of its requirements matches and it imports torch), put AFTER the
# controller venv's packages on the path, so that only what the controller venv lacks (torch and its own
# dependencies) comes from it. No separate torch install for this stage.
bash tests/fixtures/engine-venv.sh
site=$("$GPUHOST_ROOT/.cache/engine-venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')

python -m py_compile benchmarks/gpu/gpu_check.py benchmarks/gpu/gpu_health.py benchmarks/gpu/gpu_utils.py benchmarks/gpu/independent.py
# The GPU unit test files (tests/stages/gpu-tests; stage 30 leaves them out), in one run.
mapfile -t gpu_tests < <(grep -v '^#' tests/stages/gpu-tests | grep .)
junit=$(mktemp)
trap 'rm -f "$junit"' EXIT
python -c 'import sys; sys.path.append(sys.argv[1]); import pytest; sys.exit(pytest.main(sys.argv[2:]))' "$site" \
  -q -p no:cacheprovider -rs --junitxml="$junit" "${gpu_tests[@]}"
# the plumbing test must have run and passed, not been skipped or deselected (read from that run's report)
python - "$junit" <<'PY'
import sys
import xml.etree.ElementTree as ET
cases = [c for c in ET.parse(sys.argv[1]).iter("testcase") if "gloo" in c.get("name", "")]
bad = [c.get("name") for c in cases if any(child.tag in ("skipped", "failure", "error") for child in c)]
if not cases or bad:
    sys.exit("gloo all-reduce plumbing test did not run: %s" % (bad or "not collected"))
print("gloo all-reduce plumbing: %d passed" % len(cases))
PY
