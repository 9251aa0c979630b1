#!/usr/bin/env bash
# Regenerates the seed corpora (corpus/*/gen-*) with examples/gen_corpus.rs. Builds it with the fuzz targets'
# flags (as `cargo fuzz build -s none -O` sets them) so that it reuses their build instead of compiling every
# dependency again.
set -euo pipefail
cd "$(dirname "$0")"
export RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing -Cllvm-args=-simplifycfg-branch-fold-threshold=0 \
-Cllvm-args=-sanitizer-coverage-stack-depth -Ccodegen-units=1"
triple="$(rustc +nightly -vV | sed -n 's/^host: //p')"
cargo +nightly build --target "$triple" --release --config 'profile.release.debug="line-tables-only"' \
  --example gen_corpus
"${CARGO_TARGET_DIR:-target}/$triple/release/examples/gen_corpus"
