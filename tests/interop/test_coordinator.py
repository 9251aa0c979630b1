"""Issue 9/10: a group's coordinator is the leader of its `__consumer_offsets` partition, on a real 3-node cluster
(cluster.py) driven by unchanged clients bootstrapped to one node, with raw requests (kwire.py) asked of one node at
a time where a client library would hide which broker answered. Every assertion holds for Apache Kafka 4.x
(INTEROP_BROKER=kafka).

Kafka facts the tests encode:
- `__consumer_offsets` is created on first use (the first FindCoordinator for a group) with
  offsets.topic.num.partitions (50) and offsets.topic.replication.factor (here 3), and listed as internal.
- The coordinator of group g is the leader of partition Utils.abs(g.hashCode()) % 50 (Java's String.hashCode);
  every broker answers FindCoordinator with it.
- A broker that does not lead a group's partition answers OffsetCommit with NOT_COORDINATOR (16).
- When the coordinator dies, a replica of the partition becomes leader, loads the partition and coordinates the
  group: the committed offsets are still there (this needs replicated partitions: issue 10's data plane).
"""

import time

import confluent_kafka as ck
import pytest

import kwire
from cluster import broker_kind, running, wait_until
from clients import ck_produce_all, ck_producer
from test_cluster import create_topic_via

pytestmark = pytest.mark.cluster

SIZE = 3
OFFSETS_TOPIC = "__consumer_offsets"
OFFSETS_PARTITIONS = 50
COORDINATOR_BOUND_S = 30  # the topic created, its leaders elected and the partition loaded
FAILOVER_BOUND_S = 45  # a dead coordinator's partition led, loaded and served by another broker


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    yield from running(tmp_path_factory.mktemp("coordinator"), size=SIZE)


@pytest.fixture
def healthy(cluster):
    cluster.heal()
    yield cluster
    cluster.heal()


def coordinator_seen_by(node, group):
    """The coordinator id `node` names for `group`, or None while it answers a retriable error."""
    error, node_id, _, _ = kwire.find_coordinator(node, group)
    if error in (kwire.COORDINATOR_NOT_AVAILABLE, kwire.COORDINATOR_LOAD_IN_PROGRESS, kwire.NOT_COORDINATOR):
        return None
    assert error == 0, f"FindCoordinator from {node}: error {error}"
    return node_id


def partition_leader(node, group):
    """The leader of the group's __consumer_offsets partition in `node`'s Metadata, or None if none yet."""
    topic = kwire.metadata(node, [OFFSETS_TOPIC])["topics"].get(OFFSETS_TOPIC)
    if not topic or topic["error"] != 0 or len(topic["partitions"]) != OFFSETS_PARTITIONS:
        return None
    p = topic["partitions"][kwire.group_partition(group, OFFSETS_PARTITIONS)]
    return p if p["leader"] >= 0 else None


def agreed_coordinator(cluster, group, nodes=None, timeout=COORDINATOR_BOUND_S, not_on=None):
    """Waits until every node in `nodes` names the same coordinator (other than `not_on`) and it is the leader of
    the group's partition in every node's Metadata; returns (coordinator id, that partition's metadata)."""
    nodes = nodes or cluster.nodes

    def probe():
        seen = {coordinator_seen_by(n, group) for n in nodes}
        leaders = {(p or {}).get("leader") for p in (partition_leader(n, group) for n in nodes)}
        if len(seen) == 1 and None not in seen and not_on not in seen and leaders == seen:
            return seen.pop(), partition_leader(nodes[0], group)
        return None

    return wait_until(f"one coordinator for {group} on every node, the leader of its partition", probe, timeout)


def commit_with_a_consumer(node, group, topic, offsets):
    """A consumer of `group` bootstrapped to `node`: assigns `offsets` {partition: offset}, commits them
    synchronously, and returns what `committed()` reads back."""
    consumer = ck.Consumer({"bootstrap.servers": node.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        tps = [ck.TopicPartition(topic, p, o) for p, o in sorted(offsets.items())]
        consumer.assign(tps)
        deadline = time.monotonic() + COORDINATOR_BOUND_S
        while True:
            try:
                consumer.commit(offsets=tps, asynchronous=False)
                break
            except ck.KafkaException as e:
                if not e.args[0].retriable() or time.monotonic() >= deadline:
                    raise
                time.sleep(0.5)
        return read_committed(consumer, topic, offsets)
    finally:
        consumer.close()


def read_committed(consumer, topic, offsets):
    got = consumer.committed([ck.TopicPartition(topic, p) for p in sorted(offsets)], timeout=COORDINATOR_BOUND_S)
    return {tp.partition: tp.offset for tp in got}


def committed_via(node, group, topic, offsets):
    consumer = ck.Consumer({"bootstrap.servers": node.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        return read_committed(consumer, topic, offsets)
    finally:
        consumer.close()


def test_the_coordinator_is_the_leader_of_the_group_s_partition(healthy, topic_name):
    c = healthy
    create_topic_via(c.node(1), topic_name, partitions=3, replication_factor=3)
    c.wait_for_leaders(topic_name, 3)
    producer = ck_producer(c.node(1))
    for p in range(3):
        ck_produce_all(producer, topic_name, [(None, b"r%d" % i, None, None) for i in range(5)], partition=p)
    group = f"g-{topic_name}"
    offsets = {0: 5, 1: 3, 2: 1}
    assert commit_with_a_consumer(c.node(1), group, topic_name, offsets) == offsets

    coordinator, partition = agreed_coordinator(c, group)
    assert coordinator in {n.node_id for n in c.nodes}
    assert len(partition["replicas"]) == SIZE, f"offsets.topic.replication.factor={SIZE}: {partition}"
    assert coordinator in partition["isr"]
    # Any node's clients read the same commits (they all find the one coordinator).
    for node in c.nodes:
        assert committed_via(node, group, topic_name, offsets) == offsets, node


def test_a_broker_that_is_not_the_coordinator_answers_not_coordinator(healthy, topic_name):
    c = healthy
    create_topic_via(c.node(1), topic_name, partitions=1, replication_factor=3)
    c.wait_for_leaders(topic_name, 1)
    group = f"g-{topic_name}"
    # FindCoordinator creates the topic and elects the partition's leader; wait for the coordinator to serve.
    coordinator, _ = agreed_coordinator(c, group)
    wait_until("the coordinator accepts a standalone commit",
               lambda: kwire.offset_commit(c.node(coordinator), group, topic_name, 0, 11) == 0, COORDINATOR_BOUND_S)
    for node in c.other_nodes(coordinator):
        assert kwire.offset_commit(node, group, topic_name, 0, 12) == kwire.NOT_COORDINATOR, node
    assert committed_via(c.node(1), group, topic_name, {0: 11}) == {0: 11}, "the refused commits changed nothing"


def test_the_group_moves_with_its_partition_when_the_coordinator_is_killed(healthy, topic_name):
    c = healthy
    create_topic_via(c.node(1), topic_name, partitions=1, replication_factor=3)
    c.wait_for_leaders(topic_name, 1)
    group = f"g-{topic_name}"
    coordinator, _ = agreed_coordinator(c, group)
    offsets = {0: 42}
    survivor = c.node(next(n.node_id for n in c.other_nodes(coordinator)))
    assert commit_with_a_consumer(survivor, group, topic_name, offsets) == offsets
    c.node(coordinator).kill()
    survivors = c.other_nodes(coordinator)
    new_coordinator, _ = agreed_coordinator(c, group, nodes=survivors, timeout=FAILOVER_BOUND_S, not_on=coordinator)
    assert new_coordinator != coordinator
    assert committed_via(survivor, group, topic_name, offsets) == offsets, "the commit survived the failover"
