//! The web console's JSON API (docs/http-api.md) over real HTTP against a real broker: sessions and CSRF,
//! paged topic and group lists, topic changes through the Kafka admin APIs, produce and browse, offset resets
//! checked with OffsetFetch, and (with SASL and an authorizer) SCRAM login and ACL-filtered lists.

use std::collections::BTreeMap;
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

    async fn raw(
        &self,
        method: &str,
        path: &str,
        extra: &[(&str, &str)],
        body: Option<&str>,
    ) -> Answer {
        let mut s = tokio::net::TcpStream::connect(self.addr).await.unwrap();
        let mut req = format!(
            "{method} {path} HTTP/1.1\r\nhost: {}\r\nconnection: close\r\n",
            self.addr
        );
        if let Some(c) = &self.cookie {
            req.push_str(&format!("cookie: annal_session={c}\r\n"));
        }
        for (k, v) in extra {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        let body = body.unwrap_or("");
        if !body.is_empty() || method != "GET" {
            req.push_str(&format!(
                "content-type: application/json\r\ncontent-length: {}\r\n",
                body.len()
            ));
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
        let cookie = a
            .header("set-cookie")
            .expect("a session cookie")
            .to_string();
        assert!(
            cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
            "{cookie}"
        );
        let value = cookie
            .split(';')
            .next()
            .unwrap()
            .split_once('=')
            .unwrap()
            .1
            .to_string();
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
        let config = BrokerConfig::load(
            None,
            &overrides,
            Some(dir.path().to_path_buf()),
            Some("127.0.0.1:0".into()),
        )
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
    assert_eq!(
        (no_token.status, no_token.json()["code"].clone()),
        (403, json!("CSRF")),
        "{}",
        no_token.body
    );
    let wrong = web
        .raw(
            "POST",
            "/v1/topics",
            &[("x-csrf-token", "nope")],
            Some(&body),
        )
        .await;
    assert_eq!(wrong.status, 403);
    let csrf = web.csrf.clone().unwrap();
    let foreign = web
        .raw(
            "POST",
            "/v1/topics",
            &[("x-csrf-token", &csrf), ("origin", "http://evil.example")],
            Some(&body),
        )
        .await;
    assert_eq!(foreign.status, 403, "{}", foreign.body);
    let stranger = Browser::new(broker.http);
    assert_eq!(
        stranger
            .raw(
                "POST",
                "/v1/topics",
                &[("x-csrf-token", &csrf)],
                Some(&body)
            )
            .await
            .status,
        403
    );

    // 30 topics: t-00..t-29, partitions 1..=3, t-07 with records.
    for i in 0..30 {
        let a = web
            .send(
                "POST",
                "/v1/topics",
                Some(json!({"name": format!("t-{i:02}"), "partitions": i % 3 + 1})),
            )
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
    let batch =
        annal_client::encode_batch(&records, kafka_protocol::records::Compression::None).unwrap();
    client
        .produce(&meta, vec![(0, batch)], -1, 5000)
        .await
        .unwrap();
    assert!(
        web.get("/v1/topics").await.json().as_array().is_some(),
        "without page= the array stays"
    );

    let page = web
        .get("/v1/topics?page=2&page_size=7&q=T-&internal=false")
        .await
        .json();
    assert_eq!(page["total"], 30, "{page}");
    let names: Vec<&str> = page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["t-07", "t-08", "t-09", "t-10", "t-11", "t-12", "t-13"]
    );
    let by_records = web
        .get("/v1/topics?page=1&page_size=1&sort=-records")
        .await
        .json();
    assert_eq!(by_records["items"][0]["name"], "t-07", "{by_records}");
    assert_eq!(by_records["items"][0]["records"], 5, "{by_records}");
    let by_partitions = web
        .get("/v1/topics?page=1&page_size=50&sort=-partitions&q=t-2")
        .await
        .json();
    let counts: Vec<i64> = by_partitions["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["partitions"].as_i64().unwrap())
        .collect();
    assert_eq!(by_partitions["total"], 10);
    assert!(
        counts.windows(2).all(|w| w[0] >= w[1]) && counts[0] == 3,
        "{counts:?}"
    );
    let past_end = web.get("/v1/topics?page=99&page_size=10").await.json();
    assert_eq!(past_end["items"], json!([]));
    for bad in [
        "page=0",
        "page_size=501",
        "page=-1",
        "page=99999999999999999999999",
        "sort=bogus",
        "internal=maybe",
    ] {
        let a = web.get(&format!("/v1/topics?{bad}")).await;
        assert_eq!(a.status, 400, "{bad}: {}", a.body);
        assert!(a.json()["error"].as_str().is_some());
    }

    let o = web.get("/v1/overview").await.json();
    let me = o["this_broker"].clone();
    assert_eq!(
        o["controller_id"], me,
        "a single node is its own controller: {o}"
    );
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
    assert!(
        d["configs"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["name"] == "retention.ms"),
        "{d}"
    );
    let missing = web.get("/v1/topics/no-such-topic").await;
    assert_eq!(
        (missing.status, missing.json()["code"].clone()),
        (404, json!("UNKNOWN_TOPIC_OR_PARTITION")),
        "{}",
        missing.body
    );
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
        .send(
            "POST",
            "/v1/topics",
            Some(json!({"name": "life", "partitions": 2, "configs": {"retention.ms": "3600000"}})),
        )
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
    let again = web
        .send(
            "POST",
            "/v1/topics",
            Some(json!({"name": "life", "partitions": 1})),
        )
        .await;
    assert_eq!(
        (again.status, again.json()["code"].clone()),
        (409, json!("TOPIC_ALREADY_EXISTS")),
        "{}",
        again.body
    );
    let dry = web
        .send(
            "POST",
            "/v1/topics",
            Some(json!({"name": "dry", "partitions": 1, "validate_only": true})),
        )
        .await;
    assert_eq!(dry.status, 200, "{}", dry.body);
    assert_eq!(
        web.get("/v1/topics/dry").await.status,
        404,
        "validate_only creates nothing"
    );
    let bad_config = web
        .send(
            "POST",
            "/v1/topics",
            Some(json!({"name": "badcfg", "partitions": 1, "configs": {"retention.ms": "soon"}})),
        )
        .await;
    assert_eq!(bad_config.status, 400, "{}", bad_config.body);
    assert_eq!(
        bad_config.json()["code"],
        "INVALID_CONFIG",
        "{}",
        bad_config.body
    );

    let altered = web
        .send(
            "PATCH",
            "/v1/topics/life/configs",
            Some(json!({"set": {"retention.ms": "7200000", "cleanup.policy": "compact"}})),
        )
        .await;
    assert_eq!(altered.status, 200, "{}", altered.body);
    assert_eq!(retention(&altered.json())["value"], "7200000");
    let deleted = web
        .send(
            "PATCH",
            "/v1/topics/life/configs",
            Some(json!({"delete": ["retention.ms"]})),
        )
        .await;
    assert_eq!(deleted.status, 200, "{}", deleted.body);
    assert_eq!(
        retention(&deleted.json())["default"],
        true,
        "{}",
        deleted.body
    );

    let grown = web
        .send(
            "POST",
            "/v1/topics/life/partitions",
            Some(json!({"count": 4})),
        )
        .await;
    assert_eq!(grown.status, 200, "{}", grown.body);
    assert_eq!(grown.json()["partitions"].as_array().unwrap().len(), 4);
    let shrink = web
        .send(
            "POST",
            "/v1/topics/life/partitions",
            Some(json!({"count": 2})),
        )
        .await;
    assert_eq!(shrink.status, 400, "{}", shrink.body);
    assert_eq!(
        shrink.json()["code"],
        "INVALID_PARTITIONS",
        "{}",
        shrink.body
    );

    let unconfirmed = web.send("DELETE", "/v1/topics/life", None).await;
    assert_eq!(unconfirmed.status, 400, "{}", unconfirmed.body);
    let wrong = web
        .send("DELETE", "/v1/topics/life?confirm=lif", None)
        .await;
    assert_eq!(wrong.status, 400);
    assert_eq!(
        web.send("DELETE", "/v1/topics/life?confirm=life", None)
            .await
            .status,
        204
    );
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
        let a = web
            .raw("POST", "/v1/topics", &[("x-csrf-token", &csrf)], Some(body))
            .await;
        assert_eq!(a.status, 400, "{body}: {}", a.body);
        assert!(a.json()["error"].is_string(), "{body}: {}", a.body);
    }
    let neg = web
        .send(
            "POST",
            "/v1/topics/nope/partitions",
            Some(json!({"count": -1})),
        )
        .await;
    assert_eq!(neg.status, 400);
    let unknown = web
        .send(
            "POST",
            "/v1/topics/nope/partitions",
            Some(json!({"count": 3})),
        )
        .await;
    assert_eq!(unknown.status, 404, "{}", unknown.body);
    broker.stop().await;
}

fn record(
    key: Option<&[u8]>,
    value: &[u8],
    headers: &[(&str, &[u8])],
    timestamp: i64,
) -> annal_client::OutgoingRecord {
    annal_client::OutgoingRecord {
        key: key.map(|k| k.to_vec().into()),
        value: Some(value.to_vec().into()),
        headers: headers
            .iter()
            .map(|(k, v)| (k.to_string(), Some(v.to_vec().into())))
            .collect(),
        timestamp,
    }
}

async fn produce(
    client: &mut Client,
    topic: &str,
    partition: i32,
    records: &[annal_client::OutgoingRecord],
) {
    let meta = client.topic(topic).await.unwrap();
    let batch =
        annal_client::encode_batch(records, kafka_protocol::records::Compression::None).unwrap();
    let r = client
        .produce(&meta, vec![(partition, batch)], -1, 5000)
        .await
        .unwrap();
    assert_eq!(r[0].error_code, 0);
}

fn offsets(v: &Value) -> Vec<(i64, i64)> {
    v["messages"]
        .as_array()
        .unwrap_or_else(|| panic!("no messages: {v}"))
        .iter()
        .map(|m| {
            (
                m["partition"].as_i64().unwrap(),
                m["offset"].as_i64().unwrap(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn produce_and_browse() {
    let broker = TestBroker::start(&[]).await;
    let mut web = Browser::new(broker.http);
    web.open_session().await;
    assert_eq!(
        web.send(
            "POST",
            "/v1/topics",
            Some(json!({"name": "msgs", "partitions": 2}))
        )
        .await
        .status,
        201
    );
    let mut client = Client::connect(&broker.kafka("PLAINTEXT")).await.unwrap();
    // Partition 0: 20 records a second apart, n-0 .. n-19, every fifth with a header trace=yes.
    let t0 = annal_broker::now_ms() - 100_000;
    let records: Vec<_> = (0..20)
        .map(|i| {
            let headers: &[(&str, &[u8])] = if i % 5 == 0 {
                &[("trace", b"yes")]
            } else {
                &[]
            };
            record(
                Some(format!("key-{i}").as_bytes()),
                format!("n-{i}").as_bytes(),
                headers,
                t0 + i * 1000,
            )
        })
        .collect();
    produce(&mut client, "msgs", 0, &records).await;
    // Partition 1: a binary value, through the Kafka client.
    produce(
        &mut client,
        "msgs",
        1,
        &[record(None, &[0xde, 0xad, 0xbe, 0xef], &[], t0 + 50_000)],
    )
    .await;

    // Produce through the console: JSON, with headers, to a chosen partition; and by key.
    let p = web
        .send(
            "POST",
            "/v1/topics/msgs/messages",
            Some(json!({"partition": 1, "key": null, "value": "{\"a\": [1, 2]}", "headers": [{"key": "h", "value": "v"}]})),
        )
        .await;
    assert_eq!(p.status, 200, "{}", p.body);
    assert_eq!(p.json(), json!({"partition": 1, "offset": 1}));

    let newest = web
        .get("/v1/topics/msgs/messages?partition=0&from=newest&limit=3")
        .await
        .json();
    assert_eq!(offsets(&newest), [(0, 19), (0, 18), (0, 17)], "{newest}");
    assert_eq!(
        newest["messages"][0]["value"],
        json!({"encoding": "utf8", "text": "n-19"})
    );
    assert_eq!(newest["messages"][0]["key"]["text"], "key-19");
    let oldest = web
        .get("/v1/topics/msgs/messages?partition=0&from=oldest&limit=2")
        .await
        .json();
    assert_eq!(offsets(&oldest), [(0, 0), (0, 1)], "{oldest}");
    assert_eq!(
        oldest["messages"][0]["headers"],
        json!([{"key": "trace", "value": {"encoding": "utf8", "text": "yes"}}])
    );
    let at = web
        .get("/v1/topics/msgs/messages?partition=0&from=offset&offset=5&limit=2")
        .await
        .json();
    assert_eq!(offsets(&at), [(0, 5), (0, 6)]);
    let ts = t0 + 10_000;
    let by_time = web
        .get(&format!(
            "/v1/topics/msgs/messages?partition=0&from=timestamp&timestamp_ms={ts}&limit=1"
        ))
        .await
        .json();
    assert_eq!(offsets(&by_time), [(0, 10)], "{by_time}");

    // Filters: value n-1 matches n-1 and n-10..n-19 (11 records), newest first.
    let filtered = web
        .get("/v1/topics/msgs/messages?partition=0&value=n-1&limit=50")
        .await
        .json();
    let got = offsets(&filtered);
    assert_eq!(got.len(), 11, "{filtered}");
    assert_eq!(got[0], (0, 19));
    assert_eq!(got[10], (0, 1));
    assert_eq!(filtered["scanned"], 20);
    assert_eq!(filtered["truncated"], false);
    let by_header = web
        .get("/v1/topics/msgs/messages?partition=0&header=trace&from=oldest")
        .await
        .json();
    assert_eq!(
        offsets(&by_header),
        [(0, 0), (0, 5), (0, 10), (0, 15)],
        "{by_header}"
    );
    let by_key = web.get("/v1/topics/msgs/messages?key=key-7").await.json();
    assert_eq!(offsets(&by_key), [(0, 7)], "{by_key}");
    let bounded = web
        .get("/v1/topics/msgs/messages?partition=0&from=oldest&value=nothing-matches&max_scan=5")
        .await
        .json();
    assert_eq!(
        (bounded["scanned"].clone(), bounded["truncated"].clone()),
        (json!(5), json!(true)),
        "{bounded}"
    );

    // Partition 1 and all partitions: binary as hex, JSON pretty-printed.
    let p1 = web
        .get("/v1/topics/msgs/messages?partition=1&from=oldest")
        .await
        .json();
    assert_eq!(
        p1["messages"][0]["value"],
        json!({"encoding": "hex", "text": "deadbeef"}),
        "{p1}"
    );
    assert_eq!(p1["messages"][1]["value"]["encoding"], "json", "{p1}");
    assert_eq!(
        p1["messages"][1]["value"]["text"],
        "{\n  \"a\": [\n    1,\n    2\n  ]\n}"
    );
    assert_eq!(p1["messages"][1]["headers"][0]["key"], "h");
    let hex_filter = web.get("/v1/topics/msgs/messages?value=adbe").await.json();
    assert_eq!(
        offsets(&hex_filter),
        [(1, 0)],
        "binary values are searched in their hex form: {hex_filter}"
    );
    let all = web.get("/v1/topics/msgs/messages?limit=100").await.json();
    assert_eq!(offsets(&all).len(), 22, "{all}");
    let keyed = web
        .send(
            "POST",
            "/v1/topics/msgs/messages",
            Some(json!({"key": "user-7", "value": "hello"})),
        )
        .await;
    assert_eq!(keyed.status, 200, "{}", keyed.body);
    let expected = annal_client::partitioner::partition_for_key(b"user-7", 2) as i64;
    assert_eq!(
        keyed.json()["partition"],
        expected,
        "the key picks the partition as the Java client does"
    );

    for bad in [
        "limit=0",
        "limit=1001",
        "max_scan=100001",
        "from=sideways",
        "from=offset",
        "partition=-1",
        "offset=abc&from=offset",
    ] {
        let a = web.get(&format!("/v1/topics/msgs/messages?{bad}")).await;
        assert_eq!(a.status, 400, "{bad}: {}", a.body);
    }
    assert_eq!(
        web.get("/v1/topics/msgs/messages?partition=7").await.status,
        404
    );
    assert_eq!(web.get("/v1/topics/nope/messages").await.status, 404);
    let bad_partition = web
        .send(
            "POST",
            "/v1/topics/msgs/messages",
            Some(json!({"partition": 9, "value": "x"})),
        )
        .await;
    assert_eq!(bad_partition.status, 404, "{}", bad_partition.body);
    let bad_body = web
        .send(
            "POST",
            "/v1/topics/msgs/messages",
            Some(json!({"value": 12})),
        )
        .await;
    assert_eq!(bad_body.status, 400, "{}", bad_body.body);
    // A record of 512 KiB fits the body limit; the answer is still bounded (the text is cut for display).
    let big = "x".repeat(512 * 1024);
    let a = web
        .send(
            "POST",
            "/v1/topics/msgs/messages",
            Some(json!({"partition": 0, "value": big})),
        )
        .await;
    assert_eq!(a.status, 200, "{}", a.body);
    let shown = web
        .get("/v1/topics/msgs/messages?partition=0&limit=1")
        .await
        .json();
    assert_eq!(shown["messages"][0]["size_bytes"], 512 * 1024);
    assert_eq!(shown["messages"][0]["value"]["cut"], true);
    drop(client);
    broker.stop().await;
}

async fn committed(client: &mut Client, group: &str, topic: &str) -> BTreeMap<i32, i64> {
    client
        .fetch_offsets(group)
        .await
        .unwrap()
        .get(topic)
        .map(|ps| {
            ps.iter()
                .filter_map(|(p, o)| Some((*p, o.as_ref().ok()?.offset)))
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn groups_lists_offset_resets_and_delete() {
    let broker = TestBroker::start(&[]).await;
    let mut web = Browser::new(broker.http);
    web.open_session().await;
    assert_eq!(
        web.send(
            "POST",
            "/v1/topics",
            Some(json!({"name": "work", "partitions": 2}))
        )
        .await
        .status,
        201
    );
    let mut client = Client::connect(&broker.kafka("PLAINTEXT")).await.unwrap();
    let now = annal_broker::now_ms();
    for p in 0..2 {
        let records: Vec<_> = (0..10)
            .map(|i| record(None, format!("r{i}").as_bytes(), &[], now - 10_000 + i))
            .collect();
        produce(&mut client, "work", p, &records).await;
    }
    for (group, at) in [("idle", 2), ("busy", 9), ("caught-up", 10)] {
        let codes = client
            .commit_offsets(group, "work", &BTreeMap::from([(0, at), (1, at)]))
            .await
            .unwrap();
        assert!(codes.values().all(|c| *c == 0));
    }
    assert!(
        web.get("/v1/groups").await.json().as_array().is_some(),
        "without page= the array stays"
    );
    let page = web.get("/v1/groups?page=1&sort=-lag").await.json();
    assert_eq!(page["total"], 3, "{page}");
    let order: Vec<&str> = page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["group"].as_str().unwrap())
        .collect();
    assert_eq!(order, ["idle", "busy", "caught-up"], "{page}");
    assert_eq!(page["items"][0]["lag_records_sum"], 16);
    assert_eq!(
        page["items"][0]["coordinator"],
        page["items"][0]["coordinator"].as_i64().unwrap()
    );
    let filtered = web.get("/v1/groups?q=U&page_size=1").await.json();
    assert_eq!(
        (
            filtered["total"].clone(),
            filtered["items"][0]["group"].clone()
        ),
        (json!(2), json!("busy")),
        "{filtered}"
    );
    let empty_state = web.get("/v1/groups?state=Stable").await.json();
    assert_eq!(empty_state["total"], 0, "{empty_state}");
    assert_eq!(web.get("/v1/groups?sort=-nope").await.status, 400);
    // The topic list names the groups on each topic of the page, with their lag.
    let topics = web.get("/v1/topics?q=work").await.json();
    let mut groups: Vec<(String, i64)> = topics["items"][0]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            (
                g["group"].as_str().unwrap().to_string(),
                g["lag"].as_i64().unwrap(),
            )
        })
        .collect();
    groups.sort();
    assert_eq!(
        groups,
        [
            ("busy".to_string(), 2),
            ("caught-up".to_string(), 0),
            ("idle".to_string(), 16)
        ],
        "{topics}"
    );
    assert_eq!(topics["items"][0]["groups_total"], 3, "{topics}");

    let detail = web.get("/v1/groups/idle").await.json();
    assert_eq!(detail["lag_records_sum"], 16, "{detail}");
    assert_eq!(detail["member_list"], json!([]), "{detail}");
    assert!(detail["coordinator"].is_i64(), "{detail}");
    assert_eq!(web.get("/v1/groups/nobody").await.status, 404);

    // Dry run: answers the plan, commits nothing.
    let dry = web
        .send(
            "POST",
            "/v1/groups/idle/offsets",
            Some(json!({"topic": "work", "to": "earliest", "dry_run": true})),
        )
        .await;
    assert_eq!(dry.status, 200, "{}", dry.body);
    let rows = dry.json()["partitions"].clone();
    assert_eq!(
        rows[0],
        json!({"topic": "work", "partition": 0, "current_offset": 2, "new_offset": 0, "lag_before": 8, "lag_after": 10}),
        "{rows}"
    );
    assert_eq!(
        committed(&mut client, "idle", "work").await,
        BTreeMap::from([(0, 2), (1, 2)]),
        "a dry run changes nothing"
    );
    // For real: to offset 5 on partition 1 only, then a shift back by 1 on both, then beyond the end (clamped).
    let real = web
        .send(
            "POST",
            "/v1/groups/idle/offsets",
            Some(json!({"topic": "work", "partitions": [1], "to": "offset", "offset": 5})),
        )
        .await;
    assert_eq!(real.status, 200, "{}", real.body);
    assert_eq!(
        committed(&mut client, "idle", "work").await,
        BTreeMap::from([(0, 2), (1, 5)])
    );
    let shifted = web
        .send(
            "POST",
            "/v1/groups/idle/offsets",
            Some(json!({"to": "shift", "shift": -1})),
        )
        .await;
    assert_eq!(shifted.status, 200, "{}", shifted.body);
    assert_eq!(
        committed(&mut client, "idle", "work").await,
        BTreeMap::from([(0, 1), (1, 4)])
    );
    let clamped = web
        .send(
            "POST",
            "/v1/groups/idle/offsets",
            Some(json!({"to": "offset", "offset": 1_000_000})),
        )
        .await;
    assert_eq!(clamped.status, 200, "{}", clamped.body);
    assert_eq!(
        committed(&mut client, "idle", "work").await,
        BTreeMap::from([(0, 10), (1, 10)])
    );
    let by_time = web
        .send(
            "POST",
            "/v1/groups/idle/offsets",
            Some(json!({"to": "timestamp", "timestamp_ms": now - 10_000 + 3})),
        )
        .await;
    assert_eq!(by_time.status, 200, "{}", by_time.body);
    assert_eq!(
        committed(&mut client, "idle", "work").await,
        BTreeMap::from([(0, 3), (1, 3)])
    );

    // An active member: the reset is refused with 409 (a dry run still answers), so is the delete.
    let mut member_client = Client::connect(&broker.kafka("PLAINTEXT")).await.unwrap();
    let member = annal_client::GroupConsumer::join(
        &mut member_client,
        "busy",
        &["work".to_string()],
        Default::default(),
    )
    .await
    .unwrap();
    let refused = web
        .send(
            "POST",
            "/v1/groups/busy/offsets",
            Some(json!({"to": "earliest"})),
        )
        .await;
    assert_eq!(
        (refused.status, refused.json()["code"].clone()),
        (409, json!("NON_EMPTY_GROUP")),
        "{}",
        refused.body
    );
    assert_eq!(
        committed(&mut client, "busy", "work").await,
        BTreeMap::from([(0, 9), (1, 9)])
    );
    let dry = web
        .send(
            "POST",
            "/v1/groups/busy/offsets",
            Some(json!({"to": "earliest", "dry_run": true})),
        )
        .await;
    assert_eq!(dry.status, 200, "{}", dry.body);
    let busy = web.get("/v1/groups/busy").await.json();
    assert_eq!(busy["member_list"].as_array().unwrap().len(), 1, "{busy}");
    assert_eq!(
        busy["member_list"][0]["assignment"][0]["topic"], "work",
        "{busy}"
    );
    let not_empty = web
        .send("DELETE", "/v1/groups/busy?confirm=busy", None)
        .await;
    assert_eq!(not_empty.status, 409, "{}", not_empty.body);
    member.leave(&mut member_client).await.unwrap();

    for bad in [
        json!({"to": "sideways"}),
        json!({"to": "offset"}),
        json!({"to": "earliest", "partitions": [-1], "topic": "work"}),
        json!({"to": "earliest", "partitions": [0]}),
    ] {
        let a = web
            .send("POST", "/v1/groups/idle/offsets", Some(bad.clone()))
            .await;
        assert_eq!(a.status, 400, "{bad}: {}", a.body);
    }
    let csrf = web.csrf.clone().unwrap();
    let huge = r#"{"to": "shift", "shift": 99999999999999999999999}"#;
    let a = web
        .raw(
            "POST",
            "/v1/groups/idle/offsets",
            &[("x-csrf-token", &csrf)],
            Some(huge),
        )
        .await;
    assert_eq!(a.status, 400, "{}", a.body);
    assert_eq!(
        web.send("DELETE", "/v1/groups/idle", None).await.status,
        400,
        "delete needs confirm"
    );
    assert_eq!(
        web.send("DELETE", "/v1/groups/idle?confirm=idle", None)
            .await
            .status,
        204
    );
    assert_eq!(web.get("/v1/groups/idle").await.status, 404);

    // A topic read by more groups than the list names inline: the ones with the most lag, and the count.
    for i in 0..10 {
        let codes = client
            .commit_offsets(
                &format!("reader-{i:02}"),
                "work",
                &BTreeMap::from([(0, 0), (1, 0)]),
            )
            .await
            .unwrap();
        assert!(codes.values().all(|c| *c == 0));
    }
    let topics = web.get("/v1/topics?q=work").await.json();
    let inline = topics["items"][0]["groups"].as_array().unwrap();
    assert_eq!(inline.len(), 10, "{topics}");
    assert_eq!(topics["items"][0]["groups_total"], 12, "{topics}");
    let lags: Vec<i64> = inline.iter().map(|g| g["lag"].as_i64().unwrap()).collect();
    assert!(
        lags.windows(2).all(|w| w[0] >= w[1]),
        "most lag first: {topics}"
    );
    assert!(
        inline.iter().all(|g| g["group"] != "caught-up"),
        "the group without lag is the one left out: {topics}"
    );
    drop(client);
    broker.stop().await;
}

const JAAS_ADMIN: &str = "listener.name.sasl_plaintext.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username=\"admin\" password=\"admin-secret\" user_admin=\"admin-secret\";";

/// Logs a browser in; the answer's status and body.
async fn login(web: &Browser, username: &str, password: &str, mechanism: &str) -> Answer {
    web.send(
        "POST",
        "/v1/session",
        Some(json!({"username": username, "password": password, "mechanism": mechanism})),
    )
    .await
}

/// With SASL and an authorizer: the console requires a login; a super user (PLAIN) creates a SCRAM user and an
/// ACL through the console; that user then logs in with SCRAM and sees only what its ACL lets it describe.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scram_login_users_and_acls() {
    let broker = TestBroker::start(&[
        "listeners=PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        JAAS_ADMIN,
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users=User:admin",
    ])
    .await;
    let mut admin = Browser::new(broker.http);
    let s = admin.open_session().await;
    assert_eq!(
        (s["login_required"].clone(), s["authenticated"].clone()),
        (json!(true), json!(false)),
        "{s}"
    );
    let before = admin.get("/v1/topics?page=1").await;
    assert_eq!(before.status, 401, "{}", before.body);
    let wrong = login(&admin, "admin", "not-the-password", "PLAIN").await;
    assert_eq!(
        (wrong.status, wrong.json()["code"].clone()),
        (401, json!("SASL_AUTHENTICATION_FAILED")),
        "{}",
        wrong.body
    );
    let ok = login(&admin, "admin", "admin-secret", "PLAIN").await;
    assert_eq!(ok.status, 200, "{}", ok.body);
    assert_eq!(ok.json()["principal"], "User:admin");

    // A SCRAM user, created through the console.
    let bad = admin
        .send(
            "POST",
            "/v1/users",
            Some(json!({"name": "alice", "password": "x", "mechanism": "PLAIN"})),
        )
        .await;
    assert_eq!(bad.status, 400, "{}", bad.body);
    let created = admin
        .send(
            "POST",
            "/v1/users",
            Some(json!({"name": "alice", "password": "alice-secret", "mechanism": "SCRAM-SHA-512", "iterations": 4096})),
        )
        .await;
    assert_eq!(created.status, 201, "{}", created.body);
    let users = admin.get("/v1/users").await;
    assert_eq!(users.status, 200, "{}", users.body);
    assert_eq!(
        users.json(),
        json!([{"name": "alice", "mechanisms": ["SCRAM-SHA-512"], "iterations": [4096]}])
    );

    for topic in ["orders", "payroll"] {
        let a = admin
            .send(
                "POST",
                "/v1/topics",
                Some(json!({"name": topic, "partitions": 1})),
            )
            .await;
        assert_eq!(a.status, 201, "{}", a.body);
    }
    // Alice may describe "orders" (literal) and everything under "pay" is denied to her explicitly.
    let acl = json!({"principal": "User:alice", "host": "*", "operation": "DESCRIBE", "permission": "ALLOW",
                     "resource_type": "TOPIC", "resource_name": "orders", "pattern_type": "LITERAL"});
    let a = admin.send("POST", "/v1/acls", Some(acl.clone())).await;
    assert_eq!(a.status, 201, "{}", a.body);
    assert_eq!(a.json(), acl);
    let deny = json!({"principal": "User:alice", "host": "*", "operation": "ALL", "permission": "DENY",
                      "resource_type": "TOPIC", "resource_name": "pay", "pattern_type": "PREFIXED"});
    assert_eq!(
        admin
            .send("POST", "/v1/acls", Some(deny.clone()))
            .await
            .status,
        201
    );
    let no_principal_type = admin
        .send("POST", "/v1/acls", Some(json!({"principal": "alice", "operation": "READ", "permission": "ALLOW",
                                               "resource_type": "TOPIC", "resource_name": "orders"})))
        .await;
    assert_eq!(no_principal_type.status, 400, "{}", no_principal_type.body);

    let listed = admin.get("/v1/acls?principal=User:alice").await;
    assert_eq!(listed.status, 200, "{}", listed.body);
    assert_eq!(listed.json(), json!([acl, deny]));
    // The topic page shows the ACLs that apply to it (MATCH: literal, prefixed, wildcard).
    let payroll = admin.get("/v1/topics/payroll").await;
    assert_eq!(payroll.status, 200, "{}", payroll.body);
    assert_eq!(payroll.json()["acls"], json!([deny]));

    // Alice logs in with the SCRAM credential the console made, and sees only "orders".
    let mut alice = Browser::new(broker.http);
    alice.open_session().await;
    let wrong = login(&alice, "alice", "alice-secret", "SCRAM-SHA-256").await;
    assert_eq!(
        wrong.status, 401,
        "a SCRAM-SHA-256 login without that credential: {}",
        wrong.body
    );
    let ok = login(&alice, "alice", "alice-secret", "SCRAM-SHA-512").await;
    assert_eq!(ok.status, 200, "{}", ok.body);
    let page = alice.get("/v1/topics?page=1").await;
    assert_eq!(page.status, 200, "{}", page.body);
    let names: Vec<String> = page.json()["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, vec!["orders".to_string()]);
    let hidden = alice.get("/v1/topics/payroll").await;
    assert!(
        hidden.status == 403 || hidden.status == 404,
        "{}",
        hidden.body
    );
    // Alice may not manage ACLs or users (no ALTER/DESCRIBE on the cluster).
    let denied = alice.get("/v1/acls").await;
    assert_eq!(
        (denied.status, denied.json()["code"].clone()),
        (403, json!("CLUSTER_AUTHORIZATION_FAILED")),
        "{}",
        denied.body
    );
    let denied = alice
        .send("POST", "/v1/acls", Some(json!({"principal": "User:alice", "operation": "ALL", "permission": "ALLOW",
                                               "resource_type": "TOPIC", "resource_name": "payroll"})))
        .await;
    assert_eq!(denied.status, 403, "{}", denied.body);

    // Removing: an unbounded filter is refused; the deny ACL by exact filter; then the user.
    let everything = admin.send("DELETE", "/v1/acls", None).await;
    assert_eq!(everything.status, 400, "{}", everything.body);
    let removed = admin
        .send("DELETE", "/v1/acls?principal=User:alice&resource_type=TOPIC&resource_name=pay&pattern_type=PREFIXED", None)
        .await;
    assert_eq!(removed.status, 200, "{}", removed.body);
    assert_eq!(removed.json(), json!({"deleted": [deny]}));
    assert_eq!(
        admin.get("/v1/acls?principal=User:alice").await.json(),
        json!([acl])
    );
    let gone = admin.send("DELETE", "/v1/users/alice", None).await;
    assert_eq!(gone.status, 204, "{}", gone.body);
    assert_eq!(admin.get("/v1/users").await.json(), json!([]));
    assert_eq!(
        admin.send("DELETE", "/v1/users/alice", None).await.status,
        404
    );
    let mut late = Browser::new(broker.http);
    late.open_session().await;
    assert_eq!(
        login(&late, "alice", "alice-secret", "SCRAM-SHA-512")
            .await
            .status,
        401
    );
    broker.stop().await;
}
