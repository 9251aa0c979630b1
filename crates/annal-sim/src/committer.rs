//! A consumer group's offset commits through the real group coordinator, and the invariant that committed
//! offsets never move backwards.
//!
//! The committer is a standalone consumer (generation -1, empty member id: Kafka accepts such commits while the
//! group has no members): it finds the group's coordinator (FindCoordinator, key type GROUP), commits a growing
//! offset for a few of the workload's partitions (OffsetCommit) and reads them back (OffsetFetch). The
//! coordinator is the leader of the group's `__consumer_offsets` partition, which moves under faults.
//!
//! Checked at every OffsetFetch answered without error, during the run and once after healing: no partition's
//! committed offset is below the highest commit acknowledged before the fetch was sent (an acknowledged commit
//! lost or overwritten by an older one across a coordinator failover).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::{
    FindCoordinatorRequest, GroupId, OffsetCommitRequest, OffsetFetchRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::replication::{keep_writing, partitions, Kafka, Tp};
use crate::{now_ms, Shared, VOTERS};

/// The committer's group.
pub const GROUP: &str = "sim-committers";
/// Kafka error codes after which the committer finds the coordinator again and retries.
const REQUEST_TIMED_OUT: i16 = 7;
const COORDINATOR_LOAD_IN_PROGRESS: i16 = 14;
const COORDINATOR_NOT_AVAILABLE: i16 = 15;
const NOT_COORDINATOR: i16 = 16;
/// Whole-request bound (connect, write, answer): a write into a connection nobody reads must not hold the run.
const REQUEST_BOUND: Duration = Duration::from_secs(6);

/// What the commit check remembers.
#[derive(Debug, Default)]
pub struct CommitHistory {
    /// Highest commit acknowledged per partition.
    pub acked: BTreeMap<Tp, i64>,
    /// Commits acknowledged, and OffsetFetches answered without error (and checked).
    pub acked_count: usize,
    pub fetches_checked: usize,
}

/// Kafka's name for the codes the committer meets, for the trace.
fn code_name(code: i16) -> &'static str {
    match code {
        0 => "NONE",
        -1 => "no answer",
        REQUEST_TIMED_OUT => "REQUEST_TIMED_OUT",
        COORDINATOR_LOAD_IN_PROGRESS => "COORDINATOR_LOAD_IN_PROGRESS",
        COORDINATOR_NOT_AVAILABLE => "COORDINATOR_NOT_AVAILABLE",
        NOT_COORDINATOR => "NOT_COORDINATOR",
        _ => "other",
    }
}

/// Whether an error code says the coordinator moved, is loading, or did not answer: find it again and retry.
fn retriable(code: i16) -> bool {
    matches!(
        code,
        -1 | REQUEST_TIMED_OUT
            | COORDINATOR_LOAD_IN_PROGRESS
            | COORDINATOR_NOT_AVAILABLE
            | NOT_COORDINATOR
    )
}

/// The coordinator of `group`, as broker `ask` names it, or an error code (-1: no answer).
pub(crate) async fn find_coordinator(
    kafka: &mut Kafka,
    ask: i32,
    group: &'static str,
) -> Result<i32, i16> {
    let request = FindCoordinatorRequest::default()
        .with_key(StrBytes::from_static_str(group))
        .with_key_type(0);
    let response = kafka
        .send_bounded(ask, &request, (1, 3), REQUEST_BOUND)
        .await
        .map_err(|_| -1i16)?;
    if response.error_code != 0 {
        return Err(response.error_code);
    }
    let node = response.node_id.0;
    if (1..=VOTERS).contains(&node) {
        Ok(node)
    } else {
        Err(-1)
    }
}

/// Who commits: the group, and the member's generation and id (-1 and "" for a standalone consumer).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Committer<'a> {
    pub group: &'static str,
    /// The classic group's generation, or the KIP-848 member's epoch.
    pub generation: i32,
    pub member_id: &'a str,
    /// The OffsetCommit versions to choose from: v9 and later carry a KIP-848 member's epoch.
    pub versions: (i16, i16),
}

/// OffsetCommit versions of a standalone consumer or a classic group's member.
pub(crate) const CLASSIC_COMMIT_VERSIONS: (i16, i16) = (2, 8);

/// Commits `offsets` at `coordinator`; the partitions acknowledged, or the first error code.
pub(crate) async fn commit(
    kafka: &mut Kafka,
    coordinator: i32,
    who: Committer<'_>,
    offsets: &[(Tp, i64)],
) -> Result<Vec<(Tp, i64)>, i16> {
    let mut by_topic: BTreeMap<&str, Vec<OffsetCommitRequestPartition>> = BTreeMap::new();
    for ((topic, partition), offset) in offsets {
        by_topic.entry(topic).or_default().push(
            OffsetCommitRequestPartition::default()
                .with_partition_index(*partition)
                .with_committed_offset(*offset)
                .with_committed_leader_epoch(-1)
                .with_committed_metadata(Some(StrBytes::from_static_str(""))),
        );
    }
    let request = OffsetCommitRequest::default()
        .with_group_id(GroupId(StrBytes::from_static_str(who.group)))
        .with_generation_id_or_member_epoch(who.generation)
        .with_member_id(StrBytes::from_string(who.member_id.to_string()))
        .with_retention_time_ms(-1)
        .with_topics(
            by_topic
                .into_iter()
                .map(|(t, ps)| {
                    OffsetCommitRequestTopic::default()
                        .with_name(TopicName(StrBytes::from_string(t.to_string())))
                        .with_partitions(ps)
                })
                .collect(),
        );
    let response = kafka
        .send_bounded(coordinator, &request, who.versions, REQUEST_BOUND)
        .await
        .map_err(|_| -1i16)?;
    let mut acked = Vec::new();
    let mut error = None;
    for t in &response.topics {
        for p in &t.partitions {
            let Some((tp, offset)) = offsets.iter().find(|((topic, partition), _)| {
                *topic == t.name.0.as_str() && *partition == p.partition_index
            }) else {
                continue;
            };
            if p.error_code == 0 {
                acked.push((*tp, *offset));
            } else {
                error.get_or_insert(p.error_code);
            }
        }
    }
    match error {
        Some(code) if acked.is_empty() => Err(code),
        _ => Ok(acked),
    }
}

/// Fetches the committed offsets of `tps` at `coordinator`: partition -> offset (-1: none committed), or the
/// error code (the group's, or the first partition's).
pub(crate) async fn fetch(
    kafka: &mut Kafka,
    coordinator: i32,
    group: &'static str,
    tps: &[Tp],
) -> Result<BTreeMap<Tp, i64>, i16> {
    let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for (topic, partition) in tps {
        by_topic.entry(topic).or_default().push(*partition);
    }
    let request = OffsetFetchRequest::default()
        .with_group_id(GroupId(StrBytes::from_static_str(group)))
        .with_topics(Some(
            by_topic
                .into_iter()
                .map(|(t, ps)| {
                    OffsetFetchRequestTopic::default()
                        .with_name(TopicName(StrBytes::from_string(t.to_string())))
                        .with_partition_indexes(ps)
                })
                .collect(),
        ));
    let response = kafka
        .send_bounded(coordinator, &request, (1, 7), REQUEST_BOUND)
        .await
        .map_err(|_| -1i16)?;
    if response.error_code != 0 {
        return Err(response.error_code);
    }
    let mut out = BTreeMap::new();
    for t in &response.topics {
        for p in &t.partitions {
            if p.error_code != 0 {
                return Err(p.error_code);
            }
            if let Some(tp) = tps.iter().find(|(topic, partition)| {
                *topic == t.name.0.as_str() && *partition == p.partition_index
            }) {
                out.insert(*tp, p.committed_offset);
            }
        }
    }
    Ok(out)
}

/// Offsets for the trace: `topic-partition=offset`, space-separated.
pub(crate) fn offsets_text<'a>(offsets: impl IntoIterator<Item = (&'a Tp, &'a i64)>) -> String {
    offsets
        .into_iter()
        .map(|((t, p), o)| format!("{t}-{p}={o}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Raises each partition's highest acknowledged commit (`highest`) to what `acked` acknowledged.
pub(crate) fn raise_acked(highest: &mut BTreeMap<Tp, i64>, acked: &[(Tp, i64)]) {
    for (tp, offset) in acked {
        let h = highest.entry(*tp).or_insert(*offset);
        *h = (*h).max(*offset);
    }
}

/// The check: every partition's fetched offset is at least the highest commit acknowledged before the fetch was
/// sent (`floor`). A partition missing from the answer counts as none committed (-1).
pub(crate) fn check_fetch(
    shared: &Shared,
    group: &'static str,
    coordinator: i32,
    floor: &BTreeMap<Tp, i64>,
    fetched: &BTreeMap<Tp, i64>,
    when: &str,
) {
    let at = now_ms();
    let mut history = shared.history.lock();
    history.event(
        at,
        format!(
            "{when}offset fetch of {group} at n{coordinator}: {}",
            offsets_text(fetched)
        ),
    );
    history.replication.commits.fetches_checked += 1;
    for (tp, acked, got) in backwards(floor, fetched) {
        history.violate(
            at,
            format!(
                "{when}group {group}'s committed offset of {}-{} fetched as {got} from n{coordinator}, below the \
                 commit of {acked} acknowledged before the fetch: committed offsets moved backwards",
                tp.0, tp.1
            ),
        );
    }
}

/// The partitions whose fetched offset is below the highest commit acknowledged before the fetch: (partition,
/// acknowledged, fetched). A partition missing from the answer counts as none committed (-1).
fn backwards(floor: &BTreeMap<Tp, i64>, fetched: &BTreeMap<Tp, i64>) -> Vec<(Tp, i64, i64)> {
    floor
        .iter()
        .filter_map(|(tp, acked)| {
            let got = fetched.get(tp).copied().unwrap_or(-1);
            (got < *acked).then_some((*tp, *acked, got))
        })
        .collect()
}

/// The committer: commits growing offsets for a random few of the workload's partitions and fetches them back,
/// until a few seconds after healing; then fetches once more until answered and checks that too.
pub(crate) async fn committer(shared: Arc<Shared>, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut kafka = Kafka::new();
    let tps = partitions();
    let mut next: BTreeMap<Tp, i64> = BTreeMap::new();
    let mut coordinator: Option<i32> = None;
    let mut ask = 1;
    let mut healed_at = None;
    let rediscover = |shared: &Shared, ask: &mut i32, what: String| {
        shared.history.lock().event(now_ms(), what);
        *ask = *ask % VOTERS + 1;
    };
    while keep_writing(&shared, &mut healed_at) {
        let Some(c) = coordinator else {
            match find_coordinator(&mut kafka, ask, GROUP).await {
                Ok(c) => {
                    shared.history.lock().event(
                        now_ms(),
                        format!("coordinator of {GROUP}: n{c} (asked n{ask})"),
                    );
                    coordinator = Some(c);
                }
                Err(code) => {
                    let what = format!("find coordinator at n{ask}: {code} {}", code_name(code));
                    rediscover(&shared, &mut ask, what);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
            continue;
        };
        // A new, higher offset for each chosen partition at every attempt (a retry commits a higher one).
        let mut offsets: Vec<(Tp, i64)> = Vec::new();
        for tp in &tps {
            if rng.gen_bool(0.6) {
                let offset = next.entry(*tp).or_insert(0);
                *offset += rng.gen_range(1..20);
                offsets.push((*tp, *offset));
            }
        }
        if !offsets.is_empty() {
            let standalone = Committer {
                group: GROUP,
                generation: -1,
                member_id: "",
                versions: CLASSIC_COMMIT_VERSIONS,
            };
            match commit(&mut kafka, c, standalone, &offsets).await {
                Ok(acked) => {
                    let at = now_ms();
                    let mut history = shared.history.lock();
                    let text = offsets_text(acked.iter().map(|(tp, o)| (tp, o)));
                    history.event(at, format!("ack commit at n{c}: {text}"));
                    let commits = &mut history.replication.commits;
                    commits.acked_count += acked.len();
                    raise_acked(&mut commits.acked, &acked);
                }
                Err(code) => {
                    coordinator = None;
                    rediscover(
                        &shared,
                        &mut ask,
                        format!(
                            "commit at n{c}: {code} {}{}",
                            code_name(code),
                            if retriable(code) { "" } else { " (unexpected)" }
                        ),
                    );
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            }
        }
        if rng.gen_bool(0.5) {
            let floor = shared.history.lock().replication.commits.acked.clone();
            match fetch(&mut kafka, c, GROUP, &tps).await {
                Ok(fetched) => check_fetch(&shared, GROUP, c, &floor, &fetched, ""),
                Err(code) => {
                    coordinator = None;
                    rediscover(
                        &shared,
                        &mut ask,
                        format!("offset fetch at n{c}: {code} {}", code_name(code)),
                    );
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(rng.gen_range(20..150))).await;
    }
    let floor = shared.history.lock().replication.commits.acked.clone();
    final_fetch(&shared, &mut kafka, GROUP, &tps, &floor, coordinator, ask).await;
}

/// After healing: `group`'s coordinator must answer an OffsetFetch of `tps`, with every commit acknowledged
/// (`floor`), within the time the whole cluster has to converge. A time bound, not a count of attempts: recovery
/// may legitimately wait out the longest timeout on its path (a follower whose fetch went into a connection the
/// partition black-holed notices after its 30.5 s request timeout, as Kafka's does after
/// replica.socket.timeout.ms), and until the followers are back in the ISR the read barrier cannot commit.
pub(crate) async fn final_fetch(
    shared: &Shared,
    kafka: &mut Kafka,
    group: &'static str,
    tps: &[Tp],
    floor: &BTreeMap<Tp, i64>,
    mut coordinator: Option<i32>,
    mut ask: i32,
) {
    let deadline = tokio::time::Instant::now() + crate::CONVERGENCE_MAX;
    while tokio::time::Instant::now() < deadline {
        let c = match coordinator {
            Some(c) => c,
            None => match find_coordinator(kafka, ask, group).await {
                Ok(c) => c,
                Err(_) => {
                    ask = ask % VOTERS + 1;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        match fetch(kafka, c, group, tps).await {
            Ok(fetched) => {
                check_fetch(shared, group, c, floor, &fetched, "final ");
                return;
            }
            Err(_) => {
                coordinator = None;
                ask = ask % VOTERS + 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    shared.history.lock().not_converged(
        now_ms(),
        format!(
            "group {group}'s coordinator answered no OffsetFetch within {:?} of healing",
            crate::CONVERGENCE_MAX
        ),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_offset_below_an_acknowledged_commit_or_a_missing_one_moved_backwards() {
        let floor = BTreeMap::from([(("a", 0), 10), (("a", 1), 5), (("b", 0), 7)]);
        let fetched = BTreeMap::from([(("a", 0), 9), (("a", 1), 6)]);
        assert_eq!(
            backwards(&floor, &fetched),
            vec![(("a", 0), 10, 9), (("b", 0), 7, -1)]
        );
        let caught_up = BTreeMap::from([(("a", 0), 10), (("a", 1), 5), (("b", 0), 8)]);
        assert!(backwards(&floor, &caught_up).is_empty());
    }
}
