//! Transactions through the real transaction coordinator, markers and read_committed, and their invariants.
//!
//! A transactional producer (transactional.id [`TRANSACTIONAL_ID`], transaction version 2 as Java clients 4.x
//! speak it: no AddPartitionsToTxn of its own, Produce v12 makes the partition leader add the partition through
//! the coordinator (KIP-890 part 2), EndTxn v5 bumps the epoch) finds its coordinator (FindCoordinator, key type
//! TRANSACTION), gets an id (InitProducerId), then runs transactions that each write one record to each of the
//! two partitions of [`TOPIC`] (acks=all) and end with a commit, or an abort (one in three, from the seed). Each
//! value says its transaction, partition and intent (`txn-{n}-p{partition}-{commit|abort}`), and is sent in one
//! transaction only. Every request is bounded, and so is every transaction ([`TRANSACTION_BOUND`]); an error
//! that is not a plain retry (a fence, a lost answer to a produce it cannot retry, a transaction past its bound)
//! makes the producer start over with a fresh InitProducerId, which bumps the epoch and aborts what was open.
//!
//! The producer is an application's producer instances one after another: after a failed transaction it
//! recovers as KIP-360 has it (InitProducerId with its id and epoch), and starts over as a new instance when that
//! is refused as fenced. Once per run, at a moment drawn from the seed, a second instance (the [`usurper`])
//! takes the transactional id over, fencing the producer, and runs one transaction. Every (producer id, epoch)
//! the coordinator hands out (InitProducerId, EndTxn) must go to one instance only ([`grant`]): a zombie given
//! the epoch of the producer that fenced it would commit as that producer.
//!
//! What each transaction is known to have become ([`Outcome`]): committed (EndTxn(commit) acknowledged), aborted
//! (EndTxn(abort) acknowledged, or an InitProducerId acknowledged after it when no commit was asked for: the
//! coordinator fences and aborts an open transaction), or unknown (a commit asked for whose answer never came).
//!
//! A read_committed reader (Fetch isolation_level 1 from each partition's leader, filtering aborted transactions
//! as Kafka's consumer does from the answer's aborted_transactions) checks, during the run and once more after
//! convergence ([`final_read_done`]):
//! - nothing is served at or above the last stable offset;
//! - no record of a transaction that was aborted, or whose commit was never asked for, is returned;
//! - after convergence every committed transaction is returned on both partitions, and every transaction on
//!   both or neither (atomicity); no value is returned twice;
//! - an offset read never reads differently later (shared with the other readers, `ReplicationHistory::read`).
//!
//! Convergence waits for each partition's last stable offset to reach its high watermark
//! (`replication::converged`): a transaction left open must be ended by the coordinator's timeout.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use indexmap::IndexMap;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    BrokerId, EndTxnRequest, FetchRequest, FindCoordinatorRequest, InitProducerIdRequest,
    ProduceRequest, ProducerId, TopicName, TransactionalId,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions,
    TimestampType, NO_PARTITION_LEADER_EPOCH,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::replication::{keep_writing, note_read, Kafka, Tp};
use crate::{now_ms, Shared, VOTERS};

/// The transactional topic and its partitions.
pub const TOPIC: &str = "txn";
pub const PARTITIONS: i32 = 2;
/// The producer's transactional id.
pub const TRANSACTIONAL_ID: &str = "sim-txn";
/// The producer's transaction.timeout.ms: short, so a transaction left open is aborted by the coordinator well
/// within convergence (the nodes look for timed-out transactions every second).
pub const TRANSACTION_TIMEOUT_MS: i32 = 10_000;
/// Whole-request bound (connect, write, answer), as the committer's.
const REQUEST_BOUND: Duration = Duration::from_secs(6);
/// A transaction that has not been ended this long after it began is given up: the producer starts over
/// (below the transaction timeout, so the producer usually ends it before the coordinator has to).
const TRANSACTION_BOUND: Duration = Duration::from_secs(8);
/// The timeout of the transaction the producer abandons at the end (short: convergence waits for its abort).
const ABANDONED_TIMEOUT_MS: i32 = 2_000;
/// How long the producer tries to begin that transaction before it gives up on it.
const ABANDON_BOUND: Duration = Duration::from_secs(10);
/// After convergence, the final read_committed pass is tried this many times (100 ms apart) before the run fails.
const FINAL_READ_ATTEMPTS: u32 = 200;

/// Kafka error codes the producer and reader react to.
const NONE: i16 = 0;
const OFFSET_OUT_OF_RANGE: i16 = 1;
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const NOT_LEADER_OR_FOLLOWER: i16 = 6;
const REQUEST_TIMED_OUT: i16 = 7;
const COORDINATOR_LOAD_IN_PROGRESS: i16 = 14;
const COORDINATOR_NOT_AVAILABLE: i16 = 15;
const NOT_COORDINATOR: i16 = 16;
const NOT_ENOUGH_REPLICAS: i16 = 19;
const NOT_ENOUGH_REPLICAS_AFTER_APPEND: i16 = 20;
const CONCURRENT_TRANSACTIONS: i16 = 51;
const KAFKA_STORAGE_ERROR: i16 = 56;
const FENCED_LEADER_EPOCH: i16 = 74;
const UNKNOWN_LEADER_EPOCH: i16 = 75;
const INVALID_PRODUCER_EPOCH: i16 = 47;
const INVALID_PRODUCER_ID_MAPPING: i16 = 49;
const PRODUCER_FENCED: i16 = 90;
/// No answer (the exchange failed or was not answered within its bound).
const NO_ANSWER: i16 = -1;

/// What a transaction is known to have become.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Begun; not ended as far as the producer knows.
    Open,
    /// EndTxn(commit) acknowledged.
    Committed,
    /// EndTxn(abort) acknowledged, or an InitProducerId acknowledged after it while no commit was asked for.
    Aborted,
    /// A commit was asked for and its answer never came: either outcome is legal, but only one, atomically.
    Unknown,
}

/// One transaction of the producer.
#[derive(Debug, Clone)]
pub struct Transaction {
    /// What the producer meant to end it with (the values say it too).
    pub commit_intent: bool,
    /// EndTxn(commit) was sent (at least once): only then may the transaction become visible.
    pub commit_sent: bool,
    /// Partitions whose record was acknowledged.
    pub produced: BTreeSet<i32>,
    pub outcome: Outcome,
}

/// What the transaction checks remember.
#[derive(Debug, Default)]
pub struct TxnHistory {
    /// Every transaction begun, by number.
    pub transactions: BTreeMap<u64, Transaction>,
    /// What read_committed returned: transaction number -> partitions it was returned on.
    pub visible: BTreeMap<u64, BTreeSet<i32>>,
    /// Records returned by read_committed during the run, and aborted records it filtered out.
    pub returned: usize,
    pub filtered: usize,
    /// The final read_committed pass ran (after convergence), its checks included.
    pub final_read: bool,
    /// Every (producer id, epoch) the coordinator handed out for [`TRANSACTIONAL_ID`] (InitProducerId, EndTxn),
    /// and the producer instance it went to: two instances holding one epoch is a zombie not fenced.
    pub grants: BTreeMap<(i64, i16), String>,
    /// KIP-360 re-inits (InitProducerId with the producer's current id and epoch) refused as fenced, and taken.
    pub reinits_refused: usize,
    pub reinits_taken: usize,
    /// The usurper took the transactional id over (its InitProducerId was acknowledged).
    pub usurped: bool,
}

impl TxnHistory {
    /// Records transaction `n`'s beginning under the next number (the producer instances share the numbering).
    fn begin(&mut self, commit_intent: bool) -> u64 {
        let n = self
            .transactions
            .keys()
            .next_back()
            .map_or(1, |last| last + 1);
        self.transactions.insert(
            n,
            Transaction {
                commit_intent,
                commit_sent: false,
                produced: BTreeSet::new(),
                outcome: Outcome::Open,
            },
        );
        n
    }

    fn count(&self, outcome: Outcome) -> usize {
        self.transactions
            .values()
            .filter(|t| t.outcome == outcome)
            .count()
    }
}

/// The workload's transactional partitions.
pub fn partitions() -> Vec<Tp> {
    (0..PARTITIONS).map(|p| (TOPIC, p)).collect()
}

/// The record value of transaction `n` on `partition`.
fn value_of(n: u64, partition: i32, commit: bool) -> Bytes {
    let intent = if commit { "commit" } else { "abort" };
    Bytes::from(format!("txn-{n}-p{partition}-{intent}"))
}

/// The (transaction, partition, commit intent) a value names, if it is one of the producer's.
fn parse_value(value: &[u8]) -> Option<(u64, i32, bool)> {
    let text = std::str::from_utf8(value).ok()?;
    let mut parts = text.strip_prefix("txn-")?.split('-');
    let n = parts.next()?.parse().ok()?;
    let partition = parts.next()?.strip_prefix('p')?.parse().ok()?;
    let commit = match parts.next()? {
        "commit" => true,
        "abort" => false,
        _ => return None,
    };
    parts.next().is_none().then_some((n, partition, commit))
}

/// Whether an error code means: look for the coordinator again and retry.
fn coordinator_moved(code: i16) -> bool {
    matches!(
        code,
        NO_ANSWER
            | REQUEST_TIMED_OUT
            | COORDINATOR_LOAD_IN_PROGRESS
            | COORDINATOR_NOT_AVAILABLE
            | NOT_COORDINATOR
    )
}

/// Whether a produce error is worth retrying as it is (same epoch, same sequence): the leader moved, the ISR is
/// short, the coordinator is busy or moved (the leader adds the partition through it), or no answer came.
fn produce_retriable(code: i16) -> bool {
    matches!(
        code,
        NO_ANSWER
            | UNKNOWN_TOPIC_OR_PARTITION
            | NOT_LEADER_OR_FOLLOWER
            | REQUEST_TIMED_OUT
            | COORDINATOR_LOAD_IN_PROGRESS
            | COORDINATOR_NOT_AVAILABLE
            | NOT_COORDINATOR
            | NOT_ENOUGH_REPLICAS
            | NOT_ENOUGH_REPLICAS_AFTER_APPEND
            | CONCURRENT_TRANSACTIONS
            | KAFKA_STORAGE_ERROR
            | FENCED_LEADER_EPOCH
            | UNKNOWN_LEADER_EPOCH
    )
}

fn event(shared: &Shared, what: String) {
    shared.history.lock().event(now_ms(), what);
}

/// Records that the coordinator handed `id` (producer id, epoch) to producer instance `instance` (by `how`): the
/// run fails if another instance was handed it before. The only legal repeat is to the same instance (a retry
/// answered with what it already got); a fence's bump is never handed out, and a new producer's InitProducerId
/// bumps past every epoch before it.
fn grant(shared: &Shared, instance: &str, id: (i64, i16), how: &str) {
    let at = now_ms();
    let mut history = shared.history.lock();
    if how != "EndTxn" {
        // EndTxn's grants are in the trace as "txn n committed; next epoch e".
        history.event(
            at,
            format!(
                "{how} handed producer id {} epoch {} to {instance}",
                id.0, id.1
            ),
        );
    }
    let holder = history
        .replication
        .txn
        .grants
        .entry(id)
        .or_insert_with(|| instance.to_string())
        .clone();
    if holder != instance {
        history.violate(
            at,
            format!(
                "{how} handed producer id {} epoch {} of {TRANSACTIONAL_ID} to {instance}, which {holder} was \
                 handed before: two producers hold one epoch, the zombie is not fenced",
                id.0, id.1
            ),
        );
    }
}

/// Whether an InitProducerId error says this producer is fenced for good (a new instance must start over).
fn fenced(code: i16) -> bool {
    matches!(
        code,
        PRODUCER_FENCED | INVALID_PRODUCER_EPOCH | INVALID_PRODUCER_ID_MAPPING
    )
}

async fn find_coordinator(kafka: &mut Kafka, ask: i32) -> Result<i32, i16> {
    let request = FindCoordinatorRequest::default()
        .with_key(StrBytes::from_static_str(TRANSACTIONAL_ID))
        .with_key_type(1);
    let response = kafka
        .send_bounded(ask, &request, (1, 3), REQUEST_BOUND)
        .await
        .map_err(|_| NO_ANSWER)?;
    if response.error_code != NONE {
        return Err(response.error_code);
    }
    let node = response.node_id.0;
    if (1..=VOTERS).contains(&node) {
        Ok(node)
    } else {
        Err(NO_ANSWER)
    }
}

/// InitProducerId v4 for [`TRANSACTIONAL_ID`]: as a new producer (`current` None), or as KIP-360's recovery of
/// a producer that has an id and epoch and wants a bumped one.
async fn init_producer_id(
    kafka: &mut Kafka,
    coordinator: i32,
    timeout_ms: i32,
    current: Option<(i64, i16)>,
) -> Result<(i64, i16), i16> {
    let (id, epoch) = current.unwrap_or((-1, -1));
    let request = InitProducerIdRequest::default()
        .with_transactional_id(Some(TransactionalId(StrBytes::from_static_str(
            TRANSACTIONAL_ID,
        ))))
        .with_transaction_timeout_ms(timeout_ms)
        .with_producer_id(ProducerId(id))
        .with_producer_epoch(epoch);
    let response = kafka
        .send_bounded(coordinator, &request, (3, 4), REQUEST_BOUND)
        .await
        .map_err(|_| NO_ANSWER)?;
    if response.error_code != NONE {
        return Err(response.error_code);
    }
    Ok((response.producer_id.0, response.producer_epoch))
}

/// EndTxn v5 (transaction version 2): on success, the producer id and the bumped epoch to continue with.
async fn end_txn(
    kafka: &mut Kafka,
    coordinator: i32,
    producer: (i64, i16),
    commit: bool,
) -> Result<(i64, i16), i16> {
    let request = EndTxnRequest::default()
        .with_transactional_id(TransactionalId(StrBytes::from_static_str(TRANSACTIONAL_ID)))
        .with_producer_id(ProducerId(producer.0))
        .with_producer_epoch(producer.1)
        .with_committed(commit);
    let response = kafka
        .send_bounded(coordinator, &request, (5, 5), REQUEST_BOUND)
        .await
        .map_err(|_| NO_ANSWER)?;
    if response.error_code != NONE {
        return Err(response.error_code);
    }
    Ok((response.producer_id.0, response.producer_epoch))
}

/// One transactional record (sequence 0: at transaction version 2 every transaction has an epoch of its own).
fn transactional_batch(value: &Bytes, producer: (i64, i16)) -> Bytes {
    let record = Record {
        transactional: true,
        control: false,
        delete_horizon: false,
        partition_leader_epoch: NO_PARTITION_LEADER_EPOCH,
        producer_id: producer.0,
        producer_epoch: producer.1,
        timestamp_type: TimestampType::Creation,
        offset: 0,
        sequence: 0,
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

/// Produce v12 of one transactional record, acks=all: its offset, or the error code.
async fn produce(kafka: &mut Kafka, leader: i32, tp: Tp, records: Bytes) -> Result<i64, i16> {
    let request = ProduceRequest::default()
        .with_transactional_id(Some(TransactionalId(StrBytes::from_static_str(
            TRANSACTIONAL_ID,
        ))))
        .with_acks(-1)
        .with_timeout_ms(3000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_static_str(tp.0)))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(tp.1)
                .with_records(Some(records))])]);
    let response = kafka
        .send_bounded(leader, &request, (12, 12), REQUEST_BOUND)
        .await
        .map_err(|_| NO_ANSWER)?;
    let p = response
        .responses
        .first()
        .and_then(|t| t.partition_responses.first())
        .ok_or(NO_ANSWER)?;
    if p.error_code == NONE {
        Ok(p.base_offset)
    } else {
        Err(p.error_code)
    }
}

/// The producer's connection state between transactions.
struct Producer {
    kafka: Kafka,
    coordinator: Option<i32>,
    /// Where the next FindCoordinator / Metadata goes.
    ask: i32,
    leaders: BTreeMap<i32, i32>,
}

impl Producer {
    /// A producer that asks node `ask` first.
    fn new(ask: i32) -> Self {
        Producer {
            kafka: Kafka::new(),
            coordinator: None,
            ask,
            leaders: BTreeMap::new(),
        }
    }

    /// Transaction `n` at `producer` (id, epoch): its record on each partition, then EndTxn (`commit` or abort),
    /// all within [`TRANSACTION_BOUND`]. The id and epoch to go on with, or why it failed. An abort is asked for
    /// after a failed write only by starting over: simpler, and what the InitProducerId path must get right
    /// anyway.
    async fn run(
        &mut self,
        shared: &Shared,
        n: u64,
        commit: bool,
        producer: (i64, i16),
    ) -> Result<(i64, i16), String> {
        let deadline = tokio::time::Instant::now() + TRANSACTION_BOUND;
        for partition in 0..PARTITIONS {
            let value = value_of(n, partition, commit);
            self.write(shared, n, partition, &value, producer, deadline)
                .await?;
        }
        if commit {
            with_transaction(shared, n, |t| t.commit_sent = true);
        }
        self.end(shared, producer, commit, deadline).await
    }

    fn rotate(&mut self) {
        self.ask = self.ask % VOTERS + 1;
    }

    /// The coordinator, found again if needed; None after a failed try (the caller backs off).
    async fn coordinator(&mut self, shared: &Shared) -> Option<i32> {
        if let Some(c) = self.coordinator {
            return Some(c);
        }
        match find_coordinator(&mut self.kafka, self.ask).await {
            Ok(c) => {
                event(
                    shared,
                    format!(
                        "coordinator of {TRANSACTIONAL_ID}: n{c} (asked n{})",
                        self.ask
                    ),
                );
                self.coordinator = Some(c);
                Some(c)
            }
            Err(code) => {
                event(
                    shared,
                    format!("find transaction coordinator at n{}: {code}", self.ask),
                );
                self.rotate();
                None
            }
        }
    }

    /// Writes transaction `n`'s record to `partition`, retrying what can be retried until `deadline`.
    async fn write(
        &mut self,
        shared: &Shared,
        n: u64,
        partition: i32,
        value: &Bytes,
        producer: (i64, i16),
        deadline: tokio::time::Instant,
    ) -> Result<(), String> {
        let tp = (TOPIC, partition);
        while tokio::time::Instant::now() < deadline {
            let leader = match self.leaders.get(&partition) {
                Some(l) => *l,
                None => match self.kafka.leader(self.ask, tp).await {
                    Some((l, _)) => {
                        self.leaders.insert(partition, l);
                        l
                    }
                    None => {
                        self.rotate();
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                },
            };
            match produce(
                &mut self.kafka,
                leader,
                tp,
                transactional_batch(value, producer),
            )
            .await
            {
                Ok(offset) => {
                    let mut history = shared.history.lock();
                    history.event(
                        now_ms(),
                        format!(
                            "ack txn {TOPIC}-{partition} @{offset} {}",
                            String::from_utf8_lossy(value)
                        ),
                    );
                    if let Some(t) = history.replication.txn.transactions.get_mut(&n) {
                        t.produced.insert(partition);
                    }
                    return Ok(());
                }
                Err(code) if produce_retriable(code) => {
                    event(
                        shared,
                        format!("produce txn {TOPIC}-{partition} at n{leader}: {code}; retrying"),
                    );
                    self.leaders.remove(&partition);
                    self.rotate();
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(code) => return Err(format!("produce {TOPIC}-{partition}: {code}")),
            }
        }
        Err(format!(
            "{TOPIC}-{partition} not written within {TRANSACTION_BOUND:?}"
        ))
    }

    /// Ends the transaction, retrying what can be retried until `deadline`: the id and epoch to go on with.
    async fn end(
        &mut self,
        shared: &Shared,
        producer: (i64, i16),
        commit: bool,
        deadline: tokio::time::Instant,
    ) -> Result<(i64, i16), String> {
        while tokio::time::Instant::now() < deadline {
            let Some(c) = self.coordinator(shared).await else {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            };
            match end_txn(&mut self.kafka, c, producer, commit).await {
                Ok(next) => return Ok(next),
                Err(code) if coordinator_moved(code) || code == CONCURRENT_TRANSACTIONS => {
                    event(shared, format!("end txn at n{c}: {code}; retrying"));
                    if code != CONCURRENT_TRANSACTIONS {
                        self.coordinator = None;
                        self.rotate();
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(code) => return Err(format!("end txn at n{c}: {code}")),
            }
        }
        Err(format!("not ended within {TRANSACTION_BOUND:?}"))
    }
}

/// The transactional producer: transactions until a few seconds after healing, as an application's producer
/// instances one after another (`producer#1`, `producer#2`, ...). After a failed transaction it first recovers
/// as KIP-360 has it: InitProducerId with its id and epoch, which bumps the epoch if nobody took the id over
/// meanwhile. Refused as fenced (the [`usurper`] took the id over, or its own transaction was still open and the
/// coordinator fenced it), it starts over as a new instance with a fresh InitProducerId, as an application does
/// after a fatal producer error.
pub(crate) async fn producer(shared: Arc<Shared>, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut p = Producer::new(2);
    let mut instance = 1u32;
    let mut id: Option<(i64, i16)> = None;
    // The id and epoch to recover with (KIP-360) before starting over as a new instance.
    let mut recover: Option<(i64, i16)> = None;
    // The transaction the next acknowledged InitProducerId settles (the producer gave up on it).
    let mut unsettled: Option<u64> = None;
    let mut healed_at = None;
    while keep_writing(&shared, &mut healed_at) {
        let name = format!("producer#{instance}");
        let Some(producer) = id else {
            let Some(c) = p.coordinator(&shared).await else {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            };
            match init_producer_id(&mut p.kafka, c, TRANSACTION_TIMEOUT_MS, recover).await {
                Ok(next) => {
                    grant(&shared, &name, next, &format!("InitProducerId at n{c}"));
                    let mut history = shared.history.lock();
                    if recover.is_some() {
                        history.replication.txn.reinits_taken += 1;
                    }
                    if let Some(t) = unsettled
                        .take()
                        .and_then(|u| history.replication.txn.transactions.get_mut(&u))
                    {
                        // The bump fenced the transaction and aborted it, unless a commit was asked for: that
                        // one may have been prepared (and so committed) before the bump.
                        t.outcome = if t.commit_sent {
                            Outcome::Unknown
                        } else {
                            Outcome::Aborted
                        };
                    }
                    id = Some(next);
                    recover = None;
                }
                Err(code) if fenced(code) && recover.is_some() => {
                    let (old_id, old_epoch) = recover.take().unwrap_or_default();
                    instance += 1;
                    {
                        let mut history = shared.history.lock();
                        history.replication.txn.reinits_refused += 1;
                        history.event(
                            now_ms(),
                            format!(
                                "{name}'s re-init with producer id {old_id} epoch {old_epoch} at n{c}: {code} \
                                 (fenced); starting over as producer#{instance}"
                            ),
                        );
                    }
                    // The application notices and makes a new producer: long enough for a usurper to get on.
                    tokio::time::sleep(Duration::from_millis(rng.gen_range(500..3_000))).await;
                }
                Err(code) => {
                    event(&shared, format!("init transactional id at n{c}: {code}"));
                    if coordinator_moved(code) {
                        p.coordinator = None;
                        p.rotate();
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
            continue;
        };
        let commit = rng.gen_range(0..3) != 0;
        let n = shared.history.lock().replication.txn.begin(commit);
        unsettled = Some(n);
        let ended = p.run(&shared, n, commit, producer).await;
        match ended {
            Ok(next) => {
                grant(&shared, &name, next, "EndTxn");
                let mut history = shared.history.lock();
                history.event(
                    now_ms(),
                    format!(
                        "txn {n} {}; next epoch {}",
                        if commit { "committed" } else { "aborted" },
                        next.1
                    ),
                );
                if let Some(t) = history.replication.txn.transactions.get_mut(&n) {
                    t.outcome = if commit {
                        Outcome::Committed
                    } else {
                        Outcome::Aborted
                    };
                }
                unsettled = None;
                id = Some(next);
            }
            Err(why) => {
                event(&shared, format!("txn {n}: {why}; starting over"));
                id = None;
                // Without the zombie workload, as before it: always a fresh InitProducerId.
                recover = shared.zombie_producer.then_some(producer);
                p.coordinator = None;
                p.leaders.clear();
            }
        }
        tokio::time::sleep(Duration::from_millis(rng.gen_range(20..200))).await;
    }
    // A transaction given up on last stays Open (or Unknown if its commit was asked for): the coordinator's
    // timeout must end it before the run can converge.
    if let Some(u) = unsettled {
        settle_given_up(&shared, u);
    }
    abandon(&shared, &mut p, &format!("producer#{}", instance + 1)).await;
}

/// A transaction its producer gave up on without an answer: Unknown if its commit was asked for, else it
/// stays Open (only an abort, by a fence or the coordinator's timeout, can end it).
fn settle_given_up(shared: &Shared, n: u64) {
    with_transaction(shared, n, |t| {
        if t.commit_sent {
            t.outcome = Outcome::Unknown;
        }
    });
}

/// Applies `f` to transaction `n`'s record, if it has one.
fn with_transaction(shared: &Shared, n: u64, f: impl FnOnce(&mut Transaction)) {
    if let Some(t) = shared
        .history
        .lock()
        .replication
        .txn
        .transactions
        .get_mut(&n)
    {
        f(t);
    }
}

/// A second producer instance of [`TRANSACTIONAL_ID`], as when an application's instance starts elsewhere while
/// the old one still runs: at a moment of the fault phase drawn from the seed it takes the id over
/// (InitProducerId without an id, which fences the [`producer`] and aborts its open transaction), stays idle a
/// moment (starting up), runs one transaction meant to commit, and stops. The fenced producer must be refused
/// when it recovers with its old epoch; what checks it is [`grant`] (one instance per epoch) and the
/// read_committed checks every transaction gets.
pub(crate) async fn usurper(shared: Arc<Shared>, seed: u64) {
    const NAME: &str = "usurper";
    let mut rng = StdRng::seed_from_u64(seed);
    let phase_ms = u64::try_from(shared.fault_phase.as_millis()).unwrap_or(u64::MAX);
    let latest = (phase_ms / 5 * 4).max(3_000);
    tokio::time::sleep(Duration::from_millis(rng.gen_range(2_000..=latest))).await;
    if shared.healed.load(std::sync::atomic::Ordering::Relaxed) {
        return;
    }
    let mut p = Producer::new(3);
    let mut healed_at = None;
    let producer = loop {
        if !keep_writing(&shared, &mut healed_at) {
            event(&shared, format!("{NAME}: no producer id; it stops"));
            return;
        }
        let Some(c) = p.coordinator(&shared).await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        match init_producer_id(&mut p.kafka, c, TRANSACTION_TIMEOUT_MS, None).await {
            Ok(next) => {
                grant(&shared, NAME, next, &format!("InitProducerId at n{c}"));
                break next;
            }
            Err(code) => {
                event(&shared, format!("{NAME}: init at n{c}: {code}"));
                if coordinator_moved(code) {
                    p.coordinator = None;
                    p.rotate();
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    shared.history.lock().replication.txn.usurped = true;
    tokio::time::sleep(Duration::from_millis(rng.gen_range(0..2_000))).await;
    let n = shared.history.lock().replication.txn.begin(true);
    match p.run(&shared, n, true, producer).await {
        Ok(next) => {
            grant(&shared, NAME, next, "EndTxn");
            let mut history = shared.history.lock();
            history.event(now_ms(), format!("{NAME}: txn {n} committed; it stops"));
            if let Some(t) = history.replication.txn.transactions.get_mut(&n) {
                t.outcome = Outcome::Committed;
            }
        }
        Err(why) => {
            event(&shared, format!("{NAME}: txn {n}: {why}; it stops"));
            settle_given_up(&shared, n);
        }
    }
}

/// Dies in the middle of a transaction, as a crashed producer does: a fresh InitProducerId with a short
/// timeout (as producer instance `name`), the next transaction's records written to both partitions (values
/// that say commit), and no EndTxn. Only the coordinator's timeout can end it, by an abort: the run converges
/// only once it has (the last stable offsets reach the high watermarks) and its records must never be returned
/// by read_committed (no commit was asked for). Every run exercises the coordinator's timeout this way. Bounded
/// by [`ABANDON_BOUND`]; the run goes on without it if the cluster does not let it begin in that time.
async fn abandon(shared: &Shared, p: &mut Producer, name: &str) {
    let deadline = tokio::time::Instant::now() + ABANDON_BOUND;
    let producer = loop {
        if tokio::time::Instant::now() >= deadline {
            event(shared, "no transaction to abandon: no producer id".into());
            return;
        }
        let Some(c) = p.coordinator(shared).await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        match init_producer_id(&mut p.kafka, c, ABANDONED_TIMEOUT_MS, None).await {
            Ok(next) => {
                grant(shared, name, next, &format!("InitProducerId at n{c}"));
                break next;
            }
            Err(code) => {
                event(shared, format!("init transactional id at n{c}: {code}"));
                if coordinator_moved(code) {
                    p.coordinator = None;
                    p.rotate();
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    let n = shared.history.lock().replication.txn.begin(true);
    for partition in 0..PARTITIONS {
        let value = value_of(n, partition, true);
        if p.write(shared, n, partition, &value, producer, deadline)
            .await
            .is_err()
        {
            break;
        }
    }
    event(
        shared,
        format!(
            "txn {n} abandoned (epoch {}): its timeout must abort it",
            producer.1
        ),
    );
}

/// What one read_committed fetch of a partition returned.
struct CommittedRead {
    /// The records a read_committed consumer delivers: (offset, value).
    delivered: Vec<(i64, Bytes)>,
    /// Every data record the answer held (aborted ones too): (offset, value).
    all: Vec<(i64, Bytes)>,
    next_offset: Option<i64>,
    last_stable_offset: i64,
    high_watermark: i64,
    leader: i32,
}

/// One read_committed Fetch of `tp` from `offset` at its leader, filtered as Kafka's consumer filters
/// (`CompletedFetch`): a transactional batch of a producer in the answer's aborted transactions (from their first
/// offset on, until that producer's abort marker) is skipped, and so is every control batch. Records at or
/// above the last stable offset fail the run.
async fn read_committed(
    shared: &Shared,
    kafka: &mut Kafka,
    ask: i32,
    tp: Tp,
    offset: i64,
) -> Result<CommittedRead, i16> {
    let (leader, epoch) = kafka.leader(ask, tp).await.ok_or(NO_ANSWER)?;
    let request = FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(0)
        .with_min_bytes(1)
        .with_max_bytes(1 << 20)
        .with_isolation_level(1)
        .with_session_epoch(-1)
        .with_topics(vec![FetchTopic::default()
            .with_topic(TopicName(StrBytes::from_static_str(tp.0)))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(tp.1)
                .with_current_leader_epoch(epoch)
                .with_fetch_offset(offset)
                .with_partition_max_bytes(1 << 20)])]);
    let response = kafka
        .send_bounded(leader, &request, (4, 12), REQUEST_BOUND)
        .await
        .map_err(|_| NO_ANSWER)?;
    let pd = response
        .responses
        .first()
        .and_then(|t| t.partitions.first())
        .ok_or(NO_ANSWER)?;
    if pd.error_code != NONE {
        return Err(pd.error_code);
    }
    let mut aborted: Vec<(i64, i64)> = pd
        .aborted_transactions
        .iter()
        .flatten()
        .map(|a| (a.first_offset, a.producer_id.0))
        .collect();
    aborted.sort_unstable();
    let mut aborted = aborted.into_iter().peekable();
    let mut aborted_producers: BTreeSet<i64> = BTreeSet::new();
    let mut out = CommittedRead {
        delivered: Vec::new(),
        all: Vec::new(),
        next_offset: None,
        last_stable_offset: pd.last_stable_offset,
        high_watermark: pd.high_watermark,
        leader,
    };
    let mut data = pd.records.clone().unwrap_or_default();
    let at = now_ms();
    // Batch by batch (the answer may end in a partial batch, which is left for the next fetch).
    while data.len() >= 12 {
        let length = i32::from_be_bytes([data[8], data[9], data[10], data[11]]);
        let Some(total) = usize::try_from(length).ok().and_then(|l| l.checked_add(12)) else {
            break;
        };
        if total > data.len() {
            break;
        }
        let mut batch = data.split_to(total);
        let Ok(set) = RecordBatchDecoder::decode(&mut batch) else {
            break;
        };
        let Some(first) = set.records.first() else {
            continue;
        };
        let last_offset = set.records.last().map_or(first.offset, |r| r.offset);
        out.next_offset = Some(last_offset + 1);
        if last_offset < offset {
            continue;
        }
        if last_offset >= pd.last_stable_offset {
            shared.history.lock().violate(
                at,
                format!(
                    "{}-{} offset {last_offset} served to a read_committed consumer at or above the last \
                     stable offset {} (from n{leader})",
                    tp.0, tp.1, pd.last_stable_offset
                ),
            );
        }
        if first.transactional || first.control {
            while let Some((_, producer)) = aborted.next_if(|(o, _)| *o <= last_offset) {
                aborted_producers.insert(producer);
            }
        }
        if first.control {
            // A control record's key: version (i16), type (i16: 0 abort, 1 commit).
            let is_abort = first.key.as_ref().is_some_and(|k| {
                let mut k = k.clone();
                k.len() >= 4 && {
                    k.advance(2);
                    k.get_i16() == 0
                }
            });
            if is_abort {
                aborted_producers.remove(&first.producer_id);
            }
            continue;
        }
        let skipped = first.transactional && aborted_producers.contains(&first.producer_id);
        for r in set.records {
            if r.offset < offset {
                continue;
            }
            let value = r.value.unwrap_or_default();
            out.all.push((r.offset, value.clone()));
            if !skipped {
                out.delivered.push((r.offset, value));
            }
        }
    }
    Ok(out)
}

/// Checks what one read returned against what the producer knows, and records it.
fn check_read(shared: &Shared, tp: Tp, read: &CommittedRead, when: &str) {
    let at = now_ms();
    let mut history = shared.history.lock();
    for (offset, value) in &read.all {
        note_read(&mut history, at, tp, *offset, value, read.leader);
    }
    let txn = &mut history.replication.txn;
    txn.returned += read.delivered.len();
    txn.filtered += read.all.len() - read.delivered.len();
    let mut bad = Vec::new();
    for (offset, value) in &read.delivered {
        let Some((n, partition, commit)) = parse_value(value) else {
            bad.push(format!(
                "{}-{} offset {offset}: read_committed returned {:?}, not a value the producer sent",
                tp.0,
                tp.1,
                String::from_utf8_lossy(value)
            ));
            continue;
        };
        let t = txn.transactions.get(&n);
        let why = match t {
            _ if partition != tp.1 => Some("a value of another partition"),
            None => Some("a transaction never begun"),
            Some(_) if !commit => Some("a transaction the producer meant to abort"),
            Some(t) if t.outcome == Outcome::Aborted => {
                Some("a transaction whose abort was acknowledged")
            }
            Some(t) if !t.commit_sent => Some("a transaction whose commit was never asked for"),
            Some(_) => None,
        };
        if let Some(why) = why {
            bad.push(format!(
                "{when}{}-{} offset {offset}: read_committed (n{}) returned {:?}, of {why}",
                tp.0,
                tp.1,
                read.leader,
                String::from_utf8_lossy(value)
            ));
        }
        txn.visible.entry(n).or_default().insert(tp.1);
    }
    for b in bad {
        history.violate(at, b);
    }
}

/// The read_committed reader: follows both partitions during the run; once the writes are done and the cluster
/// has converged, reads both from offset 0 to their end and checks every transaction ([`final_check`]).
pub(crate) async fn reader(shared: Arc<Shared>) {
    let mut kafka = Kafka::new();
    let mut next: BTreeMap<i32, i64> = BTreeMap::new();
    let mut ask = 1;
    loop {
        let ready = {
            let history = shared.history.lock();
            history.replication.quiesced
        } && crate::replication::converged(&shared);
        if ready {
            break;
        }
        for tp in partitions() {
            let offset = *next.get(&tp.1).unwrap_or(&0);
            match read_committed(&shared, &mut kafka, ask, tp, offset).await {
                Ok(read) => {
                    check_read(&shared, tp, &read, "");
                    if let Some(n) = read.next_offset {
                        next.insert(tp.1, n.max(offset));
                    }
                }
                Err(OFFSET_OUT_OF_RANGE) => {
                    next.insert(tp.1, 0);
                }
                Err(_) => ask = ask % VOTERS + 1,
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The final pass: every partition from 0 to its end, which is its last stable offset (converged).
    let mut visible: BTreeMap<u64, BTreeSet<i32>> = BTreeMap::new();
    let mut values: BTreeMap<Bytes, (i32, i64)> = BTreeMap::new();
    let mut duplicates = Vec::new();
    for tp in partitions() {
        let mut offset = 0;
        let mut attempts = 0;
        loop {
            attempts += 1;
            if attempts > FINAL_READ_ATTEMPTS {
                shared.history.lock().not_converged(
                    now_ms(),
                    format!(
                        "{}-{}: the final read_committed pass did not reach the end in {FINAL_READ_ATTEMPTS} \
                         attempts (at offset {offset})",
                        tp.0, tp.1
                    ),
                );
                return;
            }
            let read = match read_committed(&shared, &mut kafka, ask, tp, offset).await {
                Ok(read) => read,
                Err(_) => {
                    ask = ask % VOTERS + 1;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            check_read(&shared, tp, &read, "final ");
            for (o, value) in &read.delivered {
                if let Some((n, _, _)) = parse_value(value) {
                    visible.entry(n).or_default().insert(tp.1);
                }
                if let Some(first) = values.insert(value.clone(), (tp.1, *o)) {
                    duplicates.push(format!(
                        "{:?} returned by read_committed twice, at {}-{} and {}-{} {o}",
                        String::from_utf8_lossy(value),
                        tp.0,
                        first.1,
                        tp.0,
                        tp.1
                    ));
                }
            }
            match read.next_offset {
                Some(n) if n > offset => offset = n,
                _ => {}
            }
            if offset >= read.last_stable_offset && read.last_stable_offset == read.high_watermark {
                break;
            }
            if read.next_offset.is_none() {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    final_check(&shared, &visible, duplicates);
}

/// After convergence: every committed transaction on both partitions, every transaction on both or neither.
fn final_check(shared: &Shared, visible: &BTreeMap<u64, BTreeSet<i32>>, duplicates: Vec<String>) {
    let at = now_ms();
    let mut history = shared.history.lock();
    let all: BTreeSet<i32> = (0..PARTITIONS).collect();
    let mut problems = duplicates;
    let txn = &history.replication.txn;
    for (n, t) in &txn.transactions {
        let seen = visible.get(n).cloned().unwrap_or_default();
        if t.outcome == Outcome::Committed && seen != all {
            problems.push(format!(
                "transaction {n}: commit acknowledged, read_committed returns it on partitions {seen:?} of \
                 {TOPIC} only"
            ));
        } else if !seen.is_empty() && seen != all {
            problems.push(format!(
                "transaction {n} ({:?}): read_committed returns it on partitions {seen:?} of {TOPIC} only: not \
                 atomic",
                t.outcome
            ));
        }
    }
    // A transaction read during the run must still be there.
    for (n, partitions) in &txn.visible {
        let now = visible.get(n).cloned().unwrap_or_default();
        if !partitions.is_subset(&now) {
            problems.push(format!(
                "transaction {n}: read_committed returned it on {partitions:?} during the run, only on {now:?} \
                 after convergence"
            ));
        }
    }
    let summary = format!(
        "final transactions: {} begun, {} committed, {} aborted, {} unknown, {} open; read_committed returned \
         {} records during the run and filtered {} aborted ones; {} transactions visible at the end; {} epochs \
         handed out, the id usurped: {}, KIP-360 re-inits taken {} and refused as fenced {}",
        txn.transactions.len(),
        txn.count(Outcome::Committed),
        txn.count(Outcome::Aborted),
        txn.count(Outcome::Unknown),
        txn.count(Outcome::Open),
        txn.returned,
        txn.filtered,
        visible.len(),
        txn.grants.len(),
        txn.usurped,
        txn.reinits_taken,
        txn.reinits_refused
    );
    history.event(at, summary);
    for p in problems.into_iter().take(10) {
        history.violate(at, p);
    }
    history.replication.txn.final_read = true;
}

/// Whether the final read_committed pass has run (the driver ends a converged run only then).
pub(crate) fn final_read_done(shared: &Shared) -> bool {
    shared.history.lock().replication.txn.final_read
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_name_their_transaction_partition_and_intent() {
        assert_eq!(parse_value(&value_of(12, 1, true)), Some((12, 1, true)));
        assert_eq!(parse_value(&value_of(3, 0, false)), Some((3, 0, false)));
        assert_eq!(parse_value(b"replicated-0-12"), None);
        assert_eq!(parse_value(b"txn-1-p0-commit-x"), None);
    }
}
