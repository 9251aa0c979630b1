//! The web console's JSON API (docs/http-api.md) over real HTTP against a real broker: sessions and CSRF,
//! paged topic and group lists, topic changes through the Kafka admin APIs, produce and browse, offset resets
//! checked with OffsetFetch, and (with SASL and an authorizer) SCRAM login and ACL-filtered lists.

use std::net::SocketAddr;
use std::time::Duration;

use annal_broker::BrokerConfig;
use annal_client::Client;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// One HTTP answer.
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// A browser, as far as the API is concerned: a cookie and a CSRF token.
struct Browser {
    addr: SocketAddr,
    cookie: Option<String>,
    csrf: Option<String>,
}

impl Browser {
    fn new(addr: SocketAddr) -> Browser {
        Browser {
            addr,
            cookie: None,
            csrf: None,
        }
    }

    async fn raw(&self, method: &str, path: &str, extra: &[(&str, &str)], body: Option<&str>) -> Answer {
        let mut s = tokio::net::TcpStream::connect(self.addr).await.unwrap();
        let mut req = format!("{method} {path} HTTP/1.1\r\nhost: {}\r\nconnection: close\r\n", self.addr);
        if let Some(c) = &self.cookie {
            req.push_str(&format!("cookie: annal_session={c}\r\n"));
        }
        for (k, v) in extra {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        let body = body.unwrap_or("");
        if !body.is_empty() || method != "GET" {
            req.push_str(&format!("content-type: application/json\r\ncontent-length: {}\r\n", body.len()));
        }
        req.push_str("\r\n");
        req.push_str(body);
        s.write_all(req.as_bytes()).await.unwrap();
        let mut out = Vec::new();
        tokio::time::timeout(Duration::from_secs(30), s.read_to_end(&mut out))
            .await
            .expect("HTTP answer in time")
            .unwrap();
        let text = String::from_utf8(out).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
        let status = head[9..12].parse().unwrap();
        let headers = head
            .lines()
            .skip(1)
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
            .collect();
        Answer {
            status,
            headers,
            body: body.to_string(),
        }
    }

    async fn get(&self, path: &str) -> Answer {
        self.raw("GET", path, &[], None).await
    }

    /// A change, with the session's CSRF token and a same-origin Origin.
    async fn send(&self, method: &str, path: &str, body: Option<Value>) -> Answer {
        let origin = format!("http://{}", self.addr);
        let csrf = self.csrf.clone().unwrap_or_default();
        let body = body.map(|b| b.to_string());
        self.raw(
            method,
            path,
            &[("x-csrf-token", &csrf), ("origin", &origin)],
            body.as_deref(),
        )
        .await
    }

    /// GET /v1/session: takes the cookie and the CSRF token.
    async fn open_session(&mut self) -> Value {
        let a = self.get("/v1/session").await;
        assert_eq!(a.status, 200, "{}", a.body);
        let cookie = a.header("set-cookie").expect("a session cookie").to_string();
        assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"), "{cookie}");
        let value = cookie.split(';').next().unwrap().split_once('=').unwrap().1.to_string();
        self.cookie = Some(value);
        let v = a.json();
        self.csrf = Some(v["csrf_token"].as_str().unwrap().to_string());
        v
    }
}

struct TestBroker {
    kafka: Vec<(String, SocketAddr)>,
    http: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    served: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
    _dir: tempfile::TempDir,
}

impl TestBroker {
    async fn start(extra: &[&str]) -> TestBroker {
        let dir = tempfile::tempdir().unwrap();
        let mut overrides: Vec<String> = vec![
            "http.listen=127.0.0.1:0".into(),
            "group.initial.rebalance.delay.ms=0".into(),
            "offsets.topic.num.partitions=2".into(),
            "offsets.topic.replication.factor=1".into(),
        ];
        overrides.extend(extra.iter().map(|s| s.to_string()));
        let config = BrokerConfig::load(None, &overrides, Some(dir.path().to_path_buf()), Some("127.0.0.1:0".into()))
            .unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let started = annal_broker::start(config, listener).await.unwrap();
        let http = started.http_addr().expect("the HTTP listener is bound");
        let kafka = started.listener_addrs();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let served = tokio::spawn(started.serve(async move {
            let _ = rx.await;
        }));
        let b = TestBroker {
            kafka,
            http,
            stop: Some(tx),
            served: Some(served),
            _dir: dir,
        };
        let probe = Browser::new(http);
        for _ in 0..100 {
            if probe.get("/readyz").await.status == 200 {
                return b;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("/readyz never answered 200");
    }

    fn kafka(&self, listener: &str) -> String {
        self.kafka
            .iter()
            .find(|(n, _)| n == listener)
            .unwrap_or_else(|| panic!("no listener {listener}: {:?}", self.kafka))
            .1
            .to_string()
    }

    async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        tokio::time::timeout(Duration::from_secs(30), self.served.take().unwrap())
            .await
            .expect("broker stops")
            .unwrap()
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_csrf_overview_and_topic_lists() {
    let broker = TestBroker::start(&[]).await;
    let mut web = Browser::new(broker.http);
    let s = web.open_session().await;
    assert_eq!(s["login_required"], false, "{s}");
    assert_eq!(s["authenticated"], false, "{s}");

    // CSRF: no token, a wrong token, a foreign Origin: all refused, and nothing is created.
    let body = json!({"name": "csrf-victim", "partitions": 1}).to_string();
    let no_token = web.raw("POST", "/v1/topics", &[], Some(&body)).await;
    assert_eq!((no_token.status, no_token.json()["code"].clone()), (403, json!("CSRF")), "{}", no_token.body);
    let wrong = web.raw("POST", "/v1/topics", &[("x-csrf-token", "nope")], Some(&body)).await;
    assert_eq!(wrong.status, 403);
    let csrf = web.csrf.clone().unwrap();
    let foreign = web
        .raw("POST", "/v1/topics", &[("x-csrf-token", &csrf), ("origin", "http://evil.example")], Some(&body))
        .await;
    assert_eq!(foreign.status, 403, "{}", foreign.body);
    let stranger = Browser::new(broker.http);
    assert_eq!(stranger.raw("POST", "/v1/topics", &[("x-csrf-token", &csrf)], Some(&body)).await.status, 403);

    // 30 topics: t-00..t-29, partitions 1..=3, t-07 with records.
    for i in 0..30 {
        let a = web
            .send("POST", "/v1/topics", Some(json!({"name": format!("t-{i:02}"), "partitions": i % 3 + 1})))
            .await;
        assert_eq!(a.status, 201, "{}", a.body);
    }
    let mut client = Client::connect(&broker.kafka("PLAINTEXT")).await.unwrap();
    let meta = client.topic("t-07").await.unwrap();
    let records: Vec<annal_client::OutgoingRecord> = (0..5)
        .map(|i| annal_client::OutgoingRecord {
            key: None,
            value: Some(format!("v{i}").into_bytes().into()),
            headers: Vec::new(),
            timestamp: annal_broker::now_ms(),
        })
        .collect();
    let batch = annal_client::encode_batch(&records, kafka_protocol::records::Compression::None).unwrap();
    client.produce(&meta, vec![(0, batch)], -1, 5000).await.unwrap();
    assert!(web.get("/v1/topics").await.json().as_array().is_some(), "without page= the array stays");

    let page = web.get("/v1/topics?page=2&page_size=7&q=T-&internal=false").await.json();
    assert_eq!(page["total"], 30, "{page}");
    let names: Vec<&str> = page["items"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["t-07", "t-08", "t-09", "t-10", "t-11", "t-12", "t-13"]);
    let by_records = web.get("/v1/topics?page=1&page_size=1&sort=-records").await.json();
    assert_eq!(by_records["items"][0]["name"], "t-07", "{by_records}");
    assert_eq!(by_records["items"][0]["records"], 5, "{by_records}");
    let by_partitions = web.get("/v1/topics?page=1&page_size=50&sort=-partitions&q=t-2").await.json();
    let counts: Vec<i64> =
        by_partitions["items"].as_array().unwrap().iter().map(|t| t["partitions"].as_i64().unwrap()).collect();
    assert_eq!(by_partitions["total"], 10);
    assert!(counts.windows(2).all(|w| w[0] >= w[1]) && counts[0] == 3, "{counts:?}");
    let past_end = web.get("/v1/topics?page=99&page_size=10").await.json();
    assert_eq!(past_end["items"], json!([]));
    for bad in ["page=0", "page_size=501", "page=-1", "page=99999999999999999999999", "sort=bogus", "internal=maybe"] {
        let a = web.get(&format!("/v1/topics?{bad}")).await;
        assert_eq!(a.status, 400, "{bad}: {}", a.body);
        assert!(a.json()["error"].as_str().is_some());
    }

    let o = web.get("/v1/overview").await.json();
    let me = o["this_broker"].clone();
    assert_eq!(o["controller_id"], me, "a single node is its own controller: {o}");
    assert_eq!(o["brokers"][0]["node_id"], me, "{o}");
    assert_eq!(o["brokers"].as_array().unwrap().len(), 1, "{o}");
    assert_eq!(o["brokers"][0]["is_controller"], true, "{o}");
    assert_eq!(o["topics"], 30, "{o}");
    assert_eq!(o["partitions"], 60, "{o}");
    assert_eq!(o["offline_partitions"], 0);
    assert!(o["disk"][0]["total_bytes"].as_u64().unwrap() > 0, "{o}");
    assert_eq!(o["ready"], true);

    let d = web.get("/v1/topics/t-07").await.json();
    assert_eq!(d["partitions"][0]["high_watermark"], 5, "{d}");
    assert_eq!(d["partitions"][0]["leader"], me, "{d}");
    assert!(d["configs"].as_array().unwrap().iter().any(|c| c["name"] == "retention.ms"), "{d}");
    let missing = web.get("/v1/topics/no-such-topic").await;
    assert_eq!((missing.status, missing.json()["code"].clone()), (404, json!("UNKNOWN_TOPIC_OR_PARTITION")), "{}", missing.body);
    let invalid = web.get("/v1/topics/bad%20name").await;
    assert_eq!(invalid.status, 400, "{}", invalid.body);

    drop(client);
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_describe_alter_grow_delete() {
    let broker = TestBroker::start(&[]).await;
    let mut web = Browser::new(broker.http);
    web.open_session().await;
    let created = web
        .send("POST", "/v1/topics", Some(json!({"name": "life", "partitions": 2, "configs": {"retention.ms": "3600000"}})))
        .await;
    assert_eq!(created.status, 201, "{}", created.body);
    let d = created.json();
    assert_eq!(d["partitions"].as_array().unwrap().len(), 2, "{d}");
    let retention = |d: &Value| {
        d.as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == "retention.ms")
            .cloned()
            .unwrap()
    };
    assert_eq!(retention(&d["configs"])["value"], "3600000", "{d}");
    let again = web.send("POST", "/v1/topics", Some(json!({"name": "life", "partitions": 1}))).await;
    assert_eq!((again.status, again.json()["code"].clone()), (409, json!("TOPIC_ALREADY_EXISTS")), "{}", again.body);
    let dry = web.send("POST", "/v1/topics", Some(json!({"name": "dry", "partitions": 1, "validate_only": true}))).await;
    assert_eq!(dry.status, 200, "{}", dry.body);
    assert_eq!(web.get("/v1/topics/dry").await.status, 404, "validate_only creates nothing");
    let bad_config = web
        .send("POST", "/v1/topics", Some(json!({"name": "badcfg", "partitions": 1, "configs": {"retention.ms": "soon"}})))
        .await;
    assert_eq!(bad_config.status, 400, "{}", bad_config.body);
    assert_eq!(bad_config.json()["code"], "INVALID_CONFIG", "{}", bad_config.body);

    let altered = web
        .send("PATCH", "/v1/topics/life/configs", Some(json!({"set": {"retention.ms": "7200000", "cleanup.policy": "compact"}})))
        .await;
    assert_eq!(altered.status, 200, "{}", altered.body);
    assert_eq!(retention(&altered.json())["value"], "7200000");
    let deleted = web.send("PATCH", "/v1/topics/life/configs", Some(json!({"delete": ["retention.ms"]}))).await;
    assert_eq!(deleted.status, 200, "{}", deleted.body);
    assert_eq!(retention(&deleted.json())["default"], true, "{}", deleted.body);

    let grown = web.send("POST", "/v1/topics/life/partitions", Some(json!({"count": 4}))).await;
    assert_eq!(grown.status, 200, "{}", grown.body);
    assert_eq!(grown.json()["partitions"].as_array().unwrap().len(), 4);
    let shrink = web.send("POST", "/v1/topics/life/partitions", Some(json!({"count": 2}))).await;
    assert_eq!(shrink.status, 400, "{}", shrink.body);
    assert_eq!(shrink.json()["code"], "INVALID_PARTITIONS", "{}", shrink.body);

    let unconfirmed = web.send("DELETE", "/v1/topics/life", None).await;
    assert_eq!(unconfirmed.status, 400, "{}", unconfirmed.body);
    let wrong = web.send("DELETE", "/v1/topics/life?confirm=lif", None).await;
    assert_eq!(wrong.status, 400);
    assert_eq!(web.send("DELETE", "/v1/topics/life?confirm=life", None).await.status, 204);
    let mut gone = false;
    for _ in 0..50 {
        if web.get("/v1/topics/life").await.status == 404 {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(gone, "the deleted topic is not described any more");

    // Bad input: answered with 400s and the error shape, never a panic.
    for body in [
        "{not json",
        "[]",
        r#"{"name": "x", "partitions": 99999999999999999999}"#,
        r#"{"name": "x", "partitions": -5}"#,
        r#"{"name": "x", "replication_factor": 0}"#,
        r#"{"name": "", "partitions": 1}"#,
        r#"{"name": "a/b", "partitions": 1}"#,
        r#"{"name": "x", "unknown_field": 1}"#,
    ] {
        let csrf = web.csrf.clone().unwrap();
        let a = web.raw("POST", "/v1/topics", &[("x-csrf-token", &csrf)], Some(body)).await;
        assert_eq!(a.status, 400, "{body}: {}", a.body);
        assert!(a.json()["error"].is_string(), "{body}: {}", a.body);
    }
    let neg = web.send("POST", "/v1/topics/nope/partitions", Some(json!({"count": -1}))).await;
    assert_eq!(neg.status, 400);
    let unknown = web.send("POST", "/v1/topics/nope/partitions", Some(json!({"count": 3}))).await;
    assert_eq!(unknown.status, 404, "{}", unknown.body);
    broker.stop().await;
}
