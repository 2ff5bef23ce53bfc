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
# GPUHOST_MOLECULE_ONLY="a b": run just those scenarios (development; CI runs all)
if [ -n "${GPUHOST_MOLECULE_ONLY:-}" ]; then
  for s in $GPUHOST_MOLECULE_ONLY; do
    [ -f "molecule/$s/molecule.yml" ] || { echo "GPUHOST_MOLECULE_ONLY names $s: allowed values are ${scenarios[*]}"; exit 1; }
  done
  read -r -a scenarios <<<"$GPUHOST_MOLECULE_ONLY"
fi
[ ${#scenarios[@]} -gt 0 ] || { echo "no molecule scenarios found"; exit 1; }
# Longest first (tests/stages/molecule-seconds: each scenario's measured seconds): with two at a time, a long
# scenario started last kept one slot busy alone at the end (2026-12-03: sglang, 133 s, started ninth of eleven).
# A scenario without a figure starts first (a new one may be long); the order changes nothing else.
seconds_file=tests/stages/molecule-seconds
mapfile -t scenarios < <(for s in "${scenarios[@]}"; do
  secs=$(awk -v s="$s" '$1 == s && $2 ~ /^[0-9]+$/ {print $2}' "$seconds_file" 2>/dev/null | tail -n 1)
  printf '%s %s\n' "${secs:-999999}" "$s"
done | sort -k1,1nr -k2,2 | cut -d' ' -f2)
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
# GPUHOST_MOLECULE_JOBS scenarios at a time (default 2): each has its own hosts, state and log, and
# testhost.py allocates subnets under a lock, so they cannot collide; a 2-core CI box spends most of a
# scenario waiting on dpkg, systemd boots and SSH round trips. Results are reported in the order started.
jobs=${GPUHOST_MOLECULE_JOBS:-2}
[[ "$jobs" =~ ^[1-9][0-9]*$ ]] || { echo "GPUHOST_MOLECULE_JOBS=$jobs is invalid: allowed values are integers >= 1"; exit 1; }
run_one() {  # scenario -> writes $logs/$1.rc and $logs/$1.secs
  local s=$1 start rc=0
  start=$(date +%s)
  if [ -n "${invalid[$s]:-}" ]; then
    echo "molecule/$s/molecule.yml: ${invalid[$s]}" >"$logs/$s.log"; rc=1
  else
    molecule test -s "$s" >"$logs/$s.log" 2>&1 || rc=$?
  fi
  echo $(( $(date +%s) - start )) >"$logs/$s.secs"
  echo "$rc" >"$logs/$s.rc"
}
rm -f "$logs"/*.rc "$logs"/*.secs
stage_start=$(date +%s)
for s in "${scenarios[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
  echo "--- molecule test -s $s (log: $logs/$s.log)"
  run_one "$s" &
done
wait || true
failed=()
summary=()
for s in "${scenarios[@]}"; do
  rc=$(cat "$logs/$s.rc" 2>/dev/null || echo 1)
  if [ "$rc" = 0 ]; then result=ok; else
    result=FAILED; failed+=("$s")
    echo "=== $s FAILED (rc=$rc), last lines of $logs/$s.log:"; tail -n 80 "$logs/$s.log"
  fi
  summary+=("$(printf '%-28s %-7s %4ss' "$s" "$result" "$(cat "$logs/$s.secs" 2>/dev/null || echo '?')")")
done
echo "--- molecule summary ($jobs at a time; stage wall $(( $(date +%s) - stage_start ))s)"
printf '%s\n' "${summary[@]}"
if [ ${#failed[@]} -gt 0 ]; then
  echo "failed scenarios: ${failed[*]}"
  exit 1
fi
