"""A crashed broker is fenced without waiting out its lease (docs/decisions/0010-crash-fencing.md), while a paused
one (a zombie: its sockets stay open) keeps the lease path, exactly as in Kafka.

The cluster runs with a 60 s `broker.session.timeout.ms`, far longer than any wait here: a leader that moves after a
kill -9 was fenced because its process was proven gone, not because its lease lapsed. Kafka has no such path (it
always waits for the session timeout), so these checks are Annal's own.
"""

import time

import pytest

from cluster import running
from clients import ck_consume, ck_produce_all, ck_producer
from test_replication import create_topic, partition_view, wait_for_isr

pytestmark = [pytest.mark.cluster, pytest.mark.annal_only]

SIZE = 3
ALL_IDS = set(range(1, SIZE + 1))
LONG_SESSION_MS = 60_000
# Far below the session timeout: failover within this bound cannot be the lease lapsing.
EARLY_FAILOVER_BOUND_S = 20
# A paused leader must still lead after this long (it would, in Kafka, for the whole session timeout).
ZOMBIE_OBSERVATION_S = 5


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    yield from running(tmp_path_factory.mktemp("crash-fencing"), size=SIZE,
                           overrides={"broker.session.timeout.ms": str(LONG_SESSION_MS),
                                      "broker.heartbeat.interval.ms": "1000"})


@pytest.fixture
def healthy(cluster):
    cluster.heal()
    yield cluster
    cluster.heal()


def produce_acknowledged(c, topic, n):
    producer = ck_producer(c.node(1), **{"acks": "all", "enable.idempotence": True, "linger.ms": 5})
    reports = ck_produce_all(producer, topic, [(None, b"v%d" % i, None, None) for i in range(n)], partition=0)
    return [(r.offset(), r.value()) for r in reports]


def wait_for_leader_among(c, topic, survivors, bound_s):
    ids = {n.node_id for n in survivors}

    def moved():
        v = partition_view(survivors[0], topic)
        return v if v is not None and v["leader"] in ids else None

    return c.wait_until(f"{topic}: a leader among {sorted(ids)}", moved, bound_s)


def test_a_killed_leader_is_fenced_before_its_lease_lapses(healthy, topic_name):
    c = healthy
    create_topic(c.node(1), topic_name, config={"min.insync.replicas": "2"})
    leader = wait_for_isr(c, topic_name, ALL_IDS)["leader"]
    acknowledged = produce_acknowledged(c, topic_name, 200)
    victim = c.node(leader)
    survivors = c.other_nodes(victim)
    victim.kill()
    view = wait_for_leader_among(c, topic_name, survivors, EARLY_FAILOVER_BOUND_S)
    assert leader not in view["isr"], view
    got = ck_consume(survivors[0], topic_name, [0], len(acknowledged))
    assert [(m.offset(), m.value()) for m in got] == acknowledged
    # The restarted process registers at once (its old lease ended with the proof) and rejoins the ISR.
    victim.start()
    wait_for_isr(c, topic_name, ALL_IDS, timeout=EARLY_FAILOVER_BOUND_S)


def test_a_killed_active_controller_that_leads_is_fenced_by_the_next_controller(healthy, topic_name):
    c = healthy
    controller = c.active_controller()
    create_topic(c.node(1), topic_name, partitions=SIZE, config={"min.insync.replicas": "2"})
    c.wait_for_leaders(topic_name, SIZE)
    led = [p for p, leader in c.partition_leaders(topic_name, c.node(controller)).items() if leader == controller]
    assert led, f"node {controller} leads none of {topic_name}'s partitions (placement spreads leaders)"
    victim = c.node(controller)
    survivors = c.other_nodes(victim)
    victim.kill()
    # A new controller never had the dead broker's connection: it probes every broker on becoming active.
    c.wait_for_leaders(topic_name, SIZE, via=survivors[0], timeout=EARLY_FAILOVER_BOUND_S,
                       allowed=[n.node_id for n in survivors])
    victim.start()


def test_a_paused_leader_keeps_its_lease_and_leads_on(healthy, topic_name):
    c = healthy
    create_topic(c.node(1), topic_name, config={"min.insync.replicas": "2"})
    leader = wait_for_isr(c, topic_name, ALL_IDS)["leader"]
    victim = c.node(leader)
    observer = c.other_nodes(victim)[0]
    victim.pause()
    try:
        # Frozen, its sockets open: no proof it is gone, so only the (long) lease could fence it.
        deadline_checks = 0
        end = time.monotonic() + ZOMBIE_OBSERVATION_S
        # At least five looks, however slow each is on a loaded machine (the lease is far longer than that).
        while time.monotonic() < end or deadline_checks < 5:
            view = partition_view(observer, topic_name)
            assert view is not None and view["leader"] == leader, f"a paused leader was fenced early: {view}"
            deadline_checks += 1
            time.sleep(0.5)
        assert deadline_checks >= 5
    finally:
        victim.resume()
    acknowledged = produce_acknowledged(c, topic_name, 20)
    assert [o for o, _ in acknowledged] == list(range(20))
