//! Topics, configs, data and producer ids survive a clean restart and a kill -9 of a broker process.

use crate::common;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use common::*;
use kafka_protocol::messages::*;

/// Runs a broker in a child process (this test binary re-executed) so the parent can SIGKILL it.
/// Only active when the parent sets ANNAL_TEST_CHILD_DATA_DIR.
#[test]
fn broker_child_process() {
    let Ok(dir) = std::env::var("ANNAL_TEST_CHILD_DATA_DIR") else {
        return;
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async move {
        let config = annal_broker::BrokerConfig::load(
            None,
            &[],
            Some(dir.into()),
            Some("127.0.0.1:0".into()),
        )
        .unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        println!("ANNAL_CHILD_PORT={}", listener.local_addr().unwrap().port());
        annal_broker::run_with_listener(config, listener, std::future::pending())
            .await
            .unwrap();
    });
}

fn spawn_child(dir: &Path) -> (Child, SocketAddr) {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "persistence::broker_child_process",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("ANNAL_TEST_CHILD_DATA_DIR", dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let port: u16 = loop {
        let line = lines
            .next()
            .expect("child exited before listening")
            .unwrap();
        // libtest prints "test broker_child_process ... " on the same line first.
        if let Some(at) = line.find("ANNAL_CHILD_PORT=") {
            break line[at + "ANNAL_CHILD_PORT=".len()..]
                .trim()
                .parse()
                .unwrap();
        }
    };
    std::thread::spawn(move || for _ in lines {});
    (child, SocketAddr::from(([127, 0, 0, 1], port)))
}

async fn describe_retention(c: &mut Client, topic: &str) -> String {
    let req = DescribeConfigsRequest::default().with_resources(vec![
        describe_configs_request::DescribeConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(s(topic))
            .with_configuration_keys(Some(vec![s("retention.ms")])),
    ]);
    c.call(&req, 4).await.results[0].configs[0]
        .value
        .as_ref()
        .unwrap()
        .to_string()
}

async fn new_producer_id(c: &mut Client) -> i64 {
    let req = InitProducerIdRequest::default()
        .with_transactional_id(None)
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    c.call(&req, 4).await.producer_id.0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clean_restart_keeps_everything() {
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(dir.path(), &[]).await;
    let mut c = broker.client().await;
    create_topic(&mut c, "keep", 2, &[("retention.ms", "123456")]).await;
    let id = topic_id(&mut c, "keep").await;
    for i in 0..10 {
        assert_eq!(
            produce(
                &mut c,
                "keep",
                i % 2,
                batch(&[&format!("v{i}")], 1_700_000_000_000),
                1,
                9
            )
            .await
            .0,
            0
        );
    }
    let pid = new_producer_id(&mut c).await;
    let cluster = c
        .call(&DescribeClusterRequest::default(), 1)
        .await
        .cluster_id
        .to_string();
    drop(c);
    broker.stop().await.unwrap();
    // KIP-966: the stop was clean and says at which broker epoch, for the next registration.
    let marker: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join(".kafka_cleanshutdown")).unwrap(),
    )
    .unwrap();
    assert_eq!(marker["version"], "0");
    let epoch: i64 = marker["broker_epoch"].as_str().unwrap().parse().unwrap();
    assert!(epoch >= 0, "{marker}");

    // Left by a crash during a topic delete: removed at start. Not ours: left alone.
    std::fs::create_dir(dir.path().join("gone-0")).unwrap();
    std::fs::write(dir.path().join("gone-0/00000000000000000000.log"), b"").unwrap();
    std::fs::create_dir(dir.path().join("photos-2026")).unwrap();
    std::fs::write(dir.path().join("photos-2026/beach.jpg"), b"jpeg").unwrap();

    let broker = TestBroker::start(dir.path(), &[]).await;
    let mut c = broker.client().await;
    assert_eq!(topic_id(&mut c, "keep").await, id); // answered, so startup is done
                                                    // Taken at start: a crash of this process must not pass for a clean stop.
    assert!(!dir.path().join(".kafka_cleanshutdown").exists());
    assert!(!dir.path().join("gone-0").exists());
    assert!(dir.path().join("photos-2026/beach.jpg").exists());
    assert_eq!(describe_retention(&mut c, "keep").await, "123456");
    assert_eq!(
        c.call(&DescribeClusterRequest::default(), 1)
            .await
            .cluster_id
            .to_string(),
        cluster
    );
    let vals = values(
        fetch(&mut c, "keep", 0, 0, 12, 10)
            .await
            .records
            .as_ref()
            .unwrap(),
    );
    assert_eq!(vals.len(), 5);
    assert!(new_producer_id(&mut c).await > pid);
    broker.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_keeps_acknowledged_records() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, addr) = spawn_child(dir.path());
    let mut c = Client::connect(addr).await;
    create_topic(&mut c, "crash", 1, &[("retention.ms", "999999")]).await;
    let mut acked = Vec::new();
    for i in 0..50 {
        let v = format!("r{i}");
        let (err, base) = produce(&mut c, "crash", 0, batch(&[&v], 1_700_000_000_000), -1, 9).await;
        assert_eq!(err, 0);
        acked.push((base, v));
    }
    let pid = new_producer_id(&mut c).await;
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    assert!(
        !dir.path().join(".kafka_cleanshutdown").exists(),
        "a killed broker has not shown a clean stop"
    );

    let (mut child, addr) = spawn_child(dir.path());
    let mut c = Client::connect(addr).await;
    assert_eq!(describe_retention(&mut c, "crash").await, "999999");
    let got = values(
        fetch(&mut c, "crash", 0, 0, 12, 10)
            .await
            .records
            .as_ref()
            .unwrap(),
    );
    assert_eq!(got, acked);
    assert!(
        new_producer_id(&mut c).await > pid,
        "producer ids never reused after a crash"
    );
    // Still writable after recovery.
    assert_eq!(
        produce(
            &mut c,
            "crash",
            0,
            batch(&["after"], 1_700_000_000_000),
            -1,
            9
        )
        .await,
        (0, 50)
    );
    child.kill().unwrap();
    child.wait().unwrap();
}
