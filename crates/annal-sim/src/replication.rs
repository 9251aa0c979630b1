//! The real brokers inside the simulation: three combined nodes (`annal_broker::start_in`: the metadata
//! quorum and controller, the replica manager, partitions, fetchers, ISR, high watermark, elections), and a
//! client host producing and reading through the Kafka protocol, with the replication invariants.
//!
//! Workload (all from the seed): the topics are created through any broker (forwarded to the controller); an
//! idempotent producer writes acks=all to `replicated` (2 partitions, RF 3, min.insync.replicas 2); a plain
//! producer writes acks=1 to `plain` (1 partition, RF 3); a reader follows both from their leaders; a committer
//! commits offsets of one group through the group coordinator ([`crate::committer`], its own invariant).
//!
//! Checked as the run goes ([`ReplicationHistory`]): an acks=all acknowledgement with fewer than
//! min.insync.replicas live replicas holding the offset (when every node is up); a (partition, offset) read
//! below the high watermark whose value changes later; a leader epoch that goes down on a node within one
//! boot. After healing and convergence: every acknowledged acks=all write is at its offset; every value read is
//! still at its offset; each idempotent value is in the log at most once; the replicas' logs are identical.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use annal_broker::{Broker, BrokerEnv, BrokerListener};
use annal_client::net::Network;
use annal_client::{decode_fetched, Connection, ConnectionOptions};
use annal_metadata::env::{DiskIo, NodeEnv};
use bytes::{Bytes, BytesMut};
use indexmap::IndexMap;
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    BrokerId, CreateTopicsRequest, FetchRequest, InitProducerIdRequest, MetadataRequest,
    ProduceRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
    NO_PARTITION_LEADER_EPOCH, NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::net::SimNetwork;
use crate::{
    host, now_ms, Shared, BROKER_PORT, CLUSTER_ID, CONTROLLER_PORT, ELECTION_TIMEOUT_MS, VOTERS,
};

/// The acks=all topic and its partitions.
pub const REPLICATED: &str = "replicated";
const REPLICATED_PARTITIONS: i32 = 2;
/// The acks=1 topic.
pub const PLAIN: &str = "plain";
const MIN_INSYNC: usize = 2;

/// Kafka error codes the workload reacts to.
const NONE: i16 = 0;
const OFFSET_OUT_OF_RANGE: i16 = 1;
const TOPIC_ALREADY_EXISTS: i16 = 36;
const OUT_OF_ORDER_SEQUENCE_NUMBER: i16 = 45;
const DUPLICATE_SEQUENCE_NUMBER: i16 = 46;
const INVALID_PRODUCER_EPOCH: i16 = 47;
const UNKNOWN_PRODUCER_ID: i16 = 59;

/// A partition of the workload's topics.
pub type Tp = (&'static str, i32);

/// What the replication checks remember.
#[derive(Debug, Default)]
pub struct ReplicationHistory {
    /// The live brokers, by node (a crashed node's `Weak` no longer upgrades).
    pub brokers: BTreeMap<i32, Weak<Broker>>,
    /// Nodes whose broker halted (its metadata quorum failed on a full disk), for the driver to crash.
    pub halted: std::collections::BTreeSet<i32>,
    /// Boot count per node (leader epochs are compared within one boot).
    pub boots: BTreeMap<i32, u64>,
    /// Acknowledged acks=all writes: (partition, offset) -> value.
    pub acked: BTreeMap<(Tp, i64), Bytes>,
    /// Acknowledged acks=1 writes (may be lost on a leader change: not checked for presence).
    pub acked_plain: usize,
    /// What the reader saw below the high watermark: (partition, offset) -> value.
    pub read: BTreeMap<(Tp, i64), Bytes>,
    /// Highest (leader epoch, partition epoch) each node's partition had, within its current boot.
    pub epochs: BTreeMap<(i32, Tp), (u64, (i32, i32))>,
    /// The most established TCP connections each node had at once (sampled every 10 ms): bounded, see
    /// [`CONNECTIONS_MAX`].
    pub max_connections: BTreeMap<i32, usize>,
    /// (partition, leader epoch) -> the node seen leading it: one leader per partition and epoch
    /// ([`sample_epochs`]).
    pub leaders: BTreeMap<(Tp, i32), i32>,
    /// A replica's log end just before it lost power (its unsynced tail then went): what it held, and may have
    /// reported to its leader in a fetch, before the loss. See [`check_ack_replicated`].
    pub held_before_power_loss: BTreeMap<(i32, Tp), i64>,
    /// Topics created.
    pub topics_ready: bool,
    /// The workload stopped writing (after healing) and the final checks may run.
    pub quiesced: bool,
    /// The committer's acknowledged commits ([`crate::committer`]).
    pub commits: crate::committer::CommitHistory,
    /// The group members' generations, assignments and commits ([`crate::group_members`]).
    pub members: crate::group_members::MemberHistory,
    /// The transactional producer's transactions and what read_committed returned ([`crate::transactions`]).
    pub txn: crate::transactions::TxnHistory,
    /// The KIP-848 members' views of what they own ([`crate::consumer_members`]).
    pub consumer_members: crate::consumer_members::ConsumerMemberHistory,
}

/// A node never has more established TCP connections than this at once. The workload's clients hold a few per
/// node and the nodes a few to each other, but a peer that crashed or was cut off leaves its connections open on
/// the survivor until they have been idle for connections.max.idle.ms (10 minutes, Kafka's, for both listeners),
/// so they add up over a run's crashes: 128 at most in seeds 10-40 of 60 s. A leak (a connection opened per retry
/// and never closed) grows by thousands under the faults' retries, far past this.
pub const CONNECTIONS_MAX: usize = 512;

/// Every partition the workload uses.
pub fn partitions() -> Vec<Tp> {
    let mut out: Vec<Tp> = (0..REPLICATED_PARTITIONS)
        .map(|p| (REPLICATED, p))
        .collect();
    out.push((PLAIN, 0));
    out.extend(crate::transactions::partitions());
    out
}

fn partition_of(broker: &Broker, tp: Tp) -> Option<Arc<annal_broker::Partition>> {
    broker.replica_manager().partition(tp.0, tp.1)
}

/// The records of `partition`'s local log on one replica from offset 0 up to `upper` (exclusive): offset ->
/// value. `None` if the replica has no such partition or the read failed.
fn local_records(p: &annal_broker::Partition, upper: i64) -> Option<BTreeMap<i64, Bytes>> {
    let mut out = BTreeMap::new();
    let mut offset = p.log_start_offset();
    while offset < upper {
        let slice = p.read_local(offset, 1 << 20, Some(upper)).ok()?;
        let Some(slice) = slice else { break };
        let bytes = slice.read_to_vec().ok()?;
        let decoded = decode_fetched(Bytes::from(bytes), offset).ok()?;
        for r in decoded.records {
            if r.offset < upper {
                out.insert(r.offset, r.value.unwrap_or_default());
            }
        }
        match decoded.next_offset {
            Some(next) if next > offset => offset = next,
            _ => break,
        }
    }
    Some(out)
}

impl ReplicationHistory {
    fn live(&self) -> Vec<(i32, Arc<Broker>)> {
        self.brokers
            .iter()
            .filter_map(|(n, w)| Some((*n, w.upgrade()?)))
            .collect()
    }
}

/// The log end of each workload partition node `n` has, if its broker is up: taken right before a crash, so
/// that a power loss can be told from a replica that never held an offset.
pub(crate) fn log_ends(shared: &Shared, n: i32) -> Vec<(Tp, i64)> {
    let history = shared.history.lock();
    let Some(broker) = history.replication.brokers.get(&n).and_then(Weak::upgrade) else {
        return Vec::new();
    };
    partitions()
        .into_iter()
        .filter_map(|tp| Some((tp, partition_of(&broker, tp)?.log_end_offset())))
        .collect()
}

/// Node `n` lost power (or the pages of files whose fsync failed) right after `ends` ([`log_ends`]).
pub(crate) fn lost_power(shared: &Shared, n: i32, ends: Vec<(Tp, i64)>) {
    let mut history = shared.history.lock();
    for (tp, end) in ends {
        let held = history
            .replication
            .held_before_power_loss
            .entry((n, tp))
            .or_insert(end);
        *held = (*held).max(end);
    }
}

/// Called on every acks=all acknowledgement: at least min.insync.replicas replicas hold the offset. Only
/// judged while every node is up (a crashed replica's log cannot be looked at, and may hold it).
///
/// A replica that held the offset before it lost power counts as holding it. acks=all without fsync means
/// "in the page cache of every ISR member": a follower's fetch reports what it has in memory, and a power loss
/// after that report takes its copy. The leader cannot know before the follower fetches again (Kafka's leader
/// computes the high watermark from the same reports), and an acknowledgement may come much later than the
/// commit (an idempotent retry answered with the offset its first attempt got). What a power loss took is the
/// known limit of replication without fsync; the simulator's budget of power losses leaves a copy, and
/// [`check_final`] proves every acknowledged write is still readable.
fn check_ack_replicated(shared: &Shared, tp: Tp, offset: i64, at: u64) {
    let mut history = shared.history.lock();
    let live = history.replication.live();
    if live.len() < VOTERS as usize {
        return;
    }
    let held_before_loss = |n: i32| {
        history
            .replication
            .held_before_power_loss
            .get(&(n, tp))
            .is_some_and(|end| *end > offset)
    };
    let holding = live
        .iter()
        .filter(|(n, b)| {
            partition_of(b, tp).is_some_and(|p| p.log_end_offset() > offset) || held_before_loss(*n)
        })
        .count();
    // Every live member of the ISR the controller has committed (the newest partition epoch any node applied)
    // may be elected next, so each must hold an acknowledged offset: a leader that acknowledges on an ISR the
    // controller has not committed yet fails here.
    let committed = live
        .iter()
        .filter_map(|(_, b)| {
            let image = b.cluster().image();
            let state = image.topic_by_name(tp.0)?.partitions.get(&tp.1)?;
            Some((state.partition_epoch, state.isr.clone()))
        })
        .max_by_key(|(epoch, _)| *epoch);
    if let Some((partition_epoch, isr)) = committed {
        let lacking: Vec<i32> = isr
            .iter()
            .copied()
            .filter(|r| {
                !held_before_loss(*r)
                    && live
                        .iter()
                        .find(|(n, _)| n == r)
                        .and_then(|(_, b)| partition_of(b, tp))
                        .is_some_and(|p| p.log_end_offset() <= offset)
            })
            .collect();
        if !lacking.is_empty() {
            history.violate(
                at,
                format!(
                    "{}-{} offset {offset} acknowledged (acks=all) while ISR member(s) {lacking:?} of the \
                     committed ISR {isr:?} (partition epoch {partition_epoch}) lack it: electable replicas \
                     without an acknowledged write",
                    tp.0, tp.1
                ),
            );
        }
    }
    if holding < MIN_INSYNC {
        history.violate(
            at,
            format!(
                "{}-{} offset {offset} acknowledged (acks=all) while only {holding} replica(s) hold it \
                 (min.insync.replicas {MIN_INSYNC})",
                tp.0, tp.1
            ),
        );
    }
}

/// Sampled by the driver: a node's leader epoch and partition epoch of a partition never go down within one boot
/// (compared as a pair: a new leader epoch may come with any partition epoch above the last), and at most one node
/// ever leads a partition at one leader epoch, so at most one can advance its high watermark in that epoch (the
/// controller gives each epoch to one leader; two would be two histories behind one epoch).
pub(crate) fn sample_epochs(shared: &Shared, at: u64) {
    let mut history = shared.history.lock();
    let live = history.replication.live();
    let mut bad = Vec::new();
    for (n, b) in &live {
        let boot = history.replication.boots.get(n).copied().unwrap_or(0);
        for tp in partitions() {
            let Some(p) = partition_of(b, tp) else {
                continue;
            };
            let epochs = (p.leader_epoch(), p.partition_epoch());
            let entry = history
                .replication
                .epochs
                .entry((*n, tp))
                .or_insert((boot, epochs));
            if entry.0 != boot {
                *entry = (boot, epochs);
            } else if epochs < entry.1 {
                bad.push(format!(
                    "n{n}'s (leader epoch, partition epoch) of {}-{} went from {:?} down to {epochs:?}",
                    tp.0, tp.1, entry.1
                ));
            } else {
                entry.1 = epochs;
            }
            if p.is_leader() {
                let leader = history
                    .replication
                    .leaders
                    .entry((tp, epochs.0))
                    .or_insert(*n);
                if *leader != *n {
                    bad.push(format!(
                        "two leaders of {}-{} at leader epoch {}: n{} and n{n}",
                        tp.0, tp.1, epochs.0, *leader
                    ));
                }
            }
        }
    }
    for b in bad {
        history.violate(at, b);
    }
}

/// True once every partition has a leader whose high watermark is its log end and every replica's log end
/// equals it (the cluster has converged after healing).
pub(crate) fn converged(shared: &Shared) -> bool {
    let history = shared.history.lock();
    let live = history.replication.live();
    if live.len() < VOTERS as usize {
        return false;
    }
    partitions().into_iter().all(|tp| {
        let ps: Vec<_> = live
            .iter()
            .filter_map(|(_, b)| partition_of(b, tp))
            .collect();
        if ps.len() < VOTERS as usize {
            return false;
        }
        let Some(leader) = ps.iter().find(|p| p.is_leader()) else {
            return false;
        };
        let end = leader.log_end_offset();
        // No transaction left open: the last stable offset has reached the high watermark (the coordinator
        // ended, or timed out, every transaction).
        leader.high_watermark() == end
            && leader.last_stable_offset() == end
            && ps.iter().all(|p| p.log_end_offset() == end)
    })
}

/// Each partition's state on every live node, for a failure message: leader, high watermark, log ends.
pub(crate) fn describe_partitions(shared: &Shared) -> String {
    let history = shared.history.lock();
    let live = history.replication.live();
    let mut out = Vec::new();
    for tp in partitions() {
        let states: Vec<String> = live
            .iter()
            .filter_map(|(n, b)| {
                let p = partition_of(b, tp)?;
                Some(format!(
                    "n{n}: leader {} epoch {} isr {:?} lso {} hw {} end {}",
                    p.leader(),
                    p.leader_epoch(),
                    p.isr(),
                    p.last_stable_offset(),
                    p.high_watermark(),
                    p.log_end_offset()
                ))
            })
            .collect();
        out.push(format!("{}-{} [{}]", tp.0, tp.1, states.join("; ")));
    }
    format!("{} of {VOTERS} nodes up; {}", live.len(), out.join("; "))
}

/// The end-of-run replication checks, once converged.
pub(crate) fn check_final(shared: &Shared, at: u64) {
    let mut history = shared.history.lock();
    let live = history.replication.live();
    let mut problems = Vec::new();
    for tp in partitions() {
        let mut logs: Vec<(i32, BTreeMap<i64, Bytes>)> = Vec::new();
        for (n, b) in &live {
            let Some(p) = partition_of(b, tp) else {
                problems.push(format!("n{n} has no {}-{}", tp.0, tp.1));
                continue;
            };
            match local_records(&p, p.log_end_offset()) {
                Some(records) => logs.push((*n, records)),
                None => problems.push(format!("n{n}: {}-{} cannot be read", tp.0, tp.1)),
            }
        }
        // Replicas agree (converged: high watermark = log end everywhere).
        if let Some((first, reference)) = logs.first() {
            for (n, log) in &logs[1..] {
                if log != reference {
                    let at_offset = reference
                        .iter()
                        .zip(log.iter())
                        .find(|(a, b)| a != b)
                        .map(|(a, _)| *a.0)
                        .unwrap_or(reference.len().min(log.len()) as i64);
                    problems.push(format!(
                        "{}-{}: replicas n{first} and n{n} differ below the high watermark (first at offset \
                         {at_offset}; {} and {} records)",
                        tp.0,
                        tp.1,
                        reference.len(),
                        log.len()
                    ));
                }
            }
        }
        let Some((_, log)) = logs.first() else {
            continue;
        };
        for ((t, offset), value) in history
            .replication
            .acked
            .range((tp, i64::MIN)..=(tp, i64::MAX))
        {
            debug_assert_eq!(*t, tp);
            if log.get(offset) != Some(value) {
                problems.push(format!(
                    "{}-{} offset {offset}: acknowledged (acks=all) {:?}, the log has {:?}: an acknowledged \
                     write was lost",
                    tp.0,
                    tp.1,
                    String::from_utf8_lossy(value),
                    log.get(offset).map(|v| String::from_utf8_lossy(v).into_owned())
                ));
            }
        }
        for ((_, offset), value) in history
            .replication
            .read
            .range((tp, i64::MIN)..=(tp, i64::MAX))
        {
            if log.get(offset) != Some(value) {
                problems.push(format!(
                    "{}-{} offset {offset}: read {:?} below the high watermark, the log now has {:?}",
                    tp.0,
                    tp.1,
                    String::from_utf8_lossy(value),
                    log.get(offset).map(|v| String::from_utf8_lossy(v).into_owned())
                ));
            }
        }
        {
            // Every value is sent once (acks=1 and acks=0 producers make a new value per attempt) or retried
            // with its sequence (idempotent): none may be in the log twice.
            let mut seen: BTreeMap<&Bytes, i64> = BTreeMap::new();
            for (offset, value) in log {
                if let Some(first) = seen.insert(value, *offset) {
                    problems.push(format!(
                        "{}-{}: value {:?} is in the log twice, at {first} and {offset}",
                        tp.0,
                        tp.1,
                        String::from_utf8_lossy(value)
                    ));
                }
            }
        }
    }
    let event = format!(
        "final: {} acks=all and {} acks=1 writes acknowledged, {} reads, {} commits acknowledged, {} offset \
         fetches checked, {} group member commits acknowledged in {} generations, most connections per node {:?}",
        history.replication.acked.len(),
        history.replication.acked_plain,
        history.replication.read.len(),
        history.replication.commits.acked_count,
        history.replication.commits.fetches_checked,
        history.replication.members.commits_acked,
        history.replication.members.generations.len(),
        history.replication.max_connections
    );
    history.event(at, event);
    for p in problems.into_iter().take(10) {
        history.violate(at, p);
    }
}

/// One combined node's process: the real broker (and its metadata node) on simulated TCP.
pub(crate) async fn node(shared: Arc<Shared>, n: i32) -> turmoil::Result {
    let (election, boot_seed) = {
        let mut boots = shared.boots.lock();
        (
            boots.gen_range(ELECTION_TIMEOUT_MS..2 * ELECTION_TIMEOUT_MS),
            boots.gen::<u64>(),
        )
    };
    crate::node_logs::register_runtime(n);
    {
        let mut history = shared.history.lock();
        history.node_started(now_ms(), n);
        *history.replication.boots.entry(n).or_insert(0) += 1;
        history.event(now_ms(), format!("n{n} election timeout {election} ms"));
    }
    let observer = {
        let history = shared.history.clone();
        Arc::new(move |index: u64, records: &[Vec<u8>]| {
            history.lock().node_applied(now_ms(), n, index, records)
        })
    };
    let network: Arc<dyn Network> = Arc::new(SimNetwork::from_host(host(n)));
    let env = BrokerEnv {
        network: Some(network.clone()),
        node: NodeEnv {
            network: network.clone(),
            disk_io: DiskIo::Inline,
            fixed_election_timeout_ms: Some(election),
            on_apply: Some(observer),
        },
        seed: Some(shared.seed ^ boot_seed),
        // A process crash keeps the machine's page cache; a power loss (`lose_unsynced`) starts a new boot.
        boot_id: Some(format!(
            "sim-n{n}-boot-{}",
            shared.power_losses.lock().get(&n).copied().unwrap_or(0)
        )),
    };
    let voters = (1..=VOTERS)
        .map(|v| format!("{v}@{}:{CONTROLLER_PORT}", host(v)))
        .collect::<Vec<_>>()
        .join(",");
    let h = host(n);
    let overrides: Vec<String> = [
        "process.roles=broker,controller".to_string(),
        format!("node.id={n}"),
        format!("controller.quorum.voters={voters}"),
        format!("listeners=PLAINTEXT://{h}:{BROKER_PORT},CONTROLLER://{h}:{CONTROLLER_PORT}"),
        format!("advertised.listeners=PLAINTEXT://{h}:{BROKER_PORT}"),
        "inter.broker.listener.name=PLAINTEXT".into(),
        "controller.listener.names=CONTROLLER".into(),
        format!("controller.quorum.election.timeout.ms={ELECTION_TIMEOUT_MS}"),
        "default.replication.factor=3".into(),
        "min.insync.replicas=2".into(),
        "offsets.topic.replication.factor=3".into(),
        // One `__consumer_offsets` partition, not Kafka's 50: the committer's group lives in one, and 50
        // partitions of 3 replicas each would multiply the simulation's work for nothing.
        "offsets.topic.num.partitions=1".into(),
        // Followers that stop fetching leave the ISR within the fault phase's time scale.
        "replica.lag.time.max.ms=3000".into(),
        "log.cleaner.threads=0".into(),
        // One `__transaction_state` partition (Kafka's 50 would multiply the work, as for the offsets topic), and
        // timed-out transactions looked for every second rather than every 10 s, so the transactional workload's
        // transaction left open at the end is aborted well within convergence.
        "transaction.state.log.num.partitions=1".into(),
        "transaction.abort.timed.out.transaction.cleanup.interval.ms=1000".into(),
    ]
    .into();
    let mut overrides = overrides;
    if shared.consumer_members {
        // KIP-848 sessions and heartbeats are the broker's settings; on the simulation's time scale.
        overrides.push(format!(
            "group.consumer.session.timeout.ms={}",
            crate::consumer_members::SESSION_TIMEOUT_MS
        ));
        overrides.push(format!(
            "group.consumer.heartbeat.interval.ms={}",
            crate::consumer_members::HEARTBEAT_INTERVAL_MS
        ));
    }
    let mut config = annal_broker::BrokerConfig::load(
        None,
        &overrides,
        Some(shared.dir.join(&h)),
        Some(format!("{h}:{BROKER_PORT}")),
    )
    .map_err(|e| format!("n{n}'s configuration: {e:#}"))?;
    config.cluster_id = Some(CLUSTER_ID.into());
    config.advertised = Some((h.clone(), BROKER_PORT));
    // Bound with a kernel-like backlog: clients connect while the broker is still starting (see
    // `BacklogListener`).
    let listener = crate::net::BacklogListener::bind(BROKER_PORT, crate::net::BACKLOG).await?;
    let started =
        match annal_broker::start_in(config, BrokerListener::Seam(Box::new(listener)), env).await {
            Ok(started) => started,
            // A start its full or failing disk refused exits, as Kafka's does when its only log directory fails;
            // the driver starts it again once the disk is healthy (`halted`, as after a halt). A start that fails
            // on a healthy disk is a failure of the run.
            Err(e) if annal_log::disk_faults::refuses(&shared.dir.join(&h)) => {
                refused_start(&shared, n, &format!("{e:#}"));
                std::future::pending::<()>().await;
                return Ok(());
            }
            Err(e) => return Err(format!("n{n} did not start: {e:#}").into()),
        };
    let broker = started.broker().clone();
    shared
        .history
        .lock()
        .replication
        .brokers
        .insert(n, Arc::downgrade(&broker));
    tokio::spawn({
        let (shared, broker) = (shared.clone(), Arc::downgrade(&broker));
        async move {
            loop {
                tokio::time::sleep(crate::LEADER_SAMPLE).await;
                let Some(b) = broker.upgrade() else { return };
                let node = b.cluster().node().clone();
                drop(b);
                let connections = turmoil::established_tcp_stream_count();
                {
                    let mut history = shared.history.lock();
                    let most = history.replication.max_connections.entry(n).or_insert(0);
                    *most = (*most).max(connections);
                    if connections > CONNECTIONS_MAX {
                        history.violate(
                            now_ms(),
                            format!("n{n} has {connections} established connections (at most {CONNECTIONS_MAX}): a connection leak"),
                        );
                        return;
                    }
                }
                if let Some(why) = node.stopped_applying() {
                    // Every node applies the same committed entries: one that does not apply freezes the whole
                    // cluster's metadata.
                    shared.history.lock().violate(
                        now_ms(),
                        format!("n{n} stopped applying the metadata log: {why}"),
                    );
                    return;
                }
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
    // A broker whose metadata quorum fails (its disk is full) halts, as Kafka's does: the driver crashes the
    // host as soon as this reports it (a halt runs no shutdown), and starts it again once the disk has room.
    // So does a broker whose data's fsync failed (its disk fails fsyncs): `annal_broker::storage_failure`.
    tokio::spawn({
        let (shared, node) = (shared.clone(), broker.cluster().node().clone());
        let storage = broker.storage_failure().clone();
        async move {
            // Relative paths in the trace: the data directory's name is random, the trace must not be.
            let data_dir = format!("{}/", shared.dir.display());
            let what = tokio::select! {
                biased;
                reason = storage.failed() => format!("n{n}'s log directory failed ({reason})"),
                reason = node.failed() => format!("n{n}'s metadata quorum failed ({reason})"),
            };
            let mut history = shared.history.lock();
            history.event(
                now_ms(),
                format!("{}: the broker halts", what.replace(&data_dir, "")),
            );
            history.replication.halted.insert(n);
        }
    });
    drop(broker);
    match started.serve(std::future::pending::<()>()).await {
        Ok(()) => Ok(()),
        // The broker stops itself when its metadata quorum fails (its disk is full): the process exits, as
        // Kafka's halts, and the driver starts it again once the disk is freed (`halted`).
        // Only if serve returned before the driver crashed the host: wait for that.
        Err(e)
            if format!("{e}").starts_with(QUORUM_STOPPED)
                || format!("{e}").starts_with(annal_broker::STORAGE_FAILED) =>
        {
            std::future::pending::<()>().await;
            Ok(())
        }
        Err(e) => Err(format!("n{n} stopped: {e:#}").into()),
    }
}

/// Records that node `n`'s start was refused by its faulty disk, as a halt the driver acts on.
fn refused_start(shared: &Shared, n: i32, error: &str) {
    // Relative paths in the trace: the data directory's name is random, the trace must not be.
    let data_dir = format!("{}/", shared.dir.display());
    let mut history = shared.history.lock();
    history.event(
        now_ms(),
        format!(
            "n{n} did not start on its faulty disk ({}): the broker exits",
            error.replace(&data_dir, "")
        ),
    );
    history.replication.halted.insert(n);
}

/// How `annal_broker::Started::serve` begins its error when the node's metadata quorum failed.
const QUORUM_STOPPED: &str = "the metadata quorum stopped on this node";

/// Connections from the client host to the brokers, one per broker, reopened after any failure.
pub(crate) struct Kafka {
    conns: BTreeMap<i32, Connection>,
}

impl Kafka {
    pub(crate) fn new() -> Kafka {
        Kafka {
            conns: BTreeMap::new(),
        }
    }

    async fn send<R: kafka_protocol::protocol::Request>(
        &mut self,
        node: i32,
        request: &R,
        versions: (i16, i16),
    ) -> Result<R::Response, String> {
        if self.conns.get(&node).is_none_or(|c| c.is_closed()) {
            let options = ConnectionOptions {
                connect_timeout: Duration::from_secs(1),
                request_timeout: Duration::from_secs(5),
                max_response_bytes: 8 << 20,
                client_id: "annal-sim".into(),
                version_caps: None,
                network: Arc::new(SimNetwork::from_host("client")),
                sasl: None,
                tls: None,
            };
            let conn = Connection::connect_with(&format!("{}:{BROKER_PORT}", host(node)), options)
                .await
                .map_err(|e| format!("{e:#}"))?;
            self.conns.insert(node, conn);
        }
        let Some(conn) = self.conns.get_mut(&node) else {
            return Err("no connection".into());
        };
        match conn.send(request, versions).await {
            Ok((r, _)) => Ok(r),
            Err(e) => {
                self.conns.remove(&node);
                Err(format!("{e:#}"))
            }
        }
    }

    /// [`Kafka::send`] bounded as a whole by `bound` (connect, write and answer): the connection's own timeout
    /// covers the answer only, and a write into a connection whose far end no longer reads waits forever.
    pub(crate) async fn send_bounded<R: kafka_protocol::protocol::Request>(
        &mut self,
        node: i32,
        request: &R,
        versions: (i16, i16),
        bound: Duration,
    ) -> Result<R::Response, String> {
        match tokio::time::timeout(bound, self.send(node, request, versions)).await {
            Ok(answer) => answer,
            Err(_) => {
                self.conns.remove(&node);
                Err(format!("no answer from n{node} within {bound:?}"))
            }
        }
    }

    /// Sends a request the broker does not answer (Produce with acks=0): Ok once written to the socket.
    async fn send_no_answer<R: kafka_protocol::protocol::Request>(
        &mut self,
        node: i32,
        request: &R,
        versions: (i16, i16),
    ) -> Result<(), String> {
        if self.conns.get(&node).is_none_or(|c| c.is_closed()) {
            // Opened (and its versions learned) by an answered request first.
            let probe = MetadataRequest::default().with_topics(Some(Vec::new()));
            self.send(node, &probe, (4, 12)).await?;
        }
        let Some(conn) = self.conns.get_mut(&node) else {
            return Err("no connection".into());
        };
        // Bounded like every answered request: a write waits while the socket's buffer is full, and a connection
        // whose far end no longer reads it held this producer, and so the run, forever (seed 12 of 30 s: a write
        // to n2 from 25.5 s on; seeds 22 and 23 alike). A real client gives up on such a socket too (librdkafka's
        // socket.timeout.ms).
        let sent = match conn.pick_version(kafka_protocol::messages::ApiKey::Produce, versions) {
            Ok(version) => tokio::time::timeout(
                Duration::from_secs(5),
                conn.send_without_response(request, version),
            )
            .await
            .unwrap_or_else(|_| Err(anyhow::anyhow!("the write did not finish within 5 s"))),
            Err(e) => Err(e),
        };
        sent.map_err(|e| {
            self.conns.remove(&node);
            format!("{e:#}")
        })
    }

    /// The workload's topics by id, as broker `ask` knows them (Metadata v10 and later name topic ids); `None`
    /// when it did not answer. KIP-848 assignments name topics by id, commits (OffsetCommit up to v9) by name.
    pub(crate) async fn topic_names(
        &mut self,
        ask: i32,
    ) -> Option<BTreeMap<uuid::Uuid, &'static str>> {
        let request = MetadataRequest::default().with_topics(Some(
            [REPLICATED, PLAIN]
                .into_iter()
                .map(|t| {
                    MetadataRequestTopic::default()
                        .with_name(Some(TopicName(StrBytes::from_static_str(t))))
                })
                .collect(),
        ));
        let response = self
            .send_bounded(ask, &request, (10, 12), Duration::from_secs(6))
            .await
            .ok()?;
        let names = response
            .topics
            .iter()
            .filter(|t| t.error_code == NONE && !t.topic_id.is_nil())
            .filter_map(|t| {
                let name = t.name.as_ref()?.0.as_str();
                let known = [REPLICATED, PLAIN].into_iter().find(|n| *n == name)?;
                Some((t.topic_id, known))
            })
            .collect();
        Some(names)
    }

    /// The leader and leader epoch of `tp` as broker `ask` sees it.
    pub(crate) async fn leader(&mut self, ask: i32, tp: Tp) -> Option<(i32, i32)> {
        let request = MetadataRequest::default()
            .with_topics(Some(vec![MetadataRequestTopic::default()
                .with_name(Some(TopicName(StrBytes::from_static_str(tp.0))))]));
        let response = self.send(ask, &request, (4, 12)).await.ok()?;
        let topic = response.topics.first()?;
        let p = topic
            .partitions
            .iter()
            .find(|p| p.partition_index == tp.1 && p.error_code == NONE)?;
        (p.leader_id.0 >= 1).then_some((p.leader_id.0, p.leader_epoch))
    }
}

fn batch(value: &Bytes, producer: Option<(i64, i16, i32)>) -> Bytes {
    let (producer_id, producer_epoch, sequence) =
        producer.unwrap_or((NO_PRODUCER_ID, NO_PRODUCER_EPOCH, NO_SEQUENCE));
    let record = Record {
        transactional: false,
        control: false,
        delete_horizon: false,
        partition_leader_epoch: NO_PARTITION_LEADER_EPOCH,
        producer_id,
        producer_epoch,
        timestamp_type: TimestampType::Creation,
        offset: 0,
        sequence,
        timestamp: now_ms() as i64,
        key: None,
        value: Some(value.clone()),
        headers: IndexMap::new(),
    };
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        &[record],
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )
    .expect("a one-record batch encodes");
    buf.freeze()
}

/// Produces one batch to `tp`'s leader; the base offset on success, else the error code (-1: no answer).
async fn produce(
    kafka: &mut Kafka,
    leader: i32,
    tp: Tp,
    acks: i16,
    records: Bytes,
) -> Result<i64, i16> {
    let request = ProduceRequest::default()
        .with_acks(acks)
        .with_timeout_ms(3000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_static_str(tp.0)))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(tp.1)
                .with_records(Some(records))])]);
    let response = kafka
        .send(leader, &request, (3, 11))
        .await
        .map_err(|_| -1i16)?;
    let p = response
        .responses
        .first()
        .and_then(|t| t.partition_responses.first())
        .ok_or(-1i16)?;
    if p.error_code == NONE {
        Ok(p.base_offset)
    } else {
        Err(p.error_code)
    }
}

/// The client host: creates the topics, then runs the producers and the reader until the run is healed and the
/// producers are done.
pub(crate) async fn workload(shared: Arc<Shared>) -> turmoil::Result {
    let mut rng = StdRng::seed_from_u64(shared.seed ^ 0x0c11_e475);
    let mut kafka = Kafka::new();
    // Topics, through any broker (the broker forwards CreateTopics to the active controller).
    let mut missing = vec![
        (REPLICATED, REPLICATED_PARTITIONS),
        (PLAIN, 1),
        (crate::transactions::TOPIC, crate::transactions::PARTITIONS),
    ];
    let mut ask = 1;
    while !missing.is_empty() {
        let (name, partitions) = missing[0];
        let request = CreateTopicsRequest::default()
            .with_topics(vec![CreatableTopic::default()
                .with_name(TopicName(StrBytes::from_static_str(name)))
                .with_num_partitions(partitions)
                .with_replication_factor(3)
                .with_configs(vec![CreatableTopicConfig::default()
                    .with_name(StrBytes::from_static_str("min.insync.replicas"))
                    .with_value(Some(StrBytes::from_static_str("2")))])])
            .with_timeout_ms(5000);
        let code = match kafka.send(ask, &request, (2, 7)).await {
            Ok(r) => r.topics.first().map_or(-1, |t| t.error_code),
            Err(_) => -1,
        };
        shared
            .history
            .lock()
            .event(now_ms(), format!("create {name} at n{ask}: {code}"));
        if code == NONE || code == TOPIC_ALREADY_EXISTS {
            if code == NONE {
                shared.history.lock().topic_acked(now_ms(), name);
            }
            missing.remove(0);
        } else {
            ask = ask % VOTERS + 1;
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    shared.history.lock().replication.topics_ready = true;
    let idempotent = tokio::spawn(idempotent_producer(shared.clone(), rng.gen()));
    let plain = tokio::spawn(plain_producer(shared.clone(), rng.gen()));
    let fire = tokio::spawn(fire_and_forget_producer(shared.clone(), rng.gen()));
    let creator = tokio::spawn(topic_creator(shared.clone(), rng.gen()));
    let reader = tokio::spawn(reader(shared.clone()));
    let committer = tokio::spawn(crate::committer::committer(shared.clone(), rng.gen()));
    let transactional = tokio::spawn(crate::transactions::producer(shared.clone(), rng.gen()));
    let committed_reader = tokio::spawn(crate::transactions::reader(shared.clone()));
    // Drawn after every earlier task's seed, so those stay what they were.
    let members: Vec<_> = (0..crate::group_members::MEMBERS)
        .map(|i| (i, rng.gen::<u64>()))
        .filter(|_| shared.group_members)
        .map(|(i, seed)| tokio::spawn(crate::group_members::member(shared.clone(), i, seed)))
        .collect();
    let usurper_seed: u64 = rng.gen();
    // Drawn last, and only when they run, so every other seed stays what it was.
    let consumer_members: Vec<_> = if shared.consumer_members {
        (0..crate::consumer_members::MEMBERS)
            .map(|i| (i, rng.gen::<u64>()))
            .collect::<Vec<_>>()
            .into_iter()
            .map(|(i, seed)| tokio::spawn(crate::consumer_members::member(shared.clone(), i, seed)))
            .collect()
    } else {
        Vec::new()
    };
    let usurper = shared
        .zombie_producer
        .then(|| tokio::spawn(crate::transactions::usurper(shared.clone(), usurper_seed)));
    let _ = idempotent.await;
    let _ = plain.await;
    let _ = fire.await;
    let _ = creator.await;
    let _ = committer.await;
    let _ = transactional.await;
    for m in members.into_iter().chain(consumer_members) {
        let _ = m.await;
    }
    if let Some(u) = usurper {
        let _ = u.await;
    }
    {
        let mut history = shared.history.lock();
        history.replication.quiesced = true;
        history.event(now_ms(), "writes done".into());
    }
    // The readers go on until the driver ends the run (the read_committed one after its final pass).
    let _ = committed_reader.await;
    let _ = reader.await;
    Ok(())
}

/// Records a value read below the high watermark at (`tp`, `offset`) from `leader`: the run fails if that
/// offset was read before with another value.
pub(crate) fn note_read(
    history: &mut crate::history::History,
    at: u64,
    tp: Tp,
    offset: i64,
    value: &Bytes,
    leader: i32,
) {
    match history.replication.read.get(&(tp, offset)) {
        Some(seen) if seen != value => {
            let why = format!(
                "{}-{} offset {offset} read as {:?}, later as {:?} (from n{leader})",
                tp.0,
                tp.1,
                String::from_utf8_lossy(seen),
                String::from_utf8_lossy(value)
            );
            history.violate(at, why);
        }
        Some(_) => {}
        None => {
            history.replication.read.insert((tp, offset), value.clone());
        }
    }
}

/// Writes until a few seconds after healing.
pub(crate) fn keep_writing(shared: &Shared, healed_at: &mut Option<tokio::time::Instant>) -> bool {
    if !shared.healed.load(Ordering::Relaxed) {
        return true;
    }
    let at = *healed_at.get_or_insert_with(tokio::time::Instant::now);
    at.elapsed() < Duration::from_secs(5)
}

/// An idempotent producer, acks=all, one record per request, round-robin over the partitions. A failed send is
/// retried with the same sequence; a producer-state error starts over with a new producer id (the unacknowledged
/// value is then abandoned: it may or may not be in the log, once at most).
async fn idempotent_producer(shared: Arc<Shared>, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut kafka = Kafka::new();
    let mut producer: Option<(i64, i16)> = None;
    let mut sequences: BTreeMap<i32, i32> = BTreeMap::new();
    let mut leaders: BTreeMap<i32, i32> = BTreeMap::new();
    let mut n = 0u64;
    let mut healed_at = None;
    let mut pending: Option<(i32, Bytes)> = None;
    let mut ask = 1;
    while keep_writing(&shared, &mut healed_at) {
        let Some((pid, epoch)) = producer else {
            let request = InitProducerIdRequest::default()
                .with_transactional_id(None)
                .with_transaction_timeout_ms(60_000)
                .with_producer_id(kafka_protocol::messages::ProducerId(-1))
                .with_producer_epoch(-1);
            match kafka.send(ask, &request, (0, 4)).await {
                Ok(r) if r.error_code == NONE => {
                    producer = Some((r.producer_id.0, r.producer_epoch));
                    sequences.clear();
                    shared.history.lock().event(
                        now_ms(),
                        format!("producer id {} epoch {}", r.producer_id.0, r.producer_epoch),
                    );
                }
                outcome => {
                    let why = match outcome {
                        Ok(r) => format!("error {}", r.error_code),
                        Err(e) => e,
                    };
                    shared
                        .history
                        .lock()
                        .event(now_ms(), format!("init producer id at n{ask}: {why}"));
                    ask = ask % VOTERS + 1;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
            continue;
        };
        let (partition, value) = pending.clone().unwrap_or_else(|| {
            n += 1;
            let p = (n % REPLICATED_PARTITIONS as u64) as i32;
            (p, Bytes::from(format!("{REPLICATED}-{p}-{n}")))
        });
        pending = Some((partition, value.clone()));
        let tp = (REPLICATED, partition);
        let leader = match leaders.get(&partition) {
            Some(l) => *l,
            None => match kafka.leader(ask, tp).await {
                Some((l, _)) => {
                    leaders.insert(partition, l);
                    l
                }
                None => {
                    ask = ask % VOTERS + 1;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let sequence = *sequences.get(&partition).unwrap_or(&0);
        let records = batch(&value, Some((pid, epoch, sequence)));
        match produce(&mut kafka, leader, tp, -1, records).await {
            Ok(offset) => {
                let at = now_ms();
                check_ack_replicated(&shared, tp, offset, at);
                {
                    let mut history = shared.history.lock();
                    history.event(
                        at,
                        format!(
                            "ack all {}-{} @{offset} {}",
                            tp.0,
                            tp.1,
                            String::from_utf8_lossy(&value)
                        ),
                    );
                    if let Some(previous) = history
                        .replication
                        .acked
                        .insert((tp, offset), value.clone())
                    {
                        if previous != value {
                            history.violate(
                                at,
                                format!(
                                "{}-{} offset {offset} acknowledged twice, for {:?} and then {:?}",
                                tp.0,
                                tp.1,
                                String::from_utf8_lossy(&previous),
                                String::from_utf8_lossy(&value)
                            ),
                            );
                        }
                    }
                }
                sequences.insert(partition, sequence.wrapping_add(1));
                pending = None;
                tokio::time::sleep(Duration::from_millis(rng.gen_range(5..60))).await;
            }
            Err(
                code @ (OUT_OF_ORDER_SEQUENCE_NUMBER
                | INVALID_PRODUCER_EPOCH
                | UNKNOWN_PRODUCER_ID
                | DUPLICATE_SEQUENCE_NUMBER),
            ) => {
                shared.history.lock().event(
                    now_ms(),
                    format!(
                        "produce {}-{} at n{leader}: {code}; new producer id",
                        tp.0, tp.1
                    ),
                );
                producer = None;
                pending = None;
            }
            Err(code) => {
                shared.history.lock().event(
                    now_ms(),
                    format!("produce {}-{} at n{leader}: {code}", tp.0, tp.1),
                );
                leaders.remove(&partition);
                ask = ask % VOTERS + 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// A plain producer, acks=1, to `plain`: a new value for every attempt.
async fn plain_producer(shared: Arc<Shared>, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut kafka = Kafka::new();
    let tp = (PLAIN, 0);
    let mut leader: Option<i32> = None;
    let mut n = 0u64;
    let mut ask = 2;
    let mut healed_at = None;
    while keep_writing(&shared, &mut healed_at) {
        let Some(l) = leader else {
            leader = kafka.leader(ask, tp).await.map(|(l, _)| l);
            if leader.is_none() {
                ask = ask % VOTERS + 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            continue;
        };
        n += 1;
        let value = Bytes::from(format!("{PLAIN}-0-{n}"));
        match produce(&mut kafka, l, tp, 1, batch(&value, None)).await {
            Ok(offset) => {
                {
                    let mut history = shared.history.lock();
                    history.replication.acked_plain += 1;
                    history.event(now_ms(), format!("ack one {PLAIN}-0 @{offset} {n}"));
                }
                tokio::time::sleep(Duration::from_millis(rng.gen_range(10..100))).await;
            }
            Err(code) => {
                shared
                    .history
                    .lock()
                    .event(now_ms(), format!("produce {PLAIN}-0 at n{l}: {code}"));
                leader = None;
                ask = ask % VOTERS + 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// A fire-and-forget producer, acks=0, to `plain`: nothing is acknowledged, so nothing may be expected in the
/// log; what is there is checked like every other value (read once, never read differently; in the log at most
/// once, since each value is sent once).
async fn fire_and_forget_producer(shared: Arc<Shared>, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut kafka = Kafka::new();
    let tp = (PLAIN, 0);
    let mut leader: Option<i32> = None;
    let (mut n, mut sent) = (0u64, 0u64);
    let mut ask = 3;
    let mut healed_at = None;
    while keep_writing(&shared, &mut healed_at) {
        let Some(l) = leader else {
            leader = kafka.leader(ask, tp).await.map(|(l, _)| l);
            if leader.is_none() {
                ask = ask % VOTERS + 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            continue;
        };
        n += 1;
        let value = Bytes::from(format!("{PLAIN}-0-acks0-{n}"));
        let request = ProduceRequest::default()
            .with_acks(0)
            .with_timeout_ms(3000)
            .with_topic_data(vec![TopicProduceData::default()
                .with_name(TopicName(StrBytes::from_static_str(tp.0)))
                .with_partition_data(vec![PartitionProduceData::default()
                    .with_index(tp.1)
                    .with_records(Some(batch(&value, None)))])]);
        match kafka.send_no_answer(l, &request, (3, 11)).await {
            Ok(()) => sent += 1,
            Err(e) => {
                shared
                    .history
                    .lock()
                    .event(now_ms(), format!("produce acks=0 {PLAIN}-0 at n{l}: {e}"));
                leader = None;
                ask = ask % VOTERS + 1;
            }
        }
        // Now and then look again who leads: an acks=0 producer hears of no error.
        if n.is_multiple_of(20) {
            leader = None;
        }
        tokio::time::sleep(Duration::from_millis(rng.gen_range(10..100))).await;
    }
    shared.history.lock().event(
        now_ms(),
        format!("acks=0 producer done: {sent} of {n} sent"),
    );
}

/// Creates a topic now and then during the run (RF 3, through any broker): each acknowledged creation must be
/// in the metadata log (`History::check_after_healing`), the brokers creating its partitions while faults go on.
async fn topic_creator(shared: Arc<Shared>, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut kafka = Kafka::new();
    let mut ask = 2;
    let mut n = 0;
    while !shared.healed.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(rng.gen_range(1000..4000))).await;
        let name = format!("late-{n}");
        n += 1;
        let request = CreateTopicsRequest::default()
            .with_topics(vec![CreatableTopic::default()
                .with_name(TopicName(StrBytes::from_string(name.clone())))
                .with_num_partitions(1)
                .with_replication_factor(3)])
            .with_timeout_ms(5000);
        let code = match kafka.send(ask, &request, (2, 7)).await {
            Ok(r) => r.topics.first().map_or(-1, |t| t.error_code),
            Err(_) => -1,
        };
        let mut history = shared.history.lock();
        history.event(now_ms(), format!("create {name} at n{ask}: {code}"));
        if code == NONE {
            history.topic_acked(now_ms(), &name);
        } else {
            ask = ask % VOTERS + 1;
        }
    }
}

/// Follows every partition from its leader (what a consumer sees: nothing above the high watermark) and checks
/// that an offset read once never shows another value. Starts over from offset 0 now and then, to read again.
async fn reader(shared: Arc<Shared>) {
    let mut kafka = Kafka::new();
    let mut next: BTreeMap<Tp, i64> = BTreeMap::new();
    let mut round = 0u64;
    let mut ask = 3;
    loop {
        round += 1;
        for tp in partitions() {
            let Some((leader, epoch)) = kafka.leader(ask, tp).await else {
                ask = ask % VOTERS + 1;
                continue;
            };
            let offset = if round.is_multiple_of(10) {
                0
            } else {
                *next.get(&tp).unwrap_or(&0)
            };
            let request = FetchRequest::default()
                .with_replica_id(BrokerId(-1))
                .with_max_wait_ms(0)
                .with_min_bytes(1)
                .with_max_bytes(1 << 20)
                .with_isolation_level(0)
                .with_session_epoch(-1)
                .with_topics(vec![FetchTopic::default()
                    .with_topic(TopicName(StrBytes::from_static_str(tp.0)))
                    .with_partitions(vec![FetchPartition::default()
                        .with_partition(tp.1)
                        .with_current_leader_epoch(epoch)
                        .with_fetch_offset(offset)
                        .with_partition_max_bytes(1 << 20)])]);
            let Ok(response) = kafka.send(leader, &request, (4, 12)).await else {
                continue;
            };
            let Some(pd) = response
                .responses
                .first()
                .and_then(|t| t.partitions.first())
            else {
                continue;
            };
            if pd.error_code == OFFSET_OUT_OF_RANGE {
                shared.history.lock().event(
                    now_ms(),
                    format!(
                        "read {}-{} at {offset} from n{leader}: out of range",
                        tp.0, tp.1
                    ),
                );
                next.insert(tp, 0);
                continue;
            }
            if pd.error_code != NONE {
                continue;
            }
            let Ok(decoded) = decode_fetched(pd.records.clone().unwrap_or_default(), offset) else {
                continue;
            };
            let at = now_ms();
            {
                let mut history = shared.history.lock();
                for r in decoded.records {
                    if r.offset >= pd.high_watermark {
                        history.violate(
                            at,
                            format!(
                                "{}-{} offset {} served to a consumer above the high watermark {}",
                                tp.0, tp.1, r.offset, pd.high_watermark
                            ),
                        );
                        continue;
                    }
                    let value = r.value.unwrap_or_default();
                    note_read(&mut history, at, tp, r.offset, &value, leader);
                }
            }
            if let Some(n) = decoded.next_offset {
                next.insert(tp, n.max(offset));
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
