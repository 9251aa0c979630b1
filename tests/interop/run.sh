#!/usr/bin/env bash
# Interop suite: unchanged Kafka clients (librdkafka via confluent-kafka, kafka-python, Java kafka-clients 4.x, kcat)
# against real broker processes. Installs what it needs by itself (Python venv under .cache/, Maven artifacts,
# kcat from Debian), so it runs on a fresh machine.
#
#   ANNAL_BIN=target/release/annal tests/interop/run.sh      the normal run: tests start `annal serve` processes
#   INTEROP_BROKER=kafka tests/interop/run.sh                 the same tests against real Apache Kafka 4.x processes
#   INTEROP_BOOTSTRAP=127.0.0.1:19092 tests/interop/run.sh    against a running broker (restart/on-disk tests skip)
#   INTEROP_GROUPS=1                                          also run the consumer-group tests (issue 4)
#   INTEROP_IDEMPOTENCE=0                                     skip the idempotent-producer tests (issue 6)
#   INTEROP_CLUSTER=1                                         also run the 3-node cluster tests (issue 9: marker
#                                                             `cluster`, test_cluster.py / @Tag("cluster")); ./test.sh
#                                                             sets it. Under a minute against Annal, two against
#                                                             INTEROP_BROKER=kafka.
#   FAULT_SEED=N FAULT_RUNS=N FAULT_DURATION=S                the fault-injection scenarios (test_faults.py, marker
#                                                             `faults`, part of the cluster tests): seed, runs per
#                                                             scenario, extra seconds of load per fault (README)
#   INTEROP_ONLY=python|java                                  run one half only
#   INTEROP_JAVA_TESTS=ClusterTest                            run only these Java test classes (surefire -Dtest)
#   extra arguments go to pytest (e.g. -k codec -x)
# Exits non-zero if any test fails. Ends with one summary line "interop: N passed, N failed, N skipped".
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cache="$repo/.cache"
venv="$cache/interop-venv"
reports="$cache/interop-reports"
mkdir -p "$cache"
rm -rf "$reports" && mkdir -p "$reports"

die() { echo "interop: $*" >&2; exit 2; }

if [ -z "${INTEROP_BOOTSTRAP:-}" ] && [ "${INTEROP_BROKER:-}" != "kafka" ]; then
  [ -n "${ANNAL_BIN:-}" ] || die "set ANNAL_BIN to the annal binary (or INTEROP_BROKER=kafka / INTEROP_BOOTSTRAP)"
  [ -x "$ANNAL_BIN" ] || die "ANNAL_BIN=$ANNAL_BIN is not an executable file; build it: cargo build --release"
  ANNAL_BIN="$(cd "$(dirname "$ANNAL_BIN")" && pwd)/$(basename "$ANNAL_BIN")"
  export ANNAL_BIN
fi

echo "== interop: installing test dependencies"
# Python: a venv with pinned clients; reinstalled only when requirements.txt changes.
stamp="$venv/.requirements.sha256"
want="$(sha256sum "$here/requirements.txt" | cut -d' ' -f1)"
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  python3 -m venv "$venv" || die "python3 -m venv failed (Debian: apt-get install python3-venv)"
  "$venv/bin/pip" install -q --disable-pip-version-check -r "$here/requirements.txt" || die "pip install failed"
  echo "$want" > "$stamp"
fi
# Apache Kafka jars (DumpLogSegments, and the Kafka broker for INTEROP_BROKER=kafka), from Maven Central.
"$repo/scripts/kafka/fetch.sh" > /dev/null || die "could not resolve the Apache Kafka jars with Maven"
# kcat, for the smoke test only: if apt cannot install it, that one test skips and says why.
if ! command -v kcat > /dev/null && ! command -v kafkacat > /dev/null; then
  if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kcat; } > "$cache/apt-kcat.log" 2>&1; then
    echo "interop: could not install kcat with apt (see $cache/apt-kcat.log); the kcat smoke test will skip"
  fi
fi

# chromium, for the console's browser tests (test_console.py, Playwright driving Debian's chromium, never a
# downloaded browser); without it those tests skip and say why.
if ! command -v chromium > /dev/null && [ "${ANNAL_SKIP_CHROMIUM:-}" != "1" ]; then
  if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } > "$cache/apt-chromium.log" 2>&1; then
    echo "interop: could not install chromium with apt (see $cache/apt-chromium.log); the console tests will skip"
  fi
fi

# openssl, for the security tests' certificates (made at test time); without it those tests skip and say why.
if ! command -v openssl > /dev/null; then
  if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssl; } > "$cache/apt-openssl.log" 2>&1; then
    echo "interop: could not install openssl with apt (see $cache/apt-openssl.log); the security tests will skip"
  fi
fi

# Debian's prometheus, for test_prometheus.py (a real Prometheus server scraping Annal); without it that test
# tries apt itself, then skips and says why. --no-install-recommends: the server only, not the exporters.
if ! command -v prometheus > /dev/null; then
  if ! { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus \
         || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus; }; \
       } > "$cache/apt-prometheus.log" 2>&1; then
    echo "interop: could not install prometheus with apt (see $cache/apt-prometheus.log); test_prometheus.py will skip"
  fi
fi

python_rc=0
java_rc=0
start=$SECONDS

only="${INTEROP_ONLY:-}"
case "$only" in ""|python|java) ;; *) die "INTEROP_ONLY must be python or java, not '$only'" ;; esac

if [ "$only" != "java" ]; then
  echo "== interop: Python clients (confluent-kafka/librdkafka, kafka-python), raw protocol, DumpLogSegments, kcat"
  (cd "$here" && "$venv/bin/python" -m pytest -q --durations=15 --junitxml="$reports/pytest.xml" "$@")
  python_rc=$?
fi

if [ "$only" != "python" ]; then
  echo "== interop: Java kafka-clients"
  excluded=()
  if [ "${INTEROP_GROUPS:-}" != "1" ]; then excluded+=(groups); fi
  if [ "${INTEROP_IDEMPOTENCE:-}" = "0" ]; then excluded+=(idempotence); fi
  if [ "${INTEROP_CLUSTER:-}" != "1" ]; then excluded+=(cluster); fi
  excluded_csv="$(IFS=,; echo "${excluded[*]:-none}")"
  (cd "$here/java" && mvn -B -q -ntp -Dstyle.color=never test -Dinterop.repo="$repo" \
     -Dinterop.excludedGroups="$excluded_csv" ${INTEROP_JAVA_TESTS:+-Dtest="$INTEROP_JAVA_TESTS"} \
     -Dinterop.reportsDirectory="$reports/surefire")
  java_rc=$?
fi

echo "interop: took $((SECONDS - start)) s (python rc=$python_rc, java rc=$java_rc)"
# One closing line over both runners, from their JUnit XML reports (the last line printed).
"$venv/bin/python" - "$reports" <<'PY'
import sys, pathlib, xml.etree.ElementTree as ET
tests = failures = errors = skipped = 0
for f in pathlib.Path(sys.argv[1]).rglob("*.xml"):
    root = ET.parse(f).getroot()
    for suite in ([root] if root.tag == "testsuite" else root.iter("testsuite")):
        tests += int(suite.get("tests", 0)); failures += int(suite.get("failures", 0))
        errors += int(suite.get("errors", 0)); skipped += int(suite.get("skipped", 0))
failed = failures + errors
print(f"interop: {tests - failed - skipped} passed, {failed} failed, {skipped} skipped")
PY
[ "$python_rc" -eq 0 ] && [ "$java_rc" -eq 0 ]
