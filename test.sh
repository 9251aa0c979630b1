#!/usr/bin/env bash
# Annal's whole test suite: the README's test command, and exactly what CI runs (.ci/run).
# It installs what the tests need (Rust crates, PyPI and Maven packages, kcat) by itself, so it works on a fresh
# machine of this project's kind.
set -euo pipefail
cd "$(dirname "$0")"

# Each step's wall time, printed as it ends (CI keeps only the log of a failed run: this is where its time went).
suite_start=$SECONDS
step_start=$SECONDS
step_done() { echo "== $1: $((SECONDS - step_start)) s (suite: $((SECONDS - suite_start)) s)"; step_start=$SECONDS; }

# The fuzz step (nightly, cargo-fuzz, its own build of the workspace, then each target for a short budget) runs in
# the background at the lowest CPU priority: it uses the CPU the other steps leave idle (the interop suite mostly
# waits on brokers and timeouts) instead of adding its build time to the suite's. Its log is printed at the end.
# FUZZ_SECONDS sets the time per target; ANNAL_FUZZ=0 skips this step (fuzz/README.md).
fuzz_pid=""
fuzz_log=""
if [ "${ANNAL_FUZZ:-1}" != 0 ]; then
  fuzz_log="$(mktemp)"
  echo "== fuzz: started in the background (nice 19); its output follows the other steps"
  # Its own process group (setsid), so that a suite failing early stops it and everything it started.
  setsid nice -n 19 fuzz/run.sh short > "$fuzz_log" 2>&1 &
  fuzz_pid=$!
  trap 'if [ -n "$fuzz_pid" ]; then kill -- "-$fuzz_pid" 2>/dev/null || kill "$fuzz_pid" 2>/dev/null || true; fi' EXIT
fi

# The `ci` profile (Cargo.toml: release at opt-level 1) keeps compile time, most of this suite's time on CI's two
# cores, down. No separate `cargo build --bin annal` first: the annal crate's integration tests make cargo build the
# binary (target/ci/annal, which the interop step uses) with the test build's dependency features; a plain
# `cargo build` resolves some shared dependencies (kafka-protocol, openraft, serde, ...) with fewer features, so it
# compiled the broker and its heaviest dependencies a second time for nothing.
# kcat (librdkafka's CLI), which crates/annal/tests/cli.rs shares a consumer group with, from Debian: installed
# here, before the cargo tests, and not only by the interop step, so that test runs on a fresh machine too.
if ! command -v kcat > /dev/null && ! command -v kafkacat > /dev/null; then
  echo "== apt: kcat"
  if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kcat; } > /dev/null 2>&1; then
    echo "test.sh: WARNING: could not install kcat with apt; the kcat test is skipped (ANNAL_SKIP_KCAT=1)"
    export ANNAL_SKIP_KCAT=1
  fi
fi

# Debian's chromium, for the console's browser tests (tests/interop/test_console.py, driven by Playwright); if apt
# cannot install it, those tests skip and say so (ANNAL_SKIP_CHROMIUM=1).
if ! command -v chromium > /dev/null; then
  echo "== apt: chromium"
  if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } > /dev/null 2>&1; then
    echo "test.sh: WARNING: could not install chromium with apt; the console's browser tests are skipped (ANNAL_SKIP_CHROMIUM=1)"
    export ANNAL_SKIP_CHROMIUM=1
  fi
fi

echo "== cargo: unit and integration tests"
cargo test --workspace --locked --profile ci 2>&1
annal_bin="$PWD/target/ci/annal"
[ -x "$annal_bin" ] || { echo "test.sh: cargo test did not leave $annal_bin" >&2; exit 1; }
step_done "cargo test"

if [ -x tests/interop/run.sh ]; then
  echo "== interop: real Kafka clients against a real annal broker"
  ANNAL_BIN="$annal_bin" INTEROP_GROUPS=1 INTEROP_CLUSTER=1 tests/interop/run.sh
  step_done "interop"
fi

if [ -n "$fuzz_pid" ]; then
  echo "== fuzz: each decoder's cargo-fuzz target for a short budget from its committed corpus (fuzz/README.md)"
  fuzz_rc=0
  wait "$fuzz_pid" || fuzz_rc=$?
  fuzz_pid=""
  step_done "fuzz (waiting for the background step)"
  cat "$fuzz_log"
  rm -f "$fuzz_log"
  if [ "$fuzz_rc" -ne 0 ]; then
    echo "fuzz: failed (exit $fuzz_rc); see above" >&2
    exit "$fuzz_rc"
  fi
fi
