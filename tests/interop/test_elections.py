"""Issue 10's controller side: leader elections driven by Kafka's own `kafka-leader-election` tool
(org.apache.kafka.tools.LeaderElectionCommand, kafka-tools 4.x) against a real 3-node cluster (cluster.py), Annal or
Apache Kafka 4.x (INTEROP_BROKER=kafka).

Kafka facts the tests encode:
- A broker that shuts down (SIGTERM: controlled shutdown) gives up its leaderships; the first replica in replica
  order that is in the ISR and live takes over, and the leader epoch grows.
- When the broker returns, it rejoins the ISR once its log caught up, but leadership stays where it is until a
  preferred election (auto.leader.rebalance.enable, off here so that only the tool moves it).
- `--election-type preferred` moves leadership to the first replica when it is in the ISR and live; a second run
  finds nothing to do ("Valid replica already elected").
"""

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from clients import ck_produce_all, ck_producer
from cluster import running
from test_kafka_tools import kafka_tool

pytestmark = pytest.mark.cluster

SIZE = 3
# Bounds, in seconds. Kafka meets each with room to spare on a loaded 2-core machine.
MOVE_BOUND_S = 30  # leaderships moved off a broker that shut down, or onto the elected one
ISR_BOUND_S = 60  # a restarted follower caught up and back in the ISR


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    yield from running(tmp_path_factory.mktemp("elections"), size=SIZE,
                           overrides={"auto.leader.rebalance.enable": "false"})


def leader_election(via, *args):
    return kafka_tool("org.apache.kafka.tools.LeaderElectionCommand", "--bootstrap-server", via.bootstrap, *args)


def partition_view(via, topic, partition):
    t = via.metadata(topics=[topic])["topics"].get(topic)
    if t is None or t["error"] != 0 or partition not in t["partitions"]:
        return None
    return t["partitions"][partition]


def test_preferred_election_moves_leadership_back_after_a_restart(cluster, topic_name):
    c = cluster
    via = c.node(2)
    admin = AdminClient({"bootstrap.servers": via.bootstrap})
    fs = admin.create_topics([NewTopic(topic_name, num_partitions=3, replication_factor=-1,
                                       replica_assignment=[[1, 2, 3], [2, 3, 1], [3, 1, 2]])],
                             operation_timeout=30)
    fs[topic_name].result(timeout=60)
    c.wait_until(f"{topic_name} led by its preferred replicas",
                 lambda: c.partition_leaders(topic_name, via) == {0: 1, 1: 2, 2: 3}, MOVE_BOUND_S)
    producer = ck_producer(via, acks="all")
    ck_produce_all(producer, topic_name, [(None, f"before-{i}".encode(), None, None) for i in range(20)])

    before = partition_view(via, topic_name, 0)
    victim = c.node(1)
    victim.stop()
    moved = c.wait_until(
        f"{topic_name}-0 led by broker 2 once broker 1 shut down",
        lambda: (p := partition_view(via, topic_name, 0)) and p["leader"] == 2 and p,
        MOVE_BOUND_S)
    assert moved["leader_epoch"] > before["leader_epoch"]
    assert 1 not in moved["isr"]
    ck_produce_all(producer, topic_name, [(None, f"while-down-{i}".encode(), None, None) for i in range(20)])

    victim.start()
    c.wait_ready()
    c.wait_until(f"broker 1 back in the ISR of {topic_name}-0",
                 lambda: (p := partition_view(via, topic_name, 0)) and 1 in p["isr"], ISR_BOUND_S)
    assert partition_view(via, topic_name, 0)["leader"] == 2, "no automatic rebalance while it is off"

    out = leader_election(via, "--election-type", "preferred", "--topic", topic_name, "--partition", "0")
    assert "Successfully completed leader election (PREFERRED)" in out, out
    assert f"{topic_name}-0" in out, out
    elected = c.wait_until(
        f"{topic_name}-0 led by its preferred replica 1 again on every node",
        lambda: all((p := partition_view(n, topic_name, 0)) and p["leader"] == 1 for n in c.live_nodes()),
        MOVE_BOUND_S)
    assert elected
    assert partition_view(via, topic_name, 0)["leader_epoch"] > moved["leader_epoch"]

    again = leader_election(via, "--election-type", "preferred", "--topic", topic_name, "--partition", "0")
    assert "Valid replica already elected" in again, again
    ck_produce_all(producer, topic_name, [(None, f"after-{i}".encode(), None, None) for i in range(20)])


def reassign_partitions(via, *args):
    return kafka_tool("org.apache.kafka.tools.reassign.ReassignPartitionsCommand", "--bootstrap-server",
                      via.bootstrap, *args)


def test_kafka_reassign_partitions_moves_a_partition_and_its_data(cluster, topic_name, tmp_path):
    """`kafka-reassign-partitions --execute` then `--verify`: the new replicas catch up before the old one leaves,
    and every acknowledged record is on the new replicas at its offset."""
    import json

    from clients import ck_consume

    c = cluster
    c.heal()
    via = c.node(1)
    admin = AdminClient({"bootstrap.servers": via.bootstrap})
    fs = admin.create_topics([NewTopic(topic_name, num_partitions=1, replication_factor=-1,
                                       replica_assignment=[[1]])], operation_timeout=30)
    fs[topic_name].result(timeout=60)
    c.wait_until(f"{topic_name} led by node 1", lambda: c.partition_leaders(topic_name, via) == {0: 1}, MOVE_BOUND_S)
    producer = ck_producer(via, acks="all")
    reports = ck_produce_all(producer, topic_name, [(None, f"r-{i}".encode(), None, None) for i in range(200)],
                             partition=0)
    acknowledged = [(r.offset(), r.value()) for r in reports]

    plan = tmp_path / "reassignment.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic_name, "partition": 0, "replicas": [2, 3], "log_dirs": ["any", "any"]}]}))
    out = reassign_partitions(via, "--reassignment-json-file", str(plan), "--execute")
    assert "Successfully started partition reassignment" in out, out

    def completed():
        verify = reassign_partitions(via, "--reassignment-json-file", str(plan), "--verify")
        return verify if f"Reassignment of partition {topic_name}-0 is completed" in verify else None

    c.wait_until(f"{topic_name}-0 reassigned to [2, 3]", completed, ISR_BOUND_S, interval=1.0)

    def moved():
        v = partition_view(c.node(2), topic_name, 0)
        return v if v and sorted(v["replicas"]) == [2, 3] and sorted(v["isr"]) == [2, 3] and v["leader"] in (2, 3) \
            else None

    view = c.wait_until(f"{topic_name}-0 on replicas [2, 3]", moved, MOVE_BOUND_S)
    got = ck_consume(c.node(view["leader"]), topic_name, [0], len(acknowledged))
    assert [(m.offset(), m.value()) for m in got] == acknowledged
