#!/usr/bin/env bash
# Stops a cluster started by scripts/kafka/start-cluster.sh DIR: SIGTERM to every node (controlled shutdown), waits
# up to 60 s.   scripts/kafka/stop-cluster.sh DIR [--kill]   (--kill: SIGKILL instead)
set -euo pipefail
if [ $# -lt 1 ]; then echo "usage: $0 DIR [--kill]" >&2; exit 2; fi
here="$(cd "$(dirname "$0")" && pwd)"
exec python3 "$here/../../tests/interop/cluster.py" stop "$@"
