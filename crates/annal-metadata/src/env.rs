//! What a metadata node takes from the world around it, behind seams small enough that production and the
//! deterministic simulator (`crates/annal-sim`, docs/decisions/0011-simulation.md) use the same code:
//!
//! - [`Network`] and [`Listener`] (defined in `annal_client::net`, so the broker's Kafka connections use the
//!   same seam): every connection the quorum, the CONTROLLER listener and the crash probes make or accept.
//!   Production: tokio's TCP ([`TokioNetwork`], `tokio::net::TcpListener`); the simulator: turmoil's
//!   simulated TCP.
//! - [`DiskIo`]: where the blocking metadata-log I/O runs. Production: tokio's blocking pool, off the async
//!   workers; the simulator: inline, because a real thread finishing at a wall-clock moment would make the
//!   order of wake-ups, and so the run, depend on the machine.
//! - the clock: time is read only as `tokio::time::Instant` (virtual under a paused runtime, the real
//!   monotonic clock otherwise), never `std::time::Instant::now()`.
//! - randomness: openraft 0.9 draws each election timeout with `rand::thread_rng`, which no seed reaches;
//!   [`NodeEnv::fixed_election_timeout_ms`] replaces the draw with a value the simulator picks from its seed.
//!
//! [`NodeEnv::production`] is what `MetadataNode::start` uses.

use std::fmt;
use std::sync::Arc;

/// The network seam is `annal_client::net`, shared with the broker's Kafka connections (the replica fetchers,
/// the controller channel); re-exported here so the quorum's code names it as before.
pub use annal_client::net::{
    BoxConnection, BoxFuture, Connection, Listener, Network, TokioNetwork,
};

/// Where blocking disk I/O (appends and fsyncs of the metadata log, snapshots) runs.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub enum DiskIo {
    /// tokio's blocking pool: the async workers never wait on a disk.
    #[default]
    BlockingPool,
    /// On the calling task. Only for a single-threaded simulation, where the disk must not race the
    /// scheduler.
    Inline,
}

impl DiskIo {
    /// Runs `f` where this mode says; `Err` only when the blocking task panicked or was cancelled.
    pub(crate) async fn run<T, F>(self, f: F) -> Result<T, String>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        match self {
            DiskIo::BlockingPool => tokio::task::spawn_blocking(f)
                .await
                .map_err(|e| format!("blocking disk task: {e}")),
            DiskIo::Inline => Ok(f()),
        }
    }
}

/// Called with (index, records) for every committed normal entry a node applies, after its image has it.
pub type ApplyObserver = Arc<dyn Fn(u64, &[Vec<u8>]) + Send + Sync>;

/// Everything a metadata node takes from its environment.
#[derive(Clone)]
pub struct NodeEnv {
    pub network: Arc<dyn Network>,
    pub disk_io: DiskIo,
    /// `Some(t)`: every election timeout is `t` ms (openraft is given the range `[t, t + 1)`), instead of a draw
    /// from `[min, max)` with the OS's randomness. For the simulator, which picks `t` per node from its seed.
    pub fixed_election_timeout_ms: Option<u64>,
    /// Sees every applied entry (the simulator's invariant checks); `None` in production.
    pub on_apply: Option<ApplyObserver>,
}

impl NodeEnv {
    /// The operating system's network, the blocking pool, openraft's own election timeout draw.
    pub fn production() -> NodeEnv {
        NodeEnv {
            network: Arc::new(TokioNetwork),
            disk_io: DiskIo::BlockingPool,
            fixed_election_timeout_ms: None,
            on_apply: None,
        }
    }
}

impl Default for NodeEnv {
    fn default() -> Self {
        NodeEnv::production()
    }
}

impl fmt::Debug for NodeEnv {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeEnv")
            .field("disk_io", &self.disk_io)
            .field("fixed_election_timeout_ms", &self.fixed_election_timeout_ms)
            .field("on_apply", &self.on_apply.is_some())
            .finish_non_exhaustive()
    }
}

/// The monotonic clock every decision reads: tokio's, so a paused (simulated) runtime controls it.
pub(crate) fn now() -> std::time::Instant {
    tokio::time::Instant::now().into_std()
}

/// Test-only switches, off unless the deterministic simulator turns them on for its own thread: known
/// replication bugs planted one at a time to show that its invariants catch them (docs/decisions/0011), and
/// inline blocking disk work for the broker. Nothing in the configuration reaches them; a thread that never
/// calls [`testing::set_for_this_thread`] (every production thread) sees [`testing::Testing::default`].
pub mod testing {
    use std::cell::Cell;

    /// A bug to plant. Each is a real bug Kafka or a Kafka-like system had.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    pub enum PlantedBug {
        #[default]
        Nothing,
        /// The leader advances the high watermark to its own log end, before the ISR has the data (acks=all
        /// then acknowledges what only the leader holds).
        HighWatermarkBeforeIsr,
        /// A follower truncates its log to its own high watermark when it starts following (pre-KIP-101
        /// Kafka), instead of to the end of the largest epoch it shares with the leader.
        TruncateToHighWatermark,
        /// The controller elects a live replica outside the ISR when the leader goes away, as if unclean
        /// leader election were on.
        ElectOutsideIsr,
        /// The leader counts the ISR it has only proposed (AlterPartition sent, not yet committed by the
        /// controller) toward the high watermark and acks=all: a shrunk ISR lets it acknowledge what a member
        /// the controller still has in the ISR (and may elect) lacks.
        AckBeforeIsrCommitted,
        /// A read_committed Fetch reads up to the high watermark instead of the last stable offset (it still
        /// reports the true last stable offset): records of transactions not yet ended reach the consumer.
        ReadCommittedAboveStable,
        /// The transaction coordinator keeps a fenced producer's epoch as the one a KIP-360 retry may claim
        /// when a new producer of the transactional id takes over (or a fence bumps the epoch): the fenced
        /// producer re-initialising with it is handed the new producer's epoch, and both commit as one (the bug
        /// franz-go's zombie test found in Annal).
        FencedEpochCountsAsRetry,
        /// The group coordinator ignores a KIP-848 group's records when it loads a `__consumer_offsets`
        /// partition (Annal before 2026-12-06 kept that membership in memory): after a failover the new
        /// coordinator knows no members and hands a rejoining member partitions the others still own.
        ForgetConsumerGroupMembers,
    }

    /// What this thread's simulated nodes do differently.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    pub struct Testing {
        pub planted: PlantedBug,
        /// The broker's blocking disk work (`spawn_blocking` in production) runs inline on the calling task.
        /// Only for a single-threaded simulation, where a thread finishing at a wall-clock moment would make
        /// the run depend on the machine.
        pub inline_disk_io: bool,
    }

    thread_local! {
        static TESTING: Cell<Testing> = const { Cell::new(Testing { planted: PlantedBug::Nothing, inline_disk_io: false }) };
    }

    /// This thread's switches (the defaults on every thread the simulator did not set).
    pub fn current() -> Testing {
        TESTING.with(Cell::get)
    }

    /// True if `bug` is planted on this thread.
    pub fn planted(bug: PlantedBug) -> bool {
        bug != PlantedBug::Nothing && current().planted == bug
    }

    /// Sets this thread's switches (the simulator, before it runs a seed; it resets them after).
    pub fn set_for_this_thread(testing: Testing) {
        TESTING.with(|t| t.set(testing));
    }
}
