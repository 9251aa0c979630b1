"""A secured CONTROLLER listener (issue 17) on a real 3-node cluster (cluster.py, INTEROP_CLUSTER=1), Annal or
Apache Kafka from the same server.properties.

Every node is combined (broker,controller) and maps CONTROLLER:SSL, with the controller listener's own
`listener.name.controller.ssl.*` settings and `ssl.client.auth=required` on it (mutual TLS): the metadata quorum's
transport between the controllers, the brokers' registrations and heartbeats, AlterPartition and the forwarded
admin requests all go over TLS with each node's certificate. The cluster must form and elect a leader, a topic with
replication factor 3 must take acks=all records (its ISR changes and CreateTopics go through the controller
listener), and a kill -9 of the active controller must elect another and the restarted node rejoin. The
controller port is checked to speak TLS only: a plaintext ApiVersions is not answered, and a TLS client without
a certificate is refused.
"""

import socket
import ssl
import time
import types
import uuid

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

import kwire
from cluster import Cluster
from test_security_cluster import consume_all, make_node_pki

pytestmark = [pytest.mark.cluster, pytest.mark.security]

TIMEOUT_S = 60
PARTITIONS = 3
RECORDS = 200


class SslControllerCluster(Cluster):
    """A Cluster whose CONTROLLER listener speaks SSL with mutual TLS."""

    def __init__(self, workdir, **kwargs):
        super().__init__(workdir, **kwargs)
        self.pki = self.workdir / "pki"
        self.pki.mkdir(parents=True, exist_ok=True)
        make_node_pki(self.pki)

    def properties(self, node):
        props = super().properties(node)
        props["listener.security.protocol.map"] = props["listener.security.protocol.map"].replace(
            "CONTROLLER:PLAINTEXT", "CONTROLLER:SSL")
        assert "CONTROLLER:SSL" in props["listener.security.protocol.map"]
        props.update({
            "listener.name.controller.ssl.keystore.type": "PEM",
            "listener.name.controller.ssl.keystore.location": str(self.pki / "node.pem"),
            "listener.name.controller.ssl.truststore.type": "PEM",
            "listener.name.controller.ssl.truststore.location": str(self.pki / "ca.pem"),
            "listener.name.controller.ssl.client.auth": "required",
        })
        return props


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = SslControllerCluster(tmp_path_factory.mktemp("controller-ssl"), size=3)
    try:
        c.start()
    except BaseException:
        c.close()
        raise
    try:
        yield c
    finally:
        c.close()


def produce(bootstrap, topic, values):
    p = ck.Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    errors = []
    for i, v in enumerate(values):
        p.produce(topic, value=v.encode(), partition=i % PARTITIONS,
                  on_delivery=lambda err, msg: errors.append(err) if err else None)
    assert p.flush(TIMEOUT_S) == 0
    assert errors == []


def wait_for_full_isr(cluster, topic, via):
    def probe():
        entry = via.metadata(topics=[topic])["topics"].get(topic)
        if entry is None or len(entry["partitions"]) != PARTITIONS:
            return None
        ok = all(sorted(p["isr"]) == [1, 2, 3] and p["leader"] > 0 for p in entry["partitions"].values())
        return entry if ok else None

    return cluster.wait_until(f"{topic}: every partition's ISR is nodes 1, 2, 3", probe, TIMEOUT_S)


def test_the_controller_port_speaks_tls_only(cluster):
    node = cluster.node(1)
    port = types.SimpleNamespace(host=node.host, port=node.controller_port)
    # Plaintext: a Kafka ApiVersions request is not answered with a Kafka response.
    with kwire.connect(port, timeout=10) as s:
        s.sendall(kwire.request(18, 0, 7, b""))
        try:
            data = s.recv(8)
        except (ConnectionResetError, socket.timeout):
            data = b""
        assert not (len(data) == 8 and data[4:8] == (7).to_bytes(4, "big")), data
    # TLS without a client certificate: refused (ssl.client.auth=required).
    ctx = ssl.create_default_context(cafile=str(cluster.pki / "ca.pem"))
    refused = False
    try:
        with socket.create_connection((node.host, node.controller_port), timeout=10) as raw:
            with ctx.wrap_socket(raw, server_hostname=node.host) as s:
                s.sendall(kwire.request(18, 0, 7, b""))
                refused = s.recv(8) == b""
    except (ssl.SSLError, ConnectionResetError, BrokenPipeError):
        refused = True
    assert refused, "a TLS client without a certificate was served on the controller listener"
    # TLS with the nodes' certificate: the handshake succeeds.
    ctx.load_cert_chain(str(cluster.pki / "node-cert.pem"), str(cluster.pki / "node-key.pem"))
    with socket.create_connection((node.host, node.controller_port), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname=node.host) as s:
            assert s.version() is not None


def test_replication_and_controller_failover_over_the_ssl_controller_listener(cluster):
    leader = cluster.active_controller()
    assert leader in {1, 2, 3}
    bootstrap = cluster.bootstrap
    topic = f"ctrl-ssl-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(topic, PARTITIONS, 3, config={"min.insync.replicas": "2"})],
                                 operation_timeout=30).values():
        f.result(timeout=TIMEOUT_S)
    cluster.wait_for_leaders(topic, PARTITIONS)
    wait_for_full_isr(cluster, topic, cluster.node(1))
    before = [f"a{i}" for i in range(RECORDS)]
    produce(bootstrap, topic, before)

    # kill -9 of the active controller: the two others elect a new one over TLS, fence the dead broker, and the
    # partitions it led move (AlterPartition / leader changes through the new controller).
    victim = cluster.node(leader)
    survivors = cluster.other_nodes(victim)
    victim.kill()

    def new_leader_agreed():
        leaders = {n.describe_quorum()["leader_id"] for n in survivors}
        new = leaders.pop() if len(leaders) == 1 else -1
        return new if new in {n.node_id for n in survivors} else None

    new = cluster.wait_until(f"a new active controller after killing controller {leader}", new_leader_agreed,
                             TIMEOUT_S)
    assert new != leader
    cluster.wait_until(f"killed broker {leader} fenced",
                       lambda: all(leader not in n.metadata(topics=[])["brokers"] for n in survivors), TIMEOUT_S)
    cluster.wait_for_leaders(topic, PARTITIONS, via=survivors[0], allowed={n.node_id for n in survivors})
    during = [f"b{i}" for i in range(RECORDS)]
    produce(survivors[0].bootstrap, topic, during)

    # The killed node restarts from its data, registers again over TLS and catches up into the ISR.
    victim.start()
    cluster.wait_ready()
    wait_for_full_isr(cluster, topic, survivors[0])
    after = [f"c{i}" for i in range(RECORDS)]
    produce(bootstrap, topic, after)
    got = consume_all(victim.bootstrap, topic, 3 * RECORDS)
    assert sorted(got) == sorted(before + during + after)


def test_split_roles_over_the_ssl_controller_listener(tmp_path_factory):
    """Three controller-only nodes and two broker-only ones: the brokers register, heartbeat and forward admin
    requests over TLS to the controllers, and follow the metadata log (Annal: pushed to their broker listener)."""
    # Two brokers: the offsets topic (the consumer group's) gets replication factor 2, as Kafka needs.
    c = SslControllerCluster(tmp_path_factory.mktemp("controller-ssl-split"), size=5, controllers=3,
                             overrides={"offsets.topic.replication.factor": "2"})
    try:
        leader = c.start()
        assert leader in {1, 2, 3}
        brokers = c.broker_nodes()
        assert sorted(n.node_id for n in brokers) == [4, 5]
        quorum = brokers[0].describe_quorum()
        assert sorted(quorum["voters"]) == [1, 2, 3], quorum
        topic = f"ctrl-ssl-split-{uuid.uuid4().hex[:6]}"
        admin = AdminClient({"bootstrap.servers": brokers[0].bootstrap})
        for f in admin.create_topics([NewTopic(topic, PARTITIONS, 2, config={"min.insync.replicas": "2"})],
                                     operation_timeout=30).values():
            f.result(timeout=TIMEOUT_S)
        c.wait_for_leaders(topic, PARTITIONS, via=brokers[1])
        values = [f"s{i}" for i in range(RECORDS)]
        produce(brokers[0].bootstrap, topic, values)
        assert sorted(consume_all(brokers[1].bootstrap, topic, RECORDS)) == sorted(values)
    finally:
        c.close()
