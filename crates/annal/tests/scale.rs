//! More partitions than file descriptors: a real `annal serve` whose RLIMIT_NOFILE (soft and hard) is 512
//! holds 1,000 partitions (three files each, far more than 512 / 3), creates them, takes a record in every one,
//! serves them back, survives kill -9 and serves them all again after recovery. Segment files go through the
//! engine's open-file budget (`log.open.files.max`, sized from the limit), so the descriptors stay bounded.

mod support;

use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use annal_client::{Client, OutgoingRecord, TopicMetadata};
use bytes::Bytes;
use kafka_protocol::records::Compression;
use support::{free_port, ANNAL};

const FD_LIMIT: u64 = 512;
const PARTITIONS: i32 = 1000;

/// `annal serve` on `data` with RLIMIT_NOFILE = `FD_LIMIT` (soft and hard, so the broker cannot raise it).
fn serve(data: &std::path::Path, log: &std::path::Path, extra: &[&str]) -> (Child, String) {
    let addr = format!("127.0.0.1:{}", free_port());
    let http = format!("127.0.0.1:{}", free_port());
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap();
    let mut command = Command::new(ANNAL);
    command
        .args(["serve", "--data-dir"])
        .arg(data)
        .args(["--listen", &addr])
        .args(["--override", &format!("http.listen={http}")])
        .stdout(out.try_clone().unwrap())
        .stderr(out);
    for o in extra {
        command.args(["--override", o]);
    }
    // SAFETY: setrlimit is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        command.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: FD_LIMIT,
                rlim_max: FD_LIMIT,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = command.spawn().expect("spawn annal serve");
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::net::TcpStream::connect(&addr).is_err() {
        if let Some(status) = child.try_wait().unwrap() {
            panic!(
                "annal serve exited with {status}: {}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        assert!(Instant::now() < deadline, "annal serve did not listen");
        std::thread::sleep(Duration::from_millis(50));
    }
    (child, addr)
}

fn open_fds(child: &Child) -> usize {
    std::fs::read_dir(format!("/proc/{}/fd", child.id()))
        .map(|d| d.count())
        .unwrap_or(0)
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

fn value(p: i32) -> Bytes {
    Bytes::from(format!("record of partition {p}"))
}

/// Leadership still settling after a restart (the controller bumps leader epochs as the broker comes back):
/// NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH. Refresh the metadata and retry.
const SETTLING: [i16; 3] = [6, 74, 76];

/// Fetches offset 0 of every partition and checks each holds its one record.
async fn read_all(client: &mut Client, topic: &TopicMetadata) {
    let mut topic = topic.clone();
    let mut missing: BTreeMap<i32, i64> = (0..PARTITIONS).map(|p| (p, 0)).collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !missing.is_empty() {
        assert!(
            Instant::now() < deadline,
            "{} partitions unread",
            missing.len()
        );
        let fetched = client.fetch(&topic, &missing, 100, 4096).await.unwrap();
        if fetched.iter().any(|p| SETTLING.contains(&p.error_code)) {
            tokio::time::sleep(Duration::from_millis(200)).await;
            topic = client.topic(&topic.name).await.unwrap();
        }
        for part in fetched {
            if SETTLING.contains(&part.error_code) {
                continue;
            }
            assert_eq!(part.error_code, 0, "partition {}", part.partition);
            let Some(records) = part.records.filter(|r| !r.is_empty()) else {
                continue;
            };
            let decoded = annal_client::decode_fetched(records, 0).unwrap();
            let values: Vec<_> = decoded.records.iter().map(|r| r.value.clone()).collect();
            assert_eq!(values, vec![Some(value(part.partition))]);
            missing.remove(&part.partition);
        }
    }
}

#[test]
fn a_broker_with_more_partitions_than_descriptors_serves_them_all_across_kill_9() {
    let data = tempfile::tempdir().unwrap();
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("broker.log");
    let started = Instant::now();
    let (mut child, addr) = serve(data.path(), &log, &[]);
    eprintln!("listening after {:?}", started.elapsed());
    block_on(async {
        let mut client = Client::connect(&addr).await.unwrap();
        client
            .create_topic("scale", Some(PARTITIONS), Some(1), &[])
            .await
            .unwrap();
        let topic = client.created_topic("scale").await.unwrap();
        assert_eq!(topic.partitions.len(), PARTITIONS as usize);
        eprintln!("created after {:?}", started.elapsed());
        let batches = (0..PARTITIONS)
            .map(|p| {
                let record = OutgoingRecord {
                    key: None,
                    value: Some(value(p)),
                    headers: Vec::new(),
                    timestamp: 1_700_000_000_000,
                };
                (
                    p,
                    annal_client::encode_batch(&[record], Compression::None).unwrap(),
                )
            })
            .collect();
        for result in client.produce(&topic, batches, -1, 30_000).await.unwrap() {
            assert_eq!(
                (result.error_code, result.base_offset),
                (0, 0),
                "partition {}: {:?}",
                result.partition,
                result.error_message
            );
        }
        eprintln!("produced after {:?}", started.elapsed());
        read_all(&mut client, &topic).await;
    });
    eprintln!("read after {:?}", started.elapsed());
    let fds = open_fds(&child);
    assert!(fds > 0 && (fds as u64) < FD_LIMIT, "{fds} descriptors open");
    eprintln!("{PARTITIONS} partitions served with {fds} open descriptors (limit {FD_LIMIT})");

    // kill -9, then recovery must open every partition within the same limit.
    child.kill().unwrap();
    child.wait().unwrap();
    let started = Instant::now();
    let (mut child, addr) = serve(data.path(), &log, &[]);
    eprintln!("restarted, listening after {:?}", started.elapsed());
    block_on(async {
        let mut client = Client::connect(&addr).await.unwrap();
        let topic = client.created_topic("scale").await.unwrap();
        eprintln!("restarted and ready after {:?}", started.elapsed());
        read_all(&mut client, &topic).await;
    });
    eprintln!("read again after {:?}", started.elapsed());
    let fds = open_fds(&child);
    assert!(
        (fds as u64) < FD_LIMIT,
        "{fds} descriptors open after recovery"
    );
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        !text.contains("Too many open files") && !text.contains("out of file descriptors"),
        "{text}"
    );
    child.kill().unwrap();
    child.wait().unwrap();
}

/// UNKNOWN_SERVER_ERROR: what an out-of-descriptors failure used to reach clients as.
const UNKNOWN: i16 = -1;

#[test]
fn out_of_descriptors_gives_a_clear_error_and_no_half_created_topic() {
    let data = tempfile::tempdir().unwrap();
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("broker.log");
    let (mut child, addr) = serve(data.path(), &log, &[]);
    block_on(async {
        let mut client = Client::connect(&addr).await.unwrap();
        // Idle connections take every descriptor the broker has left (its accept loop backs off on EMFILE).
        let mut hogs = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        while (open_fds(&child) as u64) < FD_LIMIT - 1 && Instant::now() < deadline {
            for _ in 0..16 {
                if let Ok(s) = tokio::net::TcpStream::connect(&addr).await {
                    hogs.push(s);
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(
            (open_fds(&child) as u64) >= FD_LIMIT - 2,
            "{} descriptors",
            open_fds(&child)
        );

        // Either the forward to the controller cannot connect (the topic is not created: a retriable error that
        // names the cause), or the controller commits the topic and this broker cannot open its logs (it installs
        // none of them and logs the limits to raise). Never UNKNOWN, never part of a topic.
        let created = client.create_topic("blocked", Some(50), Some(1), &[]).await;
        eprintln!("CreateTopics while out of descriptors: {created:?}");
        match &created {
            Err(e) => {
                let message = format!("{e:#}");
                assert!(
                    message.contains("NOT_CONTROLLER") && message.contains("Too many open files"),
                    "{message}"
                );
            }
            Ok(_) => {
                let deadline = Instant::now() + Duration::from_secs(10);
                let mut text = std::fs::read_to_string(&log).unwrap();
                while !text.contains("log.open.files.max") && Instant::now() < deadline {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    text = std::fs::read_to_string(&log).unwrap();
                }
                assert!(
                    text.contains("log.open.files.max") && text.contains("ulimit -n"),
                    "the broker log names the limits: {text}"
                );
            }
        }
        let topics = client.metadata(Some(&["blocked"])).await.unwrap();
        let (code, meta) = &topics[0];
        assert_ne!(*code, UNKNOWN);
        let led = meta.partitions.iter().filter(|p| p.leader >= 0).count();
        assert!(
            led == 0 || led == 50,
            "{led} of 50 partitions: half a topic"
        );

        // Descriptors come back: the retried apply opens every log, the whole topic is served.
        drop(hogs);
        if created.is_err() {
            let deadline = Instant::now() + Duration::from_secs(30);
            while let Err(e) = client.create_topic("blocked", Some(50), Some(1), &[]).await {
                assert!(
                    Instant::now() < deadline,
                    "CreateTopics never worked again: {e:#}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        let topic = client.created_topic("blocked").await.unwrap();
        assert_eq!(topic.partitions.len(), 50);
        let batches = (0..50)
            .map(|p| {
                let record = OutgoingRecord {
                    key: None,
                    value: Some(value(p)),
                    headers: Vec::new(),
                    timestamp: 1_700_000_000_000,
                };
                (
                    p,
                    annal_client::encode_batch(&[record], Compression::None).unwrap(),
                )
            })
            .collect();
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut batches: Vec<(i32, Bytes)> = batches;
        while !batches.is_empty() {
            assert!(
                Instant::now() < deadline,
                "{} partitions never took a record",
                batches.len()
            );
            let results = client
                .produce(&topic, batches.clone(), -1, 30_000)
                .await
                .unwrap();
            for r in &results {
                assert_ne!(
                    r.error_code, UNKNOWN,
                    "partition {}: {:?}",
                    r.partition, r.error_message
                );
            }
            let done: Vec<i32> = results
                .iter()
                .filter(|r| r.error_code == 0)
                .map(|r| r.partition)
                .collect();
            batches.retain(|(p, _)| !done.contains(p));
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    child.kill().unwrap();
    child.wait().unwrap();
}
