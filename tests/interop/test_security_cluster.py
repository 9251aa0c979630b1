"""Secured inter-broker listeners (issue 17) on a real 3-node cluster (cluster.py, INTEROP_CLUSTER=1), Annal or
Apache Kafka from the same server.properties.

Each node has the harness's PLAINTEXT client listener and CONTROLLER listener, plus an INTERNAL listener that is
`inter.broker.listener.name`, secured two ways:
  ssl        INTERNAL:SSL with ssl.client.auth=required: the brokers present their keystore's certificate to each
             other (mutual TLS), so a plaintext or certificate-less replica fetcher would be refused
  sasl_ssl   INTERNAL:SASL_SSL with PLAIN (sasl.mechanism.inter.broker.protocol=PLAIN): the brokers log in with the
             username/password of the listener's JAAS entry
Replication must go through INTERNAL: a topic with replication factor 3 and min.insync.replicas=3 takes acks=all
records only when both followers have fetched them; every partition's ISR is then all three nodes. A
transactional producer's commit makes the coordinator send markers to the partitions' leaders over INTERNAL too,
and a read_committed consumer sees the records. Against Annal, the nodes' logs must show their replica fetchers
connecting to the INTERNAL ports.
"""

import re
import shutil
import subprocess
import time
import uuid

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from brokers import free_port
from cluster import Cluster

pytestmark = [pytest.mark.cluster, pytest.mark.security]

TIMEOUT_S = 60
PARTITIONS = 3
RECORDS = 300
PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="broker" '
              'password="broker-secret" user_broker="broker-secret";')


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_node_pki(d):
    """ca.pem and node.pem: one certificate (CN=broker, 127.0.0.1) for every node, good for TLS servers and clients
    (the same keystore answers as the INTERNAL listener and logs in to the others)."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl CLI is needed to make test certificates")
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca-key.pem", "-out", "ca.pem",
            "-days", "2", "-subj", "/CN=annal-interop-ca", cwd=d)
    (d / "node.ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n"
                                "extendedKeyUsage=serverAuth,clientAuth\n")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "node-key.pem", "-out", "node.csr",
            "-subj", "/CN=broker", cwd=d)
    openssl("x509", "-req", "-in", "node.csr", "-CA", "ca.pem", "-CAkey", "ca-key.pem", "-CAcreateserial",
            "-out", "node-cert.pem", "-days", "2", "-extfile", "node.ext", cwd=d)
    (d / "node.pem").write_text((d / "node-key.pem").read_text() + (d / "node-cert.pem").read_text()
                                + (d / "ca.pem").read_text())


class SecuredCluster(Cluster):
    """A Cluster whose inter-broker listener is INTERNAL, secured with `protocol` (SSL or SASL_SSL)."""

    def __init__(self, workdir, protocol, **kwargs):
        super().__init__(workdir, **kwargs)
        self.protocol = protocol
        self.pki = self.workdir / "pki"
        self.pki.mkdir(parents=True, exist_ok=True)
        make_node_pki(self.pki)
        self.internal = {n.node_id: free_port() for n in self.nodes}

    def properties(self, node):
        props = super().properties(node)
        internal = f"INTERNAL://{node.host}:{self.internal[node.node_id]}"
        props["listeners"] += f",{internal}"
        props["advertised.listeners"] += f",{internal}"
        props["inter.broker.listener.name"] = "INTERNAL"
        props["listener.security.protocol.map"] += f",INTERNAL:{self.protocol}"
        props.update({
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(self.pki / "node.pem"),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.pki / "ca.pem"),
        })
        if self.protocol == "SSL":
            props["listener.name.internal.ssl.client.auth"] = "required"
        else:
            props.update({
                "sasl.enabled.mechanisms": "PLAIN",
                "sasl.mechanism.inter.broker.protocol": "PLAIN",
                "listener.name.internal.sasl.enabled.mechanisms": "PLAIN",
                "listener.name.internal.plain.sasl.jaas.config": PLAIN_JAAS,
            })
        return props


@pytest.fixture(scope="module", params=["SSL", "SASL_SSL"])
def cluster(request, tmp_path_factory):
    c = SecuredCluster(tmp_path_factory.mktemp(f"inter-broker-{request.param.lower()}"), request.param, size=3)
    try:
        c.start()
    except BaseException:
        c.close()
        raise
    try:
        yield c
    finally:
        c.close()


def wait_for_full_isr(cluster, topic):
    def probe():
        entry = cluster.node(1).metadata(topics=[topic])["topics"].get(topic)
        if entry is None or len(entry["partitions"]) != PARTITIONS:
            return None
        ok = all(sorted(p["isr"]) == [1, 2, 3] and p["leader"] > 0 for p in entry["partitions"].values())
        return entry if ok else None

    return cluster.wait_until(f"{topic}: every partition's ISR is nodes 1, 2, 3", probe, TIMEOUT_S)


def consume_all(bootstrap, topic, n, **extra):
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}",
                     "auto.offset.reset": "earliest", "enable.auto.commit": False, **extra})
    c.subscribe([topic])
    got = []
    deadline = time.monotonic() + TIMEOUT_S
    while len(got) < n and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got.append(m.value().decode())
    c.close()
    return got


def test_replication_and_transaction_markers_over_the_secured_inter_broker_listener(cluster):
    bootstrap = cluster.bootstrap
    topic = f"ib-{cluster.protocol.lower()}-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(topic, PARTITIONS, 3, config={"min.insync.replicas": "3"})],
                                 operation_timeout=30).values():
        f.result(timeout=TIMEOUT_S)
    cluster.wait_for_leaders(topic, PARTITIONS)
    wait_for_full_isr(cluster, topic)

    # acks=all with min.insync.replicas=3: acknowledged only once both followers fetched over INTERNAL.
    p = ck.Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    errors = []
    for i in range(RECORDS):
        p.produce(topic, value=f"v{i}".encode(), partition=i % PARTITIONS,
                  on_delivery=lambda err, msg: errors.append(err) if err else None)
    assert p.flush(TIMEOUT_S) == 0
    assert errors == []
    wait_for_full_isr(cluster, topic)
    assert sorted(consume_all(bootstrap, topic, RECORDS)) == sorted(f"v{i}" for i in range(RECORDS))

    # A committed transaction: the coordinator writes its markers to each partition's leader over INTERNAL.
    tp = ck.Producer({"bootstrap.servers": bootstrap, "transactional.id": f"txn-{topic}", "acks": "all"})
    tp.init_transactions(TIMEOUT_S)
    tp.begin_transaction()
    for i in range(PARTITIONS * 4):
        tp.produce(topic, value=f"t{i}".encode(), partition=i % PARTITIONS)
    tp.commit_transaction(TIMEOUT_S)
    got = consume_all(bootstrap, topic, RECORDS + PARTITIONS * 4, **{"isolation.level": "read_committed"})
    assert sorted(got) == sorted([f"v{i}" for i in range(RECORDS)] + [f"t{i}" for i in range(PARTITIONS * 4)])

    if cluster.kind == "annal":
        # The fetchers connected to the leaders' INTERNAL endpoints (the PLAINTEXT ones would work too, unsecured).
        internal = {f"127.0.0.1:{port}" for port in cluster.internal.values()}
        plaintext = {n.bootstrap for n in cluster.nodes}
        for node in cluster.nodes:
            text = re.sub(r"\x1b\[[0-9;]*m", "", node.log_text())  # the log's colours
            started = [line for line in text.splitlines() if "starting a replica fetcher" in line]
            assert any(f"addr={a}" in line for line in started for a in internal), \
                f"node {node.node_id} started no replica fetcher to an INTERNAL port:\n{node.log_tail()}"
            assert not any(f"addr={a}" in line for line in started for a in plaintext), started
