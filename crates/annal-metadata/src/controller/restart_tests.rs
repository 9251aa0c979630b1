//! A broker process restarting: when its new incarnation may register without waiting out the old lease.

use std::sync::Arc;
use std::time::Instant;

use kafka_protocol::messages::broker_registration_request::Listener;
use kafka_protocol::messages::{BrokerHeartbeatRequest, BrokerId, BrokerRegistrationRequest};
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

use super::errors::{DUPLICATE_BROKER_REGISTRATION, NONE};
use super::{Controller, ControllerConfig, InMemoryWriter, MetadataWriter};
use crate::image::MetadataImage;

fn registration(id: i32, incarnation: u128) -> BrokerRegistrationRequest {
    BrokerRegistrationRequest::default()
        .with_broker_id(BrokerId(id))
        .with_cluster_id(StrBytes::from_static_str("c"))
        .with_incarnation_id(Uuid::from_u128(incarnation))
        .with_listeners(vec![Listener::default()
            .with_name(StrBytes::from_static_str("PLAINTEXT"))
            .with_host(StrBytes::from_static_str("127.0.0.1"))
            .with_port(9092)])
}

fn controller(writer: &Arc<InMemoryWriter>, local: Option<i32>) -> Controller {
    let config = ControllerConfig {
        local_node_id: local,
        ..ControllerConfig::default()
    };
    Controller::new(config, writer.clone())
}

async fn register_and_unfence(c: &Controller, writer: &InMemoryWriter, id: i32, inc: u128) -> i64 {
    let now = Instant::now();
    let r = c.register_broker(registration(id, inc), now).await;
    assert_eq!(r.error_code, NONE);
    let offset = writer.image().last_applied_offset.unwrap() as i64;
    let hb = BrokerHeartbeatRequest::default()
        .with_broker_id(BrokerId(id))
        .with_broker_epoch(r.broker_epoch)
        .with_current_metadata_offset(offset);
    assert!(!c.broker_heartbeat(hb, now).await.is_fenced);
    r.broker_epoch
}

#[tokio::test]
async fn a_restarted_controller_lets_its_own_broker_register_at_once_but_not_others() {
    let writer = Arc::new(InMemoryWriter::new(MetadataImage::new("c")));
    let first = controller(&writer, Some(1));
    register_and_unfence(&first, &writer, 1, 10).await;
    register_and_unfence(&first, &writer, 2, 20).await;

    // The node restarts (kill -9): a new controller over the same log grants fresh leases to both brokers.
    let second = controller(&writer, Some(1));
    let now = Instant::now();
    second.on_become_active(now).await;
    // Its own broker's old incarnation died with the old process: the new one registers at once ...
    let own = second.register_broker(registration(1, 11), now).await;
    assert_eq!(own.error_code, NONE);
    // ... but another node's broker may still be alive, so a second incarnation of it waits for the lease.
    let other = second.register_broker(registration(2, 21), now).await;
    assert_eq!(other.error_code, DUPLICATE_BROKER_REGISTRATION);
}

#[tokio::test]
async fn a_broker_released_from_controlled_shutdown_re_registers_at_once() {
    let writer = Arc::new(InMemoryWriter::new(MetadataImage::new("c")));
    let c = controller(&writer, None);
    let epoch = register_and_unfence(&c, &writer, 3, 30).await;
    let now = Instant::now();
    let shut = BrokerHeartbeatRequest::default()
        .with_broker_id(BrokerId(3))
        .with_broker_epoch(epoch)
        .with_current_metadata_offset(writer.image().last_applied_offset.unwrap() as i64)
        .with_want_shut_down(true);
    assert!(c.broker_heartbeat(shut, now).await.should_shut_down);
    let again = c.register_broker(registration(3, 31), now).await;
    assert_eq!(again.error_code, NONE);
    // While the old incarnation is live and not shutting down, a second one is refused.
    let dup = c.register_broker(registration(3, 32), now).await;
    assert_eq!(dup.error_code, DUPLICATE_BROKER_REGISTRATION);
}

#[tokio::test]
async fn a_crashed_broker_is_fenced_at_once_and_its_next_incarnation_registers_at_once() {
    let writer = Arc::new(InMemoryWriter::new(MetadataImage::new("c")));
    let c = controller(&writer, None);
    register_and_unfence(&c, &writer, 1, 10).await;
    let epoch = register_and_unfence(&c, &writer, 2, 20).await;
    let now = Instant::now();
    // A probe that raced a new registration (another epoch) decides nothing.
    assert!(!c.fence_crashed(2, epoch + 100, now).await.unwrap());
    assert!(!writer.image().broker(2).unwrap().fenced);
    assert!(!c.fence_crashed(9, 0, now).await.unwrap(), "unknown broker");
    assert!(c.fence_crashed(2, epoch, now).await.unwrap());
    assert!(writer.image().broker(2).unwrap().fenced);
    assert!(
        !c.fence_crashed(2, epoch, now).await.unwrap(),
        "already fenced"
    );
    // Its process was proven gone: the restarted process need not wait out the old lease.
    let again = c.register_broker(registration(2, 21), now).await;
    assert_eq!(again.error_code, NONE);
    assert!(again.broker_epoch > epoch);
    // The live broker was not touched.
    assert!(!writer.image().broker(1).unwrap().fenced);
}
