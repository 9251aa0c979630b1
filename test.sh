#!/usr/bin/env bash
# Annal's whole test suite: the README's test command, and exactly what CI runs (.ci/run).
# It installs what the tests need (Rust crates, PyPI and Maven packages, kcat) by itself, so it works on a fresh
# machine of this project's kind.
set -euo pipefail
cd "$(dirname "$0")"

echo "== cargo: build and unit/integration tests"
cargo build --release --locked --bin annal
cargo test --workspace --locked --release 2>&1

echo "== fuzz: each decoder's cargo-fuzz target for a short budget from its committed corpus (fuzz/README.md)"
# Installs nightly and cargo-fuzz if missing. FUZZ_SECONDS sets the time per target; ANNAL_FUZZ=0 skips this step.
if [ "${ANNAL_FUZZ:-1}" != 0 ]; then
  fuzz/run.sh short
fi

if [ -x tests/interop/run.sh ]; then
  echo "== interop: real Kafka clients against a real annal broker"
  ANNAL_BIN="$PWD/target/release/annal" INTEROP_GROUPS=1 INTEROP_CLUSTER=1 tests/interop/run.sh
fi
