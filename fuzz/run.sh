#!/usr/bin/env bash
# Runs the cargo-fuzz targets (fuzz/README.md).
#
#   fuzz/run.sh [short] [target...]   CI mode (./test.sh): each target for FUZZ_SECONDS (default 10) of fuzzing
#                                     from its committed corpus; new corpus entries go to a scratch directory, so
#                                     the committed corpus only changes when someone copies them in (cmin first).
#   fuzz/run.sh long [target...]      each target for FUZZ_RUNS executions (default 10^7; 10^8 for request_frame,
#                                     record_batch and record_batch_structured), on FUZZ_JOBS processes (default 1),
#                                     growing .cache/fuzz-corpus/<target>/ across runs; FUZZ_SECONDS, if set, also
#                                     caps each target's time.
#   fuzz/run.sh list                  the targets.
#
# Exits non-zero on the first crash, leak, timeout or out-of-memory; the input is in fuzz/artifacts/<target>/
# (replay: cargo +nightly fuzz run -s none <target> fuzz/artifacts/<target>/<file>). Ends with a table of
# executions per target. Installs what it needs: a nightly toolchain (rustup) and cargo-fuzz (crates.io).
#
# Built without a sanitizer (-s none) and in release mode: the code under test is safe Rust (an out-of-bounds
# access is a panic, which libFuzzer reports as a crash), and AddressSanitizer would rebuild the standard library
# and run every target 2-3x slower, which the CI budget (under 5 minutes with the build) does not allow. A long run
# can add a sanitizer: FUZZ_BUILD_FLAGS="-s address" fuzz/run.sh long.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/.." && pwd)"
cd "$here"

mode="${1:-short}"
[ $# -gt 0 ] && shift
all_targets=(request_frame record_batch record_batch_structured log_recovery producer_snapshot checkpoint_files metadata_record txn_records
             raft_entry group_records client_response client_records)
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=("${all_targets[@]}")
build_flags=(${FUZZ_BUILD_FLAGS:--s none -O})
# The fuzz crate builds into fuzz/target/ (kept between runs: a rebuild from scratch is the slow part);
# FUZZ_TARGET_DIR moves it (e.g. into a CI cache).
[ -n "${FUZZ_TARGET_DIR:-}" ] && export CARGO_TARGET_DIR="$FUZZ_TARGET_DIR"

case "$mode" in
  list) printf '%s\n' "${all_targets[@]}"; exit 0 ;;
  short|long) ;;
  *) echo "fuzz/run.sh: mode must be short, long or list, not '$mode'" >&2; exit 2 ;;
esac

echo "== fuzz: toolchain"
if ! rustup run nightly rustc --version > /dev/null 2>&1; then
  rustup toolchain install nightly --profile minimal
fi
if ! cargo +nightly fuzz --version > /dev/null 2>&1; then
  cargo install cargo-fuzz --locked
fi

echo "== fuzz: building ${#targets[@]} targets (${build_flags[*]}, release)"
build_start=$SECONDS
cargo +nightly fuzz build "${build_flags[@]}" 2>&1 | grep -v '^\s*Compiling ' || true
[ "${PIPESTATUS[0]}" -eq 0 ] || { echo "fuzz: build failed" >&2; exit 1; }
echo "fuzz: built in $((SECONDS - build_start)) s"

scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
summary=()
total=0
for t in "${targets[@]}"; do
  mkdir -p "corpus/$t"
  if [ "$mode" = short ]; then
    out="$scratch/$t"
    limits=(-max_total_time="${FUZZ_SECONDS:-10}")
  else
    out="$repo/.cache/fuzz-corpus/$t"
    case "$t" in
      request_frame|record_batch|record_batch_structured) runs="${FUZZ_RUNS_HEAVY:-${FUZZ_RUNS:-100000000}}" ;;
      *) runs="${FUZZ_RUNS:-10000000}" ;;
    esac
    jobs="${FUZZ_JOBS:-1}"
    # With -jobs, each job does runs/jobs executions.
    limits=(-runs="$((runs / jobs))")
    [ "$jobs" -gt 1 ] && limits+=(-jobs="$jobs" -workers="$jobs")
    # A time box as well, if given: whichever comes first ends the target's run.
    [ -n "${FUZZ_SECONDS:-}" ] && limits+=(-max_total_time="$FUZZ_SECONDS")
  fi
  mkdir -p "$out" "artifacts/$t"
  log="$scratch/$t.log"
  echo "== fuzz: $t (${limits[*]})"
  start=$SECONDS
  rc=0
  cargo +nightly fuzz run "${build_flags[@]}" "$t" "$out" "corpus/$t" -- \
    "${limits[@]}" -rss_limit_mb=2048 -timeout=20 -max_len=65536 -print_final_stats=1 \
    -artifact_prefix="artifacts/$t/" > "$log" 2>&1 || rc=$?
  # With -jobs each job's stats are in its fuzz-<n>.log, and the parent's log repeats them: sum the jobs' logs
  # only. With one process, its own log.
  if ls fuzz-*.log > /dev/null 2>&1; then stats_logs=(fuzz-*.log); else stats_logs=("$log"); fi
  execs=$(cat "${stats_logs[@]}" | sed -n 's/^stat::number_of_executed_units: *//p' | awk '{s += $1} END {print s + 0}')
  rm -f fuzz-*.log
  execs="${execs:-0}"
  total=$((total + execs))
  summary+=("$(printf '%-26s %14s execs %6s s  %s' "$t" "$execs" "$((SECONDS - start))" \
                "$([ $rc -eq 0 ] && echo ok || echo "FAILED (exit $rc)")")")
  if [ $rc -ne 0 ]; then
    grep -v "^Output of\|^\s*\[" "$log" | cut -c1-400 | tail -60 >&2
    echo "fuzz: $t failed; the input is in fuzz/artifacts/$t/" >&2
    printf '%s\n' "${summary[@]}" >&2
    exit 1
  fi
done
echo "== fuzz: summary ($mode)"
printf '%s\n' "${summary[@]}"
printf '%-26s %14s execs\n' total "$total"
