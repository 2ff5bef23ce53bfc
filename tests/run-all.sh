#!/usr/bin/env bash
# Runs every gate of the collection in order: each tests/stages/NN-*.sh is one stage.
# Usage: tests/run-all.sh [STAGE_GLOB]   (e.g. tests/run-all.sh '3*' to run the pytest stage only)
set -uo pipefail
cd "$(dirname "$0")/.."
export GPUHOST_ROOT=$PWD
glob=${1:-*}
passed=0; failed=0; failed_names=()
declare -a timings=()
for stage in tests/stages/${glob}.sh; do
  [ -e "$stage" ] || continue
  name=$(basename "$stage" .sh)
  echo "=================== stage $name ==================="
  start=$(date +%s)
  if bash "$stage"; then
    passed=$((passed + 1)); result=ok
  else
    failed=$((failed + 1)); failed_names+=("$name"); result=FAILED
    # Setup failures make every later stage meaningless.
    case "$name" in 00-*) echo "setup failed: stopping"; break ;; esac
  fi
  timings+=("$(printf '%-28s %-7s %5ss' "$name" "$result" "$(( $(date +%s) - start ))")")
done
echo "=================== summary ==================="
printf '%s\n' "${timings[@]}"
[ "$failed" -eq 0 ] || echo "failed stages: ${failed_names[*]}"
echo "stages: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
