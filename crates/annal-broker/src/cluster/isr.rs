//! The leader's side of ISR changes: every tick, each partition this broker leads may propose a change
//! ([`Partition::propose_isr_change`]: lagging members leave, caught-up replicas join); the proposals go to the
//! controller in one AlterPartition (v3, members with their broker epochs) and each answer is applied
//! ([`Partition::isr_change_answered`]). A partition has at most one change in flight: it proposes nothing
//! while one is pending, and the high watermark counts the maximal ISR meanwhile.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::alter_partition_request::{BrokerState, PartitionData, TopicData};
use kafka_protocol::messages::{AlterPartitionRequest, BrokerId};
use tokio::sync::watch;
use uuid::Uuid;

use super::controller_channel::{ControllerChannel, NOT_CONTROLLER};
use super::lifecycle::LeaseState;
use crate::replica::{Partition, ReplicaManager};
use annal_metadata::image::MetadataImage;

/// How often leaders look for ISR changes. Shrinking waits replica.lag.time.max.ms anyway; expanding soon
/// after a follower catches up is what makes acks=all available again.
const ISR_TICK: Duration = Duration::from_millis(200);
/// How long a partition whose ISR change the controller refused waits before proposing again (the image
/// usually explains the refusal by then: a newer partition epoch, a fenced replica).
const REFUSED_BACKOFF: Duration = Duration::from_secs(1);
/// How long one AlterPartition may wait for the controller. Every ISR change of this broker waits behind it (one
/// request at a time, each partition with its change pending), so it must be short: the admin channel's 60 s let
/// a request lost to a partition hold every ISR expansion for a minute after the network healed (found by the
/// simulator: `annal-sim --brokers --seed 2 --seconds 60`). It is also the request timeout of the ISR loop's own
/// controller channel (`ClusterRuntime::isr_channel`), which nothing else uses, so nothing else can hold it.
pub(crate) const ALTER_PARTITION_TIMEOUT: Duration = Duration::from_secs(5);
/// AlterPartition v3 names ISR members with their broker epochs (KIP-903).
const ALTER_PARTITION_VERSION: i16 = 3;

pub async fn run(
    replica_manager: Arc<ReplicaManager>,
    channel: Arc<ControllerChannel>,
    images: watch::Receiver<Arc<MetadataImage>>,
    lease: watch::Receiver<LeaseState>,
    lag_time_max_ms: i64,
    mut stop: watch::Receiver<bool>,
) {
    // Partitions whose last proposal was refused or failed, until when they wait.
    let mut refused: HashMap<(Uuid, i32), tokio::time::Instant> = HashMap::new();
    loop {
        tokio::select! {
            biased;
            _ = tokio::time::sleep(ISR_TICK) => {}
            _ = crate::stopped(&mut stop) => return,
        }
        let broker_epoch = lease.borrow().broker_epoch;
        if broker_epoch < 0 {
            continue;
        }
        let image = images.borrow().clone();
        // The monotonic clock, as the follower progress it is compared with (`crate::monotonic_ms`).
        let now = crate::monotonic_ms();
        let instant = tokio::time::Instant::now();
        refused.retain(|_, until| *until > instant);
        let proposals: Vec<(Arc<Partition>, crate::replica::IsrChange)> = replica_manager
            .all_partitions()
            .into_iter()
            .filter(|p| p.is_leader() && p.replicas().len() > 1)
            .filter(|p| !refused.contains_key(&(p.topic_id(), p.index())))
            .filter_map(|p| {
                let change = p.propose_isr_change(now, lag_time_max_ms, |id| {
                    image.broker(id).filter(|b| b.is_usable()).map(|b| b.epoch)
                })?;
                Some((p, change))
            })
            .collect();
        if proposals.is_empty() {
            continue;
        }
        if annal_metadata::env::testing::planted(
            annal_metadata::env::testing::PlantedBug::AckBeforeIsrCommitted,
        ) {
            // PLANTED BUG (simulator only): act on the proposed ISR at once, before the controller answers.
            for (p, _) in &proposals {
                p.high_watermark_moved();
            }
        }
        let not_confirmed = send(
            &replica_manager,
            &channel,
            broker_epoch,
            proposals,
            &mut stop,
        )
        .await;
        for key in not_confirmed {
            refused.insert(key, tokio::time::Instant::now() + REFUSED_BACKOFF);
        }
    }
}

async fn send(
    replica_manager: &ReplicaManager,
    channel: &ControllerChannel,
    broker_epoch: i64,
    proposals: Vec<(Arc<Partition>, crate::replica::IsrChange)>,
    stop: &mut watch::Receiver<bool>,
) -> Vec<(Uuid, i32)> {
    let mut not_confirmed = Vec::new();
    let mut topics: Vec<TopicData> = Vec::new();
    for (p, change) in &proposals {
        let data = PartitionData::default()
            .with_partition_index(p.index())
            .with_leader_epoch(change.leader_epoch)
            .with_partition_epoch(change.partition_epoch)
            .with_new_isr_with_epochs(
                change
                    .new_isr
                    .iter()
                    .map(|(id, epoch)| {
                        BrokerState::default()
                            .with_broker_id(BrokerId(*id))
                            .with_broker_epoch(*epoch)
                    })
                    .collect(),
            );
        match topics.iter_mut().find(|t| t.topic_id == p.topic_id()) {
            Some(t) => t.partitions.push(data),
            None => topics.push(
                TopicData::default()
                    .with_topic_id(p.topic_id())
                    .with_partitions(vec![data]),
            ),
        }
    }
    let request = AlterPartitionRequest::default()
        .with_broker_id(BrokerId(replica_manager.local_broker_id()))
        .with_broker_epoch(broker_epoch)
        .with_topics(topics);
    let answer = tokio::select! {
        biased;
        r = tokio::time::timeout(ALTER_PARTITION_TIMEOUT, channel.send(&request, ALTER_PARTITION_VERSION)) => match r {
            Ok(r) => r,
            Err(_) => {
                // The connection may hold the late answer: drop it, so the next request starts clean (and
                // goes to whichever voter leads by then).
                channel.reset().await;
                Err(anyhow::anyhow!("the controller did not answer AlterPartition within {ALTER_PARTITION_TIMEOUT:?}"))
            }
        },
        _ = crate::stopped(stop) => Err(anyhow::anyhow!("shutting down")),
    };
    let response = match answer {
        Ok(r) if r.error_code == NOT_CONTROLLER => {
            channel.reset().await;
            None
        }
        Ok(r) if r.error_code != 0 => {
            tracing::warn!(code = r.error_code, "the controller refused AlterPartition");
            None
        }
        Ok(r) => Some(r),
        Err(e) => {
            tracing::warn!(error = %format!("{e:#}"), "AlterPartition failed; the ISR change will be proposed again");
            None
        }
    };
    for (p, _) in proposals {
        let answered = response.as_ref().and_then(|r| {
            let pd = r
                .topics
                .iter()
                .filter(|t| t.topic_id == p.topic_id() || t.topic_id == Uuid::nil())
                .flat_map(|t| t.partitions.iter())
                .find(|d| d.partition_index == p.index())?;
            if pd.error_code != 0 {
                tracing::info!(partition = %p.name(), code = pd.error_code, "the controller refused an ISR change");
                return None;
            }
            Some((
                pd.leader_epoch,
                pd.partition_epoch,
                pd.isr.iter().map(|b| b.0).collect::<Vec<i32>>(),
            ))
        });
        match &answered {
            None => not_confirmed.push((p.topic_id(), p.index())),
            Some((_, _, isr)) => {
                let metrics = replica_manager.metrics();
                match isr.len().cmp(&p.isr().len()) {
                    std::cmp::Ordering::Less => metrics.isr_shrinks.inc(),
                    std::cmp::Ordering::Greater => metrics.isr_expands.inc(),
                    std::cmp::Ordering::Equal => 0,
                };
            }
        }
        p.isr_change_answered(answered);
    }
    not_confirmed
}
