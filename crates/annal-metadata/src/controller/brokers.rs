//! Broker registration, heartbeats and leases, fencing, controlled shutdown, producer id blocks.

use std::time::Instant;

use kafka_protocol::messages::{
    AllocateProducerIdsRequest, AllocateProducerIdsResponse, BrokerHeartbeatRequest,
    BrokerHeartbeatResponse, BrokerRegistrationRequest, BrokerRegistrationResponse, ProducerId,
};

use super::errors::{
    DUPLICATE_BROKER_REGISTRATION, INCONSISTENT_CLUSTER_ID, NONE, STALE_BROKER_EPOCH,
    UNKNOWN_SERVER_ERROR,
};
use super::{election, Controller, Lease, State, WriteError};
use crate::image::MetadataImage;
use crate::records::{
    BrokerEndpoint, BrokerFeature, BrokerRegistrationChangeRecord, FenceBrokerRecord,
    MetadataRecord, ProducerIdsRecord, RegisterBrokerRecord, UnfenceBrokerRecord,
};

/// The records that fence `broker` (epoch `epoch`) and move its partitions: one PartitionChangeRecord per
/// partition it led or was in sync for, then the FenceBrokerRecord. The fence comes last, as in Kafka's
/// `handleBrokerFenced`, because the records may span batches ([`MetadataWriter::write_in_batches`]): a
/// controller that fails part-way leaves the broker unfenced with its lease lapsed, so the next active
/// controller fences it again and moves what is left.
fn fence_records(
    image: &MetadataImage,
    policies: &election::Policies<'_>,
    broker: i32,
    epoch: i64,
) -> Vec<MetadataRecord> {
    let mut records: Vec<MetadataRecord> =
        changes(election::move_off_broker(image, policies, broker)).collect();
    records.push(MetadataRecord::FenceBroker(FenceBrokerRecord {
        id: broker,
        epoch,
    }));
    records
}

fn changes(c: Vec<crate::records::PartitionChangeRecord>) -> impl Iterator<Item = MetadataRecord> {
    c.into_iter().map(MetadataRecord::PartitionChange)
}

impl Controller {
    /// BrokerRegistration (62).
    pub async fn register_broker(
        &self,
        req: BrokerRegistrationRequest,
        now: Instant,
    ) -> BrokerRegistrationResponse {
        let mut state = self.lock_state().await;
        let image = self.writer.image();
        let id = req.broker_id.0;
        let reply = |code: i16, epoch: i64| {
            BrokerRegistrationResponse::default()
                .with_error_code(code)
                .with_broker_epoch(epoch)
        };
        if req.cluster_id.as_str() != image.cluster_id {
            tracing::warn!(
                broker = id,
                theirs = %req.cluster_id.as_str(),
                ours = %image.cluster_id,
                "registration refused: the broker's data directory belongs to another cluster"
            );
            return reply(INCONSISTENT_CLUSTER_ID, -1);
        }
        let mut records = Vec::new();
        let policies = self.policies(&image);
        if let Some(existing) = image.broker(id) {
            let lease_live = state.leases.get(&id).is_some_and(|l| {
                l.deadline > now && (l.confirmed || self.config.local_node_id != Some(id))
            });
            // A broker released from its controlled shutdown leads nothing and is on its way out: its next
            // incarnation need not wait for the old lease to lapse.
            let released =
                existing.in_controlled_shutdown && image.partitions_led_by(id).is_empty();
            let new_incarnation = existing.incarnation_id != req.incarnation_id;
            if new_incarnation && lease_live && !released {
                return reply(DUPLICATE_BROKER_REGISTRATION, -1);
            }
            if !existing.fenced {
                records.push(MetadataRecord::FenceBroker(FenceBrokerRecord {
                    id,
                    epoch: existing.epoch,
                }));
            }
            // KIP-966: a new process that cannot show it shut down cleanly (PreviousBrokerEpoch = the epoch it
            // had) may have lost unflushed records, so it leaves the ELR too; otherwise (a clean restart, or the
            // same process retrying) it only leaves ISRs and leaderships, as when fenced.
            let clean = !new_incarnation || req.previous_broker_epoch == existing.epoch;
            if clean {
                records.extend(changes(election::move_off_broker(&image, &policies, id)));
            } else {
                tracing::info!(
                    broker = id,
                    previous_epoch = req.previous_broker_epoch,
                    last_epoch = existing.epoch,
                    "broker restarted without a clean shutdown: it leaves every ISR and ELR until it catches up"
                );
                records.extend(changes(election::remove_unclean_restart(
                    &image, &policies, id,
                )));
            }
        }
        let epoch = image.next_broker_epoch();
        records.push(MetadataRecord::RegisterBroker(RegisterBrokerRecord {
            broker_id: id,
            is_migrating_zk_broker: false,
            incarnation_id: req.incarnation_id,
            broker_epoch: epoch,
            end_points: req
                .listeners
                .iter()
                .map(|l| BrokerEndpoint {
                    name: l.name.to_string(),
                    host: l.host.to_string(),
                    port: l.port,
                    security_protocol: l.security_protocol,
                })
                .collect(),
            features: req
                .features
                .iter()
                .map(|f| BrokerFeature {
                    name: f.name.to_string(),
                    min_supported_version: f.min_supported_version,
                    max_supported_version: f.max_supported_version,
                })
                .collect(),
            rack: req.rack.as_ref().map(|r| r.to_string()),
            // A new registration is fenced until the broker has caught up with the metadata log.
            fenced: true,
            in_controlled_shutdown: false,
            log_dirs: Vec::new(),
        }));
        // The fence of the old incarnation and its partition changes first, the registration last: a failure
        // part-way is repaired by the broker registering again.
        match self.writer.write_in_batches(records).await {
            Ok(offset) => {
                state.leases.insert(
                    id,
                    Lease {
                        deadline: self.answered_at(now) + self.config.session_timeout,
                        confirmed: true,
                        registration_offset: offset,
                    },
                );
                reply(NONE, epoch)
            }
            Err(e) => reply(e.code(), -1),
        }
    }

    /// BrokerHeartbeat (63).
    pub async fn broker_heartbeat(
        &self,
        req: BrokerHeartbeatRequest,
        now: Instant,
    ) -> BrokerHeartbeatResponse {
        let mut state = self.lock_state().await;
        let image = self.writer.image();
        let id = req.broker_id.0;
        let Some(broker) = image.broker(id).filter(|b| b.epoch == req.broker_epoch) else {
            return BrokerHeartbeatResponse::default()
                .with_error_code(STALE_BROKER_EPOCH)
                .with_is_fenced(true);
        };
        let lease = state.leases.entry(id).or_insert(Lease {
            deadline: now,
            confirmed: true,
            // Unknown to this controller (it became active after the registration): the offset it has seen is
            // a safe bound.
            registration_offset: image.last_applied_offset.unwrap_or(0),
        });
        lease.deadline = now + self.config.session_timeout;
        lease.confirmed = true;
        let caught_up = u64::try_from(req.current_metadata_offset)
            .is_ok_and(|o| o >= lease.registration_offset);

        let mut records = Vec::new();
        if req.want_shut_down {
            if !broker.in_controlled_shutdown {
                records.push(MetadataRecord::BrokerRegistrationChange(
                    BrokerRegistrationChangeRecord {
                        broker_id: id,
                        broker_epoch: broker.epoch,
                        fenced: 0,
                        in_controlled_shutdown: 1,
                        log_dirs: Vec::new(),
                    },
                ));
            }
            // Every heartbeat of a broker shutting down moves what it still leads: a move that failed part-way
            // (it spans batches) is finished by the next one. Nothing is written once it has moved.
            records.extend(changes(election::move_off_broker(
                &image,
                &self.policies(&image),
                id,
            )));
        } else if req.want_fence && !broker.fenced {
            records.extend(fence_records(
                &image,
                &self.policies(&image),
                id,
                broker.epoch,
            ));
        } else if broker.fenced && caught_up && !req.want_fence && !req.want_shut_down {
            records.push(MetadataRecord::UnfenceBroker(UnfenceBrokerRecord {
                id,
                epoch: broker.epoch,
            }));
            records.extend(changes(election::elect_offline_with(
                &image,
                &self.policies(&image),
                id,
            )));
        }
        let mut error_code = NONE;
        if !records.is_empty() {
            if let Err(e) = self.writer.write_in_batches(records).await {
                error_code = e.code();
            }
            let answered = self.answered_at(now);
            if let Some(lease) = state.leases.get_mut(&id) {
                lease.deadline = lease.deadline.max(answered + self.config.session_timeout);
            }
        }
        let image = self.writer.image();
        let broker = image.broker(id);
        let fenced = broker.is_none_or(|b| b.fenced);
        let in_shutdown = broker.is_some_and(|b| b.in_controlled_shutdown);
        let should_shut_down = in_shutdown && image.partitions_led_by(id).is_empty();
        BrokerHeartbeatResponse::default()
            .with_error_code(error_code)
            .with_is_caught_up(caught_up)
            .with_is_fenced(fenced)
            .with_should_shut_down(should_shut_down)
    }

    /// Fences every unfenced broker whose lease has lapsed, moving its leaderships; elects uncleanly where a
    /// topic allows it and a partition is offline; and, when due, rebalances leaders to preferred replicas. Call
    /// it periodically (every few hundred ms; Kafka checks on a timer) with the current time.
    ///
    /// A tick that waited for the lock behind a long operation judges leases by its `now` from before the wait:
    /// earlier than the real time, so it can only fence later, never sooner.
    pub async fn tick(&self, now: Instant) -> Result<(), WriteError> {
        let mut state = self.lock_state().await;
        let image = self.writer.image();
        self.grant_missing_leases(&mut state, &image, now);
        let expired: Vec<(i32, i64)> = image
            .brokers
            .values()
            .filter(|b| !b.fenced && state.leases.get(&b.id).is_some_and(|l| l.deadline <= now))
            .map(|b| (b.id, b.epoch))
            .collect();
        for (id, epoch) in expired {
            // Each fencing decides against the image that includes the previous one.
            let image = self.writer.image();
            tracing::info!(broker = id, "fencing broker: its session lease lapsed");
            let records = fence_records(&image, &self.policies(&image), id, epoch);
            self.writer.write_in_batches(records).await?;
        }
        let image = self.writer.image();
        let offline = election::elect_offline(&image, &self.policies(&image));
        if !offline.is_empty() {
            self.writer
                .write_in_batches(changes(offline).collect())
                .await?;
        }
        self.maybe_rebalance(&mut state, now).await
    }

    /// Fences broker `id` now if it still holds registration `epoch` unfenced: its process was seen to be gone
    /// (see [`crate::crash_probe`]), so its leaderships move without waiting out its lease. Returns whether it
    /// fenced. The epoch check makes a probe that raced a new registration (a restarted process) a no-op.
    pub async fn fence_crashed(
        &self,
        id: i32,
        epoch: i64,
        now: Instant,
    ) -> Result<bool, WriteError> {
        let mut state = self.lock_state().await;
        let image = self.writer.image();
        match image.broker(id) {
            Some(b) if !b.fenced && b.epoch == epoch => {}
            _ => return Ok(false),
        }
        let records = fence_records(&image, &self.policies(&image), id, epoch);
        self.writer.write_in_batches(records).await?;
        // The old process is gone: its lease ends now, so its next incarnation registers at once rather than
        // being refused as a duplicate until the lease would have lapsed.
        if let Some(lease) = state.leases.get_mut(&id) {
            lease.deadline = now;
        }
        Ok(true)
    }

    /// A newly active controller gives every registered broker a fresh lease, as Kafka does: it cannot know
    /// when they last heartbeated to the previous controller.
    pub async fn on_become_active(&self, now: Instant) {
        let mut state = self.lock_state().await;
        state.leases.clear();
        state.next_imbalance_check = None;
        let image = self.writer.image();
        self.grant_missing_leases(&mut state, &image, now);
    }

    fn grant_missing_leases(&self, state: &mut State, image: &MetadataImage, now: Instant) {
        for id in image.brokers.keys() {
            state.leases.entry(*id).or_insert(Lease {
                deadline: now + self.config.session_timeout,
                confirmed: false,
                registration_offset: image.last_applied_offset.unwrap_or(0),
            });
        }
    }

    /// When a registration or heartbeat that arrived at `now` is answered: the clock's time after its writes,
    /// if the controller has a clock ([`super::ControllerConfig::clock`]).
    fn answered_at(&self, now: Instant) -> Instant {
        self.config.clock.map_or(now, |clock| clock().max(now))
    }

    /// AllocateProducerIds (67): the next block of `producer_id_block_size` ids, recorded before it is handed out
    /// so no two brokers (nor one broker twice) ever get overlapping blocks.
    pub async fn allocate_producer_ids(
        &self,
        req: AllocateProducerIdsRequest,
    ) -> AllocateProducerIdsResponse {
        let _state = self.lock_state().await;
        let image = self.writer.image();
        let id = req.broker_id.0;
        if image.broker(id).is_none_or(|b| b.epoch != req.broker_epoch) {
            return AllocateProducerIdsResponse::default().with_error_code(STALE_BROKER_EPOCH);
        }
        let start = image.next_producer_id;
        let len = self.config.producer_id_block_size;
        assert!(
            len > 0 && len <= i64::from(i32::MAX),
            "producer id block size is a positive i32"
        );
        let Some(next) = start.checked_add(len) else {
            tracing::error!("producer ids exhausted");
            return AllocateProducerIdsResponse::default().with_error_code(UNKNOWN_SERVER_ERROR);
        };
        let record = MetadataRecord::ProducerIds(ProducerIdsRecord {
            broker_id: id,
            broker_epoch: req.broker_epoch,
            next_producer_id: next,
        });
        match self.writer.write(vec![record]).await {
            Ok(_) => AllocateProducerIdsResponse::default()
                .with_producer_id_start(ProducerId(start))
                .with_producer_id_len(len as i32),
            Err(e) => AllocateProducerIdsResponse::default().with_error_code(e.code()),
        }
    }
}
