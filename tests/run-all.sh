#!/usr/bin/env bash
# Runs every gate of the collection in order: each tests/stages/NN-*.sh is one stage.
# Usage: tests/run-all.sh [STAGE_GLOB]   (e.g. tests/run-all.sh '3*' to run the pytest stage only)
set -uo pipefail
cd "$(dirname "$0")/.."
export GPUHOST_ROOT=$PWD
glob=${1:-*}
passed=0; failed=0; failed_names=()
declare -a timings=()
# Stages that only download and build fixtures run beside CPU-bound stages that need none of them: a pair "A:B"
# starts B in the background when A starts and waits for it after A; "A..C:B" starts B when the first selected stage
# from A to C (in the stages' order) starts and waits for it after the last one. B's output is kept apart and printed
# after that stage's, each stage keeps its own result and time. Only when B and a stage of A..C are selected;
# GPUHOST_OVERLAP= runs everything in order.
# 20-fixtures (downloads, venv installs) runs beside 10-lint and 15-sanity, which need no fixture.
# 35-gpu (CPU-only GPU gates: its own apt repo copy in .cache, loopback gloo ranks) runs beside 40-molecule,
# whose scenarios mostly wait on dpkg, boots and SSH and build their own repo copies.
# 31-sandbox (README command 1 and the serving role's cases on the sandbox host) runs beside 30-pytest: alone, each
# kept the machine about half busy (engine loads, readiness waits; the summary's cpu column), and neither times
# anything: the gates that measure time run alone in 50-timing.
overlap=${GPUHOST_OVERLAP-10-lint..15-sanity:20-fixtures 30-pytest:31-sandbox 40-molecule:35-gpu}
selected=$(for s in tests/stages/${glob}.sh; do [ -e "$s" ] && basename "$s" .sh; done)
declare -A beside=() deferred=() until=() span=()
for pair in $overlap; do
  range=${pair%%:*}; b=${pair##*:}; first=${range%%..*}; last=${range##*..}
  grep -qxF -- "$b" <<<"$selected" || continue
  in_range=()
  for s in $selected; do
    if [ "$s" != "$b" ] && ! [[ "$s" < "$first" ]] && ! [[ "$s" > "$last" ]]; then in_range+=("$s"); fi
  done
  [ ${#in_range[@]} -gt 0 ] || continue
  beside[${in_range[0]}]=$b; until[${in_range[-1]}]=$b; span[$b]=${in_range[*]}; deferred[$b]=1
done
# Budgets (tests/stages/budgets: "STAGE SECONDS" lines, plus "goal" and "limit" for the whole run): a stage over
# its budget and a run over the goal or the limit print a warning in the summary; the result stays the stages'
# (machines differ by up to 2x in speed). GPUHOST_BUDGETS names another file.
budgets_file=${GPUHOST_BUDGETS:-tests/stages/budgets}
goal=1200; limit=5400
declare -A budget=() secs=()
if [ -f "$budgets_file" ]; then
  while read -r key value _rest; do
    case "$key" in ''|'#'*) continue ;; esac
    if ! [[ "$value" =~ ^[0-9]+$ ]]; then
      echo "WARNING: $budgets_file: budget of $key is '$value': allowed values are whole seconds (0 or more)"
      continue
    fi
    case "$key" in goal) goal=$value ;; limit) limit=$value ;; *) budget[$key]=$value ;; esac
  done <"$budgets_file"
else
  echo "WARNING: no budget file $budgets_file: stages are not checked against budgets"
fi
run_start=$(date +%s)
order=()
# How busy the machine's CPUs were during a stage (all processes, test hosts and stages run beside it included;
# proc(5), /proc/stat's first line): a stage far below 100 % waits on something, and has room for another beside it.
ticks() {  # prints "BUSY TOTAL": the CPUs' busy and total clock ticks since boot
  local _cpu user nice system idle iowait irq softirq steal _rest
  read -r _cpu user nice system idle iowait irq softirq steal _rest </proc/stat
  echo "$((user + nice + system + irq + softirq + steal)) $((user + nice + system + idle + iowait + irq + softirq + steal))"
}
busy() {  # "BUSY TOTAL" at the start, the same at the end: the busy share in percent
  local b0 t0 b1 t1
  read -r b0 t0 <<<"$1"; read -r b1 t1 <<<"$2"
  if [ $((t1 - t0)) -gt 0 ]; then echo "$(( 100 * (b1 - b0) / (t1 - t0) ))%"; else echo "-"; fi
}
cpus=$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo "?")
run_ticks=$(ticks)
record() {  # name rc seconds busy [note]
  if [ "$2" -eq 0 ]; then passed=$((passed + 1)); result=ok
  else failed=$((failed + 1)); failed_names+=("$1"); result=FAILED; fi
  secs[$1]=$3; order+=("$1")
  timings+=("$(printf '%-28s %-7s %5ss  budget %5s  cpu busy %4s%s' "$1" "$result" "$3" "${budget[$1]:+${budget[$1]}s}" "$4" "${5:-}")")
}
declare -A bglog=() bgstart=() bgticks=() bgpid=()
collect() {  # name: wait for the stage run in the background, print its log, record its result and time
  local bg=$1 beside=${span[$1]// /, }
  wait "${bgpid[$bg]}"
  echo "=================== stage $bg (ran beside $beside) ==================="
  cat "${bglog[$bg]}"
  local bg_rc bg_end bg_ticks
  read -r bg_rc bg_end bg_ticks <"${bglog[$bg]}.end"
  record "$bg" "$bg_rc" "$(( bg_end - ${bgstart[$bg]} ))" "$(busy "${bgticks[$bg]}" "$bg_ticks")" " (beside $beside)"
  rm -f "${bglog[$bg]}" "${bglog[$bg]}.end"
  unset "bgpid[$bg]"
}
mins() { printf '%d:%02d' $(($1 / 60)) $(($1 % 60)); }
for stage in tests/stages/${glob}.sh; do
  [ -e "$stage" ] || continue
  name=$(basename "$stage" .sh)
  [ -n "${deferred[$name]:-}" ] && continue
  bg=${beside[$name]:-}
  if [ -n "$bg" ]; then
    bglog[$bg]=$(mktemp); bgstart[$bg]=$(date +%s); bgticks[$bg]=$(ticks)
    # its end in one line: "RC SECONDS BUSY_TICKS TOTAL_TICKS"
    ( bash "tests/stages/$bg.sh" >"${bglog[$bg]}" 2>&1; bg_rc=$?
      echo "$bg_rc $(date +%s) $(ticks)" >"${bglog[$bg]}.end" ) &
    bgpid[$bg]=$!
  fi
  echo "=================== stage $name ==================="
  start=$(date +%s); start_ticks=$(ticks)
  bash "$stage"; rc=$?
  record "$name" "$rc" "$(( $(date +%s) - start ))" "$(busy "$start_ticks" "$(ticks)")"
  [ -z "${until[$name]:-}" ] || collect "${until[$name]}"
  # Setup failures make every later stage meaningless.
  if [ "$rc" -ne 0 ]; then case "$name" in 00-*) echo "setup failed: stopping"; break ;; esac; fi
done
for bg in "${!bgpid[@]}"; do collect "$bg"; done  # started beside a stage after which the run stopped
echo "=================== summary ==================="
echo "(cpu busy: the share of the machine's $cpus CPUs in use during the stage, by every process on it)"
printf '%s\n' "${timings[@]}"
for name in "${order[@]}"; do
  if [ -z "${budget[$name]:-}" ]; then
    echo "WARNING: stage $name has no budget in $budgets_file"
  elif [ "${secs[$name]}" -gt "${budget[$name]}" ]; then
    echo "WARNING: stage $name took ${secs[$name]}s, over its budget of ${budget[$name]}s ($budgets_file)"
  fi
done
total=$(( $(date +%s) - run_start ))
echo "cpu busy over the whole run: $(busy "$run_ticks" "$(ticks)") of $cpus CPUs"
echo "total: ${total}s ($(mins "$total")) against the goal of ${goal}s ($(mins "$goal")) and the limit of ${limit}s ($(mins "$limit"))"
if [ "$total" -gt "$limit" ]; then
  echo "WARNING: the run took ${total}s, over the limit of ${limit}s: a CI run this long lands nothing"
elif [ "$total" -gt "$goal" ]; then
  echo "WARNING: the run took ${total}s, over the goal of ${goal}s"
fi
[ "$failed" -eq 0 ] || echo "failed stages: ${failed_names[*]}"
echo "stages: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
