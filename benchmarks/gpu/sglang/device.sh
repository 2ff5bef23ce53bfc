#!/usr/bin/env bash
# The real-engine runner on the lent H200 machine (no network there; 64 MiB travels a run; the machine stays up
# only ~30 s after a run returns, so chained runs must follow each other at once). Everything logs to $OUT.
#   OUT=... bash benchmarks/gpu/sglang/device.sh stage PARTDIR     append the parts in PARTDIR to /tmp/sglang/parts
#   OUT=... bash benchmarks/gpu/sglang/device.sh start [ARGS...]   unpack (once), start the server (setsid), wait
#                                                                    (LAUNCH=gpubound: the GPU-bound model with
#                                                                    launch-gpubound.args; READY_S: the wait, 280 s)
#   OUT=... bash benchmarks/gpu/sglang/device.sh gpubound [MODEL ARGS] [-- START ARGS]   build the GPU-bound model
#                                                                    (gpubound_model.py, once), start SGLang on it;
#                                                                    gpubound-build [MODEL ARGS]: the build alone
#   OUT=... bash benchmarks/gpu/sglang/device.sh EXPERIMENT        record | bench | health_bench (benchmarks/gpu/sglang/*.py)
#   OUT=... bash benchmarks/gpu/sglang/device.sh stop | restart     stop the server (its whole session); stop, then
#                                                                    start with the last start's extra ARGS, timed
#   OUT=... bash benchmarks/gpu/sglang/device.sh gap                restart timing, then the c=256 gap experiment
#                                                                    (gap.py); start the server first with
#                                                                    start --export-metrics-to-file
#                                                                    --export-metrics-to-file-dir /tmp/sglang/reqmetrics;
#                                                                    gap --restart-cmd '' --plan explain --budget-s 330:
#                                                                    the like-for-like arms, no restart (gap.py)
#   OUT=... bash benchmarks/gpu/sglang/device.sh tune [ARGS...]    unpack (once), the tuning campaign (tune.py; it
#                                                                   starts its own servers: no start before it)
#   OUT=... bash benchmarks/gpu/sglang/device.sh damage DST=REL...  unpack (once), damaged copies of the bundle's
#                                                                   model (damage_model.py: noise of REL x each
#                                                                   tensor's spread), for the accuracy experiment
#   bash benchmarks/gpu/sglang/device.sh ansible-zip                HERE, before: Ansible's module_utils into
#                                                                   .device/ (ignored; carry it: no Ansible there)
# The launch is the one that worked on this machine with the trimmed kernel package: triton attention, pytorch
# sampling, no grammar backend, bf16, metrics on.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
if [ "${1:-}" = ansible-zip ]; then
  # Ansible's module_utils as AnsiballZ ships them to a target (an empty ansible/__init__.py beside them), and PyYAML's
  # pure-Python package for the campaign files (tune.py puts the zip last on sys.path: the machine's own packages win)
  mkdir -p "$ROOT/.device"
  "${PYTHON:-python3}" - "$ROOT/.device/ansible-module-utils.zip" <<'PY'
import os, sys, zipfile, ansible.module_utils as mu, yaml
with zipfile.ZipFile(sys.argv[1], "w", zipfile.ZIP_DEFLATED) as z:
    z.writestr("ansible/__init__.py", "")
    for top, into in ((os.path.dirname(mu.__file__), "ansible/module_utils"), (os.path.dirname(yaml.__file__), "yaml")):
        for d, _dirs, files in os.walk(top):
            for f in files:
                if f.endswith(".py"):
                    z.write(os.path.join(d, f), os.path.join(into, os.path.relpath(os.path.join(d, f), top)))
print(sys.argv[1], os.path.getsize(sys.argv[1]))
PY
  exit
fi
OUT=${OUT:?set OUT}
W=${SGLANG_WORKDIR:-/tmp/sglang}
PORT=${PORT:-30000}
mkdir -p "$W/parts" "$OUT"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH=$W/site${PYTHONPATH:+:$PYTHONPATH}
ts() { date -u +%FT%T.%3NZ; }
unpack() {
  if [ ! -d "$W/site/sglang" ]; then
    t0=$(date +%s.%N); cat "$W"/parts/bundle.tar.xz.* | xz -d | tar -C "$W" -xf -
    echo "unpack $(awk "BEGIN{print $(date +%s.%N) - $t0}") s" | tee -a "$OUT/start.log"
  fi
}
case "${1:-}" in
  stage)
    cp -v "$2"/bundle.tar.xz.* "$W/parts/" | tee -a "$OUT/stage.log"; ls -l "$W/parts" >>"$OUT/stage.log" ;;
  start)
    shift
    unpack
    if [ "${LAUNCH:-tiny}" = gpubound ]; then
      # the GPU-bound model (device.sh gpubound builds it) with its launch (launch-gpubound.args)
      mapfile -t base < <(grep -v '^#' "$ROOT/benchmarks/gpu/sglang/launch-gpubound.args")
      ARGS=(--model-path "$W/model-gpubound" "${base[@]}" --host 127.0.0.1 --port "$PORT" "$@")
    elif [ "${LAUNCH:-tiny}" = tiny ]; then
      ARGS=(--model-path "$W/model" --served-model-name tiny --attention-backend triton --sampling-backend pytorch
            --grammar-backend none --disable-cuda-graph --dtype bfloat16 --mem-fraction-static 0.3
            --max-total-tokens 65536 --max-running-requests 256 --host 127.0.0.1 --port "$PORT" --enable-metrics "$@")
    else
      echo "LAUNCH=$LAUNCH: allowed values are tiny, gpubound" >&2; exit 2
    fi
    echo "${LAUNCH:-tiny}" >"$W/server.launch"
    if [ $# -gt 0 ]; then printf '%s\n' "$@"; fi >"$W/server.args"  # restart starts the same server again
    echo "$(ts) launch ${ARGS[*]}" | tee -a "$OUT/start.log"
    t0=$(date +%s.%N)
    setsid python3 -m sglang.launch_server "${ARGS[@]}" >"$W/server.log" 2>&1 < /dev/null &
    echo $! >"$W/server.pid"
    for i in $(seq 1 "${READY_S:-280}"); do
      if python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$PORT/health', timeout=2)" 2>/dev/null; then
        echo "$(ts) ready after $(awk "BEGIN{print $(date +%s.%N) - $t0}") s" | tee -a "$OUT/start.log"; break
      fi
      kill -0 "$(cat "$W/server.pid")" 2>/dev/null || { echo "$(ts) server exited" | tee -a "$OUT/start.log"; break; }
      sleep 1
    done
    cp "$W/server.log" "$OUT/server-start.log" ;;
  stop)
    # the server was started with setsid: its pid is its session's; every process of that session is stopped
    pid=$(cat "$W/server.pid" 2>/dev/null) || { echo "no $W/server.pid" >&2; exit 1; }
    t0=$(date +%s.%N)
    kill -TERM -- "-$pid" 2>/dev/null
    for i in $(seq 1 300); do
      left=$(sed 's/.*) //' /proc/[0-9]*/stat 2>/dev/null | awk -v s="$pid" '$4 == s' | wc -l)
      [ "$left" = 0 ] && break
      [ "$i" = 200 ] && kill -KILL -- "-$pid" 2>/dev/null
      sleep 0.1
    done
    echo "$(ts) stopped after $(awk "BEGIN{print $(date +%s.%N) - $t0}") s ($left processes left)" | tee -a "$OUT/start.log" ;;
  restart)
    bash "$0" stop
    mapfile -t extra < <(cat "$W/server.args" 2>/dev/null)
    LAUNCH=$(cat "$W/server.launch" 2>/dev/null || echo tiny) bash "$0" start "${extra[@]}" ;;
  gpubound-build)
    # the GPU-bound model, built once (gpubound_model.py ARGS; a second call with the same ARGS keeps it)
    shift
    unpack
    python3 "$ROOT/benchmarks/gpu/sglang/gpubound_model.py" --out "$W/model-gpubound" "$@" 2>&1 |
      tee -a "$OUT/gpubound-model.log"
    [ "${PIPESTATUS[0]}" = 0 ] || { echo "$(ts) the GPU-bound model was not built" | tee -a "$OUT/start.log"; exit 1; }
    cp "$W/model-gpubound/gpubound-manifest.json" "$OUT/" ;;
  gpubound)
    # build the GPU-bound model (once), then start SGLang on it: device.sh gpubound [MODEL ARGS] [-- START ARGS]
    shift
    margs=()
    while [ $# -gt 0 ] && [ "$1" != -- ]; do margs+=("$1"); shift; done
    [ "${1:-}" = -- ] && shift
    bash "$0" gpubound-build "${margs[@]}" || exit 1
    LAUNCH=gpubound bash "$0" start "$@" ;;
  gap)
    python3 "$ROOT/benchmarks/gpu/sglang/gap.py" --base-url "http://127.0.0.1:$PORT" --out "$OUT" \
      --restart-cmd "OUT=$OUT bash $ROOT/benchmarks/gpu/sglang/device.sh restart" "${@:2}" 2>&1 | tee "$OUT/gap.log"
    xz -1 -c "$W/server.log" >"$OUT/server.log.xz"
    rm -f "$OUT/server-start.log" ;;  # the restart's part of server.log
  record|bench|health_bench)
    python3 "$ROOT/benchmarks/gpu/sglang/$1.py" --base-url "http://127.0.0.1:$PORT" --out "$OUT" 2>&1 | tee "$OUT/$1.log"
    cp "$W/server.log" "$OUT/server.log" ;;
  nvml)
    nvidia-smi -q >"$OUT/h200-nvidia-smi-q.txt" 2>&1
    python3 - >"$OUT/h200-pynvml.json" 2>"$OUT/h200-pynvml.err" <<'PY'
import json, pynvml as n
n.nvmlInit()
h = n.nvmlDeviceGetHandleByIndex(0)
def g(f, *a):
    try:
        v = f(h, *a)
        return v.decode() if isinstance(v, bytes) else v
    except Exception as e:  # a reading the driver refuses is a finding too
        return "error: %s" % e
out = {"driver": n.nvmlSystemGetDriverVersion(), "name": g(n.nvmlDeviceGetName),
       "pcie_gen_current": g(n.nvmlDeviceGetCurrPcieLinkGeneration), "pcie_gen_max": g(n.nvmlDeviceGetMaxPcieLinkGeneration),
       "pcie_width_current": g(n.nvmlDeviceGetCurrPcieLinkWidth), "pcie_width_max": g(n.nvmlDeviceGetMaxPcieLinkWidth),
       "clocks_event_reasons": g(n.nvmlDeviceGetCurrentClocksThrottleReasons),
       "persistence_mode": g(n.nvmlDeviceGetPersistenceMode), "ecc_mode": str(g(n.nvmlDeviceGetEccMode)),
       "ecc_volatile_uncorrected": g(n.nvmlDeviceGetTotalEccErrors, 1, 0),
       "ecc_aggregate_uncorrected": g(n.nvmlDeviceGetTotalEccErrors, 1, 1),
       "ecc_volatile_corrected": g(n.nvmlDeviceGetTotalEccErrors, 0, 0),
       "retired_pages_pending": g(n.nvmlDeviceGetRetiredPagesPendingStatus),
       "temperature_c": g(n.nvmlDeviceGetTemperature, 0), "power_mw": g(n.nvmlDeviceGetPowerUsage)}
print(json.dumps(out, indent=1, default=str))
PY
    ;;
  failures)
    # real failed starts, each on its own port, stopped after FAIL_S seconds: an attention backend whose kernel the
    # trimmed package lacks, and an impossible memory fraction
    for spec in "fa3:--attention-backend fa3 --mem-fraction-static 0.3" "memfrac:--mem-fraction-static 0.0001"; do
      name=${spec%%:*}; extra=${spec#*:}
      # shellcheck disable=SC2086
      timeout "${FAIL_S:-120}" python3 -m sglang.launch_server --model-path "$W/model" --served-model-name tiny \
        --sampling-backend pytorch --grammar-backend none --disable-cuda-graph --dtype bfloat16 \
        --host 127.0.0.1 --port 30011 $extra >"$OUT/startup-fail-$name.log" 2>&1
      echo "$name rc=$?" | tee -a "$OUT/failures.txt"
    done ;;
  damage)
    unpack
    python3 "$ROOT/benchmarks/gpu/sglang/damage_model.py" "$W/model" "${@:2}" 2>&1 | tee -a "$OUT/damage.log" ;;
  tune)
    shift
    unpack
    # SIGTERM before the device's 10-minute limit: the driver saves its state and tables to $OUT on the way out
    timeout -k 20 "${TUNE_LIMIT_S:-560}" python3 "$ROOT/benchmarks/gpu/sglang/tune.py" --out "$OUT" --port "$PORT" "$@"
    echo "tune rc=$?" | tee -a "$OUT/tune.log" ;;
  *) echo "usage: device.sh stage PARTDIR | start [ARGS] | gpubound [MODEL ARGS] [-- START ARGS] | gpubound-build [ARGS]
                 | stop | restart | record | bench
                 | health_bench | gap [gap.py ARGS] | nvml | failures
                 | tune [ARGS] | damage DST=REL... | ansible-zip" >&2
     exit 2 ;;
esac
