//! One partition's next state, decided the way Kafka's `PartitionChangeBuilder` decides it (Kafka 4, eligible
//! leader replicas on, KIP-966), as a pure function of the partition, a target ISR/assignment and who may lead.
//!
//! The order of the steps is Kafka's and matters: complete a reassignment, track the ELR, elect, bump the leader
//! epoch if replicas leave, then write the fields that changed. The image bumps the epochs when it applies the
//! record (every change bumps the partition epoch; a leader field bumps the leader epoch).

use uuid::Uuid;

use crate::image::PartitionState;
use crate::records::{PartitionChangeRecord, LEADER_UNCHANGED, NO_LEADER};

/// Kafka's `LeaderRecoveryState.RECOVERING`: the leader was elected uncleanly and has not yet told the controller
/// (AlterPartition) that it recovered.
pub const RECOVERING: i8 = 1;
/// `LeaderRecoveryState.RECOVERED`.
pub const RECOVERED: i8 = 0;

/// How a new leader may be chosen (Kafka's `PartitionChangeBuilder.Election`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Election {
    /// The preferred (first) replica if it is eligible, else keep the partition online as [`Election::Online`].
    Preferred,
    /// Keep the current leader if it is still eligible, else the first eligible replica in replica order.
    Online,
    /// As [`Election::Online`], but if no in-sync or eligible replica is acceptable, any acceptable replica:
    /// records acknowledged by the old ISR may be lost (`unclean.leader.election.enable=true`).
    Unclean,
}

/// What [`PartitionChange::build`] decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub record: PartitionChangeRecord,
    /// The leader was elected from outside the ISR and ELR (unclean election or last-known-leader recovery).
    pub unclean: bool,
    /// ... and it was the partition's last known leader (Kafka's balanced recovery after every in-sync replica
    /// restarted uncleanly), the replica most likely to hold every committed record, not an arbitrary one.
    pub last_known_leader: bool,
}

/// How [`PartitionChange::elect`] chose a leader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Choice {
    /// From the ISR or the ELR (or no leader at all).
    Clean,
    /// The last known leader, with no ISR or ELR left.
    LastKnownLeader,
    /// Any acceptable replica (`unclean.leader.election.enable=true`).
    Unclean,
}

/// A partition change under construction. Set the targets that change, then [`PartitionChange::build`].
pub struct PartitionChange<'a> {
    partition: &'a PartitionState,
    topic_id: Uuid,
    partition_id: i32,
    acceptable: &'a dyn Fn(i32) -> bool,
    min_isr: usize,
    election: Election,
    unclean_shutdown: Option<i32>,
    target_isr: Vec<i32>,
    target_replicas: Vec<i32>,
    target_removing: Vec<i32>,
    target_adding: Vec<i32>,
    target_elr: Vec<i32>,
    target_recovery_state: i8,
}

impl<'a> PartitionChange<'a> {
    /// `acceptable(broker)`: may `broker` lead (live, not shutting down, not the broker being removed).
    /// `min_isr`: the topic's effective `min.insync.replicas` (already capped at the replication factor).
    pub fn new(
        partition: &'a PartitionState,
        topic_id: Uuid,
        partition_id: i32,
        acceptable: &'a dyn Fn(i32) -> bool,
        min_isr: usize,
    ) -> Self {
        PartitionChange {
            partition,
            topic_id,
            partition_id,
            acceptable,
            min_isr,
            election: Election::Online,
            unclean_shutdown: None,
            target_isr: partition.isr.clone(),
            target_replicas: partition.replicas.clone(),
            target_removing: partition.removing_replicas.clone(),
            target_adding: partition.adding_replicas.clone(),
            target_elr: partition.elr.clone(),
            target_recovery_state: partition.leader_recovery_state,
        }
    }

    pub fn election(mut self, election: Election) -> Self {
        self.election = election;
        self
    }

    pub fn target_isr(mut self, isr: Vec<i32>) -> Self {
        self.target_isr = isr;
        self
    }

    /// A broker that restarted without a clean shutdown: it may have lost records, so it leaves the ELR too.
    pub fn unclean_shutdown(mut self, broker: i32) -> Self {
        self.unclean_shutdown = Some(broker);
        self
    }

    /// A new assignment (reassignment start, cancel or completion).
    pub fn target_assignment(
        mut self,
        replicas: Vec<i32>,
        removing: Vec<i32>,
        adding: Vec<i32>,
    ) -> Self {
        self.target_replicas = replicas;
        self.target_removing = removing;
        self.target_adding = adding;
        self
    }

    pub fn target_recovery_state(mut self, state: i8) -> Self {
        self.target_recovery_state = state;
        self
    }

    /// The record, or `None` when nothing changes.
    pub fn build(mut self) -> Option<Decision> {
        let mut record = PartitionChangeRecord::new(self.topic_id, self.partition_id);
        self.complete_reassignment_if_needed();
        self.populate_target_elr();
        let choice = self.try_election(&mut record);
        // A replica leaving the assignment must not keep following at the old leader epoch.
        if record.leader == LEADER_UNCHANGED
            && !self
                .partition
                .replicas
                .iter()
                .all(|r| self.target_replicas.contains(r))
        {
            record.leader = self.partition.leader;
        }
        let clean = record.isr.is_none();
        if !clean {
            self.target_elr.clear();
        }
        if self.target_elr != self.partition.elr {
            record.eligible_leader_replicas = Some(self.target_elr.clone());
        }
        if record.isr.is_none() && self.target_isr != self.partition.isr {
            record.isr = Some(self.target_isr.clone());
        }
        self.update_last_known_leader(&mut record);
        if self.target_replicas != self.partition.replicas {
            record.replicas = Some(self.target_replicas.clone());
        }
        if self.target_removing != self.partition.removing_replicas {
            record.removing_replicas = Some(self.target_removing.clone());
        }
        if self.target_adding != self.partition.adding_replicas {
            record.adding_replicas = Some(self.target_adding.clone());
        }
        if record.leader_recovery_state == -1
            && self.target_recovery_state != self.partition.leader_recovery_state
        {
            record.leader_recovery_state = self.target_recovery_state;
        }
        let no_op = record == PartitionChangeRecord::new(self.topic_id, self.partition_id);
        (!no_op).then_some(Decision {
            record,
            unclean: choice != Choice::Clean,
            last_known_leader: choice == Choice::LastKnownLeader,
        })
    }

    /// Kafka's `PartitionReassignmentReplicas.maybeCompleteReassignment`: once every target replica is in the
    /// ISR, the removing replicas leave the assignment and the ISR.
    fn complete_reassignment_if_needed(&mut self) {
        if self.target_removing.is_empty() && self.target_adding.is_empty() {
            return;
        }
        let removing = &self.target_removing;
        let isr: Vec<i32> = self
            .target_isr
            .iter()
            .copied()
            .filter(|r| !removing.contains(r))
            .collect();
        let replicas: Vec<i32> = self
            .target_replicas
            .iter()
            .copied()
            .filter(|r| !removing.contains(r))
            .collect();
        if isr.is_empty() || replicas.is_empty() || !replicas.iter().all(|r| isr.contains(r)) {
            return;
        }
        self.target_isr = isr;
        self.target_replicas = replicas;
        self.target_removing.clear();
        self.target_adding.clear();
    }

    /// KIP-966: while the ISR is below min ISR, the members that leave it (and earlier ELR members) stay eligible
    /// leaders, unless they restarted uncleanly; at or above min ISR the ELR is empty.
    fn populate_target_elr(&mut self) {
        if self.target_isr.len() >= self.min_isr {
            self.target_elr.clear();
            return;
        }
        let candidates: Vec<i32> = self
            .target_elr
            .iter()
            .chain(self.partition.isr.iter())
            .copied()
            .collect();
        // Replica order, so the same decision always yields the same bytes.
        self.target_elr = self
            .target_replicas
            .iter()
            .copied()
            .filter(|r| candidates.contains(r))
            .filter(|r| !self.target_isr.contains(r))
            .filter(|r| Some(*r) != self.unclean_shutdown)
            .collect();
    }

    /// In the ISR, or in the ELR when the ISR is empty; and acceptable.
    fn is_valid_new_leader(&self, replica: i32) -> bool {
        let eligible = self.target_isr.contains(&replica)
            || (self.target_isr.is_empty() && self.target_elr.contains(&replica));
        eligible && self.target_replicas.contains(&replica) && (self.acceptable)(replica)
    }

    /// Kafka's balanced recovery: with no ISR and no ELR left (their members restarted uncleanly), the leader the
    /// partition last had, recorded in LastKnownElr, is the replica most likely to hold every committed record.
    fn last_known_leader(&self) -> Option<i32> {
        if !self.target_isr.is_empty() || !self.target_elr.is_empty() {
            return None;
        }
        match self.partition.last_known_elr.as_slice() {
            [leader] if self.target_replicas.contains(leader) && (self.acceptable)(*leader) => {
                Some(*leader)
            }
            _ => None,
        }
    }

    /// The leader, and how it was chosen.
    fn elect(&self) -> (i32, Choice) {
        let current = self.partition.leader;
        if self.election == Election::Preferred {
            if let Some(&preferred) = self.target_replicas.first() {
                if self.is_valid_new_leader(preferred) {
                    return (preferred, Choice::Clean);
                }
            }
        }
        if current != NO_LEADER && self.is_valid_new_leader(current) {
            return (current, Choice::Clean);
        }
        if crate::env::testing::planted(crate::env::testing::PlantedBug::ElectOutsideIsr) {
            // PLANTED BUG (simulator only): a live replica outside the ISR, as if it were in sync.
            if let Some(leader) =
                self.target_replicas.iter().copied().find(|r| {
                    *r != current && !self.target_isr.contains(r) && (self.acceptable)(*r)
                })
            {
                return (leader, Choice::Clean);
            }
        }
        if let Some(leader) = self
            .target_replicas
            .iter()
            .copied()
            .find(|r| self.is_valid_new_leader(*r))
        {
            return (leader, Choice::Clean);
        }
        if let Some(leader) = self.last_known_leader() {
            return (leader, Choice::LastKnownLeader);
        }
        if self.election == Election::Unclean {
            if let Some(leader) = self
                .target_replicas
                .iter()
                .copied()
                .find(|r| (self.acceptable)(*r))
            {
                return (leader, Choice::Unclean);
            }
        }
        (NO_LEADER, Choice::Clean)
    }

    /// Sets the leader (and, for an ELR or unclean election, the ISR) on `record`; how the leader was chosen.
    fn try_election(&mut self, record: &mut PartitionChangeRecord) -> Choice {
        let (leader, choice) = self.elect();
        if leader == self.partition.leader {
            return Choice::Clean;
        }
        if self.target_elr.contains(&leader) {
            // Elected from the ELR: it alone is in sync now; the others stay eligible.
            self.target_isr = vec![leader];
            self.target_elr.retain(|r| *r != leader);
        }
        record.leader = leader;
        if choice == Choice::Clean
            && leader >= 0
            && !self.target_isr.contains(&leader)
            && crate::env::testing::planted(crate::env::testing::PlantedBug::ElectOutsideIsr)
        {
            // PLANTED BUG (simulator only): the replica from outside the ISR joins it, as if it were in sync.
            self.target_isr.push(leader);
            record.isr = Some(self.target_isr.clone());
        }
        if choice != Choice::Clean {
            // The new leader's log is the truth from here on: whatever only the old ISR had may be gone.
            record.isr = Some(vec![leader]);
            if self.partition.leader_recovery_state != RECOVERING {
                record.leader_recovery_state = RECOVERING;
            }
        }
        choice
    }

    /// LastKnownElr holds the leader the partition had when its ISR became empty, and is cleared once the
    /// partition has a leader again (Kafka's `maybeUpdateLastKnownLeader`).
    fn update_last_known_leader(&self, record: &mut PartitionChangeRecord) {
        let p = self.partition;
        let becomes_empty = record.isr.as_ref().is_some_and(Vec::is_empty);
        if becomes_empty {
            if p.leader != NO_LEADER && p.last_known_elr != [p.leader] {
                record.last_known_elr = Some(vec![p.leader]);
            }
            return;
        }
        // A leader is elected, or the current one stays.
        let has_leader =
            record.leader >= 0 || (p.leader != NO_LEADER && record.leader != NO_LEADER);
        if has_leader && !p.last_known_elr.is_empty() {
            record.last_known_elr = Some(Vec::new());
        }
    }
}
