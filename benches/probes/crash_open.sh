#!/bin/bash
# The demo's crash and reopen, from outside: a child process schedules 100,000 durable jobs
# due in a second (as the demo's crash child does), says `scheduled` and is killed with
# SIGKILL; 1.5 s later (its jobs all missed) the directory is opened, and the open's wall time,
# recovery's own part and the log's part are printed. RUNS times (default 10).
#
#   benches/probes/crash_open.sh [RUNS] [BINARY]
#
# BINARY defaults to the release build of the `crash_open_probe` example (built first); pass
# another build's copy to compare two builds run by run.
set -euo pipefail
runs=${1:-10}
bin=${2:-}
if [ -z "$bin" ]; then
  cargo build --release -q -p timewheel-benches --example crash_open_probe
  bin=$(dirname "$0")/../../target/release/examples/crash_open_probe
fi
for ((i = 0; i < runs; i++)); do
  dir=$(mktemp -d)/crash
  coproc CHILD { exec "$bin" child "$dir" 100000 1000; }
  read -r said <&"${CHILD[0]}"
  [ "$said" = scheduled ] || { echo "child said: $said" >&2; exit 1; }
  kill -9 "$CHILD_PID"
  wait "$CHILD_PID" 2>/dev/null || true
  sleep 1.5
  "$bin" open "$dir"
  rm -rf "$(dirname "$dir")"
done
