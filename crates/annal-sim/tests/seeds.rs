//! The simulation's budget for `cargo test`: a few seeds, each run twice for the determinism check.
//!
//! - `SIM_SEEDS=n` runs seeds 0..n (default 8 in a release build, as CI runs it; 2 in a debug build);
//!   `SIM_SEED=s` runs only seed `s` and prints its trace (a replay).
//! - `SIM_SECONDS=t` sets the simulated seconds of faults per seed (default 30 in release, 15 in debug).
//! - `SIM_STRICT_TERMS=1` fails a seed on two leaders in one term (a known finding, decision 0011).
//! - `SIM_TEETH_SEEDS=n` bounds the planted-fault search (the checks' teeth; default 10).
//! - The long mode is the binary: `cargo run --release -p annal-sim -- --seeds 10000 [--twice]`.

use std::time::Duration;

use annal_sim::{run_seed, Options, Planted, Report};

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

const RELEASE: bool = !cfg!(debug_assertions);

fn options(keep_trace: bool) -> Options {
    let seconds = if RELEASE { 30 } else { 15 };
    Options {
        fault_phase: Duration::from_secs(env_u64("SIM_SECONDS").unwrap_or(seconds)),
        keep_trace,
        ..Options::default()
    }
}

fn describe(r: &Report) -> String {
    format!(
        "seed {}: hash {:016x}, {} events, {} faults, {} topics + {} registrations acked, {} committed, \
         term {}, {:?} simulated in {:?}",
        r.seed,
        r.trace_hash,
        r.events,
        r.faults.len(),
        r.acked_topics,
        r.acked_registrations,
        r.committed_entries,
        r.max_term,
        r.simulated,
        r.wall
    )
}

fn fail(r: &Report) -> ! {
    let tail: Vec<String> = r
        .trace
        .iter()
        .rev()
        .take(40)
        .rev()
        .map(|(at, e)| format!("{at:>8} ms  {e}"))
        .collect();
    panic!(
        "{}\ninvariant violated:\n  {}\nlast events:\n{}\nreplay with:\n  {}",
        describe(r),
        r.violations.join("\n  "),
        tail.join("\n"),
        r.replay_commands()
    );
}

#[test]
fn seeds_pass_and_replay_identically() {
    let seeds: Vec<u64> = match env_u64("SIM_SEED") {
        Some(s) => vec![s],
        None => (0..env_u64("SIM_SEEDS").unwrap_or(if RELEASE { 8 } else { 2 })).collect(),
    };
    let replaying = seeds.len() == 1 && env_u64("SIM_SEED").is_some();
    for seed in seeds {
        let first = run_seed(seed, &options(true));
        if replaying {
            for (at, e) in &first.trace {
                println!("{at:>8} ms  {e}");
            }
        }
        println!("{}", describe(&first));
        for f in &first.findings {
            println!("seed {seed} finding (not a failure unless SIM_STRICT_TERMS=1): {f}");
        }
        if !first.passed() {
            fail(&first);
        }
        assert!(
            first.acked_topics > 0,
            "seed {seed}: no write was acknowledged at all"
        );
        let again = run_seed(seed, &options(true));
        if first.trace_hash != again.trace_hash {
            let diverged = first
                .trace
                .iter()
                .zip(&again.trace)
                .position(|(a, b)| a != b)
                .unwrap_or(first.trace.len().min(again.trace.len()));
            panic!(
                "seed {seed} is not deterministic: trace hashes {:016x} and {:016x}; first difference at event \
                 {diverged}: {:?} vs {:?}",
                first.trace_hash,
                again.trace_hash,
                first.trace.get(diverged),
                again.trace.get(diverged)
            );
        }
    }
}

/// The checks have teeth: a crashed voter that comes back with an empty disk (a fault Raft does not survive) is
/// caught within `SIM_TEETH_SEEDS` seeds (default 10; as of this writing 18 of seeds 0-29 catch it, seed 0
/// first, as two voters applying different entries at one index after a relay of faults).
#[test]
fn a_voter_that_loses_its_disk_is_caught() {
    let budget = env_u64("SIM_TEETH_SEEDS").unwrap_or(10);
    let options = Options {
        fault_phase: Duration::from_secs(60),
        planted: Planted::WipeDiskOnCrash,
        ..Options::default()
    };
    for seed in 0..budget {
        let report = run_seed(seed, &options);
        if !report.passed() {
            println!(
                "planted disk loss caught at seed {seed}: {}\n  replay: {}",
                report.violations.join("; "),
                report.replay_commands()
            );
            return;
        }
    }
    panic!("a voter losing its disk went unnoticed for {budget} seeds");
}
