"""Security with unchanged clients (issue 17): TLS, mutual TLS, SASL/PLAIN and SASL/SCRAM, against Annal and
against Apache Kafka configured from the same server.properties.

One broker serves every case from its own listeners (one process, so the whole module stays within a few seconds
of client work plus one broker start):
  PLAINTEXT        inter-broker and admin
  SSL              TLS, server certificate only
  MTLS             TLS with ssl.client.auth=required (listener.name.mtls.ssl.*)
  SASL_PLAINTEXT   PLAIN, users from listener.name.sasl_plaintext.plain.sasl.jaas.config
  SASL_SSL         SCRAM-SHA-512 and SCRAM-SHA-256, users created with Kafka's kafka-configs tool
Certificates are made at test time with the openssl CLI (a CA, a server certificate for localhost/127.0.0.1, a
client certificate for CN=alice,OU=eng).
"""
import base64
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import confluent_kafka as ck
import kafka
import pytest

from brokers import START_TIMEOUT_S, api_versions_answered, free_port, remove_workdir
from test_dump_log_segments import kafka_classpath

pytestmark = pytest.mark.security

TIMEOUT_S = 30


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_pki(d):
    """ca.pem, server.pem (PKCS#8 key + chain, Kafka's PEM keystore file), client-cert.pem/client-key.pem."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl CLI is needed to make test certificates")
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca-key.pem", "-out", "ca.pem",
            "-days", "2", "-subj", "/CN=annal-interop-ca", cwd=d)
    (d / "server.ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server-key.pem", "-out", "server.csr",
            "-subj", "/CN=localhost", cwd=d)
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca-key.pem", "-CAcreateserial",
            "-out", "server-cert.pem", "-days", "2", "-extfile", "server.ext", cwd=d)
    (d / "client.ext").write_text("extendedKeyUsage=clientAuth\n")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "client-key.pem", "-out", "client.csr",
            "-subj", "/OU=eng/CN=alice", cwd=d)
    openssl("x509", "-req", "-in", "client.csr", "-CA", "ca.pem", "-CAkey", "ca-key.pem", "-CAcreateserial",
            "-out", "client-cert.pem", "-days", "2", "-extfile", "client.ext", cwd=d)
    # openssl 3 writes PKCS#8 ("BEGIN PRIVATE KEY"), the only unencrypted form Kafka's PEM keystore reads.
    (d / "server.pem").write_text((d / "server-key.pem").read_text() + (d / "server-cert.pem").read_text()
                                  + (d / "ca.pem").read_text())


PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
              'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";')
SCRAM_JAAS = "org.apache.kafka.common.security.scram.ScramLoginModule required;"


def server_properties(d, ports, ctrl_port):
    names = ["PLAINTEXT", "SSL", "MTLS", "SASL_PLAINTEXT", "SASL_SSL"]
    listeners = ",".join(f"{n}://127.0.0.1:{ports[n]}" for n in names)
    return "\n".join([
        "process.roles=broker,controller",
        "node.id=1",
        f"controller.quorum.voters=1@127.0.0.1:{ctrl_port}",
        f"listeners={listeners},CONTROLLER://127.0.0.1:{ctrl_port}",
        f"advertised.listeners={listeners}",
        "inter.broker.listener.name=PLAINTEXT",
        "controller.listener.names=CONTROLLER",
        "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL,"
        "SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
        f"log.dirs={d}/data",
        "offsets.topic.replication.factor=1",
        "transaction.state.log.replication.factor=1",
        "transaction.state.log.min.isr=1",
        "group.initial.rebalance.delay.ms=0",
        "ssl.keystore.type=PEM",
        f"ssl.keystore.location={d}/server.pem",
        "ssl.truststore.type=PEM",
        f"ssl.truststore.location={d}/ca.pem",
        "listener.name.mtls.ssl.client.auth=required",
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms=PLAIN",
        f"listener.name.sasl_plaintext.plain.sasl.jaas.config={PLAIN_JAAS}",
        "listener.name.sasl_ssl.sasl.enabled.mechanisms=SCRAM-SHA-512,SCRAM-SHA-256",
        f"listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config={SCRAM_JAAS}",
        f"listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config={SCRAM_JAAS}",
        "sasl.enabled.mechanisms=PLAIN",
        "",
    ])


class SecureBroker:
    """Annal (`annal serve --config`) or Kafka (`kafka.Kafka`), from the same server.properties."""

    def __init__(self):
        self.dir = Path(tempfile.mkdtemp(prefix="annal-security-"))
        make_pki(self.dir)
        self.ports = {n: free_port() for n in ["PLAINTEXT", "SSL", "MTLS", "SASL_PLAINTEXT", "SASL_SSL"]}
        self.ctrl_port = free_port()
        self.props = self.dir / "server.properties"
        self.props.write_text(server_properties(self.dir, self.ports, self.ctrl_port))
        self.kind = "kafka" if os.environ.get("INTEROP_BROKER") == "kafka" else "annal"
        self.log = open(self.dir / "broker.log", "ab")
        if self.kind == "kafka":
            cp = kafka_classpath()
            java = ["java", "-Xms256m", "-Xmx512m", "-cp", cp]
            cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
            subprocess.run(java + ["kafka.tools.StorageTool", "format", "-t", cluster_id,
                                   "-c", str(self.props)], check=True, capture_output=True)
            cmd = java + ["kafka.Kafka", str(self.props)]
        else:
            annal = os.environ.get("ANNAL_BIN")
            if not annal:
                pytest.skip("set ANNAL_BIN (or INTEROP_BROKER=kafka)")
            cmd = [annal, "serve", "--config", str(self.props)]
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True)
        deadline = time.monotonic() + START_TIMEOUT_S * 2
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.kind} exited during start-up:\n{self.tail()}")
            if api_versions_answered("127.0.0.1", self.ports["PLAINTEXT"], timeout=1.0):
                return
            time.sleep(0.2)
        raise RuntimeError(f"{self.kind} did not serve within the start timeout:\n{self.tail()}")

    def bootstrap(self, listener):
        return f"127.0.0.1:{self.ports[listener]}"

    def tail(self, lines=40):
        return "\n".join((self.dir / "broker.log").read_text(errors="replace").splitlines()[-lines:])

    def close(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        remove_workdir(self.dir)


@pytest.fixture(scope="module")
def secure():
    if os.environ.get("INTEROP_BOOTSTRAP"):
        pytest.skip("starts its own broker with secured listeners; INTEROP_BOOTSTRAP is set")
    b = SecureBroker()
    yield b
    assert b.proc.poll() is None, f"the broker died during the security tests:\n{b.tail()}"
    b.close()


def ck_config(b, listener, **extra):
    conf = {"bootstrap.servers": b.bootstrap(listener), "socket.timeout.ms": 10000}
    if listener in ("SSL", "MTLS", "SASL_SSL"):
        conf["ssl.ca.location"] = str(b.dir / "ca.pem")
    conf.update(extra)
    return conf


def ck_round_trip(conf, topic, n=20):
    """Creates `topic`, produces n records and consumes them back with librdkafka over `conf`."""
    admin = ck.admin.AdminClient(conf)
    for f in admin.create_topics([ck.admin.NewTopic(topic, 1, 1)]).values():
        f.result(timeout=TIMEOUT_S)
    p = ck.Producer({**conf, "acks": "all"})
    for i in range(n):
        p.produce(topic, value=f"v{i}".encode())
    assert p.flush(TIMEOUT_S) == 0
    c = ck.Consumer({**conf, "group.id": f"g-{topic}", "auto.offset.reset": "earliest",
                     "enable.auto.commit": False})
    c.subscribe([topic])
    got = []
    deadline = time.monotonic() + TIMEOUT_S
    while len(got) < n and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got.append(m.value().decode())
    c.commit(asynchronous=False)
    c.close()
    assert got == [f"v{i}" for i in range(n)]


def kp_round_trip(b, listener, topic, n=20, **security):
    """The same with kafka-python."""
    common = {"bootstrap_servers": b.bootstrap(listener), "request_timeout_ms": 20000, **security}
    admin = kafka.KafkaAdminClient(**common)
    admin.create_topics([kafka.admin.NewTopic(topic, 1, 1)])
    admin.close()
    p = kafka.KafkaProducer(acks="all", **common)
    for i in range(n):
        p.send(topic, f"v{i}".encode())
    p.flush(TIMEOUT_S)
    p.close()
    c = kafka.KafkaConsumer(topic, group_id=f"g-{topic}", auto_offset_reset="earliest",
                            consumer_timeout_ms=10000, **common)
    got = []
    deadline = time.monotonic() + TIMEOUT_S
    while len(got) < n and time.monotonic() < deadline:
        for records in c.poll(timeout_ms=500).values():
            got.extend(r.value.decode() for r in records)
    c.commit()
    c.close()
    assert got == [f"v{i}" for i in range(n)]


def name(prefix):
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_ssl_librdkafka_and_kafka_python(secure):
    ck_round_trip(ck_config(secure, "SSL", **{"security.protocol": "SSL"}), name("ssl-ck"))
    kp_round_trip(secure, "SSL", name("ssl-kp"), security_protocol="SSL", ssl_cafile=str(secure.dir / "ca.pem"))


def test_mutual_tls_required(secure):
    d = secure.dir
    conf = ck_config(secure, "MTLS", **{"security.protocol": "SSL",
                                         "ssl.certificate.location": str(d / "client-cert.pem"),
                                         "ssl.key.location": str(d / "client-key.pem")})
    ck_round_trip(conf, name("mtls-ck"))
    kp_round_trip(secure, "MTLS", name("mtls-kp"), security_protocol="SSL", ssl_cafile=str(d / "ca.pem"),
                  ssl_certfile=str(d / "client-cert.pem"), ssl_keyfile=str(d / "client-key.pem"))
    # Without a client certificate the handshake is refused: no metadata, an error instead.
    admin = ck.admin.AdminClient(ck_config(secure, "MTLS", **{"security.protocol": "SSL"}))
    with pytest.raises(ck.KafkaException):
        admin.list_topics(timeout=5)


def test_sasl_plaintext_plain(secure):
    conf = ck_config(secure, "SASL_PLAINTEXT", **{"security.protocol": "SASL_PLAINTEXT",
                                                   "sasl.mechanisms": "PLAIN", "sasl.username": "alice",
                                                   "sasl.password": "alice-secret"})
    ck_round_trip(conf, name("plain-ck"))
    kp_round_trip(secure, "SASL_PLAINTEXT", name("plain-kp"), security_protocol="SASL_PLAINTEXT",
                  sasl_mechanism="PLAIN", sasl_plain_username="alice", sasl_plain_password="alice-secret")


def test_sasl_plain_wrong_password_is_an_authentication_error(secure):
    errors = []
    conf = ck_config(secure, "SASL_PLAINTEXT", **{"security.protocol": "SASL_PLAINTEXT",
                                                   "sasl.mechanisms": "PLAIN", "sasl.username": "alice",
                                                   "sasl.password": "wrong", "error_cb": errors.append})
    admin = ck.admin.AdminClient(conf)
    with pytest.raises(ck.KafkaException):
        admin.list_topics(timeout=5)
    assert auth_errors(admin, errors), errors
    with pytest.raises(kafka.errors.KafkaError):
        kafka.KafkaAdminClient(bootstrap_servers=secure.bootstrap("SASL_PLAINTEXT"),
                               security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                               sasl_plain_username="alice", sasl_plain_password="wrong",
                               request_timeout_ms=5000, api_version_auto_timeout_ms=5000)


def auth_errors(admin, errors, within=10):
    """The authentication errors librdkafka reported through error_cb (served by poll)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline and not any(e.code() == ck.KafkaError._AUTHENTICATION for e in errors):
        admin.poll(0.2)
    return [e for e in errors if e.code() == ck.KafkaError._AUTHENTICATION]


def config_command(b, *args):
    proc = subprocess.run(["java", "-Xmx256m", "-cp", kafka_classpath(), "kafka.admin.ConfigCommand",
                           "--bootstrap-server", b.bootstrap("PLAINTEXT"), *args],
                          capture_output=True, text=True, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"kafka-configs {' '.join(args)} failed:\n{out[-3000:]}"
    return proc.stdout


def test_kafka_configs_creates_a_scram_user_who_then_produces_over_sasl_ssl(secure):
    # One mechanism per call: Kafka refuses a user twice in one AlterUserScramCredentials (DUPLICATE_RESOURCE).
    config_command(secure, "--alter", "--add-config", "SCRAM-SHA-512=[iterations=8192,password=alice-secret]",
                   "--entity-type", "users", "--entity-name", "alice")
    config_command(secure, "--alter", "--add-config", "SCRAM-SHA-256=[password=alice-256]",
                   "--entity-type", "users", "--entity-name", "alice")
    out = config_command(secure, "--describe", "--entity-type", "users")
    assert "alice" in out and "SCRAM-SHA-512=iterations=8192" in out and "SCRAM-SHA-256=iterations=4096" in out, out

    base = {"security.protocol": "SASL_SSL", "sasl.username": "alice"}
    ck_round_trip(ck_config(secure, "SASL_SSL", **base, **{"sasl.mechanisms": "SCRAM-SHA-512",
                                                          "sasl.password": "alice-secret"}), name("scram-ck"))
    kp_round_trip(secure, "SASL_SSL", name("scram-kp"), security_protocol="SASL_SSL",
                  ssl_cafile=str(secure.dir / "ca.pem"), sasl_mechanism="SCRAM-SHA-256",
                  sasl_plain_username="alice", sasl_plain_password="alice-256")
    # The wrong password for SCRAM is an authentication error too.
    errors = []
    admin = ck.admin.AdminClient(ck_config(secure, "SASL_SSL", **base, **{
        "sasl.mechanisms": "SCRAM-SHA-512", "sasl.password": "wrong", "error_cb": errors.append}))
    with pytest.raises(ck.KafkaException):
        admin.list_topics(timeout=5)
    assert auth_errors(admin, errors), errors


@pytest.mark.annal_only
def test_plaintext_and_tls_on_the_wrong_port_are_refused_without_harm(secure):
    """Kafka refuses these too, but logs and times them differently; Annal's promise is a clean refusal."""
    import socket
    import ssl as pyssl
    # TLS to the PLAINTEXT port: closed.
    ctx = pyssl.create_default_context(cafile=str(secure.dir / "ca.pem"))
    with socket.create_connection(("127.0.0.1", secure.ports["PLAINTEXT"]), timeout=5) as s:
        with pytest.raises((pyssl.SSLError, OSError)):
            ctx.wrap_socket(s, server_hostname="localhost")
    # Kafka bytes to the SSL port: no answer, closed.
    assert not api_versions_answered("127.0.0.1", secure.ports["SSL"], timeout=5)
    # And the broker still serves.
    assert api_versions_answered("127.0.0.1", secure.ports["PLAINTEXT"])
