"""Records by key (issue 15) on a real 3-node Annal cluster (cluster.py, INTEROP_CLUSTER=1): a topic with
replication factor 3 and key.index.enable=true, keyed records produced with acks=all by kafka-python, then:

- every follower builds its own key index from the records it replicates, in the background (its metrics show no
  backlog and index files on disk before anyone looks a key up there);
- every node's HTTP listener answers a key lookup of every partition, as the leader or as an in-sync follower,
  with exactly what a full scan by a consumer finds; no answer reaches past the partition's high watermark;
- after a kill -9 of one node the two left answer the same records.

Annal only (Kafka has no key index).
"""

import json
import os
import urllib.error
import urllib.request

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from cluster import SESSION_TIMEOUT_MS, HttpCluster
from clients import kp_consume, kp_producer

pytestmark = [pytest.mark.cluster, pytest.mark.annal_only]

SIZE = 3
PARTITIONS = 3
KEYS = 30
ROUNDS = 30
TIMEOUT_S = 60
TOPIC = "keyed-replicated"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = HttpCluster(tmp_path_factory.mktemp("key-lookup-cluster"), size=SIZE)
    if c.kind != "annal":
        pytest.skip("Annal only: Kafka has no key index")
    try:
        c.start()
    except BaseException:
        c.close()
        raise
    try:
        yield c
    finally:
        c.close()


def http_get(addr, path):
    try:
        with urllib.request.urlopen(f"http://{addr}{path}", timeout=TIMEOUT_S) as r:
            body = r.read()
            return r.status, (json.loads(body) if path.startswith("/v1/") else body.decode())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def metric(text, series):
    for line in text.splitlines():
        if line.startswith(series + " "):
            return float(line.split()[-1])
    return None


def lookup(addr, key):
    """{partition: [(offset, value)]} of every record with `key`, every partition (paged), and the answers' partition
    views; None when the node does not answer every partition."""
    found, views = {}, []
    for p in range(PARTITIONS):
        frm = 0
        while True:
            status, body = http_get(addr, f"/v1/topics/{TOPIC}/records?key={key}&partition={p}&limit=50&from={frm}")
            if status != 200:
                return None, body
            part = body["partitions"][0]
            views.append(part)
            found.setdefault(p, []).extend((r["offset"], r["value"]["data"]) for r in part["records"])
            assert all(r["key"]["data"] == key for r in part["records"]), body
            if part["next_offset"] is None:
                break
            frm = part["next_offset"]
    return found, views


def partition_view(node, partition):
    t = node.metadata(topics=[TOPIC])["topics"].get(TOPIC)
    if t is None or t["error"] != 0:
        return None
    return t["partitions"].get(partition)


def test_every_in_sync_replica_indexes_and_answers_the_same(cluster):
    c = cluster
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    fs = admin.create_topics([NewTopic(TOPIC, num_partitions=PARTITIONS, replication_factor=SIZE,
                                       config={"key.index.enable": "true", "segment.bytes": "4096",
                                               "min.insync.replicas": "2"})], operation_timeout=30)
    fs[TOPIC].result(timeout=60)

    def full_isr():
        views = [partition_view(n, p) for n in c.live_nodes() for p in range(PARTITIONS)]
        return all(v is not None and v["leader"] >= 0 and len(v["isr"]) == SIZE for v in views) or None

    c.wait_until(f"{TOPIC}: every partition with an ISR of {SIZE}", full_isr, TIMEOUT_S)

    producer = kp_producer(c.node(1), acks="all", compression_type="gzip", linger_ms=5)
    for r in range(ROUNDS):
        for k in range(KEYS):
            producer.send(TOPIC, key=f"user-{k}".encode(), value=f"v-{r}-{k}-{os.urandom(40).hex()}".encode())
    producer.flush(TIMEOUT_S)
    producer.close()

    # The full scan: a consumer reads every partition.
    expected = {}
    for rec in kp_consume(c.node(1), TOPIC, list(range(PARTITIONS)), KEYS * ROUNDS):
        expected.setdefault(rec.key.decode(), {}).setdefault(rec.partition, []).append((rec.offset, rec.value.decode()))
    assert len(expected) == KEYS
    ends = {p: 1 + max(o for per in expected.values() for o, _ in per.get(p, [])) for p in range(PARTITIONS)}

    # Followers index in the background: before any lookup, every node's backlog drains and files appear.
    seen = {}

    def indexed_everywhere():
        for n in c.live_nodes():
            status, text = http_get(c.http[n.node_id], "/metrics")
            if status != 200:
                return None
            backlog = metric(text, f'annal_key_index_unindexed_bytes{{topic="{TOPIC}"}}')
            files = metric(text, f'annal_key_index_file_bytes{{topic="{TOPIC}"}}')
            seen[n.node_id] = (backlog, files)
            if backlog != 0 or not files:
                return None
        return True

    try:
        c.wait_until("every node's key index built in the background", indexed_everywhere, TIMEOUT_S)
    except AssertionError:
        raise AssertionError(f"(unindexed bytes, file bytes) per node: {seen}") from None
    for n in c.nodes:
        for p in range(PARTITIONS):
            files = list((n.data_dir / f"{TOPIC}-{p}").glob("*.keyindex"))
            assert files, f"node {n.node_id} has no key index file for partition {p}"

    def same_everywhere(nodes):
        roles = set()
        for n in nodes:
            for k in range(KEYS):
                key = f"user-{k}"
                found, views = lookup(c.http[n.node_id], key)
                if found is None:
                    return None  # e.g. a follower not yet back in the ISR (421)
                for v in views:
                    # Never past the high watermark (the scan saw everything below it).
                    assert v["end_offset"] <= ends[v["partition"]], (n, v)
                    roles.add(v["role"])
                if {p: r for p, r in found.items() if r} != expected[key]:
                    # A follower's high watermark may trail the leader's by a fetch; it catches up.
                    assert all(found.get(p, []) == want[:len(found.get(p, []))] for p, want in expected[key].items()), \
                        (n, key, found, expected[key])
                    return None
        return roles

    roles = c.wait_until("every node answers every key exactly", lambda: same_everywhere(c.live_nodes()), TIMEOUT_S)
    assert roles == {"leader", "follower"}, roles

    # kill -9 the leader of partition 0: the two nodes left still answer, the same records.
    leader = partition_view(c.node(1), 0)["leader"]
    c.node(leader).kill()
    left = c.other_nodes(leader)

    def failed_over():
        views = [partition_view(n, 0) for n in left]
        return all(v is not None and v["leader"] in {n.node_id for n in left} for v in views) or None

    c.wait_until("partition 0 led by a live node", failed_over, SESSION_TIMEOUT_MS / 1000 + 30)
    c.wait_until("the two nodes left answer every key exactly", lambda: same_everywhere(left), TIMEOUT_S)
    c.heal()
