#!/usr/bin/env bash
# Molecule: every scenario in molecule/*/ runs `molecule test` on its own real test host
# (tests/hosts/testhost.py); a failure is attributed to its scenario; hosts are always destroyed.
set -euo pipefail
cd "$GPUHOST_ROOT"
export PATH=$GPUHOST_ROOT/.venv/bin:$PATH
export ANSIBLE_NOCOLOR=1 NO_COLOR=1 PY_COLORS=0

# Controller packages the test hosts need (idempotent; `make setup` normally installed them already).
need=(debootstrap systemd-container zstd iproute2 openssh-client)
missing=()
for p in "${need[@]}"; do
  dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# The cached rootfs under /var/cache/gpuhost-testhosts (debootstrap once, then reused).
start=$(date +%s)
python3 tests/hosts/testhost.py prepare
echo "prepare: $(( $(date +%s) - start ))s"

mapfile -t scenarios < <(for f in molecule/*/molecule.yml; do basename "$(dirname "$f")"; done)
[ ${#scenarios[@]} -gt 0 ] || { echo "no molecule scenarios found"; exit 1; }
# Host names of every scenario (to destroy exactly those, never the sandbox's host).
mapfile -t hosts < <(python3 - "${scenarios[@]}" <<'PY'
import sys, yaml
for s in sys.argv[1:]:
    for p in (yaml.safe_load(open(f"molecule/{s}/molecule.yml")) or {}).get("platforms", []):
        print(p["name"])
PY
)
dups=$(printf '%s\n' "${hosts[@]}" | sort | uniq -d)
[ -z "$dups" ] || { echo "host names used by more than one scenario: $dups"; exit 1; }
cleanup() { [ ${#hosts[@]} -eq 0 ] || python3 tests/hosts/testhost.py destroy "${hosts[@]}" >/dev/null 2>&1 || true; }
trap cleanup EXIT

logs=tests/output/molecule
mkdir -p "$logs"
failed=()
summary=()
for s in "${scenarios[@]}"; do
  echo "--- molecule test -s $s (log: $logs/$s.log)"
  start=$(date +%s)
  if molecule test -s "$s" >"$logs/$s.log" 2>&1; then
    result=ok
  else
    result=FAILED; failed+=("$s")
    tail -n 80 "$logs/$s.log"
  fi
  summary+=("$(printf '%-28s %-7s %4ss' "$s" "$result" "$(( $(date +%s) - start ))")")
done
echo "--- molecule summary"
printf '%s\n' "${summary[@]}"
if [ ${#failed[@]} -gt 0 ]; then
  echo "failed scenarios: ${failed[*]}"
  exit 1
fi
