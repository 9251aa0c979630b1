//! Broker transitions that touch more partitions than one metadata batch holds (issue 19): they span batches,
//! in an order whose every prefix the controller repairs, and a long transition does not cost the broker its
//! lease.

use std::sync::atomic::{AtomicUsize, Ordering};

use super::*;
use crate::records::{encode_batch, MetadataRecord};

/// Partitions per topic and topics: 5,000 partitions, so a transition of broker 0 needs three batches.
const TOPICS: usize = 5;
const PARTITIONS: i32 = 1_000;

async fn single_broker_with_partitions() -> Harness {
    let h = Harness::with_brokers(1, &[]).await;
    for t in 0..TOPICS {
        assert_eq!(
            h.create(&format!("t{t}"), PARTITIONS, 1).await.error_code,
            NONE
        );
    }
    assert_eq!(
        h.image().partitions_led_by(0).len(),
        TOPICS * PARTITIONS as usize
    );
    h
}

/// The batches committed after `from` (an index into the writer's log).
fn batches_since(writer: &InMemoryWriter, from: usize) -> Vec<Vec<MetadataRecord>> {
    writer
        .log()
        .into_iter()
        .skip(from)
        .map(|(_, r)| r)
        .collect()
}

#[tokio::test]
async fn fencing_and_unfencing_a_broker_that_leads_many_partitions_spans_batches() {
    let mut h = single_broker_with_partitions().await;
    let before = h.writer.log().len();
    h.now += Duration::from_millis(9_500);
    h.controller.tick(h.now).await.unwrap();
    let image = h.image();
    assert!(image.broker(0).unwrap().fenced);
    assert!(image.partitions_led_by(0).is_empty());
    let fence = batches_since(&h.writer, before);
    assert_eq!(
        fence.len(),
        3,
        "5,000 partition changes and the fence in batches of 2,000"
    );
    assert!(fence.iter().all(|b| b.len() <= MAX_RECORDS_PER_BATCH));
    let records: Vec<&MetadataRecord> = fence.iter().flatten().collect();
    assert!(
        matches!(records.last(), Some(MetadataRecord::FenceBroker(f)) if f.id == 0),
        "the fence completes the transition, so it comes last"
    );
    assert_eq!(records.len(), TOPICS * PARTITIONS as usize + 1);

    // Back: unfenced, and every partition elected again, in batches too.
    let before = h.writer.log().len();
    assert!(!h.beat(0).await.is_fenced);
    assert_eq!(
        h.image().partitions_led_by(0).len(),
        TOPICS * PARTITIONS as usize
    );
    let unfence = batches_since(&h.writer, before);
    assert_eq!(unfence.len(), 3);
    assert!(unfence.iter().all(|b| b.len() <= MAX_RECORDS_PER_BATCH));
}

/// A writer that refuses every write after the first `healthy` ones, as a controller losing its quorum
/// part-way through a transition would see.
struct FailingAfter {
    inner: Arc<InMemoryWriter>,
    healthy: AtomicUsize,
}

impl MetadataWriter for FailingAfter {
    fn write(&self, records: Vec<MetadataRecord>) -> BoxFuture<'_, Result<u64, WriteError>> {
        let left = self
            .healthy
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        Box::pin(async move {
            match left {
                Ok(_) => self.inner.write(records).await,
                Err(_) => Err(WriteError::Unavailable(
                    "planted: the quorum is gone".into(),
                )),
            }
        })
    }

    fn image(&self) -> Arc<MetadataImage> {
        self.inner.image()
    }
}

/// A controller over `h`'s log whose writer fails after one batch, active from `h.now`.
async fn cut_off_after_one_batch(h: &Harness) -> Controller {
    let failing = Controller::new(
        h.controller.config().clone(),
        Arc::new(FailingAfter {
            inner: h.writer.clone(),
            healthy: AtomicUsize::new(1),
        }),
    );
    failing.on_become_active(h.now).await;
    failing
}

#[tokio::test]
async fn a_fence_cut_off_part_way_is_finished_by_the_next_active_controller() {
    let mut h = single_broker_with_partitions().await;
    let failing = cut_off_after_one_batch(&h).await;
    h.now += Duration::from_millis(9_500);
    assert!(failing.tick(h.now).await.is_err(), "the second batch fails");
    let image = h.image();
    let led = image.partitions_led_by(0).len();
    assert_eq!(
        led,
        TOPICS * PARTITIONS as usize - MAX_RECORDS_PER_BATCH,
        "one batch committed"
    );
    assert!(
        !image.broker(0).unwrap().fenced,
        "without its fence record the broker is not fenced yet: the transition is visibly unfinished"
    );

    // The next active controller grants a fresh lease; when that lapses too it fences and moves the rest.
    h.controller.on_become_active(h.now).await;
    h.now += Duration::from_millis(9_500);
    h.controller.tick(h.now).await.unwrap();
    let image = h.image();
    assert!(image.broker(0).unwrap().fenced);
    assert!(image.partitions_led_by(0).is_empty());
}

#[tokio::test]
async fn an_unfencing_cut_off_part_way_is_finished_by_the_tick() {
    let mut h = single_broker_with_partitions().await;
    h.now += Duration::from_millis(9_500);
    h.controller.tick(h.now).await.unwrap();
    assert!(h.image().partitions_led_by(0).is_empty());

    let failing = cut_off_after_one_batch(&h).await;
    let resp = failing
        .broker_heartbeat(heartbeat(0, h.epochs[0], h.offset()), h.now)
        .await;
    assert_eq!(
        resp.error_code,
        errors::NOT_CONTROLLER,
        "the second batch failed"
    );
    let image = h.image();
    assert!(
        !image.broker(0).unwrap().fenced,
        "the unfence record came first"
    );
    assert_eq!(image.partitions_led_by(0).len(), MAX_RECORDS_PER_BATCH - 1);

    // A healthy controller's tick elects the partitions left offline: their only in-sync replica is usable.
    h.controller.on_become_active(h.now).await;
    h.controller.tick(h.now).await.unwrap();
    assert_eq!(
        h.image().partitions_led_by(0).len(),
        TOPICS * PARTITIONS as usize
    );
    assert!(h.image().offline_partitions().is_empty());
}

#[tokio::test]
async fn a_controlled_shutdown_cut_off_part_way_is_finished_by_the_next_heartbeat() {
    let h = single_broker_with_partitions().await;
    let failing = cut_off_after_one_batch(&h).await;
    let shut_down = || heartbeat(0, h.epochs[0], h.offset()).with_want_shut_down(true);
    let resp = failing.broker_heartbeat(shut_down(), h.now).await;
    assert!(!resp.should_shut_down);
    assert!(h.image().broker(0).unwrap().in_controlled_shutdown);
    assert!(!h.image().partitions_led_by(0).is_empty());

    let resp = h.controller.broker_heartbeat(shut_down(), h.now).await;
    assert_eq!(resp.error_code, NONE);
    assert!(resp.should_shut_down, "the retry moved the rest");
    assert!(h.image().partitions_led_by(0).is_empty());
    let batches = h.writer.log().len();
    let resp = h.controller.broker_heartbeat(shut_down(), h.now).await;
    assert!(resp.should_shut_down);
    assert_eq!(
        h.writer.log().len(),
        batches,
        "once moved, a heartbeat writes nothing"
    );
}

/// The answer clock of the lease test: a fixed base plus what the test sets, as a node's clock would read
/// after a long write.
static CLOCK_BASE: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
static CLOCK_OFFSET_MS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn test_clock() -> Instant {
    *CLOCK_BASE.get().unwrap() + Duration::from_millis(CLOCK_OFFSET_MS.load(Ordering::SeqCst))
}

#[tokio::test]
async fn a_long_unfencing_starts_the_lease_when_the_heartbeat_is_answered() {
    let mut h = single_broker_with_partitions().await;
    h.now += Duration::from_millis(9_500);
    h.controller.tick(h.now).await.unwrap();
    assert!(h.image().broker(0).unwrap().fenced);

    // A controller whose writes take 8 s: the unfencing heartbeat arrives at `arrived` and is answered 8 s
    // later; the broker's next heartbeat comes an interval after the answer.
    let arrived = h.now;
    CLOCK_BASE.set(arrived).unwrap();
    CLOCK_OFFSET_MS.store(8_000, Ordering::SeqCst);
    let slow = Controller::new(
        ControllerConfig {
            clock: Some(test_clock),
            ..h.controller.config().clone()
        },
        h.writer.clone(),
    );
    slow.on_become_active(arrived).await;
    let resp = slow
        .broker_heartbeat(heartbeat(0, h.epochs[0], h.offset()), arrived)
        .await;
    assert!(!resp.is_fenced);
    assert_eq!(
        h.image().partitions_led_by(0).len(),
        TOPICS * PARTITIONS as usize
    );

    // 9.5 s after it arrived (1.5 s after the answer) the lease still runs...
    slow.tick(arrived + Duration::from_millis(9_500))
        .await
        .unwrap();
    assert!(
        !h.image().broker(0).unwrap().fenced,
        "the lease runs from the answer"
    );
    // ...and a broker silent for a session after the answer is fenced.
    slow.tick(arrived + Duration::from_millis(17_100))
        .await
        .unwrap();
    assert!(
        h.image().broker(0).unwrap().fenced,
        "a silent broker still loses its lease"
    );
}

#[test]
fn batched_records_fit_one_entry() {
    // A large cluster's worst case: seven replicas, all in the ISR, ELR and last known ELR set.
    let replicas: Vec<i32> = (1_000_000..1_000_007).collect();
    let records: Vec<MetadataRecord> = (0..MAX_RECORDS_PER_BATCH as i32)
        .map(|p| {
            let mut r =
                crate::records::PartitionChangeRecord::new(uuid::Uuid::from_u128(u128::MAX), p);
            r.leader = 1_000_000;
            r.isr = Some(replicas.clone());
            r.replicas = Some(replicas.clone());
            r.eligible_leader_replicas = Some(replicas.clone());
            r.last_known_elr = Some(replicas.clone());
            MetadataRecord::PartitionChange(r)
        })
        .collect();
    // The quorum's entry limit is half its default max_rpc_bytes (8 MiB), measured as the JSON that travels.
    let json = serde_json::to_vec(&encode_batch(&records)).unwrap();
    let limit = (8 << 20) / 2;
    assert!(
        json.len() < limit / 2,
        "a full batch is {} bytes of entry, more than half the {limit}-byte limit",
        json.len()
    );
}
