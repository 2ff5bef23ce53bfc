#!/usr/bin/env bash
# Build, from the package index, the minimal SGLang 0.5.17 install for the lent H200 machine and pack it with the
# tiny model into parts that each fit one device run (64 MiB travels a run).
#   bash benchmarks/gpu/sglang/build_bundle.sh [OUTDIR]     (default .bundle/, which .git/info/exclude should ignore)
# Steps (each timed into OUTDIR/build.log):
# 1. pip download, no dependencies, for CPython 3.12 manylinux x86-64 (sglang 0.5.17 ships a manylinux_2_34 wheel);
# 2. pip install --target (no index, no deps) for that platform, whatever Python runs here;
# 3. trim the kernel package to what SM90 with --attention-backend triton loads: sgl_kernel loads
#    sm90/common_ops.abi3.so on compute capability 9.0; flash_ops (FA3, 1.12 GB), flashmla_ops, infllm_ops and
#    sm100/ load lazily and are removed (so no fa3 attention backend: the runner records that failure);
# 4. the tiny model's good copy (tests/fixtures/tinymodel.sh builds it when absent);
# 5. tar | xz, split into PART_MB (40) MiB parts: OUTDIR/parts/bundle.tar.xz.00, .01, ...
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
OUT=${1:-$ROOT/.bundle}
HERE=$ROOT/benchmarks/gpu/sglang
mkdir -p "$OUT/whl" "$OUT/parts"
log=$OUT/build.log
: >"$log"
step() { local name=$1; shift; local t0; t0=$(date +%s.%N); "$@" >>"$log" 2>&1; echo "$name $(echo "$(date +%s.%N) - $t0" | bc) s" | tee -a "$log"; }
PLAT=(--python-version 3.12 --implementation cp --abi cp312 --abi abi3 --abi none --only-binary=:all:
      --platform manylinux_2_34_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_5_x86_64
      --platform manylinux1_x86_64 --platform any)
step download python3 -m pip download --no-deps "${PLAT[@]}" -d "$OUT/whl" -r "$HERE/requirements-0.5.17.txt"
rm -rf "$OUT/stage" && mkdir -p "$OUT/stage"
step install python3 -m pip install -q --no-index --no-deps --no-compile --target "$OUT/stage/site" "${PLAT[@]}" \
  "$OUT"/whl/*.whl
trim() {
  local k=$OUT/stage/site/sgl_kernel
  rm -rf "$k"/flash_ops.abi3.so "$k"/flashmla_ops.abi3.so "$k"/infllm_ops*.so "$k"/sm100
  rm -rf "$OUT"/stage/site/bin
  du -sh "$OUT/stage/site" "$k"
}
step trim trim
model() {
  local src=${GPUHOST_TINYMODEL:-$ROOT/.cache/tinymodel}
  if [ "${BUNDLE_MODEL:-1}" = 0 ]; then mkdir -p "$OUT/stage/model"; return; fi  # BUNDLE_MODEL=0: no model
  [ -f "$src/good/config.json" ] || bash "$ROOT/tests/fixtures/tinymodel.sh"
  cp -r "$src/good" "$OUT/stage/model"
}
step model model
pack() {
  rm -f "$OUT"/parts/*
  tar -C "$OUT/stage" -cf - site model | xz -T0 "-${XZ_LEVEL:-1}" | split -b "${PART_MB:-40}M" -d - "$OUT/parts/bundle.tar.xz."
  ls -l "$OUT/parts"
}
step pack pack
cat "$OUT"/parts/* | sha256sum | tee "$OUT/parts.sha256"
