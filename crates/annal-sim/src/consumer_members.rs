//! Consumers of the consumer group protocol (KIP-848): members that heartbeat through the real coordinator with
//! `ConsumerGroupHeartbeat`, are given partitions by its server-side assignor, give up what they are asked to at
//! once (as Kafka's clients do) and report what they own in every heartbeat. Opt-in
//! ([`crate::Options::consumer_members`]).
//!
//! Checked: **no partition has two owners at once**. A partition goes to a member only once its previous owner
//! has reported it released, or once that owner's session (or revocation timeout) has lapsed. From outside: when
//! member B is given partition P while member A's last answer still gave A P, A's session cannot have lapsed if
//! B's answer came less than [`SESSION_TIMEOUT_MS`] after A's last answered heartbeat was sent (less the clock
//! jumps so far, which move a coordinator's clock ahead). Every heartbeat is a full one, whose answer carries the
//! member's assignment, so A would have dropped P had the coordinator asked it to. A coordinator that takes the
//! group over (a failover) must carry its members on from the log: one that forgot them would hand a rejoining
//! member everything while the others still own it.
//!
//! The members also commit offsets for what they own, as a Kafka consumer does: OffsetCommit v9 with the
//! member's epoch, which the coordinator checks (a stale epoch is refused). Checked as for every group
//! ([`crate::committer`]): **committed offsets never move backwards**. Offsets come from one counter per
//! partition shared by the members, so a later commit is always higher: a commit in an epoch the group has left
//! behind that was accepted, or a coordinator that took the group over and replayed its epochs wrong, shows up as
//! an OffsetFetch below an acknowledged commit.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::consumer_group_heartbeat_request::TopicPartitions;
use kafka_protocol::messages::{ConsumerGroupHeartbeatRequest, GroupId};
use kafka_protocol::protocol::StrBytes;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use uuid::Uuid;

use crate::committer::{
    check_fetch, commit, fetch, final_fetch, find_coordinator, offsets_text, raise_acked, Committer,
};
use crate::replication::{keep_writing, partitions, Kafka, Tp, PLAIN, REPLICATED};
use crate::{now_ms, Shared, VOTERS};

/// The members' group.
pub const GROUP: &str = "sim-kip848";
/// How many members the group has.
pub const MEMBERS: usize = 2;
/// `group.consumer.session.timeout.ms` of the nodes when these members run (the broker's setting in KIP-848).
pub const SESSION_TIMEOUT_MS: u64 = 15_000;
/// `group.consumer.heartbeat.interval.ms` of the nodes when these members run.
pub const HEARTBEAT_INTERVAL_MS: u64 = 1_000;
/// The members' rebalance timeout: no shorter than the session, so the check's bound covers both.
const REBALANCE_TIMEOUT_MS: i32 = SESSION_TIMEOUT_MS as i32;
const REQUEST_BOUND: Duration = Duration::from_secs(6);

const UNKNOWN_MEMBER_ID: i16 = 25;
const FENCED_MEMBER_EPOCH: i16 = 110;
const STALE_MEMBER_EPOCH: i16 = 113;
/// OffsetCommit v9 is the first to carry a KIP-848 member's epoch (Kafka refuses older ones for such a group).
const MEMBER_EPOCH_COMMIT_VERSIONS: (i16, i16) = (9, 9);

/// A partition, by topic id.
type Part = (Uuid, i32);

/// What the check remembers of each member.
#[derive(Debug, Default)]
pub struct ConsumerMemberHistory {
    /// Per member: when it sent the last heartbeat that was answered, and what that answer gave it.
    views: BTreeMap<usize, (u64, BTreeSet<Part>)>,
    /// Clock jumps applied so far, in total (any node's).
    pub clock_jumped_ms: u64,
    /// Heartbeats answered, assignments that changed, fencings.
    pub heartbeats: usize,
    pub reassignments: usize,
    pub fenced: usize,
    /// Highest commit acknowledged per partition, and the next offset to commit (shared, so later commits are
    /// higher).
    pub acked: BTreeMap<Tp, i64>,
    pub next: BTreeMap<Tp, i64>,
    /// Commits acknowledged, and refused for the member's epoch (stale, fenced, unknown member).
    pub commits_acked: usize,
    pub commits_refused: usize,
}

/// One member, until a few seconds after healing.
pub(crate) async fn member(shared: Arc<Shared>, index: usize, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut kafka = Kafka::new();
    let member_id = Uuid::from_u128(rng.gen()).to_string();
    let mut epoch = 0;
    let mut owned: BTreeSet<Part> = BTreeSet::new();
    let mut coordinator: Option<i32> = None;
    let mut ask = (index as i32) % VOTERS + 1;
    let mut healed_at = None;
    // The workload's topics by id (assignments name ids, commits names); learned once the first is assigned.
    let mut names: BTreeMap<Uuid, &'static str> = BTreeMap::new();
    let event = |shared: &Shared, what: String| shared.history.lock().event(now_ms(), what);
    while keep_writing(&shared, &mut healed_at) {
        let Some(c) = coordinator else {
            match find_coordinator(&mut kafka, ask, GROUP).await {
                Ok(c) => coordinator = Some(c),
                Err(_) => {
                    ask = ask % VOTERS + 1;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
            continue;
        };
        let mut by_topic: BTreeMap<Uuid, Vec<i32>> = BTreeMap::new();
        for (t, p) in &owned {
            by_topic.entry(*t).or_default().push(*p);
        }
        let request = ConsumerGroupHeartbeatRequest::default()
            .with_group_id(GroupId(StrBytes::from_static_str(GROUP)))
            .with_member_id(StrBytes::from_string(member_id.clone()))
            .with_member_epoch(epoch)
            .with_rebalance_timeout_ms(REBALANCE_TIMEOUT_MS)
            .with_subscribed_topic_names(Some(vec![
                StrBytes::from_static_str(REPLICATED).into(),
                StrBytes::from_static_str(PLAIN).into(),
            ]))
            .with_topic_partitions(Some(
                by_topic
                    .into_iter()
                    .map(|(t, ps)| {
                        TopicPartitions::default()
                            .with_topic_id(t)
                            .with_partitions(ps)
                    })
                    .collect(),
            ));
        let sent_at = now_ms();
        match kafka.send_bounded(c, &request, (1, 1), REQUEST_BOUND).await {
            Ok(r) if r.error_code == 0 => {
                epoch = r.member_epoch;
                if let Some(a) = &r.assignment {
                    owned = a
                        .topic_partitions
                        .iter()
                        .flat_map(|tp| tp.partitions.iter().map(move |p| (tp.topic_id, *p)))
                        .collect();
                }
                note_answer(&shared, index, sent_at, epoch, &owned);
                if !owned.is_empty() && rng.gen_bool(0.5) {
                    if owned.iter().any(|(t, _)| !names.contains_key(t)) {
                        names = kafka.topic_names(c).await.unwrap_or(names);
                    }
                    let member = Committing {
                        index,
                        member_id: &member_id,
                        epoch,
                    };
                    if !commit_owned(&shared, &mut kafka, &mut rng, c, member, &owned, &names).await
                    {
                        coordinator = None;
                        ask = ask % VOTERS + 1;
                    }
                }
                if rng.gen_bool(0.2) {
                    let floor = acked_floor(&shared);
                    if let Ok(fetched) = fetch(&mut kafka, c, GROUP, &partitions()).await {
                        check_fetch(&shared, GROUP, c, &floor, &fetched, "");
                    }
                }
            }
            Ok(r) if matches!(r.error_code, UNKNOWN_MEMBER_ID | FENCED_MEMBER_EPOCH) => {
                // Fenced: give up everything and join again (a Kafka consumer does the same).
                event(
                    &shared,
                    format!(
                        "kip848 member {index} fenced at n{c} in epoch {epoch}: {}",
                        r.error_code
                    ),
                );
                let mut history = shared.history.lock();
                let members = &mut history.replication.consumer_members;
                members.fenced += 1;
                members.views.insert(index, (sent_at, BTreeSet::new()));
                drop(history);
                owned.clear();
                epoch = 0;
                // At once, as Kafka's consumer rejoins.
                continue;
            }
            Ok(r) => {
                event(
                    &shared,
                    format!("kip848 member {index} heartbeat at n{c}: {}", r.error_code),
                );
                coordinator = None;
                ask = ask % VOTERS + 1;
            }
            Err(_) => {
                coordinator = None;
                ask = ask % VOTERS + 1;
            }
        }
        let jitter = rng.gen_range(0..200);
        tokio::time::sleep(Duration::from_millis(HEARTBEAT_INTERVAL_MS / 2 + jitter)).await;
    }
    event(&shared, format!("kip848 member {index} of {GROUP} stops"));
    if index == 0 {
        let floor = acked_floor(&shared);
        final_fetch(
            &shared,
            &mut kafka,
            GROUP,
            &partitions(),
            &floor,
            coordinator,
            ask,
        )
        .await;
        let history = &mut shared.history.lock();
        let members = &history.replication.consumer_members;
        let summary = format!(
            "final: {GROUP}: {} heartbeats answered, {} reassignments, {} fencings, {} commits acknowledged, {} \
             refused for their epoch",
            members.heartbeats,
            members.reassignments,
            members.fenced,
            members.commits_acked,
            members.commits_refused
        );
        history.event(now_ms(), summary);
    }
}

/// The highest commit acknowledged per partition so far: what an OffsetFetch sent now must return at least.
fn acked_floor(shared: &Shared) -> BTreeMap<Tp, i64> {
    shared
        .history
        .lock()
        .replication
        .consumer_members
        .acked
        .clone()
}

/// A member committing: its index, id and epoch.
#[derive(Debug, Clone, Copy)]
struct Committing<'a> {
    index: usize,
    member_id: &'a str,
    epoch: i32,
}

/// Commits growing offsets for a random half (at least one) of what the member owns, in its epoch, and records
/// what was acknowledged. False when the coordinator must be found again; a commit refused for the member's epoch
/// is not (its next heartbeat tells it where it stands).
async fn commit_owned(
    shared: &Shared,
    kafka: &mut Kafka,
    rng: &mut StdRng,
    coordinator: i32,
    member: Committing<'_>,
    owned: &BTreeSet<Part>,
    names: &BTreeMap<Uuid, &'static str>,
) -> bool {
    let Committing {
        index,
        member_id,
        epoch,
    } = member;
    let mut chosen: Vec<Tp> = owned
        .iter()
        .filter_map(|(t, p)| names.get(t).map(|name| (*name, *p)))
        .collect();
    if chosen.is_empty() {
        return true; // the topics' ids are not known yet
    }
    chosen.shuffle(rng);
    let keep = rng.gen_range(1..=chosen.len());
    chosen.truncate(keep);
    let offsets: Vec<(Tp, i64)> = {
        let mut history = shared.history.lock();
        let next = &mut history.replication.consumer_members.next;
        chosen
            .iter()
            .map(|tp| {
                let n = next.entry(*tp).or_insert(0);
                *n += rng.gen_range(1..20);
                (*tp, *n)
            })
            .collect()
    };
    let who = Committer {
        group: GROUP,
        generation: epoch,
        member_id,
        versions: MEMBER_EPOCH_COMMIT_VERSIONS,
    };
    match commit(kafka, coordinator, who, &offsets).await {
        Ok(acked) => {
            let at = now_ms();
            let mut history = shared.history.lock();
            history.event(
                at,
                format!(
                    "ack commit of kip848 member {index} (epoch {epoch}): {}",
                    offsets_text(acked.iter().map(|(tp, o)| (tp, o)))
                ),
            );
            let members = &mut history.replication.consumer_members;
            members.commits_acked += acked.len();
            raise_acked(&mut members.acked, &acked);
            true
        }
        Err(code) => {
            let mut history = shared.history.lock();
            history.event(
                now_ms(),
                format!("kip848 member {index} commit in epoch {epoch} at n{coordinator}: {code}"),
            );
            let refused = matches!(
                code,
                STALE_MEMBER_EPOCH | FENCED_MEMBER_EPOCH | UNKNOWN_MEMBER_ID
            );
            if refused {
                history.replication.consumer_members.commits_refused += 1;
            }
            refused
        }
    }
}

/// Member `index`'s heartbeat sent at `sent_at` was answered with `owned` in `epoch`: no partition it newly got
/// may still be another member's whose session cannot have lapsed.
fn note_answer(shared: &Shared, index: usize, sent_at: u64, epoch: i32, owned: &BTreeSet<Part>) {
    let at = now_ms();
    let mut history = shared.history.lock();
    let members = &mut history.replication.consumer_members;
    members.heartbeats += 1;
    let before = members
        .views
        .get(&index)
        .map(|(_, o)| o.clone())
        .unwrap_or_default();
    let margin = SESSION_TIMEOUT_MS.saturating_sub(members.clock_jumped_ms);
    let mut clashes = Vec::new();
    for part in owned.difference(&before) {
        for (other, (other_sent, other_owned)) in &members.views {
            if *other != index && other_owned.contains(part) && at < other_sent + margin {
                clashes.push(format!(
                    "{GROUP}: member {index} was given partition {} of topic {} (epoch {epoch}) while member \
                     {other} still owned it: its last heartbeat, sent at {other_sent} ms, was {} ms ago, within \
                     its session",
                    part.1,
                    part.0,
                    at - other_sent
                ));
            }
        }
    }
    if owned != &before {
        members.reassignments += 1;
    }
    members.views.insert(index, (sent_at, owned.clone()));
    let list: Vec<String> = owned.iter().map(|(t, p)| format!("{t}-{p}")).collect();
    history.event(
        at,
        format!("kip848 member {index} epoch {epoch}: {}", list.join(" ")),
    );
    for c in clashes {
        history.violate(at, c);
    }
}

/// A node's clock jumped `ms` ahead: a coordinator there may time sessions out that much early.
pub(crate) fn clock_jumped(shared: &Shared, ms: u64) {
    shared
        .history
        .lock()
        .replication
        .consumer_members
        .clock_jumped_ms += ms;
}
