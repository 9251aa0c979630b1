//! `annal-sim`: runs seeds of the cluster simulation and says how many passed.
//!
//! `annal-sim --seeds N [--from S]` runs seeds S..S+N; `annal-sim --seed S [--trace]` replays one seed (and
//! prints its trace); `--seconds T` sets the simulated time with faults (default 30); `--twice` runs every seed
//! twice and fails it if the two traces' hashes differ; `--plant-forget-vote` / `--plant-wipe-disk` plant a
//! fault Raft does not survive (crashed voters lose their vote / their whole disk), to watch the checks catch it;
//! `--strict-terms` (or `SIM_STRICT_TERMS=1`) fails a seed on two leaders in one term instead of reporting it;
//! `--tick-ms MS` (or `SIM_TICK_MS`) sets the simulation's step (default 2 ms);
//! `--brokers` (or `SIM_BROKERS=1`) runs the real brokers (three combined nodes) with producers and a reader,
//! where `--plant-hw-before-isr`, `--plant-truncate-to-hw`, `--plant-elect-outside-isr` and
//! `--plant-ack-before-isr-commit` plant a replication bug in the real code.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use annal_metadata::env::testing::PlantedBug;
use annal_sim::{run_seed, Options, Planted};

fn main() -> ExitCode {
    if std::env::var_os("RUST_LOG").is_some() {
        // The nodes' own logs on stderr (`RUST_LOG=warn`, `RUST_LOG=annal_broker=info`): for reading a replay.
        annal_broker::init_tracing();
    }
    let mut args = std::env::args().skip(1);
    let (mut seeds, mut from, mut one, mut trace, mut twice) = (10u64, 0u64, None, false, false);
    let mut options = Options::default();
    while let Some(arg) = args.next() {
        let mut value = |name: &str| -> u64 {
            args.next()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{name} needs a number"))
        };
        match arg.as_str() {
            "--seeds" => seeds = value("--seeds"),
            "--from" => from = value("--from"),
            "--seed" => one = Some(value("--seed")),
            "--seconds" => options.fault_phase = Duration::from_secs(value("--seconds")),
            "--tick-ms" => options.tick = Duration::from_millis(value("--tick-ms").max(1)),
            "--trace" => trace = true,
            "--twice" => twice = true,
            "--strict-terms" => options.strict_terms = true,
            "--plant-forget-vote" => options.planted = Planted::ForgetVoteOnCrash,
            "--plant-wipe-disk" => options.planted = Planted::WipeDiskOnCrash,
            "--brokers" => options.brokers = true,
            "--plant-hw-before-isr" => {
                options.planted = Planted::Replication(PlantedBug::HighWatermarkBeforeIsr)
            }
            "--plant-truncate-to-hw" => {
                options.planted = Planted::Replication(PlantedBug::TruncateToHighWatermark)
            }
            "--plant-elect-outside-isr" => {
                options.planted = Planted::Replication(PlantedBug::ElectOutsideIsr)
            }
            "--plant-ack-before-isr-commit" => {
                options.planted = Planted::Replication(PlantedBug::AckBeforeIsrCommitted)
            }
            other => {
                eprintln!("unknown argument {other}; usage: annal-sim [--seeds N] [--from S] [--seed S] [--seconds T] [--tick-ms MS] [--trace] [--twice] [--strict-terms] [--brokers] [--plant-forget-vote|--plant-wipe-disk|--plant-hw-before-isr|--plant-truncate-to-hw|--plant-elect-outside-isr|--plant-ack-before-isr-commit]");
                return ExitCode::from(2);
            }
        }
    }
    options.keep_trace = trace;
    let range = match one {
        Some(s) => s..s + 1,
        None => from..from + seeds,
    };
    let started = Instant::now();
    let (mut passed, mut failed) = (0u64, Vec::new());
    let mut simulated = Duration::ZERO;
    for seed in range {
        let traced = Options {
            keep_trace: trace || twice,
            ..options.clone()
        };
        let report = run_seed(seed, &traced);
        simulated += report.simulated;
        if twice {
            let again = run_seed(seed, &traced);
            simulated += again.simulated;
            if again.trace_hash != report.trace_hash {
                let at = report
                    .trace
                    .iter()
                    .zip(&again.trace)
                    .position(|(a, b)| a != b)
                    .unwrap_or(report.trace.len().min(again.trace.len()));
                println!(
                    "seed {seed} NOT DETERMINISTIC: trace hashes {:016x} and {:016x}; first difference at event \
                     {at}:\n  {:?}\n  {:?}\n  after {:?}",
                    report.trace_hash,
                    again.trace_hash,
                    report.trace.get(at),
                    again.trace.get(at),
                    &report.trace[at.saturating_sub(8)..at]
                );
                failed.push(seed);
                continue;
            }
        }
        if trace {
            for (at, event) in &report.trace {
                println!("{at:>8} ms  {event}");
            }
        }
        for f in &report.findings {
            println!("seed {seed} finding: {f}");
        }
        if report.passed() {
            passed += 1;
        } else {
            println!(
                "seed {seed} FAILED: {}\n  replay: {}",
                report.violations.join("\n  "),
                report.replay_commands()
            );
            failed.push(seed);
        }
        if one.is_some() || !report.passed() {
            println!(
                "seed {seed}: trace hash {:016x}, {} events, {} faults, {} topics, {} registrations and {} acks=all \
                 writes acknowledged, {} entries committed, highest term {}, {:?} simulated in {:?}",
                report.trace_hash,
                report.events,
                report.faults.len(),
                report.acked_topics,
                report.acked_registrations,
                report.acked_writes,
                report.committed_entries,
                report.max_term,
                report.simulated,
                report.wall
            );
        }
    }
    println!(
        "{passed} passed, {} failed ({:?} simulated in {:?} of wall time){}",
        failed.len(),
        simulated,
        started.elapsed(),
        if failed.is_empty() {
            String::new()
        } else {
            format!("; failing seeds: {failed:?}")
        }
    );
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
