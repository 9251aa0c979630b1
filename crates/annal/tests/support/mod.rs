//! The test harness shared by the end-to-end tests: a broker per test (our own `annal serve`, or the external
//! one named by ANNAL_TEST_BOOTSTRAP) and helpers to run the `annal` binary against it.
#![allow(dead_code)] // each test file uses a different part

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;

pub const ANNAL: &str = env!("CARGO_BIN_EXE_annal");

/// A broker for one test: our own `annal serve`, or the external one named by ANNAL_TEST_BOOTSTRAP.
pub struct Broker {
    pub addr: String,
    /// The broker's HTTP listener (`http.listen`), passed to the CLI as ANNAL_HTTP; `None` for an external one.
    pub http: Option<String>,
    child: Option<Child>,
    /// The data directory and the directory holding the broker's log, removed on drop.
    _dirs: Option<(tempfile::TempDir, tempfile::TempDir)>,
}

impl Broker {
    pub fn start() -> Broker {
        if let Ok(addr) = std::env::var("ANNAL_TEST_BOOTSTRAP") {
            return Broker {
                addr,
                http: std::env::var("ANNAL_TEST_HTTP").ok(),
                child: None,
                _dirs: None,
            };
        }
        let data = tempfile::tempdir().expect("temp dir");
        // The broker's log goes to a file: a pipe nobody reads would block it once full.
        let logs = tempfile::tempdir().expect("temp dir");
        let log_path = logs.path().join("broker.log");
        // `free_port` only says a port was free a moment ago: a test running alongside may bind it first. The
        // broker then exits ("cannot listen"), and a probe may even have reached the other process; start again
        // on other ports.
        let mut attempt = 0;
        let (addr, http, child) = loop {
            attempt += 1;
            let addr = format!("127.0.0.1:{}", free_port());
            // Each test broker has its own HTTP listener: the default port would be shared by every test at once.
            let http = format!("127.0.0.1:{}", free_port());
            let log = std::fs::File::create(&log_path).expect("broker log file");
            let mut child = Command::new(ANNAL)
                .args(["serve", "--data-dir"])
                .arg(data.path())
                .args(["--listen", &addr])
                .args(["--override", &format!("http.listen={http}")])
                .stdout(log.try_clone().expect("clone log handle"))
                .stderr(log)
                .spawn()
                .expect("spawn annal serve");
            let deadline = Instant::now() + Duration::from_secs(30);
            let exited = loop {
                if let Some(status) = child.try_wait().expect("poll annal serve") {
                    break Some(status);
                }
                // Listening, and still running a moment later (a probe answered by another process while ours
                // fails to bind would otherwise pass).
                if TcpStream::connect(&addr).is_ok() {
                    std::thread::sleep(Duration::from_millis(100));
                    match child.try_wait().expect("poll annal serve") {
                        Some(status) => break Some(status),
                        None => break None,
                    }
                }
                assert!(
                    Instant::now() < deadline,
                    "annal serve did not listen on {addr} within 30s"
                );
                std::thread::sleep(Duration::from_millis(50));
            };
            let Some(status) = exited else {
                break (addr, http, child);
            };
            let err = std::fs::read_to_string(&log_path).unwrap_or_default();
            if err.contains("cannot listen") && attempt < 5 {
                continue;
            }
            panic!("annal serve exited with {status} before listening on {addr}: {err}");
        };
        Broker {
            addr,
            http: Some(http),
            child: Some(child),
            _dirs: Some((data, logs)),
        }
    }

    /// The data directory of our own broker; `None` for an external one.
    pub fn data_dir(&self) -> Option<&std::path::Path> {
        self._dirs.as_ref().map(|(data, _)| data.path())
    }

    /// Runs `annal ARGS -b ADDR` with `stdin`, returning its output.
    pub fn run(&self, args: &[&str], stdin: &str) -> Output {
        self.run_env(args, stdin, &[])
    }

    /// `run` with extra environment variables.
    pub fn run_env(&self, args: &[&str], stdin: &str, env: &[(&str, &str)]) -> Output {
        let mut child = Command::new(ANNAL)
            .args(args)
            .envs(env.iter().copied())
            .args(["-b", &self.addr])
            .env("ANNAL_HTTP", self.http.as_deref().unwrap_or("127.0.0.1:1"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn annal");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(stdin.as_bytes())
            .unwrap();
        wait_with_timeout(child, Duration::from_secs(60), args)
    }

    /// Runs a command that must succeed; returns its stdout.
    pub fn ok(&self, args: &[&str], stdin: &str) -> String {
        let out = self.run(args, stdin);
        assert!(
            out.status.success(),
            "`annal {}` failed ({}):\nstdout: {}\nstderr: {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("utf-8 output")
    }

    /// Runs a command that must fail; returns its stderr.
    pub fn fails(&self, args: &[&str], stdin: &str) -> String {
        let out = self.run(args, stdin);
        assert!(
            !out.status.success(),
            "`annal {}` should have failed but printed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8_lossy(&out.stderr).into_owned()
    }

    /// Best-effort removal of a test's topic, so runs against a shared broker do not pile up topics.
    pub fn delete_quietly(&self, topic: &str) {
        let _ = self.run(&["topic", "delete", topic], "");
    }

    pub fn consume_json(&self, args: &[&str]) -> Vec<Value> {
        let mut all = vec!["consume"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--format", "json"]);
        self.ok(&all, "")
            .lines()
            .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
            .collect()
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

pub fn wait_with_timeout(mut child: Child, timeout: Duration, args: &[&str]) -> Output {
    let deadline = Instant::now() + timeout;
    while child.try_wait().expect("poll child").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!(
                "`annal {}` did not finish within {timeout:?}",
                args.join(" ")
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("collect output")
}

/// A loopback port that is free now, from below the kernel's ephemeral range: a port from binding
/// 127.0.0.1:0 is an ephemeral one, which any outgoing connection (a client's, a node's to its peers) may take as
/// its local port before the broker it was meant for binds it. Below the range a port is taken only by a bind to
/// it by name. No port is handed out twice by one test process (tests run in parallel threads).
pub fn free_port() -> u16 {
    use rand::Rng;
    static HANDED_OUT: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    const FLOOR: u16 = 10_000;
    let ceiling = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32_768); // Linux's default
    assert!(
        ceiling > FLOOR + 100,
        "the ephemeral port range starts at {ceiling}: no room below it for test brokers"
    );
    let mut handed_out = HANDED_OUT.lock().unwrap();
    let mut rng = rand::thread_rng();
    for _ in 0..1000 {
        let port = rng.gen_range(FLOOR..ceiling);
        if handed_out.contains(&port) || TcpListener::bind(("127.0.0.1", port)).is_err() {
            continue;
        }
        handed_out.push(port);
        return port;
    }
    panic!("no free loopback port found in {FLOOR}..{ceiling}");
}

pub fn unique_topic(prefix: &str) -> String {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!(
        "{prefix}-{}-{nanos}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}
