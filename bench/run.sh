#!/usr/bin/env bash
# Annal vs Apache Kafka, side by side, on this machine (see bench/README.md).
#   bench/run.sh [--short] [--brokers kafka,annal] [--annal-bin PATH] [--out DIR] [--fixed-rate N] [--skip-limits]
#   bench/run.sh --selftest      checks the output parsers and the report on recorded samples (starts nothing)
# Environment: ANNAL_BIN (default target/release/annal, built if missing), KAFKA_CACHE (default .cache/kafka).
set -euo pipefail
bench="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$bench/.." && pwd)"
cd "$repo"

short="" brokers="kafka,annal" out="" fixed_rate=2000 skip_limits="" selftest=""
annal_bin="${ANNAL_BIN:-$repo/target/release/annal}"
while [ $# -gt 0 ]; do
  case "$1" in
    --short) short=--short ;;
    --selftest) selftest=1 ;;
    --brokers) brokers="$2"; shift ;;
    --annal-bin) annal_bin="$2"; shift ;;
    --out) out="$2"; shift ;;
    --fixed-rate) fixed_rate="$2"; shift ;;
    --skip-limits) skip_limits=--skip-limits ;;
    -h|--help) sed -n '2,5p' "$0"; exit 0 ;;
    *) echo "unknown argument $1 (try --help)" >&2; exit 2 ;;
  esac
  shift
done

# Charts need matplotlib: a venv under .cache (PyPI only).
venv="$repo/.cache/bench-venv"
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import matplotlib" 2>/dev/null; then
  echo "run.sh: setting up $venv with matplotlib (PyPI)"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check matplotlib
fi
py="$venv/bin/python"

if [ -n "$selftest" ]; then exec "$py" "$bench/selftest.py"; fi

# Machine-limit tools: fio and iperf3 from Debian apt if possible (dd is the fallback for the disk).
if { ! command -v fio || ! command -v iperf3; } >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "run.sh: installing fio and iperf3 with apt-get"
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fio iperf3; } >/dev/null 2>&1 \
    || echo "run.sh: apt-get install fio iperf3 failed: using dd for the disk, no loopback figure" >&2
fi

# Apache Kafka broker + tools jars from Maven Central.
cp_file="$(KAFKA_CACHE="${KAFKA_CACHE:-$repo/.cache/kafka}" "$repo/scripts/kafka/fetch.sh")"

if [[ ",$brokers," == *",annal,"* ]] && [ ! -x "$annal_bin" ]; then
  if [ "$annal_bin" = "$repo/target/release/annal" ]; then
    echo "run.sh: building $annal_bin"
    cargo build --release --bin annal
  else
    echo "annal binary $annal_bin not found: build it or pass --annal-bin / ANNAL_BIN" >&2; exit 1
  fi
fi

mode=full; [ -n "$short" ] && mode=short
out="${out:-$bench/results/$(date -u +%Y%m%dT%H%M%SZ)-$mode}"
work="$repo/.cache/bench/work"
rm -rf "$work"
mkdir -p "$work"
"$py" "$bench/bench.py" $short $skip_limits --brokers "$brokers" --annal-bin "$annal_bin" \
  --classpath-file "$cp_file" --out "$out" --work "$work" --fixed-rate "$fixed_rate"
