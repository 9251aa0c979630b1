//! Security over the wire: a real broker on TLS and SASL listeners (certificates generated at test time with
//! rcgen), driven by a rustls client and raw Kafka requests. SASL PLAIN and SCRAM exchanges, wrong passwords,
//! wrong mechanisms, oversized tokens, requests before authentication, SCRAM credentials kept in the metadata
//! log across a restart, and the start-up errors of bad security settings.

use crate::common;

mod acls;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use annal_broker::config::SaslMechanism;
use annal_broker::security::scram::{salted_password, ScramClient};
use annal_broker::BrokerConfig;
use bytes::Bytes;
use common::*;
use kafka_protocol::messages::*;
use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A CA, a server certificate for localhost/127.0.0.1 and a client certificate for `CN=alice,OU=eng`.
struct Pki {
    ca_pem: String,
    /// Key and chain in one file, as Kafka's PEM `ssl.keystore.location` holds them.
    server_keystore: String,
    client_chain: Vec<rustls::pki_types::CertificateDer<'static>>,
    client_key: rustls::pki_types::PrivateKeyDer<'static>,
}

fn pki() -> Pki {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "annal-test-ca");
    let ca_cert = ca.self_signed(&ca_key).unwrap();

    let server_key = KeyPair::generate().unwrap();
    let mut server = CertificateParams::new(vec!["localhost".into(), "127.0.0.1".into()]).unwrap();
    server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    server
        .distinguished_name
        .push(DnType::CommonName, "localhost");
    let server_cert = server.signed_by(&server_key, &ca_cert, &ca_key).unwrap();

    let client_key = KeyPair::generate().unwrap();
    let mut client = CertificateParams::new(Vec::<String>::new()).unwrap();
    client.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    client
        .distinguished_name
        .push(DnType::OrganizationalUnitName, "eng");
    client.distinguished_name.push(DnType::CommonName, "alice");
    let client_cert = client.signed_by(&client_key, &ca_cert, &ca_key).unwrap();

    Pki {
        ca_pem: ca_cert.pem(),
        server_keystore: format!(
            "{}{}{}",
            server_key.serialize_pem(),
            server_cert.pem(),
            ca_cert.pem()
        ),
        client_chain: vec![client_cert.der().clone()],
        client_key: rustls::pki_types::PrivateKeyDer::Pkcs8(client_key.serialize_der().into()),
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn tls_client_config(pki: &Pki, with_cert: bool) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls_pemfile::certs(&mut pki.ca_pem.as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let b = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    Arc::new(if with_cert {
        b.with_client_auth_cert(pki.client_chain.clone(), pki.client_key.clone_key())
            .unwrap()
    } else {
        b.with_no_client_auth()
    })
}

async fn tls_connect(
    addr: SocketAddr,
    config: Arc<rustls::ClientConfig>,
) -> std::io::Result<Client> {
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let connector = tokio_rustls::TlsConnector::from(config);
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let tls = connector.connect(name, tcp).await?;
    Ok(Client::over(tls))
}

/// A broker started from `overrides`; the first broker listener is bound on 127.0.0.1:0 here, the others from
/// their own addresses (port 0 in these tests). Returns every listener's address by name.
struct SecureBroker {
    addrs: Vec<(String, SocketAddr)>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    handle: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
}

impl SecureBroker {
    async fn start(dir: &Path, overrides: &[String]) -> SecureBroker {
        let config = BrokerConfig::load(None, overrides, Some(dir.to_path_buf()), None)
            .expect("test config");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let started = annal_broker::start(config, listener).await.expect("start");
        let addrs = started.listener_addrs();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let handle = tokio::spawn(started.serve(async move {
            let _ = rx.await;
        }));
        SecureBroker {
            addrs,
            stop: Some(tx),
            handle: Some(handle),
        }
    }

    fn addr(&self, listener: &str) -> SocketAddr {
        self.addrs
            .iter()
            .find(|(n, _)| n == listener)
            .unwrap_or_else(|| panic!("no listener {listener} in {:?}", self.addrs))
            .1
    }

    async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        tokio::time::timeout(Duration::from_secs(20), self.handle.take().unwrap())
            .await
            .expect("broker stops")
            .expect("no panic")
            .expect("clean stop");
    }
}

fn overrides(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

const JAAS_PLAIN: &str = "listener.name.sasl_plaintext.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username=\"admin\" password=\"admin-secret\" user_admin=\"admin-secret\" user_alice=\"alice-secret\";";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_listener_serves_produce_and_fetch_beside_plaintext() {
    let dir = tempfile::tempdir().unwrap();
    let pki = pki();
    let keystore = dir.path().join("server.pem");
    std::fs::write(&keystore, &pki.server_keystore).unwrap();
    let broker = SecureBroker::start(
        &dir.path().join("data"),
        &overrides(&[
            "listeners=SSL://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
            "ssl.keystore.type=PEM",
            "ssl.truststore.type=PEM",
            &format!("ssl.keystore.location={}", keystore.display()),
        ]),
    )
    .await;
    let ssl = broker.addr("SSL");
    let plain = broker.addr("PLAINTEXT");

    let mut c = tls_connect(ssl, tls_client_config(&pki, false))
        .await
        .unwrap();
    create_topic(&mut c, "tls-topic", 1, &[]).await;
    let values: Vec<String> = (0..200)
        .map(|i| format!("record-{i}-{}", "x".repeat(100)))
        .collect();
    let refs: Vec<&str> = values.iter().map(String::as_str).collect();
    let (code, base) = produce(
        &mut c,
        "tls-topic",
        0,
        batch(&refs, 1_700_000_000_000),
        -1,
        9,
    )
    .await;
    assert_eq!((code, base), (0, 0));
    // Fetch goes through the copying write on TLS (sendfile cannot encrypt): the bytes are the records.
    let p = fetch(&mut c, "tls-topic", 0, 0, 16, 100).await;
    let got = common::values(p.records.as_ref().unwrap());
    assert_eq!(got.len(), 200);
    assert_eq!(got[199].1, values[199]);

    // Metadata on each listener names that listener's endpoint, as Kafka does.
    let md = c.call(&MetadataRequest::default(), 12).await;
    assert_eq!(md.brokers[0].port, ssl.port() as i32);
    let mut p = Client::connect(plain).await;
    let md = p.call(&MetadataRequest::default(), 12).await;
    assert_eq!(md.brokers[0].port, plain.port() as i32);
    // The plaintext listener still serves the same data with zero copy.
    let pd = fetch(&mut p, "tls-topic", 0, 0, 16, 100).await;
    assert_eq!(common::values(pd.records.as_ref().unwrap()).len(), 200);

    // Plaintext Kafka to the TLS port: the handshake fails and the connection closes (no answer).
    let mut raw = Client::connect(ssl).await;
    raw.send(&ApiVersionsRequest::default(), 3).await;
    assert!(raw.is_closed(Duration::from_secs(15)).await);
    // TLS to the plaintext port: closed, not answered.
    assert!(tls_connect(plain, tls_client_config(&pki, false))
        .await
        .is_err());
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_required_refuses_clients_without_a_trusted_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let pki = pki();
    let other = self::pki(); // a CA the broker does not trust
    let broker = SecureBroker::start(
        &dir.path().join("data"),
        &overrides(&[
            "listeners=SSL://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
            "listener.name.ssl.ssl.keystore.type=PEM",
            "listener.name.ssl.ssl.truststore.type=PEM",
            &format!(
                "listener.name.ssl.ssl.keystore.certificate.chain={}",
                pki.server_keystore
                    .split("-----END PRIVATE KEY-----")
                    .nth(1)
                    .unwrap()
                    .trim()
            ),
            &format!(
                "listener.name.ssl.ssl.keystore.key={}",
                pki.server_keystore
                    .split("-----BEGIN CERTIFICATE-----")
                    .next()
                    .unwrap()
                    .trim()
            ),
            &format!(
                "listener.name.ssl.ssl.truststore.certificates={}",
                pki.ca_pem.trim()
            ),
            "listener.name.ssl.ssl.client.auth=required",
        ]),
    )
    .await;
    let ssl = broker.addr("SSL");
    // With a certificate from the trusted CA: served.
    let mut c = tls_connect(ssl, tls_client_config(&pki, true))
        .await
        .unwrap();
    let v = c.call(&ApiVersionsRequest::default(), 3).await;
    assert_eq!(v.error_code, 0);
    // Without a certificate: TLS 1.3 reports the refusal on the first read, so try a request.
    let refused = async {
        let mut c = tls_connect(ssl, tls_client_config(&pki, false)).await?;
        c.send(&ApiVersionsRequest::default(), 3).await;
        Ok::<bool, std::io::Error>(c.read_frame().await.is_none())
    };
    assert!(refused.await.unwrap_or(true));
    // With a certificate the broker does not trust: refused too.
    // Trusts the broker's CA, presents the other CA's client certificate.
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls_pemfile::certs(&mut pki.ca_pem.as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let untrusted = Arc::new(
        rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_client_auth_cert(other.client_chain.clone(), other.client_key.clone_key())
            .unwrap(),
    );
    let refused = async {
        let mut c = tls_connect(ssl, untrusted).await?;
        c.send(&ApiVersionsRequest::default(), 3).await;
        Ok::<bool, std::io::Error>(c.read_frame().await.is_none())
    };
    assert!(refused.await.unwrap_or(true));
    broker.stop().await;
}

async fn handshake(c: &mut Client, mechanism: &str, version: i16) -> SaslHandshakeResponse {
    c.call(
        &SaslHandshakeRequest::default().with_mechanism(s(mechanism)),
        version,
    )
    .await
}

async fn authenticate(c: &mut Client, token: &[u8]) -> SaslAuthenticateResponse {
    c.call(
        &SaslAuthenticateRequest::default().with_auth_bytes(Bytes::copy_from_slice(token)),
        2,
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sasl_plain_follows_kafkas_rules() {
    let dir = tempfile::tempdir().unwrap();
    let broker = SecureBroker::start(
        &dir.path().join("data"),
        &overrides(&[
            "listeners=SASL_PLAINTEXT://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
            "sasl.enabled.mechanisms=PLAIN",
            "connection.failed.authentication.delay.ms=50",
            "sasl.server.max.receive.size=1024",
            JAAS_PLAIN,
        ]),
    )
    .await;
    let addr = broker.addr("SASL_PLAINTEXT");

    // Anything but ApiVersions/SaslHandshake before authentication closes the connection.
    let mut c = Client::connect(addr).await;
    let v = c.call(&ApiVersionsRequest::default(), 3).await;
    assert!(v
        .api_keys
        .iter()
        .any(|k| k.api_key == ApiKey::SaslAuthenticate as i16 && k.max_version == 2));
    c.send(&MetadataRequest::default(), 12).await;
    assert!(
        c.read_frame().await.is_none(),
        "metadata before authentication is not answered"
    );

    // A mechanism the listener does not enable: UNSUPPORTED_SASL_MECHANISM with the enabled ones, then closed.
    let mut c = Client::connect(addr).await;
    let h = handshake(&mut c, "SCRAM-SHA-256", 1).await;
    assert_eq!(h.error_code, 33);
    assert_eq!(h.mechanisms, vec![s("PLAIN")]);
    assert!(c.is_closed(Duration::from_secs(5)).await);

    // Wrong password: SASL_AUTHENTICATION_FAILED with a message, then closed.
    let mut c = Client::connect(addr).await;
    assert_eq!(handshake(&mut c, "PLAIN", 1).await.error_code, 0);
    let a = authenticate(&mut c, b"\0alice\0wrong").await;
    assert_eq!(a.error_code, 58);
    assert!(a
        .error_message
        .unwrap()
        .contains("Invalid username or password"));
    assert!(c.is_closed(Duration::from_secs(5)).await);

    // A request other than SaslAuthenticate after the handshake: closed.
    let mut c = Client::connect(addr).await;
    handshake(&mut c, "PLAIN", 1).await;
    c.send(&MetadataRequest::default(), 12).await;
    assert!(c.read_frame().await.is_none());

    // A frame over sasl.server.max.receive.size before authentication: closed before it is read.
    let mut c = Client::connect(addr).await;
    handshake(&mut c, "PLAIN", 1).await;
    let big = vec![b'a'; 4096];
    let mut token = b"\0alice\0".to_vec();
    token.extend_from_slice(&big);
    c.send(
        &SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(token)),
        2,
    )
    .await;
    assert!(c.read_frame().await.is_none());

    // The right password: authenticated, then served; a second handshake is ILLEGAL_SASL_STATE.
    let mut c = Client::connect(addr).await;
    handshake(&mut c, "PLAIN", 1).await;
    let a = authenticate(&mut c, b"\0alice\0alice-secret").await;
    assert_eq!(a.error_code, 0, "{:?}", a.error_message);
    let md = c.call(&MetadataRequest::default(), 12).await;
    assert_eq!(md.brokers[0].port, addr.port() as i32);
    assert_eq!(handshake(&mut c, "PLAIN", 1).await.error_code, 34);

    // Handshake v0: the token goes as a bare size-prefixed frame and the answer comes back the same way.
    let mut c = Client::connect(addr).await;
    assert_eq!(handshake(&mut c, "PLAIN", 0).await.error_code, 0);
    let token = b"\0admin\0admin-secret";
    c.stream
        .write_all(&(token.len() as u32).to_be_bytes())
        .await
        .unwrap();
    c.stream.write_all(token).await.unwrap();
    let mut len = [0u8; 4];
    c.stream.read_exact(&mut len).await.unwrap();
    assert_eq!(u32::from_be_bytes(len), 0);
    let md = c.call(&MetadataRequest::default(), 12).await;
    assert!(!md.brokers.is_empty());

    // On the PLAINTEXT listener the SASL APIs answer ILLEGAL_SASL_STATE, as in Kafka.
    let mut p = Client::connect(broker.addr("PLAINTEXT")).await;
    assert_eq!(handshake(&mut p, "PLAIN", 1).await.error_code, 34);
    broker.stop().await;
}

fn upsertion(
    user: &str,
    mechanism: SaslMechanism,
    password: &str,
) -> alter_user_scram_credentials_request::ScramCredentialUpsertion {
    let salt = b"annal-test-salt-0123".to_vec();
    let code = if mechanism == SaslMechanism::ScramSha256 {
        1
    } else {
        2
    };
    alter_user_scram_credentials_request::ScramCredentialUpsertion::default()
        .with_name(s(user))
        .with_mechanism(code)
        .with_iterations(4096)
        .with_salt(Bytes::from(salt.clone()))
        .with_salted_password(Bytes::from(salted_password(
            mechanism,
            password.as_bytes(),
            &salt,
            4096,
        )))
}

async fn scram_login(
    addr: SocketAddr,
    mechanism: SaslMechanism,
    user: &str,
    password: &str,
) -> Result<Client, (i16, String)> {
    let mut c = Client::connect(addr).await;
    let h = handshake(&mut c, mechanism.name(), 1).await;
    assert_eq!(h.error_code, 0);
    let mut scram = ScramClient::new(mechanism, user, password);
    let first = authenticate(&mut c, &scram.client_first()).await;
    if first.error_code != 0 {
        return Err((
            first.error_code,
            first
                .error_message
                .map(|m| m.to_string())
                .unwrap_or_default(),
        ));
    }
    let fin = scram.client_final(&first.auth_bytes).unwrap();
    let last = authenticate(&mut c, &fin).await;
    if last.error_code != 0 {
        return Err((
            last.error_code,
            last.error_message
                .map(|m| m.to_string())
                .unwrap_or_default(),
        ));
    }
    scram
        .verify_server_final(&last.auth_bytes)
        .expect("the broker proves it knows the credential");
    Ok(c)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scram_credentials_live_in_the_metadata_log() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let settings = overrides(&[
        "listeners=PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512",
    ]);
    let broker = SecureBroker::start(&data, &settings).await;
    let sasl = broker.addr("SASL_PLAINTEXT");
    let mut admin = Client::connect(broker.addr("PLAINTEXT")).await;

    // Unknown user: fails at the first message.
    let err = scram_login(sasl, SaslMechanism::ScramSha512, "alice", "alice-secret")
        .await
        .err()
        .unwrap();
    assert_eq!(err.0, 58);

    let resp = admin
        .call(
            &AlterUserScramCredentialsRequest::default().with_upsertions(vec![
                upsertion("alice", SaslMechanism::ScramSha512, "alice-secret"),
                upsertion("bob", SaslMechanism::ScramSha256, "bob-secret"),
            ]),
            0,
        )
        .await;
    assert!(resp.results.iter().all(|r| r.error_code == 0), "{resp:?}");
    // Too few iterations, and the same user twice: Kafka's errors.
    let mut weak = upsertion("carol", SaslMechanism::ScramSha256, "x");
    weak.iterations = 100;
    let resp = admin
        .call(
            &AlterUserScramCredentialsRequest::default().with_upsertions(vec![
                weak,
                upsertion("dave", SaslMechanism::ScramSha256, "x"),
                upsertion("dave", SaslMechanism::ScramSha256, "y"),
            ]),
            0,
        )
        .await;
    let codes: Vec<(String, i16)> = resp
        .results
        .iter()
        .map(|r| (r.user.to_string(), r.error_code))
        .collect();
    assert_eq!(codes, vec![("carol".into(), 93), ("dave".into(), 92)]);

    let d = admin
        .call(
            &DescribeUserScramCredentialsRequest::default().with_users(None),
            0,
        )
        .await;
    let described: Vec<(String, Vec<(i8, i32)>)> = d
        .results
        .iter()
        .map(|r| {
            (
                r.user.to_string(),
                r.credential_infos
                    .iter()
                    .map(|c| (c.mechanism, c.iterations))
                    .collect(),
            )
        })
        .collect();
    assert_eq!(
        described,
        vec![
            ("alice".into(), vec![(2, 4096)]),
            ("bob".into(), vec![(1, 4096)])
        ]
    );

    let mut c = scram_login(sasl, SaslMechanism::ScramSha512, "alice", "alice-secret")
        .await
        .unwrap();
    assert!(!c
        .call(&MetadataRequest::default(), 12)
        .await
        .brokers
        .is_empty());
    let err = scram_login(sasl, SaslMechanism::ScramSha512, "alice", "wrong")
        .await
        .err()
        .unwrap();
    assert_eq!(err.0, 58);
    assert!(err.1.contains("invalid credentials"), "{}", err.1);
    // alice has no SHA-256 credential.
    assert!(
        scram_login(sasl, SaslMechanism::ScramSha256, "alice", "alice-secret")
            .await
            .is_err()
    );
    assert!(
        scram_login(sasl, SaslMechanism::ScramSha256, "bob", "bob-secret")
            .await
            .is_ok()
    );
    drop(c);
    drop(admin);
    broker.stop().await;

    // After a restart the credentials come back from the metadata log; a deletion takes effect.
    let broker = SecureBroker::start(&data, &settings).await;
    let sasl = broker.addr("SASL_PLAINTEXT");
    assert!(
        scram_login(sasl, SaslMechanism::ScramSha512, "alice", "alice-secret")
            .await
            .is_ok()
    );
    let mut admin = Client::connect(broker.addr("PLAINTEXT")).await;
    let resp = admin
        .call(
            &AlterUserScramCredentialsRequest::default().with_deletions(vec![
                alter_user_scram_credentials_request::ScramCredentialDeletion::default()
                    .with_name(s("alice"))
                    .with_mechanism(2),
                alter_user_scram_credentials_request::ScramCredentialDeletion::default()
                    .with_name(s("nobody"))
                    .with_mechanism(2),
            ]),
            0,
        )
        .await;
    let codes: Vec<i16> = resp.results.iter().map(|r| r.error_code).collect();
    assert_eq!(codes, vec![0, 91]);
    assert!(
        scram_login(sasl, SaslMechanism::ScramSha512, "alice", "alice-secret")
            .await
            .is_err()
    );
    drop(admin);
    broker.stop().await;
}

#[test]
fn bad_security_settings_name_the_setting() {
    let load = |items: &[&str]| {
        BrokerConfig::load(
            None,
            &overrides(items),
            Some("/tmp/annal-unused".into()),
            None,
        )
        .map(drop)
        .map_err(|e| format!("{e:#}"))
    };
    for (items, want) in [
        (
            &[
                "listeners=SSL://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
                "ssl.keystore.type=PEM",
                "ssl.truststore.type=PEM",
            ][..],
            "ssl.keystore.location",
        ),
        (
            &[
                "listeners=SSL://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
                "ssl.keystore.location=/x",
            ][..],
            "ssl.keystore.type",
        ),
        (
            &["listeners=SASL_PLAINTEXT://127.0.0.1:0,PLAINTEXT://127.0.0.1:0"][..],
            "sasl.enabled.mechanisms",
        ),
        (
            &[
                "listeners=SASL_PLAINTEXT://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
                "sasl.enabled.mechanisms=PLAIN",
            ][..],
            "listener.name.sasl_plaintext.plain.sasl.jaas.config",
        ),
        (
            &[
                "listeners=SASL_PLAINTEXT://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
                "sasl.enabled.mechanisms=GSSAPI",
            ][..],
            "GSSAPI",
        ),
        // The inter-broker and controller listeners may be secured (decision 0017); SASL on the controller
        // listener is not supported yet.
        (
            &[
                "process.roles=broker,controller",
                "node.id=1",
                "controller.quorum.voters=1@127.0.0.1:19093",
                "listeners=PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:19093",
                "controller.listener.names=CONTROLLER",
                "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:SASL_SSL",
            ][..],
            "secures the controller listener with SSL only",
        ),
        (
            &[
                "listeners=PLAINTEXT://127.0.0.1:0",
                "listener.name.other.ssl.client.auth=required",
            ][..],
            "listener 'other'",
        ),
        (
            &[
                "listeners=PLAINTEXT://127.0.0.1:0",
                "listener.name.plaintext.log.retention.ms=1",
            ][..],
            "cannot be set per listener",
        ),
        (
            &[
                "listeners=SSL://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
                "ssl.keystore.type=PEM",
                "ssl.truststore.type=PEM",
                "ssl.keystore.location=/x",
                "ssl.client.auth=required",
            ][..],
            "truststore",
        ),
    ] {
        let e = load(items).expect_err(&format!("{items:?} must not load"));
        assert!(e.contains(want), "{items:?}: {e}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_keystore_file_stops_start_up_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let config = BrokerConfig::load(
        None,
        &overrides(&[
            "listeners=SSL://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
            "ssl.keystore.type=PEM",
            "ssl.truststore.type=PEM",
            "ssl.keystore.location=/nonexistent/server.pem",
        ]),
        Some(dir.path().to_path_buf()),
        None,
    )
    .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let e = match annal_broker::start(config, listener).await {
        Ok(_) => panic!("must not start"),
        Err(e) => format!("{e:#}"),
    };
    assert!(
        e.contains("ssl.keystore.location") && e.contains("/nonexistent/server.pem"),
        "{e}"
    );
}

#[test]
fn changed_pem_files_are_reloaded_and_broken_ones_are_not() {
    use annal_broker::config::{ClientAuth, PemSource, SslSettings};
    use annal_broker::security::tls::TlsListener;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("server.pem");
    std::fs::write(&path, pki().server_keystore).unwrap();
    let file = || PemSource::File {
        setting: "ssl.keystore.location".into(),
        path: path.clone(),
    };
    let settings = SslSettings {
        chain: file(),
        key: file(),
        truststore: None,
        client_auth: ClientAuth::None,
        tls12: true,
        tls13: true,
    };
    let listener = TlsListener::new("SSL", &settings).unwrap();
    assert!(!listener.reload_if_changed(), "nothing changed yet");
    let touch = |text: String, secs: u64| {
        std::fs::write(&path, text).unwrap();
        let f = std::fs::File::options().write(true).open(&path).unwrap();
        f.set_modified(std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(secs))
            .unwrap();
    };
    // A rotated certificate is picked up.
    touch(pki().server_keystore, 1_000_000);
    assert!(listener.reload_if_changed());
    assert!(!listener.reload_if_changed());
    // A half-written file keeps the current certificates (and is retried on the next change).
    touch("-----BEGIN PRIVATE KEY-----\n".into(), 2_000_000);
    assert!(!listener.reload_if_changed());
}
