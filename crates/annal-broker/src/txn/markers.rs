//! Kafka's `TransactionMarkerChannelManager`: WriteTxnMarkers to the leader of every partition of a prepared
//! transaction, over `annal_client` connections to the leaders' inter-broker endpoints (this broker included, as
//! Kafka sends to itself over the network too), retried with backoff until each partition has its marker.
//!
//! Bounds: at most [`COMPLETIONS_IN_FLIGHT_MAX`] transactions send markers at once; one connection per leader,
//! one request at a time on it; responses are bounded by the connection's `max_response_bytes`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::write_txn_markers_request::{
    WritableTxnMarker, WritableTxnMarkerTopic,
};
use kafka_protocol::messages::{ProducerId, TopicName, WriteTxnMarkersRequest};
use kafka_protocol::protocol::StrBytes;
use tokio::sync::Semaphore;

use super::code;
use super::peers::Peers;

/// Transactions whose markers are being sent at once; the others wait their turn.
pub const COMPLETIONS_IN_FLIGHT_MAX: usize = 128;
/// First and largest wait between two rounds of a transaction's markers.
const BACKOFF_MIN: Duration = Duration::from_millis(50);
const BACKOFF_MAX: Duration = Duration::from_secs(2);
/// WriteTxnMarkers versions we speak (Kafka 4.0: v1, flexible; v0 was removed).
const WRITE_TXN_MARKERS_VERSIONS: (i16, i16) = (1, 1);
/// Largest WriteTxnMarkers response accepted (a few bytes per partition).
const RESPONSE_MAX_BYTES: usize = 16 * 1024 * 1024;
/// Partitions in one WriteTxnMarkers request (a larger transaction takes several).
const PARTITIONS_PER_REQUEST_MAX: usize = 4096;

/// Where a partition's leader is, from this broker's metadata image.
pub trait LeaderRoutes: Send + Sync {
    /// `Ok(Some((broker id, "host:port")))` of the leader's inter-broker endpoint; `Ok(None)` while it has no
    /// leader; `Err(())` if the partition does not exist (deleted: its marker is no longer needed).
    #[allow(clippy::result_unit_err)]
    fn leader(&self, topic: &str, partition: i32) -> Result<Option<(i32, String)>, ()>;

    /// TLS and SASL for connections to those endpoints (a secured inter-broker listener); PLAINTEXT unless said.
    fn inter_broker_client(&self) -> crate::security::InterBrokerClient {
        crate::security::InterBrokerClient::default()
    }

    /// The network those connections open through: the OS's TCP unless the broker runs on another
    /// (`BrokerEnv::network`, the deterministic simulator's).
    fn network(&self) -> Arc<dyn annal_client::net::Network> {
        Arc::new(annal_client::net::TokioNetwork)
    }
}

/// One transaction's outcome, to write into each of its partitions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Marker {
    pub transactional_id: String,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub commit: bool,
    /// The `__transaction_state` partition's leader epoch: partitions refuse markers of an older coordinator.
    pub coordinator_epoch: i32,
    pub partitions: BTreeSet<(String, i32)>,
}

pub(crate) struct MarkerChannel {
    routes: Arc<dyn LeaderRoutes>,
    peers: Peers,
    in_flight: Semaphore,
}

/// What a round of requests left to do.
enum Round {
    Done,
    Retry,
    /// The partition leader refused the marker for good (the producer's epoch moved on, or this coordinator was
    /// fenced): the transaction is someone else's to finish.
    Abandon,
}

impl MarkerChannel {
    pub fn new(routes: Arc<dyn LeaderRoutes>) -> MarkerChannel {
        let security = routes.inter_broker_client();
        let network = routes.network();
        MarkerChannel {
            routes,
            peers: Peers::new(
                "annal-txn-marker-sender",
                Duration::from_secs(30),
                RESPONSE_MAX_BYTES,
                security,
                network,
            ),
            in_flight: Semaphore::new(COMPLETIONS_IN_FLIGHT_MAX),
        }
    }

    /// Sends `marker` until every partition has it (true), or `still_coordinator` turns false or a leader
    /// refuses it for good (false).
    pub async fn send(
        &self,
        marker: &Marker,
        still_coordinator: &(dyn Fn() -> bool + Sync),
    ) -> bool {
        let Ok(_slot) = self.in_flight.acquire().await else {
            return false;
        };
        let mut remaining = marker.partitions.clone();
        let mut backoff = BACKOFF_MIN;
        loop {
            if remaining.is_empty() {
                return true;
            }
            if !still_coordinator() {
                tracing::info!(transactional_id = %marker.transactional_id, "no longer the coordinator; leaving the markers to the next one");
                return false;
            }
            match self.round(marker, &mut remaining).await {
                Round::Done if remaining.is_empty() => return true,
                Round::Abandon => return false,
                Round::Done | Round::Retry => {}
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(BACKOFF_MAX);
        }
    }

    /// One request per leader for the partitions still without their marker; removes those that got it.
    async fn round(&self, marker: &Marker, remaining: &mut BTreeSet<(String, i32)>) -> Round {
        let mut by_leader: BTreeMap<String, Vec<(String, i32)>> = BTreeMap::new();
        let mut gone = Vec::new();
        for (topic, partition) in remaining.iter() {
            match self.routes.leader(topic, *partition) {
                Err(()) => gone.push((topic.clone(), *partition)),
                Ok(None) => {}
                Ok(Some((_, addr))) => by_leader
                    .entry(addr)
                    .or_default()
                    .push((topic.clone(), *partition)),
            }
        }
        for p in gone {
            tracing::info!(topic = %p.0, partition = p.1, "partition deleted; its transaction marker is not needed");
            remaining.remove(&p);
        }
        let mut outcome = Round::Done;
        for (addr, partitions) in by_leader {
            for chunk in partitions.chunks(PARTITIONS_PER_REQUEST_MAX) {
                match self.send_to(&addr, marker, chunk).await {
                    Ok(results) => {
                        for (p, error) in results {
                            match error {
                                code::NONE => {
                                    remaining.remove(&p);
                                }
                                code::INVALID_PRODUCER_EPOCH
                                | code::PRODUCER_FENCED
                                | code::TRANSACTION_COORDINATOR_FENCED => {
                                    tracing::warn!(transactional_id = %marker.transactional_id, topic = %p.0, partition = p.1, error, "the partition refused the transaction marker for good");
                                    return Round::Abandon;
                                }
                                // UNSUPPORTED_FOR_MESSAGE_FORMAT, UNSUPPORTED_VERSION: the producer could not
                                // have written there either (Kafka drops the partition).
                                43 | 35 => {
                                    remaining.remove(&p);
                                }
                                other => {
                                    tracing::debug!(topic = %p.0, partition = p.1, error = other, "transaction marker not written yet; retrying");
                                    outcome = Round::Retry;
                                }
                            }
                        }
                    }
                    Err(e) => {
                        tracing::debug!(leader = %addr, error = %format!("{e:#}"), "cannot send transaction markers; retrying");
                        outcome = Round::Retry;
                    }
                }
            }
        }
        outcome
    }

    /// One WriteTxnMarkers to `addr`; each partition's error code.
    async fn send_to(
        &self,
        addr: &str,
        marker: &Marker,
        partitions: &[(String, i32)],
    ) -> anyhow::Result<Vec<((String, i32), i16)>> {
        let mut topics: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
        for (t, p) in partitions {
            topics.entry(t.as_str()).or_default().push(*p);
        }
        let request =
            WriteTxnMarkersRequest::default().with_markers(vec![WritableTxnMarker::default()
                .with_producer_id(ProducerId(marker.producer_id))
                .with_producer_epoch(marker.producer_epoch)
                .with_transaction_result(marker.commit)
                .with_coordinator_epoch(marker.coordinator_epoch)
                .with_topics(
                    topics
                        .into_iter()
                        .map(|(t, ps)| {
                            WritableTxnMarkerTopic::default()
                                .with_name(TopicName(StrBytes::from_string(t.to_string())))
                                .with_partition_indexes(ps)
                        })
                        .collect(),
                )]);
        let response = self
            .peers
            .send(addr, &request, WRITE_TXN_MARKERS_VERSIONS)
            .await?;
        let mut out = Vec::new();
        for m in response.markers {
            if m.producer_id.0 != marker.producer_id {
                continue;
            }
            for t in m.topics {
                for p in t.partitions {
                    let key = (t.name.0.to_string(), p.partition_index);
                    if partitions.contains(&key) {
                        out.push((key, p.error_code));
                    }
                }
            }
        }
        Ok(out)
    }
}
