#!/usr/bin/env bash
# Profiles `annal serve` under one produce and one consume workload (Kafka's own perf tools as the load):
#   bench/profile.sh [--annal-bin PATH] [--records N] [--out DIR]
# Uses `perf record -e cpu-clock` (sampling; works without hardware counters). Writes DIR/produce.txt and
# DIR/consume.txt (top functions by self time, broker process only) and the perf.data files. Annal only.
set -euo pipefail
bench="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$bench/.." && pwd)"
annal_bin="${ANNAL_BIN:-$repo/target/release/annal}" records=300000 out="$repo/.cache/bench/profile"
while [ $# -gt 0 ]; do
  case "$1" in
    --annal-bin) annal_bin="$2"; shift ;;
    --records) records="$2"; shift ;;
    --out) out="$2"; shift ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
command -v perf >/dev/null || { echo "perf not found: apt-get install -y linux-perf" >&2; exit 1; }
cp="$(cat "$(KAFKA_CACHE="${KAFKA_CACHE:-$repo/.cache/kafka}" "$repo/scripts/kafka/fetch.sh")")"
rm -rf "$out"; mkdir -p "$out"
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
"$annal_bin" serve --data-dir "$out/data" --listen "127.0.0.1:$port" > "$out/annal.log" 2>&1 &
apid=$!
trap 'kill -INT $apid 2>/dev/null || true; wait $apid 2>/dev/null || true; rm -rf "$out/data"' EXIT
for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done
java -cp "$cp" "$bench/java/CreateTopics.java" "127.0.0.1:$port" 8 prof

profile() {  # name, command...
  local name="$1"; shift
  perf record -e cpu-clock -F 4999 --call-graph dwarf,16384 -p "$apid" -o "$out/$name.perf.data" 2>/dev/null &
  local ppid=$!
  sleep 0.5
  timeout 600 "$@" | tail -2
  kill -INT "$ppid"; wait "$ppid" 2>/dev/null || true
  perf report -i "$out/$name.perf.data" --no-children --stdio --sort symbol -g none --percent-limit 0.7 \
    2>/dev/null | grep -v "^$" | head -60 > "$out/$name.txt" || true
  perf report -i "$out/$name.perf.data" --children --stdio --sort symbol -g none --percent-limit 3 \
    2>/dev/null | grep -v "^$" | head -60 > "$out/$name.children.txt" || true
  echo "== $name: top self time ($out/$name.txt)"; head -40 "$out/$name.txt"
}
profile produce java -cp "$cp" org.apache.kafka.tools.ProducerPerformance --topic prof --num-records "$records" \
  --record-size 1024 --throughput -1 --producer-props "bootstrap.servers=127.0.0.1:$port" acks=1
profile consume java -cp "$cp" "$bench/java/AssignConsumer.java" "127.0.0.1:$port" prof "$records" 30000
