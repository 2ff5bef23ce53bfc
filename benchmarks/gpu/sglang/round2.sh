#!/usr/bin/env bash
# The H200 round 2 in one command, repeated call after call on the lent machine (docs/bench.md, "Round 2 on the H200:
# the plan"): every call does the next steps that fit in its time, and says what is left.
#   OUT=$OUT bash benchmarks/gpu/sglang/round2.sh [next]     (default) the steps below not yet done on this machine
#   OUT=$OUT bash benchmarks/gpu/sglang/round2.sh STEP...    those steps only, in the order given
#   bash benchmarks/gpu/sglang/round2.sh split [BUNDLE]      HERE, before: one folder a call, BUNDLE/p00, p01, ...
#                                                            (each a part and parts.sha256; default .bundle)
# Steps, in order, each with the seconds it is expected to take (unverified until run; ROUND2_SKIP=a,b skips steps
# whose files a previous session brought back; ROUND2_MODEL_ARGS: gpubound_model.py's arguments, e.g. "--layers 48"):
#   host        benchmarks/gpu/host_read.py: the day-one host read (sysfs, nvidia-smi, NVML)             60
#   model       the bundle staged and unpacked, then gpubound_model.py: the GPU-bound model, built once    450
#   start       device.sh start with LAUNCH=gpubound, until /health answers                              330
#   sidebyside  gap.py --plan gpubound: ours against bench_serving, c = 1, 16, 64, 256                   300
#   tune        device.sh stop, then tune.py campaigns/h200-gpubound.yml: the FP8 KV cache against bf16
#               (the accuracy gate, both checks) first, then four speed candidates; a call cut off resumes
#               on the next one (from /tmp, or on a fresh machine from ROUND2_RESTAGE)                    540
# Each call stages the bundle parts it carries (carry .bundle/pNN: one part a call, the device's 64 MiB limit); the
# model step waits until every part of parts.sha256 is there. Files left in /tmp last only while the machine stays
# up: on a fresh machine the steps start again from the staging (the tune state from --restage: ROUND2_RESTAGE).
# Every step's files go to $OUT/<step>.tar.xz (a call brings back at most 8 files), this call's log to
# $OUT/round2.log. No step starts that would end after ROUND2_BUDGET_S (560) seconds of the call.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
HERE=$ROOT/benchmarks/gpu/sglang
STEPS=(host model start sidebyside tune)
declare -A EST=([host]=60 [model]=450 [start]=330 [sidebyside]=300 [tune]=540)
if [ "${1:-}" = split ]; then
  B=${2:-$ROOT/.bundle}
  [ -f "$B/parts.sha256" ] || { echo "split: no $B/parts.sha256 (run benchmarks/gpu/sglang/build_bundle.sh first)" >&2; exit 2; }
  # a bundle git does not ignore would travel whole with the checkout on every call (64 MiB at most)
  case $(realpath "$B") in
    "$ROOT"/*) git -C "$ROOT" check-ignore -q "$B/parts.sha256" ||
      { echo "split: $B is not ignored by git: echo /${B#"$ROOT"/}/ >> .git/info/exclude first" >&2; exit 2; } ;;
  esac
  for part in "$B"/parts/bundle.tar.xz.*; do
    d=$B/p${part##*.}
    mkdir -p "$d" && ln -f "$part" "$d/" && cp "$B/parts.sha256" "$d/" && du -sh "$d"
  done
  exit 0
fi
OUT=${OUT:?set OUT}
W=${SGLANG_WORKDIR:-/tmp/sglang}
R=$W/round2
BUDGET=${ROUND2_BUDGET_S:-560}
PORT=${PORT:-30000}
MODEL=$W/model-gpubound
BUNDLE=${ROUND2_BUNDLE:-$ROOT/.bundle}
mkdir -p "$OUT" "$R/done" "$W/parts"
T0=$(date +%s)
log() { echo "$(date -u +%FT%TZ) [$(($(date +%s) - T0)) s] $*" | tee -a "$OUT/round2.log"; }
left() { echo $((BUDGET - ($(date +%s) - T0))); }
pack() {  # a step's folder into $OUT/<step>.tar.xz
  tar -C "$R" -cJf "$OUT/$1.tar.xz" "$1" && log "$1: $(du -h "$OUT/$1.tar.xz" | cut -f1) packed"
}
stage() {  # the parts this call carries (.bundle/pNN), then whether all of parts.sha256's are there
  for d in "$BUNDLE"/p[0-9]*; do
    [ -d "$d" ] || continue
    cp -n "$d"/bundle.tar.xz.* "$W/parts/" 2>/dev/null; cp "$d/parts.sha256" "$W/parts.sha256"
    log "staged $(basename "$d")"
  done
  [ -f "$W/parts.sha256" ] || { log "no bundle part staged yet (carry .bundle/p00, then p01, ...)"; return 1; }
  [ "$(cat "$W"/parts/bundle.tar.xz.* | sha256sum | cut -d' ' -f1)" = "$(cut -d' ' -f1 "$W/parts.sha256")" ] ||
    { log "the bundle is incomplete: $(ls "$W/parts" | tr '\n' ' ')(carry the next .bundle/pNN)"; return 1; }
}
healthy() { python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$PORT/health', timeout=2)" 2>/dev/null; }
tune() {  # STEP CAMPAIGN: tune.py through device.sh, its deadline what the call has left, resumed from /tmp or
  # ROUND2_RESTAGE (a previous call's tune-state.tgz, carried)
  local s=$1 name=$2 restage=()
  [ -n "${ROUND2_RESTAGE:-}" ] && [ -f "$ROOT/$ROUND2_RESTAGE" ] && restage=(--restage "$ROOT/$ROUND2_RESTAGE")
  bash "$HERE/device.sh" stop >/dev/null 2>&1  # the side-by-side's server holds the port the launcher needs
  OUT=$R/$s TUNE_LIMIT_S=$(($(left) - 10)) bash "$HERE/device.sh" tune "${restage[@]}" --model "$MODEL" \
    --served-name gpubound --max-total-tokens 0 --min-duration-s 8 --ready-timeout 420 --estimate-s 240 \
    --deadline-s $(($(left) - 60)) "campaigns/$name.yml"
  grep -q '"cut_off": null' "$R/$s/tune.log" 2>/dev/null
}
step() {
  local s=$1 rc=0
  mkdir -p "$R/$s"
  case $s in
    host) python3 "$ROOT/benchmarks/gpu/host_read.py" --out "$R/host" >"$R/host/host-read.log" 2>&1 || rc=$? ;;
    model)
      stage || return 3
      # shellcheck disable=SC2086
      OUT=$R/model bash "$HERE/device.sh" gpubound-build ${ROUND2_MODEL_ARGS:-} || rc=$? ;;
    start)
      healthy && { log "start: the server answers already"; return 0; }
      [ -f "$MODEL/gpubound-manifest.json" ] || { log "start: no model (step model first)"; return 3; }
      OUT=$R/start LAUNCH=gpubound READY_S=$(($(left) - 5)) bash "$HERE/device.sh" start || rc=$?
      healthy || rc=1 ;;
    sidebyside)
      healthy || { log "sidebyside: no server (step start first)"; return 3; }
      OUT=$R/sidebyside bash "$HERE/device.sh" gap --restart-cmd '' --plan gpubound --served-name gpubound \
        --model-dir "$MODEL" --budget-s $(($(left) - 20)) || rc=$? ;;
    tune)
      [ -f "$MODEL/gpubound-manifest.json" ] || { log "tune: no model (step model first)"; return 3; }
      tune tune h200-gpubound || rc=4 ;;
    *) log "unknown step $s: allowed ${STEPS[*]}"; return 2 ;;
  esac
  pack "$s"
  return $rc
}
todo=("$@")
[ ${#todo[@]} -eq 0 ] || [ "${todo[0]}" = next ] && todo=("${STEPS[@]}") && auto=1
log "round2 on $(hostname): steps ${todo[*]}; budget ${BUDGET} s; skip ${ROUND2_SKIP:-none}"
for s in "${todo[@]}"; do
  if [ -n "${auto:-}" ]; then
    [[ ",${ROUND2_SKIP:-}," == *",$s,"* ]] && { log "$s: skipped (ROUND2_SKIP)"; continue; }
    [ -f "$R/done/$s" ] && continue
    if [ "$(left)" -lt "${EST[$s]}" ] && [ "$s" != tune ]; then
      log "$s: next call (expected ${EST[$s]} s, $(left) s left)"; break
    fi
    [ "$(left)" -lt 180 ] && { log "$s: next call ($(left) s left)"; break; }
  fi
  log "$s: begins"
  step "$s"; rc=$?
  log "$s: rc=$rc"
  if [ $rc = 0 ]; then touch "$R/done/$s"; elif [ -n "${auto:-}" ]; then break; fi
done
log "done on this machine: $(ls "$R/done" | tr '\n' ' ')"
