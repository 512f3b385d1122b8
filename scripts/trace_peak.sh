#!/usr/bin/env bash
# The peak memory of a capture as it goes: every second, the seconds since the start, the main process's
# VmHWM (its peak RSS so far) and VmRSS in MB, and the batches its checkpoint counts.
#   scripts/trace_peak.sh OUT hookdump capture ... -o OUT      (OUT: the capture's --out folder)
set -euo pipefail
out=$1
shift
"$@" &
pid=$!
start=$(date +%s)
while kill -0 "$pid" 2>/dev/null; do
  if [ -r "/proc/$pid/status" ]; then
    mem=$(awk '/^VmHWM|^VmRSS/ {printf "%s %d MB  ", $1, $2 / 1024}' "/proc/$pid/status")
    batches=$(python3 -c "import json, sys; print(json.load(open(sys.argv[1]))['batches'])" \
      "$out/.hookdump-partial/progress.json" 2>/dev/null || true)
    echo "$(( $(date +%s) - start )) s  ${mem}batches ${batches:-0}"
  fi
  sleep 1
done
wait "$pid"
