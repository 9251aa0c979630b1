//! Deterministic simulation of Annal's cluster (docs/decisions/0011-simulation.md, issue 11).
//!
//! One seed runs, in one process and one thread, three metadata voters (the real `MetadataNode`: openraft, the
//! metadata log on disk, the image, the `Controller`, the CONTROLLER listener) on turmoil's simulated network
//! and clock, plus a client that plays three brokers (registration and heartbeats over the wire) and creates
//! topics through the active controller. Faults come from the seed ([`faults`]): delayed, held and dropped
//! messages, symmetric and asymmetric partitions, a node cut off, process crash and restart, clock jumps.
//! Invariants ([`history`]) are checked as events arrive and after healing; the trace's hash is the run's
//! fingerprint, equal for equal seeds.
//!
//! Running it:
//! - `cargo test -p annal-sim` runs a small budget of seeds (`SIM_SEEDS=n` for more, `SIM_SEED=s` for one).
//! - `cargo run --release -p annal-sim -- --seeds 1000` runs many; `--seed S --trace` replays one and prints
//!   its trace.

pub mod client;
pub mod committer;
pub mod consumer_members;
pub mod faults;
pub mod group_members;
pub mod history;
pub mod net;
pub mod node_logs;
mod panic_recorder;
pub mod replication;
pub mod transactions;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use annal_metadata::controller::ControllerConfig;
use annal_metadata::env::testing::{self, PlantedBug, Testing};
use annal_metadata::env::{DiskIo, NodeEnv};
use annal_metadata::{listener, MetadataNode, MetadataNodeConfig};
use kafka_protocol::messages::broker_registration_request::{Feature, Listener as BrokerListener};
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::{
    ApiKey, BrokerHeartbeatRequest, BrokerHeartbeatResponse, BrokerId, BrokerRegistrationRequest,
    BrokerRegistrationResponse, CreateTopicsRequest, CreateTopicsResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use client::{ControllerChannel, NOT_CONTROLLER};
use faults::{Fault, Scheduled};
use history::History;
use net::{SimListener, SimNetwork};

pub(crate) const VOTERS: i32 = 3;
pub(crate) const CONTROLLER_PORT: u16 = 9093;
pub(crate) const BROKER_PORT: u16 = 9092;
pub(crate) const CLUSTER_ID: &str = "annal-sim-cluster";
/// controller.quorum.election.timeout.ms; each boot of a voter draws its fixed timeout from [t, 2t).
pub(crate) const ELECTION_TIMEOUT_MS: u64 = 1000;
/// How often a voter looks whether it leads (the leader-per-term check samples at this rate).
pub(crate) const LEADER_SAMPLE: Duration = Duration::from_millis(10);
/// After the faults end and everything is healed, the cluster has this long to take a write and apply it
/// everywhere.
pub(crate) const CONVERGENCE_MAX: Duration = Duration::from_secs(40);

/// A fault outside what Raft promises to survive, planted to show that the checks catch what it breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Planted {
    #[default]
    Nothing,
    /// A crashed voter restarts without its `quorum-state` file: it forgets its vote (as if the vote were
    /// never fsynced) and may vote twice in one term.
    ForgetVoteOnCrash,
    /// A crashed voter restarts with an empty data directory: it forgets its vote and its log, and a majority
    /// that includes it may elect a leader that lacks committed entries.
    WipeDiskOnCrash,
    /// A replication bug planted in the real broker or controller (`annal_metadata::env::testing`); needs
    /// [`Options::brokers`].
    Replication(PlantedBug),
}

/// What one run does.
#[derive(Debug, Clone)]
pub struct Options {
    /// Simulated time with faults; healing and the convergence check follow.
    pub fault_phase: Duration,
    /// Keep the whole trace in the report (it is always hashed).
    pub keep_trace: bool,
    /// A planted fault (tests of the checks only).
    pub planted: Planted,
    /// Two leaders in one term fail the run instead of being a finding ([`history::History::strict_terms`]).
    pub strict_terms: bool,
    /// Run the real brokers (three combined nodes, [`replication`]) with a producing and reading client,
    /// instead of the metadata voters with a client that plays the brokers.
    pub brokers: bool,
    /// The simulation's step: how often turmoil delivers messages between hosts and steps every host's
    /// runtime ([`TICK`]; `SIM_TICK_MS`). Inside a host, timers still fire at their own millisecond.
    pub tick: Duration,
    /// How many of a run's crashes may be power losses: the crashed node also loses what it wrote to its segment
    /// files and did not fsync (`annal_log::page_cache`). Each crash is one with even odds (from the seed) while
    /// the budget lasts; the others are process crashes, whose writes the machine's page cache keeps.
    /// [`DEFAULT_POWER_LOSSES`] unless set (`--power-losses N`, `SIM_POWER_LOSSES`); see
    /// docs/decisions/0011-simulation.md for what a power loss may cost.
    pub power_losses: u32,
    /// How many full-disk windows a broker run may have (`Fault::DiskFull`, on a stream of their own):
    /// [`DEFAULT_DISK_FULLS`] unless set (`--disk-fulls N`, `SIM_DISK_FULLS`). Metadata-only runs have none
    /// (their nodes write only the metadata quorum's log, which the fault leaves writable).
    pub disk_fulls: u32,
    /// Whether a full disk also refuses the metadata quorum's log (`--disk-full-metadata`,
    /// `SIM_DISK_FULL_METADATA=1`): the node's Raft then fails and its broker halts, and the driver restarts it
    /// once the disk has room. Off by default: a run with halts does not yet replay identically (decision 0011).
    pub disk_full_metadata: bool,
    /// How many fsync-fault windows a broker run may have (`Fault::FsyncFails` or `Fault::SlowFsync`, even
    /// odds, on a stream of their own): [`DEFAULT_FSYNC_FAULTS`] unless set (`--fsync-faults N`,
    /// `SIM_FSYNC_FAULTS`). With [`Options::disk_full_metadata`] a failing disk fails the metadata log's fsyncs
    /// too.
    pub fsync_faults: u32,
    /// Whether a connection attempt over a cut link times out, as real TCP's does, instead of being refused at
    /// once, as turmoil's is (`net.rs`). On by default; `--turmoil-refusals` (`SIM_TCP_TIMEOUTS=0`) turns it off,
    /// to replay a seed found before it was (decision 0011).
    pub tcp_timeouts: bool,
    /// Whether a `--brokers` run's workload has consumers in a group ([`group_members`]): members that join, sync,
    /// heartbeat and commit with their generation. On by default; `--no-group-members` (`SIM_GROUP_MEMBERS=0`)
    /// leaves them out, to replay a seed found before they existed.
    pub group_members: bool,
    /// Whether a `--brokers` run's transactional workload has zombies: its producer recovers from a failed
    /// transaction with KIP-360's InitProducerId (its id and epoch), and a second producer instance of its
    /// transactional id ([`transactions::usurper`]) takes the id over once, during the faults, which fences the
    /// first; the fenced one's re-init must be refused. On by default; `--no-zombie-producer`
    /// (`SIM_ZOMBIE_PRODUCER=0`) leaves both out (the producer then always starts over with a fresh
    /// InitProducerId), to replay a seed found before they existed.
    pub zombie_producer: bool,
    /// Whether a power loss tears the last writes instead of losing them whole: each file with unsynced bytes
    /// keeps none of them, a prefix of them, or its new length with zeros from some point on (drawn from a stream
    /// of its own; `annal_log::page_cache::Tear`), and recovery must cut it at the first batch that does not
    /// check out. On by default; `--no-torn-writes` (`SIM_TORN_WRITES=0`) loses every unsynced tail whole, to
    /// replay a seed found before torn writes existed.
    pub torn_writes: bool,
    /// Whether a `--brokers` run may restart a node on a faulty disk: with even odds, a full or fsync-failing
    /// disk window covers one crashed node's restart ([`faults::add_faulty_disk_start`], a stream of its own).
    /// A start the disk refuses exits, and the node is started again once the window ends, as a supervisor
    /// would. On by default; `--no-faulty-disk-start` (`SIM_FAULTY_DISK_START=0`) leaves it out, to replay a
    /// seed found before it existed.
    pub faulty_disk_start: bool,
    /// Whether a `--brokers` run's workload has KIP-848 consumers ([`consumer_members`]): members of the consumer
    /// group protocol whose partitions must never have two owners at once, across coordinator failovers. Off by
    /// default (it changes every seed's run); `--consumer-members` (`SIM_CONSUMER_MEMBERS=1`) adds them.
    pub consumer_members: bool,
}

/// [`Options::fsync_faults`] unless set.
pub const DEFAULT_FSYNC_FAULTS: u32 = 1;

/// [`Options::disk_fulls`] unless set.
pub const DEFAULT_DISK_FULLS: u32 = 1;

/// [`Options::power_losses`] unless set.
pub const DEFAULT_POWER_LOSSES: u32 = 1;

/// The default step. Each step costs every host's runtime a `block_on` whatever happens in it, which was most
/// of a run's CPU at 1 ms; a message between hosts takes at least one step.
pub const TICK: Duration = Duration::from_millis(2);

impl Default for Options {
    fn default() -> Self {
        Options {
            fault_phase: Duration::from_secs(30),
            keep_trace: false,
            planted: Planted::Nothing,
            strict_terms: std::env::var("SIM_STRICT_TERMS").is_ok_and(|v| v == "1"),
            brokers: std::env::var("SIM_BROKERS").is_ok_and(|v| v == "1"),
            tick: std::env::var("SIM_TICK_MS")
                .ok()
                .and_then(|v| v.parse().ok())
                .filter(|ms| *ms > 0)
                .map_or(TICK, Duration::from_millis),
            power_losses: std::env::var("SIM_POWER_LOSSES")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(DEFAULT_POWER_LOSSES),
            disk_fulls: std::env::var("SIM_DISK_FULLS")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(DEFAULT_DISK_FULLS),
            disk_full_metadata: std::env::var("SIM_DISK_FULL_METADATA").is_ok_and(|v| v == "1"),
            fsync_faults: std::env::var("SIM_FSYNC_FAULTS")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(DEFAULT_FSYNC_FAULTS),
            tcp_timeouts: std::env::var("SIM_TCP_TIMEOUTS").map_or(true, |v| v != "0"),
            group_members: std::env::var("SIM_GROUP_MEMBERS").map_or(true, |v| v != "0"),
            zombie_producer: std::env::var("SIM_ZOMBIE_PRODUCER").map_or(true, |v| v != "0"),
            torn_writes: std::env::var("SIM_TORN_WRITES").map_or(true, |v| v != "0"),
            faulty_disk_start: std::env::var("SIM_FAULTY_DISK_START").map_or(true, |v| v != "0"),
            consumer_members: std::env::var("SIM_CONSUMER_MEMBERS").is_ok_and(|v| v == "1"),
        }
    }
}

/// How a run went.
#[derive(Debug, Clone)]
pub struct Report {
    pub seed: u64,
    /// FNV-1a over every traced event: the run's fingerprint.
    pub trace_hash: u64,
    pub events: usize,
    pub faults: Vec<Scheduled>,
    pub acked_topics: usize,
    pub acked_registrations: usize,
    /// acks=all writes the brokers acknowledged (`Options::brokers`).
    pub acked_writes: usize,
    pub committed_entries: usize,
    /// The highest term any voter led.
    pub max_term: u64,
    /// Simulated time the run took.
    pub simulated: Duration,
    /// Wall-clock time the run took.
    pub wall: Duration,
    pub violations: Vec<String>,
    /// Known divergences seen (reported, not failures).
    pub findings: Vec<String>,
    /// What the run was asked to do (for the replay command).
    pub options: Options,
    /// The trace, when [`Options::keep_trace`] asked for it.
    pub trace: Vec<(u64, String)>,
}

impl Report {
    pub fn passed(&self) -> bool {
        self.violations.is_empty()
    }

    /// The commands that replay this seed with the same options, printing its trace.
    pub fn replay_commands(&self) -> String {
        let seconds = self.options.fault_phase.as_secs();
        let strict = self.options.strict_terms;
        let (env_strict, flag_strict) = if strict {
            ("SIM_STRICT_TERMS=1 ", " --strict-terms")
        } else {
            ("", "")
        };
        let flag_planted = match self.options.planted {
            Planted::Nothing => "",
            Planted::ForgetVoteOnCrash => " --plant-forget-vote",
            Planted::WipeDiskOnCrash => " --plant-wipe-disk",
            Planted::Replication(PlantedBug::HighWatermarkBeforeIsr) => " --plant-hw-before-isr",
            Planted::Replication(PlantedBug::TruncateToHighWatermark) => " --plant-truncate-to-hw",
            Planted::Replication(PlantedBug::ElectOutsideIsr) => " --plant-elect-outside-isr",
            Planted::Replication(PlantedBug::AckBeforeIsrCommitted) => {
                " --plant-ack-before-isr-commit"
            }
            Planted::Replication(PlantedBug::ReadCommittedAboveStable) => {
                " --plant-read-committed-above-stable"
            }
            Planted::Replication(PlantedBug::FencedEpochCountsAsRetry) => {
                " --plant-fenced-epoch-retry"
            }
            Planted::Replication(PlantedBug::ForgetConsumerGroupMembers) => {
                " --plant-forget-consumer-members"
            }
            Planted::Replication(PlantedBug::Nothing) => "",
        };
        let (env_brokers, flag_brokers) = if self.options.brokers {
            ("SIM_BROKERS=1 ", " --brokers")
        } else {
            ("", "")
        };
        let (env_tick, flag_tick) = if self.options.tick == TICK {
            (String::new(), String::new())
        } else {
            let ms = self.options.tick.as_millis();
            (format!("SIM_TICK_MS={ms} "), format!(" --tick-ms {ms}"))
        };
        let (env_cache, flag_cache) = if self.options.power_losses == DEFAULT_POWER_LOSSES {
            (String::new(), String::new())
        } else {
            let n = self.options.power_losses;
            (
                format!("SIM_POWER_LOSSES={n} "),
                format!(" --power-losses {n}"),
            )
        };
        let (env_disk, flag_disk) = if self.options.disk_fulls == DEFAULT_DISK_FULLS {
            (String::new(), String::new())
        } else {
            let n = self.options.disk_fulls;
            (format!("SIM_DISK_FULLS={n} "), format!(" --disk-fulls {n}"))
        };
        let (env_disk, flag_disk) = if self.options.disk_full_metadata {
            (
                format!("{env_disk}SIM_DISK_FULL_METADATA=1 "),
                format!("{flag_disk} --disk-full-metadata"),
            )
        } else {
            (env_disk, flag_disk)
        };
        let (env_disk, flag_disk) = if self.options.fsync_faults == DEFAULT_FSYNC_FAULTS {
            (env_disk, flag_disk)
        } else {
            let n = self.options.fsync_faults;
            (
                format!("{env_disk}SIM_FSYNC_FAULTS={n} "),
                format!("{flag_disk} --fsync-faults {n}"),
            )
        };
        // The workload's parts that are on by default: each one off is named, in this order.
        let switches_off = [
            (
                self.options.tcp_timeouts,
                "SIM_TCP_TIMEOUTS",
                "--turmoil-refusals",
            ),
            (
                self.options.group_members,
                "SIM_GROUP_MEMBERS",
                "--no-group-members",
            ),
            (
                self.options.zombie_producer,
                "SIM_ZOMBIE_PRODUCER",
                "--no-zombie-producer",
            ),
            (
                self.options.torn_writes,
                "SIM_TORN_WRITES",
                "--no-torn-writes",
            ),
            (
                self.options.faulty_disk_start,
                "SIM_FAULTY_DISK_START",
                "--no-faulty-disk-start",
            ),
        ];
        let (mut env_disk, mut flag_disk) = (env_disk, flag_disk);
        for (_, env, flag) in switches_off.iter().filter(|(on, _, _)| !on) {
            env_disk.push_str(&format!("{env}=0 "));
            flag_disk.push_str(&format!(" {flag}"));
        }
        // The parts that are off by default: each one on is named.
        let switches_on = [(
            self.options.consumer_members,
            "SIM_CONSUMER_MEMBERS",
            "--consumer-members",
        )];
        for (_, env, flag) in switches_on.iter().filter(|(on, _, _)| *on) {
            env_disk.push_str(&format!("{env}=1 "));
            flag_disk.push_str(&format!(" {flag}"));
        }
        let test = if self.options.planted == Planted::Nothing {
            format!(
                "{env_tick}{env_strict}{env_brokers}{env_cache}{env_disk}SIM_SEED={seed} SIM_SECONDS={seconds} cargo test --release -p annal-sim --test seeds -- --nocapture\n  or ",
                seed = self.seed
            )
        } else {
            String::new()
        };
        format!(
            "{test}cargo run --release -p annal-sim -- --seed {seed} --seconds {seconds}{flag_brokers}{flag_strict}{flag_planted}{flag_tick}{flag_cache}{flag_disk} --trace",
            seed = self.seed
        )
    }
}

/// What the hosts and the driver share. The simulation runs on one thread; the mutexes only satisfy the
/// `Send + Sync` the production seams ask for.
pub(crate) struct Shared {
    pub(crate) seed: u64,
    pub(crate) dir: PathBuf,
    pub(crate) history: Arc<Mutex<History>>,
    /// Draws each voter boot's election timeout, in boot order (deterministic: one thread, seeded).
    pub(crate) boots: Mutex<StdRng>,
    /// Clock jumps waiting for a voter to take them.
    pub(crate) clock_jumps: Mutex<BTreeMap<i32, u64>>,
    pub(crate) healed: AtomicBool,
    pub(crate) final_acked: AtomicBool,
    /// Power losses per node so far: a node's simulated machine boot (its boot id) changes with each.
    pub(crate) power_losses: Mutex<BTreeMap<i32, u32>>,
    /// Nodes down after a halt (their metadata quorum failed on a full disk), until their disk is freed.
    pub(crate) halted_down: Mutex<std::collections::BTreeSet<i32>>,
    /// [`Options::disk_full_metadata`].
    pub(crate) disk_full_metadata: bool,
    /// [`Options::group_members`].
    pub(crate) group_members: bool,
    /// [`Options::zombie_producer`].
    pub(crate) zombie_producer: bool,
    /// [`Options::consumer_members`].
    pub(crate) consumer_members: bool,
    /// [`Options::fault_phase`].
    pub(crate) fault_phase: Duration,
}

/// Moves tokio's process-wide task-id counter to the next multiple of 64. A current-thread runtime keeps its
/// tasks in lists sharded by task id, and drops them shard by shard when it shuts down, which is what a
/// simulated crash does: the order in which a crashed host's connections close (and so the order of the
/// segments turmoil delivers) follows the ids. The ids a run hands out depend on how many tasks the process
/// spawned before it, so without this a seed run after other seeds in one process could differ from the same
/// seed run first (found by `annal-sim --twice` over 60 seeds). Runs also never overlap (`run_seed`'s lock):
/// two simulations on two threads would interleave ids.
fn align_task_ids() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a tokio runtime to align task ids");
    for _ in 0..64 {
        let task = runtime.spawn(async {});
        let id: u64 = task.id().to_string().parse().unwrap_or(0);
        let _ = runtime.block_on(task);
        if (id + 1) & 63 == 0 {
            return;
        }
    }
}

/// Where the voters' data directories go: `SIM_DATA_DIR`, else a RAM disk when there is one (the fsyncs of
/// the metadata log cost no wall time there, and a simulated crash never loses the page cache anyway), else
/// the system's temporary directory.
fn data_root() -> PathBuf {
    if let Some(dir) = std::env::var_os("SIM_DATA_DIR") {
        return PathBuf::from(dir);
    }
    let shm = PathBuf::from("/dev/shm");
    let writable = std::fs::metadata(&shm).is_ok_and(|m| m.is_dir() && !m.permissions().readonly());
    if writable {
        shm
    } else {
        std::env::temp_dir()
    }
}

pub(crate) fn now_ms() -> u64 {
    turmoil::sim_elapsed().map_or(0, |d| d.as_millis() as u64)
}

pub(crate) fn host(n: i32) -> String {
    format!("c{n}")
}

fn voter_addrs() -> Vec<String> {
    (1..=VOTERS)
        .map(|n| format!("{}:{CONTROLLER_PORT}", host(n)))
        .collect()
}

/// Runs one seed to the end and checks it.
pub fn run_seed(seed: u64, options: &Options) -> Report {
    // One simulation at a time per process, each starting from the same tokio task-id residue: see
    // `align_task_ids`.
    static ONE_AT_A_TIME: Mutex<()> = parking_lot::const_mutex(());
    let _one = ONE_AT_A_TIME.lock();
    align_task_ids();
    let _recording = panic_recorder::Recording::start();
    // The real broker's blocking disk work runs inline on this thread, and a planted replication bug (if any)
    // is on for this run only.
    let _testing = TestingGuard::set(Testing {
        planted: match options.planted {
            Planted::Replication(bug) => bug,
            _ => PlantedBug::Nothing,
        },
        inline_disk_io: true,
    });
    // Always on: besides power losses, it makes the engine's background fsyncs run inline (deterministic).
    let _page_cache = PageCacheGuard::start(true);
    // Its own stream, so the schedule and the boots are the same whatever the power-loss budget.
    let mut power_loss_rng = StdRng::seed_from_u64(seed ^ 0x0009_a9e0);
    let mut power_losses_left = options.power_losses;
    // What a power loss leaves of each file's last writes: a stream of its own too, drawn only at power losses.
    let mut tear_rng = options
        .torn_writes
        .then(|| StdRng::seed_from_u64(seed ^ 0x0007_0a2e));
    let wall = Instant::now();
    let dir = tempfile::Builder::new()
        .prefix("annal-sim-")
        .tempdir_in(data_root())
        .expect("a temporary directory for the simulated nodes' data");
    // Separate streams for the fault schedule, the voters' boots and the network, so that a seed's first
    // seconds do not depend on how long its fault phase is.
    let mut rng = StdRng::seed_from_u64(seed ^ 0x00ff_ab1e);
    let fault_start = Duration::from_secs(3);
    let mut schedule = faults::schedule(
        &mut StdRng::seed_from_u64(seed),
        VOTERS,
        fault_start,
        options.fault_phase,
    );
    if options.brokers {
        faults::add_disk_fulls(
            &mut StdRng::seed_from_u64(seed ^ 0x00d1_5cf0),
            &mut schedule,
            options.disk_fulls,
            VOTERS,
            fault_start,
            options.fault_phase,
        );
        faults::add_fsync_faults(
            &mut StdRng::seed_from_u64(seed ^ 0x00f5_0f5c),
            &mut schedule,
            options.fsync_faults,
            VOTERS,
            fault_start,
            options.fault_phase,
        );
        if options.faulty_disk_start {
            faults::add_faulty_disk_start(
                &mut StdRng::seed_from_u64(seed ^ 0x00fa_0175),
                &mut schedule,
                options.fault_phase,
            );
        }
    }
    let _disks = DiskFaultsGuard;
    net::reset();
    net::set_tcp_timeouts(options.tcp_timeouts);
    let shared = Arc::new(Shared {
        seed,
        dir: dir.path().to_path_buf(),
        history: Arc::new(Mutex::new(
            History::new().strict_terms(options.strict_terms),
        )),
        boots: Mutex::new(StdRng::seed_from_u64(seed ^ 0xb007)),
        clock_jumps: Mutex::new(BTreeMap::new()),
        healed: AtomicBool::new(false),
        final_acked: AtomicBool::new(false),
        power_losses: Mutex::new(BTreeMap::new()),
        halted_down: Mutex::new(Default::default()),
        disk_full_metadata: options.disk_full_metadata,
        group_members: options.group_members,
        zombie_producer: options.zombie_producer,
        consumer_members: options.consumer_members,
        fault_phase: options.fault_phase,
    });
    let base_latency = rng.gen_range(1..10);
    let tick = options.tick;
    let total = options.fault_phase + CONVERGENCE_MAX + Duration::from_secs(10);
    let mut sim = turmoil::Builder::new()
        .rng_seed(seed)
        .simulation_duration(total)
        .tick_duration(tick)
        .min_message_latency(Duration::from_millis(1))
        .max_message_latency(Duration::from_millis(base_latency))
        .build();
    for n in 1..=VOTERS {
        let shared = shared.clone();
        if options.brokers {
            sim.host(host(n), move || replication::node(shared.clone(), n));
        } else {
            sim.host(host(n), move || voter(shared.clone(), n));
        }
    }
    if options.brokers {
        sim.client("client", replication::workload(shared.clone()));
    } else {
        sim.client("client", workload(shared.clone()));
    }
    shared.history.lock().event(
        0,
        format!(
            "seed {seed} latency 1-{base_latency} ms, {} faults",
            schedule.len()
        ),
    );

    let mut pending: Vec<&Scheduled> = schedule.iter().collect();
    let mut active: Vec<&Scheduled> = Vec::new();
    let mut client_done = false;
    let mut done_at = None;
    loop {
        let elapsed = sim.elapsed();
        for s in active.iter().filter(|s| elapsed >= s.end) {
            undo(&mut sim, &shared, &s.fault);
        }
        active.retain(|s| elapsed < s.end);
        while pending.first().is_some_and(|s| elapsed >= s.start) {
            let s = pending.remove(0);
            let ends_before = match s.fault {
                Fault::Crash(n) if options.brokers => replication::log_ends(&shared, n),
                _ => Vec::new(),
            };
            apply(&mut sim, &shared, &s.fault);
            if let Fault::Crash(n) = s.fault {
                if power_losses_left > 0 && power_loss_rng.gen_bool(0.5) {
                    power_losses_left -= 1;
                    lose_unsynced(&shared, n, tear_rng.as_mut(), now_ms_of(&sim));
                    replication::lost_power(&shared, n, ends_before);
                }
                plant(&shared, options.planted, n, now_ms_of(&sim));
            }
            active.push(s);
        }
        if elapsed >= options.fault_phase && !shared.healed.load(Ordering::Relaxed) {
            heal(&mut sim, &shared);
        }
        if !shared.history.lock().violations.is_empty() {
            break;
        }
        // turmoil itself may panic (a listener's queue of connections not yet accepted is full: a host that
        // binds its port long before it accepts). The run then fails with the panic's message and its trace, as
        // a panic in a host does, instead of taking a whole sweep down with it.
        let step = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| sim.step())) {
            Ok(step) => step,
            Err(_) => {
                let at = now_ms_of(&sim);
                let mut history = shared.history.lock();
                for p in panic_recorder::take() {
                    history.panicked(at, format!("in the simulator: {p}"));
                }
                if history.violations.is_empty() {
                    history.panicked(at, "in the simulator".into());
                }
                break;
            }
        };
        if options.brokers {
            for (n, ends_before) in crash_halted(&mut sim, &shared) {
                // The files whose fsync failed may have lost their dirty pages: they do, while the run's budget
                // of such losses lasts (a power loss elsewhere on top could lose acknowledged writes, as two
                // power losses can).
                let failed = annal_log::disk_faults::take_failed_fsyncs(&shared.dir.join(host(n)));
                if !failed.is_empty() && power_losses_left > 0 {
                    power_losses_left -= 1;
                    lose_unsynced_files(&shared, n, &failed, now_ms_of(&sim));
                    replication::lost_power(&shared, n, ends_before);
                }
            }
            // A halted node whose disk is healthy again starts again (its window may have ended while it
            // was halting).
            let down: Vec<i32> = shared.halted_down.lock().iter().copied().collect();
            for n in down {
                if !active.iter().any(|s| s.fault.keeps_down(n)) {
                    restart_if_halted(&mut sim, &shared, n);
                }
            }
        }
        let panics = panic_recorder::take();
        if !panics.is_empty() {
            let at = now_ms_of(&sim);
            let mut history = shared.history.lock();
            for p in panics {
                history.panicked(at, p);
            }
            break;
        }
        if options.brokers {
            let elapsed = sim.elapsed();
            // Boundaries crossed by this step, whatever the tick: a 50 ms sample, a 100 ms convergence look.
            let crossed = |every: u128| {
                let (now, before) = (elapsed.as_millis(), (elapsed - tick).as_millis());
                now / every != before / every
            };
            if crossed(50) {
                replication::sample_epochs(&shared, now_ms_of(&sim));
            }
            let quiesced = shared.history.lock().replication.quiesced;
            if quiesced && crossed(100) {
                let done = *done_at.get_or_insert(elapsed);
                if replication::converged(&shared)
                    && metadata_everywhere(&shared)
                    && transactions::final_read_done(&shared)
                {
                    replication::check_final(&shared, now_ms_of(&sim));
                    break;
                }
                if elapsed > done + CONVERGENCE_MAX {
                    let at = now_ms_of(&sim);
                    let state = replication::describe_partitions(&shared);
                    shared.history.lock().not_converged(
                        at,
                        format!("the partitions did not converge within {CONVERGENCE_MAX:?} of the writes' end: {state}"),
                    );
                    break;
                }
            }
        }
        match step {
            Ok(finished) => client_done |= finished,
            Err(e) => {
                let at = now_ms_of(&sim);
                shared
                    .history
                    .lock()
                    .not_converged(at, format!("a host failed: {e}"));
                break;
            }
        }
        if client_done {
            if !shared.final_acked.load(Ordering::Relaxed) {
                let at = now_ms_of(&sim);
                shared.history.lock().not_converged(
                    at,
                    format!("no write was acknowledged within {CONVERGENCE_MAX:?} of healing"),
                );
                break;
            }
            // The acknowledged write must reach every voter's image.
            let done = done_at.get_or_insert(sim.elapsed());
            if metadata_everywhere(&shared) {
                break;
            }
            if sim.elapsed() > *done + Duration::from_secs(10) {
                let at = now_ms_of(&sim);
                shared
                    .history
                    .lock()
                    .not_converged(at, "a voter did not apply every committed entry".into());
                break;
            }
        }
    }
    let at = now_ms_of(&sim);
    let simulated = sim.elapsed();
    drop(sim);
    let mut history = shared.history.lock();
    if history.violations.is_empty() {
        let voters: Vec<i32> = (1..=VOTERS).collect();
        history.check_after_healing(at, &voters);
    }
    Report {
        seed,
        trace_hash: history.trace_hash(),
        events: history.trace.len(),
        faults: schedule.clone(),
        acked_topics: history.acked_topics.len(),
        acked_registrations: history.acked_registrations.len(),
        acked_writes: history.replication.acked.len(),
        committed_entries: history.committed.len(),
        max_term: history.leaders.keys().next_back().copied().unwrap_or(0),
        simulated,
        wall: wall.elapsed(),
        violations: history.violations.clone(),
        findings: history.findings.clone(),
        options: Options {
            keep_trace: false,
            ..options.clone()
        },
        trace: if options.keep_trace {
            history.trace.clone()
        } else {
            Vec::new()
        },
    }
}

/// True when every voter has applied the last committed metadata entry.
fn metadata_everywhere(shared: &Shared) -> bool {
    let history = shared.history.lock();
    let last = history.committed.keys().next_back().copied();
    (1..=VOTERS).all(|n| {
        history
            .applied
            .get(&n)
            .and_then(|s| s.last())
            .map(|a| a.index)
            == last
    })
}

/// Sets this thread's test switches for one run and puts the defaults back after it.
struct TestingGuard;

impl TestingGuard {
    fn set(t: Testing) -> TestingGuard {
        testing::set_for_this_thread(t);
        TestingGuard
    }
}

impl Drop for TestingGuard {
    fn drop(&mut self) {
        testing::set_for_this_thread(Testing::default());
    }
}

/// Frees every simulated full disk when a run ends, however it ends.
struct DiskFaultsGuard;

impl Drop for DiskFaultsGuard {
    fn drop(&mut self) {
        annal_log::disk_faults::free_all();
    }
}

/// Tracks the segment files' durable lengths for one run ([`Options::power_losses`]).
struct PageCacheGuard(bool);

impl PageCacheGuard {
    fn start(on: bool) -> PageCacheGuard {
        if on {
            annal_log::page_cache::start_tracking();
        }
        PageCacheGuard(on)
    }
}

impl Drop for PageCacheGuard {
    fn drop(&mut self) {
        if self.0 {
            annal_log::page_cache::stop_tracking();
        }
    }
}

/// Right after node `n` crashed, when the crash is a power loss: its segment files lose what was not fsynced,
/// whole or torn (with `tear_rng`, [`Options::torn_writes`]). The trace records what each kept (relative paths:
/// the data directory's name is random).
fn lose_unsynced(shared: &Shared, n: i32, tear_rng: Option<&mut StdRng>, at: u64) {
    *shared.power_losses.lock().entry(n).or_insert(0) += 1;
    let data = shared.dir.join(host(n));
    let cut = match tear_rng {
        None => annal_log::page_cache::lose_unsynced(&data),
        Some(rng) => annal_log::page_cache::lose_unsynced_torn(&data, &mut |unsynced| {
            draw_tear(rng, unsynced)
        }),
    };
    let what = match cut {
        Ok(lost) if lost.is_empty() => format!("power loss: n{n} lost nothing (all fsynced)"),
        Ok(lost) => {
            let files: Vec<String> = lost
                .iter()
                .map(|l| {
                    let name = l.path.strip_prefix(&data).unwrap_or(&l.path);
                    match l.zeroed_from {
                        None => format!("{} {}->{}", name.display(), l.from, l.to),
                        Some(z) => {
                            format!("{} {}->{} zeros from {z}", name.display(), l.from, l.to)
                        }
                    }
                })
                .collect();
            format!(
                "power loss: n{n} lost the unsynced tails of {} files: {}",
                lost.len(),
                files.join(", ")
            )
        }
        Err(e) => format!("power loss: n{n}'s files could not be cut back: {e}"),
    };
    shared.history.lock().event(at, what);
}

/// What a power loss leaves of a file's `unsynced` last bytes: with even odds none, a prefix (any length: the
/// last page written back may be torn mid-batch), or its new length with zeros from some point on.
fn draw_tear(rng: &mut StdRng, unsynced: u64) -> annal_log::page_cache::Tear {
    use annal_log::page_cache::Tear;
    match rng.gen_range(0..3) {
        0 => Tear::Lost,
        1 => Tear::Prefix {
            kept: rng.gen_range(0..=unsynced),
        },
        _ => Tear::Zeroed {
            from: rng.gen_range(0..unsynced.max(1)),
        },
    }
}

/// Right after node `n` halted on failed fsyncs: those files lose what was not fsynced (after a failed fsync
/// Linux may drop the dirty pages).
fn lose_unsynced_files(shared: &Shared, n: i32, failed: &[PathBuf], at: u64) {
    let data = shared.dir.join(host(n));
    let mut lost = Vec::new();
    for path in failed {
        let name = path
            .strip_prefix(&data)
            .unwrap_or(path)
            .display()
            .to_string();
        match annal_log::page_cache::lose_unsynced_file(path) {
            Ok(Some(l)) => lost.push(format!("{name} {}->{}", l.from, l.to)),
            Ok(None) => {}
            Err(e) => lost.push(format!("{name} could not be cut back: {e}")),
        }
    }
    let what = if lost.is_empty() {
        format!("failed fsyncs: n{n} lost nothing (nothing unsynced)")
    } else {
        format!(
            "failed fsyncs: n{n} lost the unsynced tails of {}",
            lost.join(", ")
        )
    };
    shared.history.lock().event(at, what);
}

/// What a planted fault does to voter `n`'s disk right after its crash.
fn plant(shared: &Shared, planted: Planted, n: i32, at: u64) {
    let data = shared.dir.join(host(n));
    let removed = match planted {
        Planted::Nothing | Planted::Replication(_) => return,
        Planted::ForgetVoteOnCrash => std::fs::remove_file(
            data.join(annal_metadata::raft::METADATA_LOG_DIR)
                .join("quorum-state"),
        ),
        Planted::WipeDiskOnCrash => std::fs::remove_dir_all(&data),
    };
    let what = match removed {
        Ok(()) => format!("planted: {planted:?} on n{n}"),
        Err(e) => format!("planted: {planted:?} on n{n} found nothing to remove ({e})"),
    };
    shared.history.lock().event(at, what);
}

fn now_ms_of(sim: &turmoil::Sim<'_>) -> u64 {
    sim.elapsed().as_millis() as u64
}

fn others(n: i32) -> impl Iterator<Item = i32> {
    (1..=VOTERS).filter(move |o| *o != n)
}

fn apply(sim: &mut turmoil::Sim<'_>, shared: &Shared, fault: &Fault) {
    shared
        .history
        .lock()
        .event(now_ms_of(sim), format!("fault: {fault}"));
    match fault {
        Fault::Isolate(n) => {
            for o in others(*n) {
                sim.partition(host(*n), host(o));
                cut_both(&host(*n), &host(o));
            }
            sim.partition(host(*n), "client");
            cut_both(&host(*n), "client");
        }
        Fault::Split(n) => {
            for o in others(*n) {
                sim.partition(host(*n), host(o));
                cut_both(&host(*n), &host(o));
            }
        }
        Fault::OneWay { from, to } => {
            sim.partition_oneway(host(*from), host(*to));
            net::cut(&host(*from), &host(*to));
        }
        Fault::Hold(a, b) => sim.hold(host(*a), host(*b)),
        Fault::Lossy(a, b) => {
            sim.set_link_fail_rate(host(*a), host(*b), 0.05);
            cut_both(&host(*a), &host(*b));
        }
        Fault::Slow(a, b, ms) => {
            sim.set_link_max_message_latency(host(*a), host(*b), Duration::from_millis(*ms))
        }
        Fault::Crash(n) => {
            // A crash runs no destructors in a real process; here dropping the host's runtime does, and
            // whatever they fsync must not count as durable.
            annal_log::page_cache::freeze(true);
            sim.crash(host(*n));
            annal_log::page_cache::freeze(false);
        }
        Fault::ClockJump(n, ms) => {
            shared.clock_jumps.lock().insert(*n, *ms);
            consumer_members::clock_jumped(shared, *ms);
        }
        Fault::DiskFull(n) => {
            let data = shared.dir.join(host(*n));
            let writable = if shared.disk_full_metadata {
                Vec::new()
            } else {
                vec![data.join(annal_metadata::raft::METADATA_LOG_DIR)]
            };
            annal_log::disk_faults::fill(&data, writable);
        }
        Fault::FsyncFails(n) => {
            let data = shared.dir.join(host(*n));
            annal_log::disk_faults::fail_fsyncs(&data, metadata_spared(shared, &data));
        }
        Fault::SlowFsync(n, ms) => {
            // A slow disk is slow for the metadata log too: it is the same disk.
            let data = shared.dir.join(host(*n));
            annal_log::disk_faults::slow_fsyncs(&data, Duration::from_millis(*ms), Vec::new());
        }
    }
}

/// The metadata log's directory, spared by a disk fault unless `--disk-full-metadata` puts it on the faulty
/// disk too.
fn metadata_spared(shared: &Shared, data: &std::path::Path) -> Vec<PathBuf> {
    if shared.disk_full_metadata {
        Vec::new()
    } else {
        vec![data.join(annal_metadata::raft::METADATA_LOG_DIR)]
    }
}

fn undo(sim: &mut turmoil::Sim<'_>, shared: &Shared, fault: &Fault) {
    shared
        .history
        .lock()
        .event(now_ms_of(sim), format!("end: {fault}"));
    match fault {
        Fault::Isolate(n) => {
            for o in others(*n) {
                sim.repair(host(*n), host(o));
                mend_both(&host(*n), &host(o));
            }
            sim.repair(host(*n), "client");
            mend_both(&host(*n), "client");
        }
        Fault::Split(n) => {
            for o in others(*n) {
                sim.repair(host(*n), host(o));
                mend_both(&host(*n), &host(o));
            }
        }
        Fault::OneWay { from, to } => {
            sim.repair_oneway(host(*from), host(*to));
            net::mend(&host(*from), &host(*to));
        }
        Fault::Hold(a, b) => sim.release(host(*a), host(*b)),
        Fault::Lossy(a, b) => {
            sim.set_link_fail_rate(host(*a), host(*b), 0.0);
            sim.repair(host(*a), host(*b));
            mend_both(&host(*a), &host(*b));
        }
        Fault::Slow(a, b, _) => {
            sim.set_link_max_message_latency(host(*a), host(*b), Duration::from_millis(10))
        }
        Fault::Crash(n) => sim.bounce(host(*n)),
        Fault::ClockJump(..) => {}
        Fault::DiskFull(n) => {
            let refused = annal_log::disk_faults::free(&shared.dir.join(host(*n)));
            shared.history.lock().event(
                now_ms_of(sim),
                format!("n{n}'s full disk refused {refused} writes"),
            );
            restart_if_halted(sim, shared, *n);
        }
        Fault::FsyncFails(n) | Fault::SlowFsync(n, _) => {
            let hit = annal_log::disk_faults::free(&shared.dir.join(host(*n)));
            let what = match fault {
                Fault::FsyncFails(_) => format!("n{n}'s disk failed {hit} fsyncs"),
                _ => format!("n{n}'s disk slowed {hit} fsyncs"),
            };
            shared.history.lock().event(now_ms_of(sim), what);
            restart_if_halted(sim, shared, *n);
        }
    }
}

/// The link between hosts `a` and `b` drops everything both ways (`net::cut`: connection attempts over it then
/// time out, as TCP's would, instead of turmoil's immediate refusal).
fn cut_both(a: &str, b: &str) {
    net::cut(a, b);
    net::cut(b, a);
}

/// Undoes [`cut_both`].
fn mend_both(a: &str, b: &str) {
    net::mend(a, b);
    net::mend(b, a);
}

/// Crashes the hosts whose broker reported a halt (`ReplicationHistory::halted`): a halt runs no shutdown.
/// Returns each with its log ends just before the crash ([`replication::log_ends`]).
fn crash_halted(
    sim: &mut turmoil::Sim<'_>,
    shared: &Shared,
) -> Vec<(i32, Vec<(replication::Tp, i64)>)> {
    let halted = std::mem::take(&mut shared.history.lock().replication.halted);
    let mut crashed = Vec::new();
    for &n in &halted {
        crashed.push((n, replication::log_ends(shared, n)));
        annal_log::page_cache::freeze(true);
        sim.crash(host(n));
        annal_log::page_cache::freeze(false);
        shared.halted_down.lock().insert(n);
        shared
            .history
            .lock()
            .event(now_ms_of(sim), format!("n{n} halted"));
    }
    crashed
}

/// Starts node `n` again if its broker halted, as a supervisor (systemd, Kubernetes) restarts a process that
/// exited, once its disk has room again.
fn restart_if_halted(sim: &mut turmoil::Sim<'_>, shared: &Shared, n: i32) {
    let halted = shared.halted_down.lock().remove(&n);
    if halted {
        shared
            .history
            .lock()
            .event(now_ms_of(sim), format!("n{n} started again"));
        sim.bounce(host(n));
    }
}

/// Ends every fault: links repaired and released, crashed voters restarted.
fn heal(sim: &mut turmoil::Sim<'_>, shared: &Shared) {
    for n in 1..=VOTERS {
        restart_if_halted(sim, shared, n);
    }
    for a in 1..=VOTERS {
        for b in others(a) {
            sim.repair(host(a), host(b));
            sim.release(host(a), host(b));
            sim.set_link_fail_rate(host(a), host(b), 0.0);
        }
        sim.repair(host(a), "client");
        if !sim.is_host_running(host(a)) {
            sim.bounce(host(a));
        }
    }
    net::reset();
    shared.healed.store(true, Ordering::Relaxed);
    shared.history.lock().event(now_ms_of(sim), "healed".into());
}

/// One voter's process: the real metadata node and CONTROLLER listener on simulated TCP, its data directory
/// on the real disk (it survives a crash).
async fn voter(shared: Arc<Shared>, n: i32) -> turmoil::Result {
    let election = shared
        .boots
        .lock()
        .gen_range(ELECTION_TIMEOUT_MS..2 * ELECTION_TIMEOUT_MS);
    {
        let mut history = shared.history.lock();
        history.node_started(now_ms(), n);
        history.event(now_ms(), format!("n{n} election timeout {election} ms"));
    }
    let observer = {
        let history = shared.history.clone();
        Arc::new(move |index: u64, records: &[Vec<u8>]| {
            history.lock().node_applied(now_ms(), n, index, records)
        })
    };
    let env = NodeEnv {
        network: Arc::new(SimNetwork::from_host(host(n))),
        disk_io: DiskIo::Inline,
        fixed_election_timeout_ms: Some(election),
        on_apply: Some(observer),
    };
    let config = MetadataNodeConfig {
        node_id: n,
        cluster_id: CLUSTER_ID.into(),
        voters: (1..=VOTERS).zip(voter_addrs()).collect(),
        advertised_addr: format!("{}:{CONTROLLER_PORT}", host(n)),
        data_dir: shared.dir.join(host(n)),
        election_timeout_ms: ELECTION_TIMEOUT_MS,
        controller: ControllerConfig {
            seed: shared.seed ^ n as u64,
            local_node_id: Some(n),
            ..ControllerConfig::default()
        },
    };
    let listener = turmoil::net::TcpListener::bind(("0.0.0.0", CONTROLLER_PORT)).await?;
    // The broker listener of this combined node: accepted and closed (crash probes only look whether
    // something listens; it vanishes with the process).
    let broker_listener = turmoil::net::TcpListener::bind(("0.0.0.0", BROKER_PORT)).await?;
    tokio::spawn(async move {
        while let Ok((stream, _)) = broker_listener.accept().await {
            drop(stream);
        }
    });
    let node = MetadataNode::start_in(config, env)
        .await
        .map_err(|e| format!("n{n} did not start: {e:#}"))?;
    tokio::spawn({
        let (node, shared) = (node.clone(), shared.clone());
        async move {
            loop {
                tokio::time::sleep(LEADER_SAMPLE).await;
                if node.is_active_controller() {
                    let term = node.quorum_status().term;
                    shared.history.lock().node_leads(now_ms(), n, term);
                }
                let jump = shared.clock_jumps.lock().remove(&n);
                if let Some(ms) = jump {
                    tokio::time::advance(Duration::from_millis(ms)).await;
                }
            }
        }
    });
    let (_stop, stop_rx) = tokio::sync::watch::channel(false);
    listener::serve(SimListener(listener), node, stop_rx).await;
    Ok(())
}

/// The client: three brokers' registration and heartbeats, and topic creations during the faults; after
/// healing, one more creation that must be acknowledged.
async fn workload(shared: Arc<Shared>) -> turmoil::Result {
    for b in 1..=VOTERS {
        tokio::spawn(broker(shared.clone(), b));
    }
    let mut rng = StdRng::seed_from_u64(shared.seed ^ 0x00c1_1e47);
    let mut channel = ControllerChannel::new(voter_addrs(), 0);
    let mut n = 0;
    while !shared.healed.load(Ordering::Relaxed) {
        create_topic(&shared, &mut channel, &format!("t{n}")).await;
        n += 1;
        tokio::time::sleep(Duration::from_millis(rng.gen_range(20..300))).await;
    }
    let deadline = tokio::time::Instant::now() + CONVERGENCE_MAX;
    let mut attempt = 0;
    while tokio::time::Instant::now() < deadline {
        if create_topic(&shared, &mut channel, &format!("final-{attempt}")).await {
            shared.final_acked.store(true, Ordering::Relaxed);
            return Ok(());
        }
        attempt += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

/// Creates one topic through the controller; true if it acknowledged.
async fn create_topic(shared: &Shared, channel: &mut ControllerChannel, name: &str) -> bool {
    let request = CreateTopicsRequest::default()
        .with_topics(vec![CreatableTopic::default()
            .with_name(TopicName(StrBytes::from_string(name.to_string())))
            .with_num_partitions(1)
            .with_replication_factor(1)])
        .with_timeout_ms(1000);
    let voter = channel.voter().to_string();
    let outcome = channel
        .send::<_, CreateTopicsResponse>(ApiKey::CreateTopics, 5, &request)
        .await;
    let code = match &outcome {
        Ok(r) => r.topics.first().map_or(-1, |t| t.error_code),
        Err(_) => -1,
    };
    let mut history = shared.history.lock();
    match outcome {
        Ok(_) if code == 0 => {
            history.topic_acked(now_ms(), name);
            return true;
        }
        Ok(_) => history.event(now_ms(), format!("create {name} at {voter}: error {code}")),
        Err(e) => history.event(now_ms(), format!("create {name} at {voter}: {}", e.0)),
    }
    drop(history);
    if code == NOT_CONTROLLER || code == -1 {
        channel.next_voter();
    }
    false
}

/// Broker `b` of a combined node: registers, then heartbeats with the metadata offset its node applied, and
/// registers again when the controller no longer knows its epoch.
async fn broker(shared: Arc<Shared>, b: i32) {
    let mut channel = ControllerChannel::new(voter_addrs(), b as usize);
    let incarnation = uuid::Uuid::from_u64_pair(shared.seed, b as u64);
    let mut epoch: Option<i64> = None;
    loop {
        match epoch {
            None => {
                let request = BrokerRegistrationRequest::default()
                    .with_broker_id(BrokerId(b))
                    .with_cluster_id(StrBytes::from_static_str(CLUSTER_ID))
                    .with_incarnation_id(incarnation)
                    .with_listeners(vec![BrokerListener::default()
                        .with_name(StrBytes::from_static_str("PLAINTEXT"))
                        .with_host(StrBytes::from_string(host(b)))
                        .with_port(BROKER_PORT)
                        .with_security_protocol(0)])
                    .with_features(vec![Feature::default()
                        .with_name(StrBytes::from_static_str("metadata.version"))
                        .with_min_supported_version(1)
                        .with_max_supported_version(1)])
                    .with_previous_broker_epoch(-1);
                let response = channel
                    .send::<_, BrokerRegistrationResponse>(ApiKey::BrokerRegistration, 3, &request)
                    .await;
                match response {
                    Ok(r) if r.error_code == 0 => {
                        shared
                            .history
                            .lock()
                            .registration_acked(now_ms(), b, r.broker_epoch);
                        epoch = Some(r.broker_epoch);
                    }
                    Ok(r) => {
                        if r.error_code == NOT_CONTROLLER {
                            channel.next_voter();
                        }
                    }
                    Err(_) => channel.next_voter(),
                }
            }
            Some(e) => {
                let offset = shared
                    .history
                    .lock()
                    .applied
                    .get(&b)
                    .and_then(|s| s.last())
                    .map_or(-1, |a| a.index as i64);
                let request = BrokerHeartbeatRequest::default()
                    .with_broker_id(BrokerId(b))
                    .with_broker_epoch(e)
                    .with_current_metadata_offset(offset);
                let response = channel
                    .send::<_, BrokerHeartbeatResponse>(ApiKey::BrokerHeartbeat, 1, &request)
                    .await;
                match response {
                    Ok(r) if r.error_code == 0 => {}
                    Ok(r) if r.error_code == NOT_CONTROLLER => channel.next_voter(),
                    Ok(r) => {
                        shared.history.lock().event(
                            now_ms(),
                            format!(
                                "b{b} heartbeat at epoch {e}: error {}; registering again",
                                r.error_code
                            ),
                        );
                        epoch = None;
                    }
                    Err(_) => channel.next_voter(),
                }
            }
        }
        let pause = if epoch.is_some() { 1000 } else { 200 };
        tokio::time::sleep(Duration::from_millis(pause)).await;
    }
}
