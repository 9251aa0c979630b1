//! What a run saw, recorded as it happens, and the invariants checked against it.
//!
//! Every event goes into the trace (simulated time, then a line of text) and into its hash; the same seed must
//! give the same hash (the determinism check). Safety invariants are checked as the events arrive, so a run
//! stops at the first violation; the end-of-run checks (acknowledged writes present and in order on every
//! voter, logs prefixes of each other, convergence) run after healing.

use std::collections::{BTreeMap, BTreeSet};

use annal_metadata::records::{decode_batch, MetadataRecord};

/// One voter's view of one committed entry it applied: the raft index and a hash of its records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Applied {
    pub index: u64,
    pub hash: u64,
}

/// What the metadata records of an entry mean to the checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Meaning {
    Topic(String),
    Register { broker: i32, epoch: i64 },
}

/// Everything recorded in one run.
#[derive(Debug, Default)]
pub struct History {
    /// (simulated ms, event), in the order they happened.
    pub trace: Vec<(u64, String)>,
    hash: u64,
    /// Per voter: the entries applied since its last (re)start, in order.
    pub applied: BTreeMap<i32, Vec<Applied>>,
    /// Every committed entry any voter applied: index -> (hash, what it means).
    pub committed: BTreeMap<u64, (u64, Vec<Meaning>)>,
    /// term -> the voters that saw themselves leader in it.
    pub leaders: BTreeMap<u64, BTreeSet<i32>>,
    /// Topic creations the controller acknowledged, in acknowledgement order.
    pub acked_topics: Vec<String>,
    /// Broker registrations the controller acknowledged, in order: (broker, epoch).
    pub acked_registrations: Vec<(i32, i64)>,
    /// Invariant violations, first one first.
    pub violations: Vec<String>,
    /// Known divergences from Kafka's semantics that are reported but do not fail a run (see
    /// [`History::strict_terms`]).
    pub findings: Vec<String>,
    /// Whether two leaders in one term fail the run. openraft 0.9 without its `single-term-leader` feature
    /// identifies a leader by (term, node id) and lets a higher node id win a term another node already
    /// won; Raft's safety holds on that pair, but Annal calls the term Kafka's leader epoch (decision 0004),
    /// which Kafka takes to name one leader. Off by default until that is settled; `SIM_STRICT_TERMS=1`.
    pub strict_terms: bool,
    /// The replication checks' state, when the real brokers run (`Options::brokers`).
    pub replication: crate::replication::ReplicationHistory,
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0100_0000_01b3;

/// FNV-1a: stable across runs, builds and Rust versions (std's hashers promise none of that).
pub fn fnv(hash: u64, bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .fold(hash, |h, b| (h ^ u64::from(*b)).wrapping_mul(FNV_PRIME))
}

impl History {
    pub fn new() -> History {
        History {
            hash: FNV_OFFSET,
            ..History::default()
        }
    }

    /// Whether two leaders in one term fail the run ([`History::strict_terms`]).
    pub fn strict_terms(mut self, strict: bool) -> History {
        self.strict_terms = strict;
        self
    }

    /// The hash of the whole trace so far.
    pub fn trace_hash(&self) -> u64 {
        self.hash
    }

    pub fn event(&mut self, at_ms: u64, what: String) {
        self.hash = fnv(self.hash, &at_ms.to_be_bytes());
        self.hash = fnv(self.hash, what.as_bytes());
        self.trace.push((at_ms, what));
    }

    pub fn violate(&mut self, at_ms: u64, why: String) {
        self.event(at_ms, format!("VIOLATION {why}"));
        self.violations.push(why);
    }

    /// A voter (re)started: what it applies from now on is a new sequence (it replays its log).
    pub fn node_started(&mut self, at_ms: u64, node: i32) {
        self.applied.insert(node, Vec::new());
        self.event(at_ms, format!("n{node} start"));
    }

    /// A voter applied a committed entry. Checks at once: indexes only grow on a node, and no two nodes ever
    /// apply different entries at one index (Raft's state machine safety).
    pub fn node_applied(&mut self, at_ms: u64, node: i32, index: u64, records: &[Vec<u8>]) {
        let hash = records.iter().fold(FNV_OFFSET, |h, r| {
            fnv(fnv(h, &(r.len() as u64).to_be_bytes()), r)
        });
        self.event(at_ms, format!("n{node} apply {index} {hash:016x}"));
        let seq = self.applied.entry(node).or_default();
        if let Some(last) = seq.last() {
            if index <= last.index {
                let why = format!(
                    "n{node} applied index {index} after {} (indexes must grow)",
                    last.index
                );
                self.violate(at_ms, why);
                return;
            }
        }
        seq.push(Applied { index, hash });
        match self.committed.get(&index) {
            Some((known, _)) if *known != hash => {
                let why = format!(
                    "n{node} applied entry {hash:016x} at index {index}, another voter applied {known:016x} there"
                );
                self.violate(at_ms, why);
            }
            Some(_) => {}
            None => {
                self.committed.insert(index, (hash, meanings(records)));
            }
        }
    }

    /// A voter saw itself leader in `term`: at most one voter may, per term (Raft's election safety).
    pub fn node_leads(&mut self, at_ms: u64, node: i32, term: u64) {
        let leaders = self.leaders.entry(term).or_default();
        if !leaders.insert(node) {
            return;
        }
        let leaders = leaders.clone();
        self.event(at_ms, format!("n{node} leads term {term}"));
        if leaders.len() > 1 {
            let why = format!("two leaders in term {term}: {leaders:?}");
            if self.strict_terms {
                self.violate(at_ms, why);
            } else {
                self.event(at_ms, format!("FINDING {why}"));
                self.findings.push(why);
            }
        }
    }

    pub fn topic_acked(&mut self, at_ms: u64, name: &str) {
        self.acked_topics.push(name.to_string());
        self.event(at_ms, format!("ack create {name}"));
    }

    /// A registration was acknowledged with `epoch`: a broker's epochs only grow.
    pub fn registration_acked(&mut self, at_ms: u64, broker: i32, epoch: i64) {
        self.event(at_ms, format!("ack register b{broker} epoch {epoch}"));
        if let Some((_, last)) = self
            .acked_registrations
            .iter()
            .rev()
            .find(|(b, _)| *b == broker)
        {
            if epoch < *last {
                let why = format!("broker {broker} registered at epoch {epoch} after epoch {last}");
                self.violate(at_ms, why);
            }
        }
        self.acked_registrations.push((broker, epoch));
    }

    /// The end-of-run checks, once the cluster is healed and has converged (`voters`: who must have it all).
    pub fn check_after_healing(&mut self, at_ms: u64, voters: &[i32]) {
        // Every voter's applied sequence is exactly the committed entries up to its last index: the committed
        // logs are prefixes of each other.
        let all: Vec<Applied> = self
            .committed
            .iter()
            .map(|(index, (hash, _))| Applied {
                index: *index,
                hash: *hash,
            })
            .collect();
        let mut problems = Vec::new();
        for node in voters {
            let seq = self.applied.get(node).cloned().unwrap_or_default();
            if seq.len() != all.len() || seq != all[..seq.len()] {
                problems.push(format!(
                    "n{node} applied {} entries (last {:?}), not the first {} of the {} committed ones: \
                     the voters' committed logs are not prefixes of each other",
                    seq.len(),
                    seq.last().map(|a| a.index),
                    seq.len(),
                    all.len()
                ));
            }
        }
        // Acknowledged topic creations: all present, in acknowledgement order.
        let mut topic_at = BTreeMap::new();
        for (index, (_, meanings)) in &self.committed {
            for m in meanings {
                if let Meaning::Topic(name) = m {
                    topic_at.entry(name.clone()).or_insert(*index);
                }
            }
        }
        let mut previous: Option<(u64, &str)> = None;
        for name in &self.acked_topics {
            match topic_at.get(name) {
                None => problems.push(format!(
                    "topic {name} was acknowledged but is in no voter's committed log"
                )),
                Some(index) => {
                    if let Some((before, other)) = previous {
                        if *index <= before {
                            problems.push(format!(
                                "topic {name} (index {index}) was acknowledged after {other} (index {before}) \
                                 but precedes it in the log"
                            ));
                        }
                    }
                    previous = Some((*index, name));
                }
            }
        }
        // Acknowledged registrations: in the log with the acknowledged epoch; epochs grow in log order too.
        let registered: Vec<(i32, i64)> = self
            .committed
            .values()
            .flat_map(|(_, ms)| ms.iter())
            .filter_map(|m| match m {
                Meaning::Register { broker, epoch } => Some((*broker, *epoch)),
                Meaning::Topic(_) => None,
            })
            .collect();
        for (broker, epoch) in &self.acked_registrations {
            if !registered.contains(&(*broker, *epoch)) {
                problems.push(format!(
                    "broker {broker}'s registration at epoch {epoch} was acknowledged but is not in the log"
                ));
            }
        }
        let mut last_epoch = BTreeMap::new();
        for (broker, epoch) in registered {
            if let Some(last) = last_epoch.insert(broker, epoch) {
                if epoch <= last {
                    problems.push(format!(
                        "broker {broker} registered at epoch {epoch} after epoch {last} in the log"
                    ));
                }
            }
        }
        for p in problems {
            self.violate(at_ms, p);
        }
    }

    /// Something panicked inside the simulation (a node's task or the client): never acceptable.
    pub fn panicked(&mut self, at_ms: u64, message: String) {
        self.violate(at_ms, format!("panic: {message}"));
    }

    /// Records that the cluster did not converge after healing.
    pub fn not_converged(&mut self, at_ms: u64, why: String) {
        self.violate(at_ms, format!("no convergence after healing: {why}"));
    }
}

fn meanings(records: &[Vec<u8>]) -> Vec<Meaning> {
    let Ok(records) = decode_batch(records) else {
        return Vec::new();
    };
    records
        .into_iter()
        .filter_map(|r| match r {
            MetadataRecord::Topic(t) => Some(Meaning::Topic(t.name)),
            MetadataRecord::RegisterBroker(b) => Some(Meaning::Register {
                broker: b.broker_id,
                epoch: b.broker_epoch,
            }),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conflicting_entries_and_two_leaders_are_violations() {
        let mut h = History::new().strict_terms(true);
        h.node_applied(1, 1, 5, &[b"a".to_vec()]);
        h.node_applied(2, 2, 5, &[b"b".to_vec()]);
        h.node_leads(3, 1, 7);
        h.node_leads(4, 2, 7);
        h.node_leads(5, 2, 8);
        assert_eq!(h.violations.len(), 2, "{:?}", h.violations);
        assert!(h.violations[0].contains("index 5"));
        assert!(h.violations[1].contains("two leaders in term 7"));
    }

    #[test]
    fn two_leaders_in_a_term_are_a_finding_unless_strict() {
        let mut h = History::new();
        h.node_leads(1, 1, 3);
        h.node_leads(1, 2, 3);
        assert!(h.violations.is_empty());
        assert_eq!(
            h.findings,
            vec!["two leaders in term 3: {1, 2}".to_string()]
        );
    }

    #[test]
    fn a_lost_acknowledged_write_and_a_gap_are_caught_after_healing() {
        let mut h = History::new();
        h.node_applied(1, 1, 1, &[b"x".to_vec()]);
        h.node_applied(1, 1, 2, &[b"y".to_vec()]);
        h.node_applied(1, 2, 2, &[b"y".to_vec()]); // node 2 skipped index 1
        h.topic_acked(2, "lost");
        h.registration_acked(3, 1, 10);
        h.registration_acked(4, 1, 9);
        assert_eq!(h.violations.len(), 1, "epochs must grow");
        h.check_after_healing(5, &[1, 2]);
        let all = h.violations.join("\n");
        assert!(all.contains("n2 applied 1 entries"), "{all}");
        assert!(all.contains("topic lost was acknowledged"), "{all}");
        assert!(all.contains("registration at epoch 10"), "{all}");
    }

    #[test]
    fn the_trace_hash_follows_every_event() {
        let (mut a, mut b) = (History::new(), History::new());
        a.event(1, "x".into());
        b.event(1, "x".into());
        assert_eq!(a.trace_hash(), b.trace_hash());
        b.event(2, "y".into());
        assert_ne!(a.trace_hash(), b.trace_hash());
    }
}
