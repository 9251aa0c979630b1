//! The quorum end to end: in-process nodes talking real TCP on 127.0.0.1, each with its own data directory.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::*;

/// Every test waits at most this long for any one condition.
const WAIT_MAX: Duration = Duration::from_secs(20);

/// A state machine that keeps every applied record, and counts what must never happen.
#[derive(Default)]
struct VecSm {
    inner: Mutex<VecSmState>,
}

#[derive(Default)]
struct VecSmState {
    last_index: Option<u64>,
    records: Vec<(u64, Vec<u8>)>,
    applied_twice: u64,
    restores: u64,
}

impl VecSm {
    fn values(&self) -> Vec<Vec<u8>> {
        self.inner
            .lock()
            .records
            .iter()
            .map(|(_, r)| r.clone())
            .collect()
    }
}

impl StateMachine for VecSm {
    fn apply(&self, index: u64, records: &[Vec<u8>]) {
        let mut s = self.inner.lock();
        if s.last_index.is_some_and(|last| index <= last) {
            s.applied_twice += 1;
        }
        s.last_index = Some(index);
        s.records.extend(records.iter().map(|r| (index, r.clone())));
    }

    fn snapshot(&self) -> (u64, Vec<u8>) {
        let s = self.inner.lock();
        (
            s.last_index.unwrap_or(0),
            serde_json::to_vec(&s.records).unwrap(),
        )
    }

    fn restore(&self, index: u64, data: &[u8]) -> Result<(), String> {
        let records: Vec<(u64, Vec<u8>)> =
            serde_json::from_slice(data).map_err(|e| e.to_string())?;
        let mut s = self.inner.lock();
        s.records = records;
        s.last_index = Some(index);
        s.restores += 1;
        Ok(())
    }
}

struct Node {
    id: u64,
    quorum: Arc<Quorum>,
    sm: Arc<VecSm>,
    stop: tokio::sync::watch::Sender<bool>,
    server: tokio::task::JoinHandle<()>,
}

impl Node {
    async fn stop(self) {
        self.quorum.shutdown().await;
        let _ = self.stop.send(true);
        let _ = self.server.await;
    }
}

fn config(
    id: u64,
    voters: &BTreeMap<u64, String>,
    addr: &str,
    root: &Path,
    snapshot_every: u64,
) -> QuorumConfig {
    QuorumConfig {
        election_timeout_min_ms: 200,
        election_timeout_max_ms: 400,
        heartbeat_interval_ms: 50,
        snapshot_every_entries: snapshot_every,
        max_rpc_bytes: 1 << 20,
        ..QuorumConfig::new(
            id,
            voters.clone(),
            addr.to_string(),
            root.join(format!("node-{id}")),
        )
    }
}

async fn start_node(config: QuorumConfig, listener: TcpListener) -> Node {
    let sm = Arc::new(VecSm::default());
    let id = config.node_id;
    let quorum = Arc::new(
        Quorum::start(config, sm.clone())
            .await
            .expect("start the quorum"),
    );
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let server = tokio::spawn(serve(listener, quorum.clone(), stop_rx));
    Node {
        id,
        quorum,
        sm,
        stop,
        server,
    }
}

async fn bind_any() -> (TcpListener, String) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    (listener, addr)
}

async fn rebind(addr: &str) -> TcpListener {
    let deadline = Instant::now() + WAIT_MAX;
    loop {
        match TcpListener::bind(addr).await {
            Ok(l) => return l,
            Err(e) if Instant::now() < deadline => {
                let _ = e;
                tokio::time::sleep(Duration::from_millis(50)).await
            }
            Err(e) => panic!("rebind {addr}: {e}"),
        }
    }
}

struct Cluster {
    root: tempfile::TempDir,
    voters: BTreeMap<u64, String>,
    nodes: Vec<Node>,
    snapshot_every: u64,
}

impl Cluster {
    async fn start(snapshot_every: u64) -> Cluster {
        let root = tempfile::tempdir().unwrap();
        let mut listeners = Vec::new();
        let mut voters = BTreeMap::new();
        for id in 1..=3u64 {
            let (l, addr) = bind_any().await;
            voters.insert(id, addr);
            listeners.push((id, l));
        }
        let mut nodes = Vec::new();
        for (id, l) in listeners {
            nodes.push(
                start_node(
                    config(id, &voters, &voters[&id], root.path(), snapshot_every),
                    l,
                )
                .await,
            );
        }
        Cluster {
            root,
            voters,
            nodes,
            snapshot_every,
        }
    }

    fn node(&self, id: u64) -> &Node {
        self.nodes
            .iter()
            .find(|n| n.id == id)
            .expect("a running node")
    }

    async fn leader(&self) -> u64 {
        wait_for("a leader", || {
            self.nodes
                .iter()
                .find(|n| n.quorum.is_leader())
                .filter(|l| self.nodes.iter().all(|n| n.quorum.leader() == Some(l.id)))
                .map(|n| n.id)
        })
        .await
    }

    async fn stop(&mut self, id: u64) {
        let at = self.nodes.iter().position(|n| n.id == id).expect("running");
        self.nodes.remove(at).stop().await;
    }

    async fn restart(&mut self, id: u64) {
        let addr = self.voters[&id].clone();
        let l = rebind(&addr).await;
        let node = start_node(
            config(
                id,
                &self.voters,
                &addr,
                self.root.path(),
                self.snapshot_every,
            ),
            l,
        )
        .await;
        self.nodes.push(node);
    }

    fn dir(&self, id: u64) -> PathBuf {
        self.root
            .path()
            .join(format!("node-{id}"))
            .join(METADATA_LOG_DIR)
    }
}

async fn wait_for<T>(what: &str, mut probe: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + WAIT_MAX;
    loop {
        if let Some(v) = probe() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Writes through whichever node leads, retrying while leadership moves.
async fn write(cluster: &Cluster, payload: Payload) -> u64 {
    let deadline = Instant::now() + WAIT_MAX;
    loop {
        let leader = cluster.leader().await;
        match cluster.node(leader).quorum.write(payload.clone()).await {
            Ok(index) => return index,
            Err(WriteError::NotLeader { .. }) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await
            }
            Err(e) => panic!("write failed: {e}"),
        }
    }
}

fn record(i: usize) -> Vec<u8> {
    format!("record-{i}").into_bytes()
}

async fn wait_applied(node: &Node, expected: &[Vec<u8>]) {
    wait_for(
        &format!("node {} to apply {} records", node.id, expected.len()),
        || (node.sm.values() == expected).then_some(()),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_voters_elect_replicate_and_fail_over() {
    let mut cluster = Cluster::start(10_000).await;
    let leader = cluster.leader().await;

    let mut expected = Vec::new();
    let mut last_index = 0;
    for i in 0..5 {
        let payload = vec![record(2 * i), record(2 * i + 1)];
        expected.extend(payload.clone());
        let index = write(&cluster, payload).await;
        assert!(index > last_index, "indexes grow");
        last_index = index;
    }
    // Applied on the leader before write() returned; on the followers soon after.
    assert_eq!(cluster.node(leader).sm.values(), expected);
    for node in &cluster.nodes {
        wait_applied(node, &expected).await;
    }

    let follower = cluster.nodes.iter().find(|n| n.id != leader).unwrap();
    assert_eq!(
        follower.quorum.write(vec![b"nope".to_vec()]).await,
        Err(WriteError::NotLeader {
            leader: Some(leader)
        })
    );

    let status = cluster.node(leader).quorum.status();
    assert_eq!(status.leader_id, Some(leader));
    assert!(status.term >= 1);
    assert!(status.high_watermark >= Some(last_index));
    assert_eq!(
        status.voters.iter().map(|v| v.node_id).collect::<Vec<_>>(),
        vec![1, 2, 3]
    );
    assert!(status.observers.is_empty());
    for voter in &status.voters {
        wait_for("followers to match", || {
            let s = cluster.node(leader).quorum.status();
            let v = s.voters.iter().find(|v| v.node_id == voter.node_id)?;
            (v.matched_index >= Some(last_index) && v.last_contact_ms.is_some()).then_some(())
        })
        .await;
    }

    let old_term = status.term;
    let mut watch = follower.quorum.watch_leader();
    cluster.stop(leader).await;
    let new_leader = cluster.leader().await;
    assert_ne!(new_leader, leader);
    assert!(
        cluster.node(new_leader).quorum.status().term > old_term,
        "a new leader has a new epoch"
    );
    assert_eq!(*watch.borrow_and_update(), Some(new_leader));

    let payload = vec![record(100)];
    expected.extend(payload.clone());
    write(&cluster, payload).await;
    for node in &cluster.nodes {
        wait_applied(node, &expected).await;
        assert_eq!(node.sm.inner.lock().applied_twice, 0);
    }
    for node in std::mem::take(&mut cluster.nodes) {
        node.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarted_nodes_recover_their_log_and_snapshot() {
    let mut cluster = Cluster::start(5).await;
    let mut expected = Vec::new();
    for i in 0..12 {
        expected.push(record(i));
        write(&cluster, vec![record(i)]).await;
    }
    for node in &cluster.nodes {
        wait_applied(node, &expected).await;
    }
    // Snapshots were taken and the log purged under them.
    let follower = cluster
        .nodes
        .iter()
        .find(|n| !n.quorum.is_leader())
        .unwrap()
        .id;
    let dir = cluster.dir(follower);
    wait_for("a snapshot file", || {
        std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| e.ok())
            .any(|e| e.file_name().to_string_lossy().ends_with(".checkpoint"))
            .then_some(())
    })
    .await;
    wait_for("the log purged", || {
        cluster.node(follower).quorum.raft.metrics().borrow().purged
    })
    .await;

    // One follower restarts from its directory and catches up with what it missed.
    cluster.stop(follower).await;
    expected.push(record(50));
    write(&cluster, vec![record(50)]).await;
    cluster.restart(follower).await;
    wait_applied(cluster.node(follower), &expected).await;
    {
        let s = cluster.node(follower).sm.inner.lock();
        assert!(s.restores >= 1, "restored from the snapshot at start-up");
        assert_eq!(s.applied_twice, 0);
    }

    // The whole cluster restarts: votes, log and snapshots are on disk.
    for id in [1, 2, 3] {
        cluster.stop(id).await;
    }
    for id in [1, 2, 3] {
        cluster.restart(id).await;
    }
    for node in &cluster.nodes {
        wait_applied(node, &expected).await;
    }
    expected.push(record(60));
    write(&cluster, vec![record(60)]).await;
    for node in &cluster.nodes {
        wait_applied(node, &expected).await;
        assert_eq!(node.sm.inner.lock().applied_twice, 0);
    }
    for node in std::mem::take(&mut cluster.nodes) {
        node.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_learner_added_later_gets_everything_through_a_snapshot() {
    let mut cluster = Cluster::start(3).await;
    let mut expected = Vec::new();
    for i in 0..10 {
        expected.push(record(i));
        write(&cluster, vec![record(i)]).await;
    }
    let leader = cluster.leader().await;
    wait_for("the leader's log purged", || {
        cluster
            .node(leader)
            .quorum
            .raft
            .metrics()
            .borrow()
            .purged
            .filter(|p| p.index >= 3)
    })
    .await;

    let (listener, addr) = bind_any().await;
    let learner = start_node(
        config(4, &cluster.voters, &addr, cluster.root.path(), 3),
        listener,
    )
    .await;
    assert!(!learner.quorum.is_leader());
    cluster
        .node(leader)
        .quorum
        .add_learner(4, addr)
        .await
        .expect("add the learner");
    wait_applied(&learner, &expected).await;
    assert!(
        learner.sm.inner.lock().restores >= 1,
        "the learner was sent a snapshot"
    );

    expected.push(record(99));
    write(&cluster, vec![record(99)]).await;
    wait_applied(&learner, &expected).await;
    let status = cluster.node(leader).quorum.status();
    assert_eq!(
        status
            .observers
            .iter()
            .map(|o| o.node_id)
            .collect::<Vec<_>>(),
        vec![4]
    );
    assert_eq!(learner.quorum.leader(), Some(leader));
    assert_eq!(
        learner.quorum.write(vec![b"x".to_vec()]).await,
        Err(WriteError::NotLeader {
            leader: Some(leader)
        })
    );
    learner.stop().await;
    for node in std::mem::take(&mut cluster.nodes) {
        node.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_rpcs_are_refused_without_harm() {
    let root = tempfile::tempdir().unwrap();
    let (listener, addr) = bind_any().await;
    let voters = BTreeMap::from([(1u64, addr.clone())]);
    let node = start_node(config(1, &voters, &addr, root.path(), 100), listener).await;
    wait_for("a single-voter leader", || {
        node.quorum.is_leader().then_some(())
    })
    .await;

    // A garbage body is answered with an error, not a panic.
    let answer = node.quorum.handle_rpc(b"\xff\x00 not json").await;
    assert!(matches!(
        serde_json::from_slice(&answer),
        Ok(RpcResponse::BadRequest(_))
    ));

    // On the wire: a well-framed request with a garbage body gets an answer; bad frames close the connection.
    let mut stream = TcpStream::connect(&addr).await.unwrap();
    stream
        .write_all(&transport::encode_request_frame(5, b"{\"Vote\":12}"))
        .await
        .unwrap();
    let size = stream.read_i32().await.unwrap();
    let mut body = vec![0u8; size as usize];
    stream.read_exact(&mut body).await.unwrap();
    assert_eq!(i32::from_be_bytes(body[..4].try_into().unwrap()), 5);
    assert!(matches!(
        serde_json::from_slice(&body[4..]),
        Ok(RpcResponse::BadRequest(_))
    ));
    for frame in [
        vec![0x7f, 0xff, 0xff, 0xff], // 2 GiB frame
        vec![0xff, 0xff, 0xff, 0xff], // negative size
        vec![0, 0, 0, 3, 1, 2, 3],    // shorter than a header
        [
            &[0u8, 0, 0, 12][..],
            &[0, 18, 0, 0, 0, 0, 0, 1, 0x7f, 0xff, 0, 0],
        ]
        .concat(), // client id overruns
        [&[0u8, 0, 0, 11][..], &[0, 3, 0, 0, 0, 0, 0, 1, 0, 0, 0]].concat(), // another api key
    ] {
        let mut stream = TcpStream::connect(&addr).await.unwrap();
        stream.write_all(&frame).await.unwrap();
        let mut buf = [0u8; 16];
        let read = tokio::time::timeout(WAIT_MAX, stream.read(&mut buf))
            .await
            .expect("the server closes");
        assert!(
            matches!(read, Ok(0) | Err(_)),
            "a bad frame is answered by closing"
        );
    }

    assert_eq!(
        node.quorum
            .write(vec![b"still fine".to_vec()])
            .await
            .map(|_| ()),
        Ok(())
    );
    assert_eq!(node.sm.values(), vec![b"still fine".to_vec()]);
    node.stop().await;
}

#[tokio::test]
async fn bad_configuration_is_refused() {
    let root = tempfile::tempdir().unwrap();
    let sm: Arc<dyn StateMachine> = Arc::new(VecSm::default());
    let voters = BTreeMap::from([(1u64, "127.0.0.1:1".to_string())]);
    let mut no_voters = config(1, &voters, "", root.path(), 10);
    no_voters.voters.clear();
    let mut unknown = config(9, &voters, "", root.path(), 10);
    unknown.advertised_addr.clear();
    let mut timeouts = config(1, &voters, "", root.path(), 10);
    timeouts.heartbeat_interval_ms = 500;
    for bad in [no_voters, unknown, timeouts] {
        assert!(matches!(
            Quorum::start(bad, sm.clone()).await,
            Err(QuorumError::Config(_))
        ));
    }
}

/// openraft's own conformance suite for storage implementations, run against the metadata log store and the
/// state machine bridge.
struct SuiteBuilder;

impl
    openraft::testing::StoreBuilder<
        types::TypeConfig,
        log_store::LogStore,
        snapshot::SmStore,
        tempfile::TempDir,
    > for SuiteBuilder
{
    async fn build(
        &self,
    ) -> Result<(tempfile::TempDir, log_store::LogStore, snapshot::SmStore), types::StorageError>
    {
        let dir = tempfile::tempdir().expect("a temp dir");
        let fail = |e: String| {
            types::StorageError::from(openraft::StorageIOError::write(openraft::AnyError::error(
                e,
            )))
        };
        let log = log_store::LogStore::open(dir.path(), 1 << 20).map_err(fail)?;
        let sm = snapshot::SmStore::open(dir.path(), Arc::new(VecSm::default())).map_err(fail)?;
        Ok((dir, log, sm))
    }
}

#[test]
fn openraft_storage_suite_passes() {
    openraft::testing::Suite::test_all(SuiteBuilder).expect("openraft's storage suite");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appended_entries_survive_an_unclean_stop() {
    use openraft::storage::{RaftLogStorage, RaftLogStorageExt};
    use openraft::{CommittedLeaderId, EntryPayload, LogId, RaftLogReader, Vote};
    let dir = tempfile::tempdir().unwrap();
    let entries: Vec<types::Entry> = (0..5u64)
        .map(|i| types::Entry {
            log_id: LogId::new(CommittedLeaderId::new(2, 1), i),
            payload: if i == 0 {
                EntryPayload::Blank
            } else {
                EntryPayload::Normal(vec![record(i as usize); i as usize])
            },
        })
        .collect();
    {
        let mut store = log_store::LogStore::open(dir.path(), 1 << 20).unwrap();
        store.blocking_append(entries.clone()).await.unwrap();
        store.save_vote(&Vote::new_committed(2, 1)).await.unwrap();
        // Dropped without close(): no clean-shutdown mark, as after kill -9.
    }
    let mut store = log_store::LogStore::open(dir.path(), 1 << 20).unwrap();
    assert_eq!(
        store.read_vote().await.unwrap(),
        Some(Vote::new_committed(2, 1))
    );
    assert_eq!(
        store.get_log_state().await.unwrap().last_log_id,
        Some(entries[4].log_id)
    );
    assert_eq!(store.try_get_log_entries(0..5).await.unwrap(), entries);
    // Kafka offsets count records: entry i starts after the records of the entries before it.
    assert!(store.try_get_log_entries(2..4).await.unwrap() == entries[2..4]);
    // Empty and inverted ranges hold nothing, and never panic.
    assert!(store.try_get_log_entries(3..3).await.unwrap().is_empty());
    #[allow(clippy::reversed_empty_ranges)]
    let inverted = store.try_get_log_entries(4..2).await.unwrap();
    assert!(inverted.is_empty());
    store.purge(entries[1].log_id).await.unwrap();
    store.truncate(entries[3].log_id).await.unwrap();
    drop(store);
    let mut store = log_store::LogStore::open(dir.path(), 1 << 20).unwrap();
    let state = store.get_log_state().await.unwrap();
    assert_eq!(
        (state.last_purged_log_id, state.last_log_id),
        (Some(entries[1].log_id), Some(entries[2].log_id))
    );
    assert_eq!(
        store.try_get_log_entries(0..10).await.unwrap(),
        entries[2..3]
    );
}

/// Few entries with many records each (a 100,000-partition cluster's entries hold thousands): the bytes applied,
/// not only the entry count, take a snapshot, so the log replayed at start-up stays bounded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_is_taken_after_enough_bytes_in_few_entries() {
    let root = tempfile::tempdir().unwrap();
    let (listener, addr) = bind_any().await;
    let voters: BTreeMap<u64, String> = [(1u64, addr.clone())].into();
    let node = start_node(
        QuorumConfig {
            snapshot_every_bytes: 16 * 1024,
            ..config(1, &voters, &addr, root.path(), 1_000_000)
        },
        listener,
    )
    .await;
    let dir = root.path().join("node-1").join(METADATA_LOG_DIR);
    let has_snapshot = || {
        std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| e.ok())
            .any(|e| e.file_name().to_string_lossy().ends_with(".checkpoint"))
    };
    wait_for("the sole voter to lead", || {
        node.quorum.is_leader().then_some(())
    })
    .await;
    let mut expected = Vec::new();
    for entry in 0..4 {
        let records: Vec<Vec<u8>> = (0..8)
            .map(|i| vec![b'a' + (entry * 8 + i) as u8 % 26; 1024])
            .collect();
        expected.extend(records.iter().cloned());
        node.quorum.write(records).await.expect("write");
        if entry == 0 {
            assert!(!has_snapshot(), "8 KiB applied: below the threshold");
        }
    }
    wait_applied(&node, &expected).await;
    wait_for(
        "a snapshot file after 32 KiB of records in 4 entries",
        || has_snapshot().then_some(()),
    )
    .await;
    node.stop().await;
}
