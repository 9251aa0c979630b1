//! Replica placement, as Kafka's `AdminUtils.assignReplicasToBrokers` does it: round robin over the brokers
//! from a random start, each partition's followers shifted so replicas spread; leaders (first replicas) rotate,
//! so they balance. With racks on every broker, the broker list alternates racks and followers skip racks that
//! already hold a replica until every rack does.

use std::collections::{BTreeMap, BTreeSet};

use rand::Rng;

/// Why replicas could not be placed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlacementError {
    #[error(
        "Unable to replicate the partition {replication_factor} time(s): the target replication factor of \
         {replication_factor} cannot be reached because only {brokers} broker(s) are registered and unfenced"
    )]
    NotEnoughBrokers {
        replication_factor: usize,
        brokers: usize,
    },
}

/// Places `partitions` partitions of `replication_factor` replicas on `brokers` (id, rack), numbering from
/// `first_partition`. Returns one replica list per partition, leader first.
pub fn place_replicas(
    brokers: &[(i32, Option<String>)],
    partitions: usize,
    replication_factor: usize,
    first_partition: usize,
    rng: &mut impl Rng,
) -> Result<Vec<Vec<i32>>, PlacementError> {
    assert!(
        replication_factor >= 1,
        "callers check the replication factor first"
    );
    if replication_factor > brokers.len() {
        return Err(PlacementError::NotEnoughBrokers {
            replication_factor,
            brokers: brokers.len(),
        });
    }
    let rack_aware = brokers.iter().all(|(_, rack)| rack.is_some());
    let (list, racks): (Vec<i32>, Option<BTreeMap<i32, String>>) = if rack_aware {
        let racks: BTreeMap<i32, String> = brokers
            .iter()
            .map(|(id, rack)| (*id, rack.clone().unwrap_or_default()))
            .collect();
        (rack_alternated(&racks), Some(racks))
    } else {
        let mut ids: Vec<i32> = brokers.iter().map(|(id, _)| *id).collect();
        ids.sort_unstable();
        (ids, None)
    };
    let n = list.len();
    let start_index = rng.gen_range(0..n);
    let mut shift = rng.gen_range(0..n);
    let num_racks = racks
        .as_ref()
        .map_or(1, |r| r.values().collect::<BTreeSet<_>>().len());
    let mut out = Vec::with_capacity(partitions);
    for p in first_partition..first_partition + partitions {
        if p > 0 && p % n == 0 {
            shift += 1;
        }
        let first = (p + start_index) % n;
        let mut replicas = vec![list[first]];
        match &racks {
            None => {
                for j in 0..replication_factor - 1 {
                    replicas.push(list[replica_index(first, shift, j, n)]);
                }
            }
            Some(racks) => {
                let mut racks_used: BTreeSet<&String> = BTreeSet::from([&racks[&list[first]]]);
                let mut k = 0;
                while replicas.len() < replication_factor {
                    // Every candidate index is visited within n-1 steps, and one of them always qualifies
                    // because replication_factor <= n.
                    assert!(k < n * n + n, "rack-aware placement must find a replica");
                    let broker = list[replica_index(first, shift * num_racks, k, n)];
                    let rack = &racks[&broker];
                    let rack_ok = !racks_used.contains(rack) || racks_used.len() == num_racks;
                    if rack_ok && !replicas.contains(&broker) {
                        replicas.push(broker);
                        racks_used.insert(rack);
                    }
                    k += 1;
                }
            }
        }
        out.push(replicas);
    }
    Ok(out)
}

fn replica_index(first: usize, shift: usize, j: usize, n: usize) -> usize {
    if n == 1 {
        return first;
    }
    let s = 1 + (shift + j) % (n - 1);
    (first + s) % n
}

/// Brokers ordered so racks alternate: the first broker of each rack, then the second of each, ...
fn rack_alternated(racks: &BTreeMap<i32, String>) -> Vec<i32> {
    let mut by_rack: BTreeMap<&String, Vec<i32>> = BTreeMap::new();
    for (id, rack) in racks {
        by_rack.entry(rack).or_default().push(*id);
    }
    let longest = by_rack.values().map(Vec::len).max().unwrap_or(0);
    let mut out = Vec::with_capacity(racks.len());
    for i in 0..longest {
        for ids in by_rack.values() {
            if let Some(id) = ids.get(i) {
                out.push(*id);
            }
        }
    }
    out
}
