"""The retention guard (issue 14, `retention.guard.groups`) on a real 3-node Annal cluster (cluster.py,
INTEROP_CLUSTER=1): every replica of a guarded partition keeps what the guarded group has not consumed, not only
the broker that coordinates the group.

A topic with replication factor 3 on 3 nodes: at most one node coordinates the group, so at least two hold a
replica of a group they do not coordinate, and must ask its coordinator for the committed offset before each
retention pass. A second topic with the same retention and no guard shows that retention really ran on every
node (its whole log goes), so the test fails if the guarded one is deleted anywhere.

Annal only (Kafka has no retention guard).
"""

import time
import urllib.request

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType

from cluster import HttpCluster

pytestmark = [pytest.mark.cluster, pytest.mark.annal_only]

SIZE = 3
TIMEOUT_S = 60
GROUP = "guard-cluster"
GUARDED = "guarded-replicated"
PLAIN = "unguarded-replicated"
RECORDS = 100
COMMITTED = 10


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = HttpCluster(tmp_path_factory.mktemp("guard-cluster"), size=SIZE,
                    overrides={"log.retention.check.interval.ms": "500"})
    if c.kind != "annal":
        pytest.skip("Annal only: Kafka has no retention guard")
    try:
        c.start()
    except BaseException:
        c.close()
        raise
    try:
        yield c
    finally:
        c.close()


def log_start(c, node_id, topic):
    """The node's own replica's log start offset of `topic`-0, from its /metrics; None if not shown."""
    with urllib.request.urlopen(f"http://{c.http[node_id]}/metrics", timeout=TIMEOUT_S) as r:
        text = r.read().decode()
    for line in text.splitlines():
        if line.startswith("annal_partition_log_start_offset{") and f'topic="{topic}"' in line \
                and 'partition="0"' in line:
            return int(float(line.split()[-1]))
    return None


def test_every_replica_keeps_what_a_guarded_group_has_not_consumed(cluster):
    c = cluster
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    retention = {"segment.bytes": "1024", "retention.ms": "3000", "min.insync.replicas": "2"}
    # The guarded topic keeps everything until the group has committed (a retention pass before the commit
    # would have nothing to guard), then gets the same 3 s.
    fs = admin.create_topics([
        NewTopic(GUARDED, num_partitions=1, replication_factor=SIZE,
                 config={**retention, "retention.ms": "-1", "retention.guard.groups": GROUP}),
        NewTopic(PLAIN, num_partitions=1, replication_factor=SIZE, config=retention),
    ], operation_timeout=30)
    for f in fs.values():
        f.result(timeout=60)

    # Small batches, so each topic's log rolls into about ten segments, replicated with acks=all.
    producer = ck.Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "linger.ms": 0,
                            "enable.idempotence": False, "batch.num.messages": 10})
    for i in range(RECORDS):
        for topic in (GUARDED, PLAIN):
            producer.produce(topic, value=f"record-{i}-".encode() * 4, partition=0)
        if i % 10 == 9:
            producer.flush(TIMEOUT_S)
    assert producer.flush(TIMEOUT_S) == 0

    # The group has consumed 10 of the guarded topic's records (it commits as an empty group).
    committer = ck.Consumer({"bootstrap.servers": c.bootstrap, "group.id": GROUP, "enable.auto.commit": False})
    committer.commit(offsets=[ck.TopicPartition(GUARDED, 0, COMMITTED)], asynchronous=False)
    committed = committer.committed([ck.TopicPartition(GUARDED, 0)], timeout=TIMEOUT_S)
    assert committed[0].offset == COMMITTED, committed
    committer.close()
    res = ConfigResource(ResourceType.TOPIC, GUARDED, incremental_configs=[
        ConfigEntry("retention.ms", "3000", incremental_operation=AlterConfigOpType.SET)])
    for f in admin.incremental_alter_configs([res]).values():
        f.result(timeout=TIMEOUT_S)

    # Retention runs on every node: the unguarded topic's whole log goes everywhere...
    seen = {}

    def plain_deleted_everywhere():
        for n in c.live_nodes():
            seen[n.node_id] = log_start(c, n.node_id, PLAIN)
        return all(v == RECORDS for v in seen.values()) or None

    try:
        c.wait_until("retention to delete the unguarded topic on every node", plain_deleted_everywhere, TIMEOUT_S)
    except AssertionError:
        raise AssertionError(f"{PLAIN} log start offset per node: {seen}") from None

    # ... and a few more passes later, every replica of the guarded topic still holds offset 10 on: not only the
    # coordinator's.
    time.sleep(2)
    starts = {n.node_id: log_start(c, n.node_id, GUARDED) for n in c.live_nodes()}
    assert all(s is not None and s <= COMMITTED for s in starts.values()), \
        f"{GUARDED} log start offset per node (the group committed {COMMITTED}): {starts}"
    assert len(starts) == SIZE, starts
