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
//! `--plant-ack-before-isr-commit` plant a replication bug in the real code, and
//! `--plant-read-committed-above-stable` a transaction bug (read_committed reads up to the high watermark).
//! `--power-losses N` (default 1) lets up to N of a run's crashes be power losses, where the crashed node also
//! loses what it did not fsync to its segment files; 0 makes every crash a process crash.
//! `--disk-fulls N` (default 1; `SIM_DISK_FULLS`) gives a `--brokers` run up to N windows in which one node's
//! disk is full (its partitions' writes fail with ENOSPC); 0 turns them off. `--disk-full-metadata` fills the
//! metadata quorum's log too: the node's broker halts and is restarted once the disk has room.
//! `--fsync-faults N` (default 1; `SIM_FSYNC_FAULTS`) gives a `--brokers` run up to N windows in which one node's
//! fsyncs fail (its broker halts, and is restarted once the window ends) or are slow; 0 turns them off.
//! A connection attempt over a cut link times out, as real TCP's does; `--turmoil-refusals` (`SIM_TCP_TIMEOUTS=0`)
//! gives turmoil's immediate refusal instead, to replay seeds found before that was the default (`--tcp-timeouts`
//! is still accepted and changes nothing).
//! `--jobs J` runs the seeds in J processes of this binary (seed `from + k + i*J` in the k-th), for the cores a
//! long run has: a simulation is single-threaded and one runs at a time per process (tokio's task ids are
//! process-wide and drive a crashed host's drop order), so processes, not threads, are the unit of parallelism.

use std::io::{BufRead, BufReader};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use annal_metadata::env::testing::PlantedBug;
use annal_sim::{run_seed, Options, Planted};

fn main() -> ExitCode {
    if std::env::var_os("RUST_LOG").is_some() {
        // The nodes' own logs on stderr (`RUST_LOG=warn`, `RUST_LOG=annal_broker=info`): for reading a replay.
        annal_sim::node_logs::init();
    }
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let mut args = argv.iter().cloned();
    let (mut seeds, mut from, mut one, mut trace, mut twice) = (10u64, 0u64, None, false, false);
    let (mut jobs, mut stride) = (1u64, 1u64);
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
            "--jobs" => jobs = value("--jobs").clamp(1, 64),
            "--stride" => stride = value("--stride").max(1),
            "--seconds" => options.fault_phase = Duration::from_secs(value("--seconds")),
            "--tick-ms" => options.tick = Duration::from_millis(value("--tick-ms").max(1)),
            "--trace" => trace = true,
            "--twice" => twice = true,
            "--strict-terms" => options.strict_terms = true,
            "--plant-forget-vote" => options.planted = Planted::ForgetVoteOnCrash,
            "--plant-wipe-disk" => options.planted = Planted::WipeDiskOnCrash,
            "--brokers" => options.brokers = true,
            "--power-losses" => options.power_losses = value("--power-losses") as u32,
            "--disk-fulls" => options.disk_fulls = value("--disk-fulls") as u32,
            "--disk-full-metadata" => options.disk_full_metadata = true,
            "--fsync-faults" => options.fsync_faults = value("--fsync-faults") as u32,
            "--tcp-timeouts" => options.tcp_timeouts = true,
            "--turmoil-refusals" => options.tcp_timeouts = false,
            "--no-group-members" => options.group_members = false,
            "--no-zombie-producer" => options.zombie_producer = false,
            "--no-torn-writes" => options.torn_writes = false,
            "--no-faulty-disk-start" => options.faulty_disk_start = false,
            "--consumer-members" => options.consumer_members = true,
            "--plant-forget-consumer-members" => {
                options.planted = Planted::Replication(PlantedBug::ForgetConsumerGroupMembers)
            }
            "--plant-fenced-epoch-retry" => {
                options.planted = Planted::Replication(PlantedBug::FencedEpochCountsAsRetry)
            }
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
            "--plant-read-committed-above-stable" => {
                options.planted = Planted::Replication(PlantedBug::ReadCommittedAboveStable)
            }
            other => {
                eprintln!("unknown argument {other}; usage: annal-sim [--seeds N] [--from S] [--seed S] [--jobs J] [--seconds T] [--power-losses N] [--disk-fulls N] [--disk-full-metadata] [--fsync-faults N] [--turmoil-refusals] [--no-group-members] [--no-zombie-producer] [--no-torn-writes] [--no-faulty-disk-start] [--consumer-members] [--tick-ms MS] [--trace] [--twice] [--strict-terms] [--brokers] [--plant-forget-vote|--plant-wipe-disk|--plant-hw-before-isr|--plant-truncate-to-hw|--plant-elect-outside-isr|--plant-ack-before-isr-commit|--plant-read-committed-above-stable|--plant-fenced-epoch-retry|--plant-forget-consumer-members]");
                return ExitCode::from(2);
            }
        }
    }
    options.keep_trace = trace;
    let started = Instant::now();
    if jobs > 1 && one.is_none() {
        return run_in_processes(&argv, from, seeds, jobs, started);
    }
    let range: Vec<u64> = match one {
        Some(s) => vec![s],
        None => (from..from + seeds).step_by(stride as usize).collect(),
    };
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
    if std::env::var_os(CHILD_ENV).is_some() {
        println!(
            "{CHILD_SUMMARY} {passed} {} {}",
            simulated.as_millis(),
            failed
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(",")
        );
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

/// Set in the environment of `--jobs`' child processes: each ends with a [`CHILD_SUMMARY`] line for the parent.
const CHILD_ENV: &str = "ANNAL_SIM_CHILD";
const CHILD_SUMMARY: &str = "annal-sim-child-summary";

/// `--jobs`: the same command in `jobs` child processes, the k-th running seeds `from + k`, `from + k + jobs`, ...;
/// their output is passed through (a failing seed's replay command included) and their summaries added up.
fn run_in_processes(
    argv: &[String],
    from: u64,
    seeds: u64,
    jobs: u64,
    started: Instant,
) -> ExitCode {
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => {
            eprintln!("annal-sim --jobs: cannot find this binary to start its jobs ({e}); run without --jobs");
            return ExitCode::from(2);
        }
    };
    // The parent's arguments without the seed range and --jobs, which each child gets its own of.
    let mut common = Vec::new();
    let mut args = argv.iter();
    while let Some(a) = args.next() {
        match a.as_str() {
            "--seeds" | "--from" | "--jobs" | "--stride" => {
                args.next();
            }
            _ => common.push(a.clone()),
        }
    }
    let children: Vec<_> = (0..jobs.min(seeds.max(1)))
        .map(|k| {
            let count = seeds.saturating_sub(k).div_ceil(jobs);
            Command::new(&exe)
                .args(&common)
                .args(["--from", &(from + k).to_string()])
                .args(["--seeds", &(count * jobs).to_string()])
                .args(["--stride", &jobs.to_string()])
                .env(CHILD_ENV, "1")
                .stdout(Stdio::piped())
                .spawn()
        })
        .collect();
    let (mut passed, mut failed, mut simulated_ms, mut broken) = (0u64, Vec::new(), 0u64, false);
    let readers: Vec<_> = children
        .into_iter()
        .map(|child| {
            std::thread::spawn(move || {
                let mut child = child?;
                let mut summary = None;
                let stdout = child.stdout.take().expect("piped");
                for line in BufReader::new(stdout).lines() {
                    let line = line?;
                    match line.strip_prefix(CHILD_SUMMARY) {
                        Some(rest) => summary = Some(rest.trim().to_string()),
                        // A child's own total; the parent prints the sum.
                        None if line.contains(" passed, ") && line.contains(" simulated in ") => {}
                        None => println!("{line}"),
                    }
                }
                child.wait()?;
                Ok::<_, std::io::Error>(summary)
            })
        })
        .collect();
    for reader in readers {
        let summary = reader.join().ok().and_then(|r| r.ok()).flatten();
        let Some(summary) = summary else {
            broken = true;
            continue;
        };
        let mut fields = summary.splitn(3, ' ');
        passed += fields.next().and_then(|v| v.parse().ok()).unwrap_or(0);
        simulated_ms += fields.next().and_then(|v| v.parse().ok()).unwrap_or(0);
        failed.extend(
            fields
                .next()
                .unwrap_or("")
                .split(',')
                .filter_map(|v| v.parse::<u64>().ok()),
        );
    }
    failed.sort_unstable();
    println!(
        "{passed} passed, {} failed ({:?} simulated in {:?} of wall time, {jobs} jobs){}{}",
        failed.len(),
        Duration::from_millis(simulated_ms),
        started.elapsed(),
        if failed.is_empty() {
            String::new()
        } else {
            format!("; failing seeds: {failed:?}")
        },
        if broken {
            "; a job ended without its summary (crashed or killed): see above"
        } else {
            ""
        }
    );
    if failed.is_empty() && !broken {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
