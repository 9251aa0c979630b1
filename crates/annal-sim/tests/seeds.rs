//! The simulation's budget for `cargo test`: a few seeds, each run twice for the determinism check.
//!
//! - `SIM_SEEDS=n` runs seeds 0..n (default 8 in a release build, as CI runs it; 2 in a debug build);
//!   `SIM_SEED=s` runs only seed `s` and prints its trace (a replay).
//! - `SIM_SECONDS=t` sets the simulated seconds of faults per seed (default 30 in release, 15 in debug).
//! - `SIM_TICK_MS=ms` sets the simulation's step (default 2, `annal_sim::TICK`).
//! - `SIM_STRICT_TERMS=1` fails a seed on two leaders in one term (a known finding, decision 0011).
//! - `SIM_TEETH_SEEDS=n` bounds the planted-fault search (the checks' teeth; default 10).
//! - `SIM_POWER_LOSSES=n`: how many crashes of a run may be power losses (default 1, `Options::power_losses`).
//! - `SIM_DISK_FULLS=n`: how many full-disk windows a broker run may have (default 1, `Options::disk_fulls`);
//!   `SIM_DISK_FULL_METADATA=1` fills the metadata log too (`Options::disk_full_metadata`);
//! - `SIM_FSYNC_FAULTS=n`: how many failing- or slow-fsync windows a broker run may have (default 1,
//!   `Options::fsync_faults`).
//! - `SIM_BROKER_SEEDS=n`: seeds of the real brokers (`Options::brokers`: three combined nodes, producers and
//!   a reader; default 2 in release, 1 in debug), each run twice; `SIM_BROKERS=1 SIM_SEED=s` replays one.
//! - The long mode is the binary: `cargo run --release -p annal-sim -- --seeds 10000 [--twice]`.

use std::time::Duration;

use annal_metadata::env::testing::PlantedBug;
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
        "seed {}: hash {:016x}, {} events, {} faults, {} topics + {} registrations + {} acks=all writes acked, \
         {} committed, term {}, {:?} simulated in {:?}",
        r.seed,
        r.trace_hash,
        r.events,
        r.faults.len(),
        r.acked_topics,
        r.acked_registrations,
        r.acked_writes,
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
    if std::env::var("SIM_BROKERS").is_ok_and(|v| v == "1") {
        // A replay of a broker seed: `brokers_pass_and_replay_identically` runs it.
        return;
    }
    let seeds: Vec<u64> = match env_u64("SIM_SEED") {
        Some(s) => vec![s],
        None => (0..env_u64("SIM_SEEDS").unwrap_or(if RELEASE { 8 } else { 2 })).collect(),
    };
    run_twice_each(seeds, options(true));
}

/// The real brokers: three combined nodes with an idempotent acks=all producer, an acks=1 producer, an acks=0
/// producer, topics created during the faults and a reader, under the seed's faults; every replication check
/// passes and each seed replays bit for bit. The release default (seeds 0 and 1) covers seed 1, which found
/// the ISR loop waiting behind a forwarded admin request (`isr_changes_do_not_wait_behind_a_forwarded_admin_request`).
#[test]
fn brokers_pass_and_replay_identically() {
    let replay = std::env::var("SIM_BROKERS").is_ok_and(|v| v == "1");
    let seeds: Vec<u64> = match env_u64("SIM_SEED") {
        Some(s) if replay => vec![s],
        Some(_) => return,
        None => (0..env_u64("SIM_BROKER_SEEDS").unwrap_or(if RELEASE { 2 } else { 1 })).collect(),
    };
    let seconds = if RELEASE { 30 } else { 10 };
    let options = Options {
        fault_phase: Duration::from_secs(env_u64("SIM_SECONDS").unwrap_or(seconds)),
        keep_trace: true,
        brokers: true,
        ..Options::default()
    };
    run_twice_each(seeds, options);
}

/// Regression, broker seed 1 of 30 s (the acks=0 and topic creation workload): n1 forwarded a CreateTopics to the
/// controller just before it was isolated, and that request held n1's admin channel to the controller for its
/// 60 s timeout. The ISR loop sent AlterPartition on the same channel, so after the faults healed n1 could not
/// ask for any expansion: `plain-0` stayed at ISR [1] with every replica at log end 639 and, with
/// min.insync.replicas 2, its high watermark stood at 425 (the run never converged). ISR changes now have their
/// own channel (`ClusterRuntime::isr_channel`). Runs in debug builds too, where the default budget is seed 0.
#[test]
fn isr_changes_do_not_wait_behind_a_forwarded_admin_request() {
    if std::env::var("SIM_SEED").is_ok() {
        // A replay of one seed: the tests above run it.
        return;
    }
    let options = Options {
        fault_phase: Duration::from_secs(30),
        keep_trace: true,
        brokers: true,
        // The schedule that found it: every crash a process crash, as before power losses existed.
        power_losses: 0,
        disk_fulls: 0,
        fsync_faults: 0,
        tcp_timeouts: false,
        group_members: false,
        zombie_producer: false,
        torn_writes: false,
        faulty_disk_start: false,
        ..Options::default()
    };
    let report = run_passing(1, &options);
    // The workload the seed needs: topics created during the faults (the forwarded CreateTopics).
    assert!(
        report.acked_topics > 2,
        "seed 1 created no topic during the faults; the regression no longer exercises a forwarded CreateTopics"
    );
}

/// Regression, broker seed 31 of 60 s with one power loss: `plain-0`'s ISR had shrunk to its leader n2 (below
/// min.insync.replicas, so n1 and n3, which held its 91 committed records, were in its ELR). n2 lost power and its
/// unflushed writes; n1 and n3 crashed as processes only, keeping every write in the page cache. All three
/// restarts counted as unclean (KIP-966), which emptied the ELR, and the controller recovered the partition on its
/// last known leader, n2, with an empty log: n1 and n3 truncated all 91 records (a value read below the high
/// watermark later read differently). A restart on the same machine boot now shows the controller its last
/// epoch (`annal_broker::clean_shutdown`, `.annal_running`), so n1 and n3 keep their ELR places and one of them
/// leads. Fails without that fix.
#[test]
fn a_process_crash_keeps_its_elr_place_when_the_last_leader_lost_power() {
    if std::env::var("SIM_SEED").is_ok() {
        return;
    }
    let options = Options {
        fault_phase: Duration::from_secs(60),
        keep_trace: true,
        brokers: true,
        power_losses: 1,
        disk_fulls: 0,
        fsync_faults: 0,
        tcp_timeouts: false,
        group_members: false,
        zombie_producer: false,
        torn_writes: false,
        faulty_disk_start: false,
        ..Options::default()
    };
    let report = run_passing(31, &options);
    assert!(
        report
            .trace
            .iter()
            .any(|(_, e)| e.starts_with("power loss: n2 lost the unsynced tails")),
        "seed 31 no longer cuts n2's unflushed writes; the regression no longer exercises a power loss"
    );
}

/// A full disk on one broker, in the middle of the writes: seed 8's n3 refuses segment and index writes
/// (leader appends answered KAFKA_STORAGE_ERROR, follower fetches failing to append, each partial write taken
/// out again), and nothing acknowledged is lost, nothing read changes, the replicas converge once it is freed.
#[test]
fn a_full_disk_on_one_broker_refuses_its_writes_and_loses_nothing() {
    if std::env::var("SIM_SEED").is_ok() {
        // A replay of one seed: the tests above run it.
        return;
    }
    let report = full_disk_run(false);
    assert!(
        refused_on_n3(&report) > 0,
        "seed 8 no longer fills n3's disk while it is written; pick another seed for this test"
    );
}

/// The same with the metadata quorum's log on the full disk too: n3's Raft fails on the metadata log's ENOSPC,
/// the broker halts (as Kafka's does) and is started again once its disk has room, then catches up.
#[test]
fn a_broker_whose_metadata_log_cannot_be_written_halts_and_recovers_after_a_restart() {
    if std::env::var("SIM_SEED").is_ok() {
        // A replay of one seed: the tests above run it.
        return;
    }
    let report = full_disk_run(true);
    let has = |event: &str| report.trace.iter().any(|(_, e)| e == event);
    assert!(
        refused_on_n3(&report) > 0 && has("n3 halted") && has("n3 started again"),
        "seed 8 no longer makes n3 halt on its full metadata log and restart; pick another seed for this test"
    );
}

/// Failing fsyncs: seed 49 of 60 s fails n1's fsyncs while n1 leads `__consumer_offsets-0` (flush.messages=1, so
/// every commit fsyncs). The engine stops trusting the log, the broker halts (as Kafka's does when its only log
/// directory fails), the file whose fsync failed loses what it had not fsynced, and once restarted n1 recovers and
/// catches up: no acknowledged write or commit lost, replicas identical. Slow fsyncs: seed 11 of 60 s slows n2's (its commits and metadata appends wait).
#[test]
fn a_broker_whose_fsync_fails_halts_and_recovers_and_a_slow_one_only_waits() {
    if std::env::var("SIM_SEED").is_ok() {
        // A replay of one seed: the tests above run it.
        return;
    }
    let options = pinned_broker_options();
    let report = run_passing(49, &options);
    let has =
        |report: &Report, prefix: &str| report.trace.iter().any(|(_, e)| e.starts_with(prefix));
    assert!(
        has(&report, "n1's log directory failed (fsync of ")
            && has(&report, "n1 halted")
            && has(&report, "failed fsyncs: n1 lost the unsynced tails of ")
            && has(&report, "n1 started again"),
        "seed 49 no longer halts n1 on a failed fsync and restarts it; pick another seed for this test"
    );
    let report = run_passing(11, &options);
    let slowed: u64 = report
        .trace
        .iter()
        .filter_map(|(_, e)| e.strip_prefix("n2's disk slowed "))
        .filter_map(|rest| rest.split(' ').next()?.parse::<u64>().ok())
        .sum();
    assert!(
        slowed > 0,
        "seed 11 no longer slows an fsync of n2; pick another seed for this test"
    );
}

/// Regression, broker seed 2250 of 60 s (no fsync faults): n3 lost the leadership of `__consumer_offsets-0`
/// while cut off and, back in touch with the client but not yet with the metadata quorum, answered the
/// committer's OffsetFetch from its own cache: offsets older than commits the new coordinator had acknowledged
/// (a consumer starting from them would process records again). The coordinator now proves its leadership with a
/// read barrier before it answers (`GroupCoordinator::read_barrier`). Fails without it.
#[test]
fn a_coordinator_that_lost_its_leadership_unknowingly_does_not_answer_stale_offsets() {
    if std::env::var("SIM_SEED").is_ok() {
        return;
    }
    let options = Options {
        fsync_faults: 0,
        ..pinned_broker_options()
    };
    run_passing(2250, &options);
}

/// Regression, broker seed 268 of 60 s: n3, a follower of `__consumer_offsets-0`, wrote a batch of epoch 5 whose
/// fsync then failed; its epoch cache, updated only after a successful append, never got epoch 5, but the batch
/// stayed in the file and recovery kept it. Once n3 led, it answered the follower holding the same batch with
/// "epoch 2 ends at 662"; the follower truncated to 659, fetched the epoch-5 batch again and diverged again, for
/// good (its ISR never grew back: no commit or OffsetFetch after healing). A follower now records a batch's epoch
/// before it writes the batch, as Kafka's does. Fails without that fix.
#[test]
fn a_follower_records_a_batch_epoch_before_the_batch() {
    if std::env::var("SIM_SEED").is_ok() {
        return;
    }
    let options = pinned_broker_options();
    run_passing(268, &options);
}

/// Regression, broker seed 467 of 60 s: a new transaction coordinator loaded a PrepareCommit that only it had
/// (above its partition's high watermark), sent COMMIT (one partition's leader wrote it), and lost the leadership
/// to a replica without that record, for which the transaction was still open and which aborted it: the
/// transaction read as committed on one partition only. A loaded Prepare's markers now wait until everything
/// loaded is committed. Fails without that fix.
#[test]
fn a_loaded_transaction_decision_is_acted_on_only_once_committed() {
    if std::env::var("SIM_SEED").is_ok() {
        return;
    }
    let options = pinned_broker_options();
    run_passing(467, &options);
}

/// Regression, broker seed 294 of 60 s with real TCP's timeouts: n1, the active controller, crashed after
/// appending an AlterPartition's result (plain-0's ISR to [3], ELR [2, 1]) it never saw committed, restarted and
/// resumed its Raft term as leader, and decided its own unclean re-registration (1 leaves every ISR) against an
/// image without that entry: ISR [3, 2] on top of ELR [2, 1]. The entry did not apply and every node's metadata
/// froze. The controller now decides only once its image holds every entry of its log, and refuses a write
/// whose decision the log has moved past. Fails without that fix ("n2 stopped applying the metadata log").
#[test]
fn a_controller_decides_only_against_everything_its_log_holds() {
    if std::env::var("SIM_SEED").is_ok() {
        return;
    }
    let options = Options {
        tcp_timeouts: true,
        ..pinned_broker_options()
    };
    run_passing(294, &options);
}

/// Torn last writes, broker seed 0 of 60 s with today's workload: n3 loses power at 28 s and its files keep
/// different parts of their unsynced tails (`replicated-0` and `replicated-1` their new lengths with zeros from
/// some point on, `plain-0` and `txn-0` a prefix cut mid-batch, `__transaction_state-0` most of it lost).
/// Recovery must cut each at its first batch that does not check out, and the replica then catches up from the
/// leader: nothing acknowledged is lost, no value read changes, the replicas agree.
#[test]
fn a_torn_last_write_is_cut_at_its_first_bad_batch_and_loses_nothing_acknowledged() {
    if std::env::var("SIM_SEED").is_ok() {
        return;
    }
    let options = Options {
        tcp_timeouts: true,
        group_members: true,
        zombie_producer: true,
        torn_writes: true,
        faulty_disk_start: false,
        ..pinned_broker_options()
    };
    let report = run_passing(0, &options);
    let power_loss = report
        .trace
        .iter()
        .find_map(|(_, e)| e.strip_prefix("power loss: n3 lost the unsynced tails of "))
        .expect("seed 0 no longer has n3 lose power; the test no longer exercises torn writes");
    assert!(
        power_loss.contains("replicated-0/00000000000000000000.log")
            && power_loss.contains(" zeros from "),
        "seed 0's power loss no longer leaves zeros in a data partition's segment: {power_loss}"
    );
}

/// Starts on a faulty disk, broker seeds 6 and 1 of 60 s: a full disk covers n1's restart in seed 6 (its start
/// cannot rebuild `__consumer_offsets-0`'s index: ENOSPC) and a disk failing fsyncs in seed 1 (its start cannot
/// flush the recovered log). Each start exits with the partition and file named, the node is started again once
/// its disk is healthy, and the run loses nothing acknowledged.
#[test]
fn a_start_its_faulty_disk_refuses_exits_and_the_next_one_recovers() {
    if std::env::var("SIM_SEED").is_ok() {
        return;
    }
    let options = Options {
        tcp_timeouts: true,
        group_members: true,
        zombie_producer: true,
        torn_writes: true,
        faulty_disk_start: true,
        ..pinned_broker_options()
    };
    for (seed, refusal) in [(6, "No space left on device"), (1, "an earlier fsync")] {
        let report = run_passing(seed, &options);
        let refused = report.trace.iter().position(|(_, e)| {
            e.starts_with("n1 did not start on its faulty disk") && e.contains(refusal)
        });
        let Some(refused) = refused else {
            panic!("seed {seed} no longer starts n1 on a faulty disk ({refusal}); the test no longer exercises it");
        };
        assert!(
            report.trace[refused..]
                .iter()
                .any(|(_, e)| e == "n1 started again"),
            "seed {seed}: n1 was not started again after its disk recovered"
        );
    }
}

/// Regression, broker seeds 90 and 55 of 60 s with the group members: the coordinator answered the leader's
/// SyncGroup (and so every member's) before the generation's metadata was committed to `__consumer_offsets`, and
/// even when the write was refused (its ISR below min.insync.replicas). A coordinator elected next loaded the
/// previous generation: in seed 90 it handed generation 1 out again with other owners (two members owned
/// `replicated-0` in generation 1), in seed 55 it accepted a commit of generation 1 after generation 2 had
/// completed SyncGroup (a stale member not fenced). SyncGroup now answers once the write is committed, and a
/// write that fails makes the group rebalance, as Kafka's coordinator does. Both fail without that fix.
#[test]
fn a_generation_is_handed_out_only_once_committed() {
    if std::env::var("SIM_SEED").is_ok() {
        return;
    }
    let options = Options {
        tcp_timeouts: true,
        group_members: true,
        ..pinned_broker_options()
    };
    let report = run_passing(90, &options);
    let synced = |report: &Report| {
        report
            .trace
            .iter()
            .filter(|(_, e)| e.starts_with("member ") && e.contains(" synced generation "))
            .count()
    };
    assert!(
        synced(&report) > 0,
        "seed 90 no longer syncs a generation; the regression no longer exercises SyncGroup"
    );
    let report = run_passing(55, &options);
    assert!(
        synced(&report) > 1,
        "seed 55 no longer syncs two generations; the regression no longer exercises a stale member"
    );
}

/// Regression, broker seed 1099 of 60 s with three full-disk windows that may fill the metadata log: n3 wrote
/// generation 1 of `sim-consumers` to `__consumer_offsets-0` and crashed before it was committed; n2, elected
/// with that tail in its log, loaded the group and answered a member's SyncGroup from it at once; n1, elected
/// later without the tail, made n2 truncate it, and generation 1 was handed out again with other owners. A
/// stable group's SyncGroup now answers once everything in the partition's log is committed. Fails without that
/// fix.
#[test]
fn a_loaded_assignment_is_handed_out_only_once_committed() {
    if std::env::var("SIM_SEED").is_ok() {
        return;
    }
    let options = Options {
        tcp_timeouts: true,
        group_members: true,
        disk_fulls: 3,
        disk_full_metadata: true,
        ..pinned_broker_options()
    };
    let report = run_passing(1099, &options);
    assert!(
        report
            .trace
            .iter()
            .any(|(_, e)| e.starts_with("member ") && e.contains(" synced generation ")),
        "seed 1099 no longer syncs a generation; the regression no longer exercises SyncGroup"
    );
}

/// Seed 8 of 30 s with one full-disk window (n3's), once; fails the test on any violation.
fn full_disk_run(metadata: bool) -> Report {
    let options = Options {
        fault_phase: Duration::from_secs(30),
        keep_trace: true,
        brokers: true,
        power_losses: 1,
        disk_fulls: 1,
        disk_full_metadata: metadata,
        fsync_faults: 0,
        tcp_timeouts: false,
        group_members: false,
        zombie_producer: false,
        torn_writes: false,
        faulty_disk_start: false,
        ..Options::default()
    };
    run_passing(8, &options)
}

fn refused_on_n3(report: &Report) -> u64 {
    report
        .trace
        .iter()
        .filter_map(|(_, e)| e.strip_prefix("n3's full disk refused "))
        .filter_map(|rest| rest.split(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// A pinned broker seed's options: 60 s of faults with one power loss, one full disk and one fsync fault, set
/// here rather than from the defaults or `SIM_*` variables, so a pinned run never changes under a test.
fn pinned_broker_options() -> Options {
    Options {
        fault_phase: Duration::from_secs(60),
        keep_trace: true,
        brokers: true,
        power_losses: 1,
        disk_fulls: 1,
        fsync_faults: 1,
        tcp_timeouts: false,
        group_members: false,
        zombie_producer: false,
        torn_writes: false,
        faulty_disk_start: false,
        ..Options::default()
    }
}

/// Runs `seed` once, prints its summary, and fails the test (with the trace's tail and the replay command) on
/// any violation: the pinned regression seeds' common part.
fn run_passing(seed: u64, options: &Options) -> Report {
    let report = run_seed(seed, options);
    println!("{}", describe(&report));
    if !report.passed() {
        fail(&report);
    }
    report
}

fn run_twice_each(seeds: Vec<u64>, options: Options) {
    let replaying = seeds.len() == 1 && env_u64("SIM_SEED").is_some();
    for seed in seeds {
        let first = run_seed(seed, &options);
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
        assert!(
            !options.brokers || first.acked_writes > 0,
            "seed {seed}: no acks=all write was acknowledged"
        );
        let again = run_seed(seed, &options);
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

/// The replication checks have teeth: each bug planted in the real broker or controller
/// (`annal_metadata::env::testing`) is caught within `SIM_TEETH_SEEDS` seeds (default 10) of 30 simulated
/// seconds. As of this writing: the high watermark before the ISR has the data at seed 0 (an acks=all write
/// acknowledged while one replica holds it, within the first second); truncation to the high watermark at
/// seed 0 (the same check, after the first leader change); a leader elected outside the ISR at seed 1 (a value
/// read below the high watermark later reads differently), seed 0 passing; an acknowledgement counted on an ISR
/// shrink the controller has not committed yet at seed 0 (6 of seeds 0-7: an acks=all write acknowledged while
/// a live member of the committed ISR lacks it). A read_committed Fetch served up to the high watermark rather
/// than the last stable offset: see [`planted_transaction_bugs_are_caught`].
#[test]
fn planted_replication_bugs_are_caught() {
    for bug in [
        PlantedBug::HighWatermarkBeforeIsr,
        PlantedBug::TruncateToHighWatermark,
        PlantedBug::ElectOutsideIsr,
        PlantedBug::AckBeforeIsrCommitted,
    ] {
        assert_caught(bug);
    }
}

/// Runs broker seeds of 30 s with `bug` planted until one fails, up to `SIM_TEETH_SEEDS` (default 10) seeds.
fn assert_caught(bug: PlantedBug) {
    let budget = env_u64("SIM_TEETH_SEEDS").unwrap_or(10);
    let options = Options {
        fault_phase: Duration::from_secs(30),
        planted: Planted::Replication(bug),
        brokers: true,
        ..Options::default()
    };
    let caught = (0..budget).find_map(|seed| {
        let report = run_seed(seed, &options);
        (!report.passed()).then_some(report)
    });
    match caught {
        Some(report) => println!(
            "planted {bug:?} caught at seed {}: {}\n  replay: {}",
            report.seed,
            report.violations.join("; "),
            report.replay_commands()
        ),
        None => panic!("planted {bug:?} went unnoticed for {budget} seeds"),
    }
}

/// The transaction checks have teeth, each bug planted in the real broker caught within `SIM_TEETH_SEEDS` seeds
/// (default 10) of 30 simulated seconds:
/// - a read_committed Fetch that reads up to the high watermark instead of the last stable offset
///   (`PlantedBug::ReadCommittedAboveStable`), by the read_committed reader of `transactions.rs` (a record served
///   at or above the last stable offset; records of a transaction later aborted);
/// - a coordinator that keeps a fenced producer's epoch as the one a KIP-360 retry may claim
///   (`PlantedBug::FencedEpochCountsAsRetry`, the bug franz-go's zombie test found): the producer the usurper
///   fenced re-initialises with its old epoch and is handed the usurper's. As of this writing caught at seeds 0,
///   3, 4 and 9 of 0-9 (the usurper's InitProducerId must land in a moment the coordinator is reachable).
#[test]
fn planted_transaction_bugs_are_caught() {
    for bug in [
        PlantedBug::ReadCommittedAboveStable,
        PlantedBug::FencedEpochCountsAsRetry,
    ] {
        assert_caught(bug);
    }
}

/// Regression (the transactional workload): the coordinator timed transactions out on the wall clock, which in
/// the simulator runs at the machine's speed, so the transaction the producer abandons at the end of every run
/// (records on both partitions, no EndTxn, a 2 s timeout) was never aborted: its partitions' last stable offset
/// stayed below the high watermark and the run never converged (broker seeds 0 and 1 of 30 s, checked with the
/// old decision put back). Timeouts now run on the monotonic clock (`TxnMetadata::timeout_origin_monotonic_ms`).
#[test]
fn a_transaction_its_producer_abandoned_is_aborted_by_its_timeout() {
    if std::env::var("SIM_SEED").is_ok() {
        return;
    }
    let options = Options {
        fault_phase: Duration::from_secs(30),
        keep_trace: true,
        brokers: true,
        ..Options::default()
    };
    let report = run_passing(0, &options);
    // The run must have abandoned a transaction with records, or this test no longer tests the timeout.
    assert!(
        report
            .trace
            .iter()
            .any(|(_, e)| e.contains("abandoned (epoch")),
        "seed 0 abandoned no transaction; the regression no longer exercises the coordinator's timeout"
    );
}

/// KIP-848 consumers ([`annal_sim::consumer_members`], an opt-in workload): no partition has two owners at once
/// across coordinator failovers, and the members' commits (with their member epochs) never move backwards, in
/// seeds 0-3 (each run twice: the same trace); and the ownership check has teeth: a coordinator that forgets the
/// group's members when it loads their partition (`PlantedBug::ForgetConsumerGroupMembers`, Annal before
/// 2026-12-06) is caught within `SIM_TEETH_SEEDS` seeds of 30 s. As of this writing at seeds 4, 5, 14 and 15 of 0-19 (both members fenced by the forgetful coordinator; one rejoins and is
/// given everything before the other has heard it was fenced); 100 of 100 seeds pass without it.
#[test]
fn consumer_group_members_never_share_a_partition_and_a_forgetful_coordinator_is_caught() {
    if std::env::var("SIM_SEED").is_ok() {
        return;
    }
    let options = Options {
        fault_phase: Duration::from_secs(30),
        brokers: true,
        consumer_members: true,
        ..Options::default()
    };
    run_twice_each((0..4).collect(), options.clone());
    let budget = env_u64("SIM_TEETH_SEEDS").unwrap_or(10);
    let planted = Options {
        planted: Planted::Replication(PlantedBug::ForgetConsumerGroupMembers),
        ..options
    };
    let caught = (0..budget).find_map(|seed| {
        let report = run_seed(seed, &planted);
        (!report.passed()).then_some(report)
    });
    match caught {
        Some(report) => println!(
            "a coordinator that forgets its KIP-848 members caught at seed {}: {}\n  replay: {}",
            report.seed,
            report.violations.join("; "),
            report.replay_commands()
        ),
        None => panic!(
            "a coordinator that forgets its KIP-848 members went unnoticed for {budget} seeds"
        ),
    }
}
