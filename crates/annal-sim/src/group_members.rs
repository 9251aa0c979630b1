//! Consumers in a group: members that join, sync and heartbeat through the real group coordinator (Kafka's
//! classic protocol, as every Kafka 3.x consumer speaks it), commit offsets with their generation, and rejoin
//! when a rebalance, a lost session or a coordinator failover says so.
//!
//! [`MEMBERS`] members share group [`GROUP`]. The leader of each generation assigns the workload's partitions
//! round-robin over the members, sorted by id; each member commits growing offsets for the partitions it was
//! given. Faults make members miss heartbeats (the coordinator removes them after the session timeout), the
//! coordinator move, and members rejoin: generations come and go all run long.
//!
//! Checked:
//! - **One owner per partition and generation**: no two members are given one partition in one generation (each
//!   member's SyncGroup answer is recorded).
//! - **A stale generation is fenced**: once a member has completed SyncGroup for generation G, no commit sent
//!   afterwards with an older generation is acknowledged. A member the group moved on from (its session lapsed
//!   while it was cut off) must not write over its successor's commits. This holds across coordinator failover
//!   only if the coordinator answers SyncGroup once the generation is committed to `__consumer_offsets`, as
//!   Kafka's does.
//! - **Committed offsets never move backwards** ([`crate::committer`]'s check, for this group): every OffsetFetch
//!   answered, during the run and after healing, returns at least the highest commit acknowledged before it was
//!   sent. Offsets come from one counter per partition shared by the members, so a later commit is always higher.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::{
    GroupId, HeartbeatRequest, JoinGroupRequest, SyncGroupRequest, SyncGroupResponse,
};
use kafka_protocol::protocol::StrBytes;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::committer::{
    check_fetch, commit, fetch, final_fetch, find_coordinator, offsets_text, raise_acked,
    Committer, CLASSIC_COMMIT_VERSIONS,
};
use crate::replication::{keep_writing, partitions, Kafka, Tp};
use crate::{now_ms, Shared, VOTERS};

/// The members' group (the committer's is another: a standalone consumer's commits are refused in a group that
/// has members).
pub const GROUP: &str = "sim-consumers";
/// How many members the group has.
pub const MEMBERS: usize = 2;
/// session.timeout.ms: a member cut off for longer leaves the group. Short, so faults cause rebalances.
const SESSION_TIMEOUT_MS: i32 = 6_000;
/// rebalance.timeout.ms: how long a rebalance waits for the members to rejoin.
const REBALANCE_TIMEOUT_MS: i32 = 6_000;
/// heartbeat.interval.ms.
const HEARTBEAT_EVERY: Duration = Duration::from_millis(1_000);
/// A request's whole bound; a JoinGroup may wait out a rebalance.
const REQUEST_BOUND: Duration = Duration::from_secs(6);
const JOIN_BOUND: Duration = Duration::from_secs(REBALANCE_TIMEOUT_MS as u64 / 1000 + 4);
const PROTOCOL_TYPE: &str = "consumer";
const PROTOCOL: &str = "sim-round-robin";

const ILLEGAL_GENERATION: i16 = 22;
const UNKNOWN_MEMBER_ID: i16 = 25;
const REBALANCE_IN_PROGRESS: i16 = 27;
const MEMBER_ID_REQUIRED: i16 = 79;

/// What the group checks remember.
#[derive(Debug, Default)]
pub struct MemberHistory {
    /// (generation, partition) -> the member SyncGroup gave it to.
    pub owners: BTreeMap<(i32, Tp), String>,
    /// The highest generation any member completed SyncGroup for.
    pub synced: i32,
    /// Highest commit acknowledged per partition.
    pub acked: BTreeMap<Tp, i64>,
    /// The next offset to commit per partition (shared, so later commits are higher).
    pub next: BTreeMap<Tp, i64>,
    /// Generations synced, commits acknowledged, commits fenced (refused for their generation).
    pub generations: BTreeSet<i32>,
    pub commits_acked: usize,
    pub commits_fenced: usize,
}

/// Where a member stands.
#[derive(Debug, Default)]
struct Member {
    /// Empty until the coordinator hands one out (MEMBER_ID_REQUIRED), and after UNKNOWN_MEMBER_ID.
    id: String,
    /// The generation it synced and the partitions it was given; `None` while it must (re)join.
    synced: Option<(i32, Vec<Tp>)>,
}

/// One member, until a few seconds after healing; member 0 then checks the group's offsets once more.
pub(crate) async fn member(shared: Arc<Shared>, index: usize, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut kafka = Kafka::new();
    let mut me = Member::default();
    let mut coordinator: Option<i32> = None;
    let mut ask = (index as i32) % VOTERS + 1;
    let mut healed_at = None;
    let mut last_heartbeat = tokio::time::Instant::now();
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
        let Some((generation, assigned)) = me.synced.clone() else {
            match join_and_sync(&shared, &mut kafka, c, index, &mut me).await {
                Ok(()) => {}
                Err(code) => {
                    event(&shared, format!("member {index} join at n{c}: {code}"));
                    if lost_coordinator(code) {
                        coordinator = None;
                        ask = ask % VOTERS + 1;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
            last_heartbeat = tokio::time::Instant::now();
            continue;
        };
        if last_heartbeat.elapsed() >= HEARTBEAT_EVERY {
            last_heartbeat = tokio::time::Instant::now();
            let request = HeartbeatRequest::default()
                .with_group_id(GroupId(StrBytes::from_static_str(GROUP)))
                .with_generation_id(generation)
                .with_member_id(StrBytes::from_string(me.id.clone()));
            let code = kafka
                .send_bounded(c, &request, (0, 4), REQUEST_BOUND)
                .await
                .map_or(-1, |r| r.error_code);
            if code != 0 {
                event(&shared, format!("member {index} heartbeat at n{c}: {code}"));
            }
            if code != 0 && !rejoin(&shared, &mut me, code, index, "heartbeat") {
                coordinator = None;
                ask = ask % VOTERS + 1;
            }
            continue;
        }
        let chosen: Vec<Tp> = assigned
            .iter()
            .copied()
            .filter(|_| rng.gen_bool(0.5))
            .collect();
        if !chosen.is_empty() {
            let (offsets, synced_before) = {
                let mut history = shared.history.lock();
                let members = &mut history.replication.members;
                let offsets: Vec<(Tp, i64)> = chosen
                    .iter()
                    .map(|tp| {
                        let next = members.next.entry(*tp).or_insert(0);
                        *next += rng.gen_range(1..20);
                        (*tp, *next)
                    })
                    .collect();
                (offsets, members.synced)
            };
            let who = Committer {
                group: GROUP,
                generation,
                member_id: &me.id,
                versions: CLASSIC_COMMIT_VERSIONS,
            };
            match commit(&mut kafka, c, who, &offsets).await {
                Ok(acked) => note_commit(&shared, index, generation, synced_before, &acked),
                Err(code) => {
                    event(&shared, format!("member {index} commit at n{c}: {code}"));
                    if !rejoin(&shared, &mut me, code, index, "commit") {
                        coordinator = None;
                        ask = ask % VOTERS + 1;
                    }
                }
            }
        }
        if rng.gen_bool(0.3) {
            let floor = shared.history.lock().replication.members.acked.clone();
            if let Ok(fetched) = fetch(&mut kafka, c, GROUP, &partitions()).await {
                check_fetch(&shared, GROUP, c, &floor, &fetched, "");
            }
        }
        tokio::time::sleep(Duration::from_millis(rng.gen_range(50..300))).await;
    }
    event(&shared, format!("member {index} of {GROUP} stops"));
    if index == 0 {
        let floor = shared.history.lock().replication.members.acked.clone();
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
    }
}

/// JoinGroup (with the member id the coordinator requires), then SyncGroup: the leader assigns. `Ok` once
/// synced (or when the member must simply join again); `Err(code)` when the coordinator did not answer or moved.
async fn join_and_sync(
    shared: &Shared,
    kafka: &mut Kafka,
    c: i32,
    index: usize,
    me: &mut Member,
) -> Result<(), i16> {
    let join = JoinGroupRequest::default()
        .with_group_id(GroupId(StrBytes::from_static_str(GROUP)))
        .with_session_timeout_ms(SESSION_TIMEOUT_MS)
        .with_rebalance_timeout_ms(REBALANCE_TIMEOUT_MS)
        .with_member_id(StrBytes::from_string(me.id.clone()))
        .with_protocol_type(StrBytes::from_static_str(PROTOCOL_TYPE))
        .with_protocols(vec![JoinGroupRequestProtocol::default()
            .with_name(StrBytes::from_static_str(PROTOCOL))
            .with_metadata(Bytes::from_static(b"sim"))]);
    let joined = kafka
        .send_bounded(c, &join, (4, 7), JOIN_BOUND)
        .await
        .map_err(|_| -1i16)?;
    match joined.error_code {
        0 => {}
        MEMBER_ID_REQUIRED => {
            me.id = joined.member_id.to_string();
            return Ok(());
        }
        UNKNOWN_MEMBER_ID => {
            me.id.clear();
            return Ok(());
        }
        code => return Err(code),
    }
    me.id = joined.member_id.to_string();
    let generation = joined.generation_id;
    let assignments = if joined.leader == joined.member_id {
        let mut ids: Vec<String> = joined
            .members
            .iter()
            .map(|m| m.member_id.to_string())
            .collect();
        ids.sort();
        assign(&ids)
            .into_iter()
            .map(|(id, tps)| {
                SyncGroupRequestAssignment::default()
                    .with_member_id(StrBytes::from_string(id))
                    .with_assignment(encode_assignment(&tps))
            })
            .collect()
    } else {
        Vec::new()
    };
    let sync = SyncGroupRequest::default()
        .with_group_id(GroupId(StrBytes::from_static_str(GROUP)))
        .with_generation_id(generation)
        .with_member_id(StrBytes::from_string(me.id.clone()))
        .with_protocol_type(Some(StrBytes::from_static_str(PROTOCOL_TYPE)))
        .with_protocol_name(Some(StrBytes::from_static_str(PROTOCOL)))
        .with_assignments(assignments);
    let synced: SyncGroupResponse = kafka
        .send_bounded(c, &sync, (3, 5), JOIN_BOUND)
        .await
        .map_err(|_| -1i16)?;
    match synced.error_code {
        0 => {}
        REBALANCE_IN_PROGRESS | ILLEGAL_GENERATION => return Ok(()),
        UNKNOWN_MEMBER_ID => {
            me.id.clear();
            return Ok(());
        }
        code => return Err(code),
    }
    let assigned = decode_assignment(&synced.assignment);
    note_sync(shared, index, &me.id, generation, &assigned);
    me.synced = Some((generation, assigned));
    Ok(())
}

/// The leader's assignment: the workload's partitions round-robin over the members (sorted ids).
fn assign(ids: &[String]) -> BTreeMap<String, Vec<Tp>> {
    let mut out: BTreeMap<String, Vec<Tp>> =
        ids.iter().map(|id| (id.clone(), Vec::new())).collect();
    if ids.is_empty() {
        return out;
    }
    for (i, tp) in partitions().into_iter().enumerate() {
        if let Some(tps) = out.get_mut(&ids[i % ids.len()]) {
            tps.push(tp);
        }
    }
    out
}

/// An assignment as bytes: the indexes of its partitions in [`partitions`] (the members share that list).
fn encode_assignment(tps: &[Tp]) -> Bytes {
    let all = partitions();
    Bytes::from(
        tps.iter()
            .filter_map(|tp| all.iter().position(|t| t == tp))
            .map(|i| i as u8)
            .collect::<Vec<u8>>(),
    )
}

fn decode_assignment(bytes: &[u8]) -> Vec<Tp> {
    let all = partitions();
    bytes
        .iter()
        .filter_map(|i| all.get(usize::from(*i)).copied())
        .collect()
}

/// A member synced `generation` with `assigned`: no other member may own any of it in that generation.
fn note_sync(shared: &Shared, index: usize, id: &str, generation: i32, assigned: &[Tp]) {
    let at = now_ms();
    let mut history = shared.history.lock();
    let list: Vec<String> = assigned.iter().map(|(t, p)| format!("{t}-{p}")).collect();
    history.event(
        at,
        format!(
            "member {index} synced generation {generation}: {}",
            list.join(" ")
        ),
    );
    let members = &mut history.replication.members;
    members.synced = members.synced.max(generation);
    members.generations.insert(generation);
    let mut clashes = Vec::new();
    for tp in assigned {
        match members.owners.get(&(generation, *tp)) {
            Some(owner) if owner != id => clashes.push(format!(
                "{GROUP} generation {generation} gave {}-{} to two members: {owner} and {id}",
                tp.0, tp.1
            )),
            Some(_) => {}
            None => {
                members.owners.insert((generation, *tp), id.to_string());
            }
        }
    }
    for c in clashes {
        history.violate(at, c);
    }
}

/// Commits of `generation` acknowledged; `synced_before`: the highest generation some member had synced when
/// they were sent.
fn note_commit(
    shared: &Shared,
    index: usize,
    generation: i32,
    synced_before: i32,
    acked: &[(Tp, i64)],
) {
    let at = now_ms();
    let mut history = shared.history.lock();
    history.event(
        at,
        format!(
            "ack commit of member {index} (generation {generation}): {}",
            offsets_text(acked.iter().map(|(tp, o)| (tp, o)))
        ),
    );
    if generation < synced_before {
        history.violate(
            at,
            format!(
                "{GROUP}: a commit of generation {generation} (member {index}) was acknowledged though generation \
                 {synced_before} had completed SyncGroup before it was sent: a stale member was not fenced"
            ),
        );
    }
    let members = &mut history.replication.members;
    members.commits_acked += acked.len();
    raise_acked(&mut members.acked, acked);
}

/// Whether `code` means the coordinator is gone, moved or did not answer (find it again).
fn lost_coordinator(code: i16) -> bool {
    matches!(code, -1 | 7 | 14 | 15 | 16)
}

/// After an error on a synced member's request: rejoin if the group moved on (true), or say the coordinator must
/// be found again (false).
fn rejoin(shared: &Shared, me: &mut Member, code: i16, index: usize, what: &str) -> bool {
    match code {
        REBALANCE_IN_PROGRESS | ILLEGAL_GENERATION | UNKNOWN_MEMBER_ID => {
            if code == UNKNOWN_MEMBER_ID {
                me.id.clear();
            }
            if what == "commit" && code != REBALANCE_IN_PROGRESS {
                shared.history.lock().replication.members.commits_fenced += 1;
            }
            shared
                .history
                .lock()
                .event(now_ms(), format!("member {index} {what}: {code}; rejoins"));
            me.synced = None;
            true
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_assignment_gives_every_partition_to_one_member_and_round_trips() {
        let ids = vec!["a".to_string(), "b".to_string()];
        let given = assign(&ids);
        let mut all: Vec<Tp> = given.values().flatten().copied().collect();
        all.sort();
        let mut expected = partitions();
        expected.sort();
        assert_eq!(all, expected);
        for tps in given.values() {
            assert_eq!(decode_assignment(&encode_assignment(tps)), *tps);
        }
    }
}
