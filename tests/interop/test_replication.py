"""Issue 10's data plane on a real 3-node cluster (cluster.py): followers fetch from leaders, the ISR grows through
AlterPartition once they catch up, acks=all waits for the ISR, a kill -9 of the leader loses nothing acknowledged,
and two of three replicas down refuse acks=all writes with NOT_ENOUGH_REPLICAS.

Every assertion is true of Apache Kafka 4.x (INTEROP_BROKER=kafka INTEROP_CLUSTER=1).

Kafka facts the tests encode:
- A new partition's ISR is all its replicas in Kafka; in Annal it starts as the leader alone and followers join
  through AlterPartition once they have fetched up to the high watermark at the current leader epoch. Either way
  it reaches all three replicas within seconds on a healthy cluster.
- The controller removes a fenced broker from every ISR and elects a new leader from what is left, so a kill -9 of
  the leader moves leadership to an in-sync follower within the session timeout.
- acks=all with min.insync.replicas=2 and an ISR of one is refused before anything is written (NOT_ENOUGH_REPLICAS,
  error 19).
"""

import confluent_kafka as ck
from confluent_kafka.admin import AdminClient, NewTopic
import pytest

from cluster import SESSION_TIMEOUT_MS, running
from clients import ck_consume, ck_produce_all, ck_producer

pytestmark = pytest.mark.cluster

SIZE = 3
ALL_IDS = set(range(1, SIZE + 1))
ISR_BOUND_S = 30  # followers caught up and in the ISR of a new, small partition
FAILOVER_BOUND_S = SESSION_TIMEOUT_MS / 1000 + 15  # a killed leader fenced and a follower leading


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    yield from running(tmp_path_factory.mktemp("replication"), size=SIZE)


@pytest.fixture(scope="module")
def split_cluster(tmp_path_factory):
    """One controller-only node (1) and three brokers (2, 3, 4): two brokers can die while the quorum lives."""
    yield from running(tmp_path_factory.mktemp("replication-split"), size=4, controllers=1)


@pytest.fixture
def healthy(cluster):
    cluster.heal()
    yield cluster
    cluster.heal()


def create_topic(node, name, partitions=1, replication_factor=3, config=None):
    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    fs = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=replication_factor,
                                       config=config or {})], operation_timeout=30)
    fs[name].result(timeout=60)


def partition_view(node, topic, partition=0):
    t = node.metadata(topics=[topic])["topics"].get(topic)
    if t is None or t["error"] != 0:
        return None
    return t["partitions"].get(partition)


def wait_for_isr(c, topic, members, via=None, partition=0, timeout=ISR_BOUND_S):
    """Waits until `via` (default: every live node) shows exactly `members` in the partition's ISR, with a leader."""
    nodes = [via] if via else c.live_nodes()

    def probe():
        views = [partition_view(n, topic, partition) for n in nodes]
        if all(v is not None and v["leader"] >= 0 and set(v["isr"]) == set(members) for v in views):
            return views[0]
        return None

    return c.wait_until(f"{topic}-{partition}: ISR {sorted(members)}", probe, timeout)


def test_acks_all_is_replicated_and_survives_a_leader_kill9(healthy, topic_name):
    c = healthy
    create_topic(c.node(1), topic_name, config={"min.insync.replicas": "2"})
    view = wait_for_isr(c, topic_name, ALL_IDS)
    leader = view["leader"]

    producer = ck_producer(c.node(1), **{"acks": "all", "enable.idempotence": True, "linger.ms": 5})
    records = [(b"k%d" % i, b"v%d" % i, None, None) for i in range(300)]
    reports = ck_produce_all(producer, topic_name, records, partition=0)
    acknowledged = [(r.offset(), r.value()) for r in reports]
    assert [o for o, _ in acknowledged] == list(range(300))

    victim = c.node(leader)
    survivors = c.other_nodes(victim)
    victim.kill()

    def new_leader():
        v = partition_view(survivors[0], topic_name)
        return v if v is not None and v["leader"] in {n.node_id for n in survivors} else None

    view = c.wait_until(f"{topic_name}: a surviving leader after kill -9 of {leader}", new_leader, FAILOVER_BOUND_S)
    assert leader not in view["isr"], f"the killed broker is still in the ISR: {view}"
    # Everything acknowledged is on the new leader, at its acknowledged offset.
    got = ck_consume(survivors[1], topic_name, [0], len(acknowledged))
    assert [(m.offset(), m.value()) for m in got] == acknowledged

    # The survivors keep replicating: acks=all still works with two in sync (min.insync.replicas=2).
    more = ck_produce_all(producer, topic_name, [(None, b"after-%d" % i, None, None) for i in range(50)],
                          partition=0)
    assert [r.offset() for r in more] == list(range(300, 350))
    producer.flush(10)


def test_two_of_three_replicas_down_refuse_acks_all(split_cluster, topic_name):
    # With three combined nodes, two down is also the metadata quorum down: no ISR can change, and acks=all just
    # times out (in Kafka too). Brokers separate from the controller show the refusal itself.
    c = split_cluster
    c.heal()
    brokers = {2, 3, 4}
    create_topic(c.node(2), topic_name, config={"min.insync.replicas": "2"})
    view = wait_for_isr(c, topic_name, brokers, via=c.node(2))
    leader = c.node(view["leader"])
    followers = [n for n in c.other_nodes(leader) if n.node_id in brokers]
    for f in followers:
        f.kill()
    wait_for_isr(c, topic_name, {leader.node_id}, via=leader, timeout=FAILOVER_BOUND_S)

    producer = ck_producer(leader, **{"acks": "all", "enable.idempotence": False, "retries": 0,
                                      "message.timeout.ms": 10000})
    errors = []
    producer.produce(topic_name, value=b"refused", partition=0,
                     on_delivery=lambda err, msg: errors.append(err))
    producer.flush(20)
    assert len(errors) == 1 and errors[0] is not None, f"acks=all was acknowledged with an ISR of one: {errors}"
    assert errors[0].code() == ck.KafkaError.NOT_ENOUGH_REPLICAS, errors[0]
    # Nothing was written (the refusal comes before the append): the log end is still 0.
    consumer = ck.Consumer({"bootstrap.servers": leader.bootstrap, "group.id": "probe"})
    try:
        low, high = consumer.get_watermark_offsets(ck.TopicPartition(topic_name, 0), timeout=10)
        assert (low, high) == (0, 0)
    finally:
        consumer.close()
    c.heal()
