#!/usr/bin/env bash
# Stops a broker started by scripts/kafka/start.sh DIR: SIGTERM (clean shutdown), then waits up to 60 s.
#   scripts/kafka/stop.sh DIR [--kill]    --kill sends SIGKILL instead (an unclean stop, for crash tests)
set -euo pipefail
dir="$1"
[ -f "$dir/kafka.pid" ] || { echo "no $dir/kafka.pid: nothing to stop" >&2; exit 0; }
pid="$(cat "$dir/kafka.pid")"
if ! kill -0 "$pid" 2>/dev/null; then rm -f "$dir/kafka.pid"; exit 0; fi
if [ "${2:-}" = "--kill" ]; then kill -KILL "$pid"; else kill -TERM "$pid"; fi
for _ in $(seq 1 120); do
  kill -0 "$pid" 2>/dev/null || { rm -f "$dir/kafka.pid"; exit 0; }
  sleep 0.5
done
echo "kafka (pid $pid) did not stop within 60 s; kill -KILL $pid" >&2
exit 1
