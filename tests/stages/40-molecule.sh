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
# Check each molecule.yml against the pitfalls of molecule/README.md (a bad one fails as its own
# scenario) and collect every scenario's host names (to destroy exactly those at the end, never
# the sandbox's host).
check=$(python3 - "${scenarios[@]}" <<'PY' 2>/dev/null
import os, re, sys, yaml
from molecule import config
base = ".config/molecule/config.yml"
for s in sys.argv[1:]:
    bad, names = [], []
    path = f"molecule/{s}/molecule.yml"
    try:
        cfg = yaml.safe_load(open(path)) or {}
        # The effective config, merged by molecule itself (base config + molecule.yml + legacy-key migration).
        eff = config.Config(path, args={"base_config": [base]}, command_args={"subcommand": "test"})
        for step in ("create", "destroy"):
            got = getattr(eff.provisioner.playbooks, step)
            if got != os.path.abspath(f"molecule/resources/{step}.yml"):
                bad.append(f"the {step} playbook resolves to {got!r}, not molecule/resources/{step}.yml: a legacy "
                           "provisioner.playbooks replaces the shared ansible.playbooks (see molecule/README.md)")
        env = eff.config_data["ansible"]["env"]
        for var in ("ANSIBLE_COLLECTIONS_PATH", "ANSIBLE_ROLES_PATH"):
            if var not in env:
                bad.append(f"ansible.env lost {var}: a legacy provisioner.env replaces the shared ansible.env "
                           "(see molecule/README.md)")
    except (OSError, yaml.YAMLError, SystemExit, Exception) as exc:  # molecule exits on schema errors
        cfg, bad = {}, bad + [f"invalid: {type(exc).__name__} {exc}".replace("\n", " ")]
    platforms = cfg.get("platforms") or []
    if not platforms:
        bad.append("no platforms: name the scenario's test host (see molecule/README.md)")
    for p in platforms:
        name = str(p.get("name", ""))
        if re.fullmatch(r"[a-z][a-z0-9-]{0,11}", name):
            names.append(name)
        else:
            bad.append(f"platform name {name!r} is invalid: allowed values match [a-z][a-z0-9-]{{0,11}}")
    print(s, "BAD" if bad else "OK", "; ".join(bad) if bad else " ".join(names), sep="\t")
PY
)
declare -A invalid=()
hosts=()
while IFS=$'\t' read -r s status rest; do
  if [ "$status" = OK ]; then read -r -a h <<<"$rest"; hosts+=("${h[@]}"); else invalid[$s]=$rest; fi
done <<<"$check"
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
  if [ -n "${invalid[$s]:-}" ]; then
    result=FAILED; failed+=("$s")
    echo "molecule/$s/molecule.yml: ${invalid[$s]}" | tee "$logs/$s.log"
  elif molecule test -s "$s" >"$logs/$s.log" 2>&1; then
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
