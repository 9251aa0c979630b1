"""Persistence: topics, topic configs and acknowledged records survive a clean restart (SIGTERM) and kill -9."""

import confluent_kafka as ck
import pytest

from clients import ck_admin, ck_consume, ck_produce_all, ck_producer, create_topic, wait_for_leaders
from test_admin import ck_topic_configs

pytestmark = pytest.mark.restart


def produce_acked(broker, topic, partitions, per_partition, tag, **conf):
    producer = ck_producer(broker, **{"acks": "all", "linger.ms": 5, "compression.type": "lz4", **conf})
    out = {}
    for p in range(partitions):
        records = [(b"k%d" % i, b"%s-p%d-%d" % (tag, p, i), [("n", b"%d" % i)], None) for i in range(per_partition)]
        reports = ck_produce_all(producer, topic, records, partition=p)
        out[p] = [(r.offset(), r.value()) for r in reports]
    return out


def check_all_there(broker, topic, partitions, expected):
    for p in range(partitions):
        got = ck_consume(broker, topic, [p], len(expected[p]))
        assert [(m.offset(), m.value()) for m in got] == expected[p], f"partition {p}"


@pytest.mark.parametrize("kill", [False, True], ids=["sigterm", "kill9"])
def test_topics_configs_and_records_survive_restart(own_broker, kill):
    b = own_broker
    create_topic(b, "persist-a", partitions=3, config={"retention.ms": "86400000", "max.message.bytes": "500000"})
    create_topic(b, "persist-b", partitions=1)
    a = produce_acked(b, "persist-a", 3, 200, b"before")
    bb = produce_acked(b, "persist-b", 1, 50, b"before")

    b.restart(kill=kill)
    wait_for_leaders(b, "persist-a", 3)
    wait_for_leaders(b, "persist-b", 1)

    md = ck_admin(b).list_topics(timeout=30)
    assert {"persist-a", "persist-b"} <= set(md.topics)
    assert len(md.topics["persist-a"].partitions) == 3
    configs = ck_topic_configs(ck_admin(b), "persist-a")
    assert configs["retention.ms"].value == "86400000"
    assert configs["max.message.bytes"].value == "500000"

    check_all_there(b, "persist-a", 3, a)
    check_all_there(b, "persist-b", 1, bb)

    # Offsets continue where they stopped; nothing is overwritten.
    after = produce_acked(b, "persist-a", 3, 10, b"after")
    for p in range(3):
        assert [o for o, _ in after[p]] == list(range(200, 210))
    consumer_watermarks(b, "persist-a", 3, (0, 210))

    # A topic deleted before a restart stays deleted.
    admin = ck_admin(b)
    admin.delete_topics(["persist-b"], operation_timeout=30)["persist-b"].result(timeout=30)
    b.restart(kill=kill)
    wait_for_leaders(b, "persist-a", 3)
    assert "persist-b" not in ck_admin(b).list_topics(timeout=30).topics
    check_all_there(b, "persist-a", 3, {p: a[p] + after[p] for p in range(3)})


def consumer_watermarks(b, topic, partitions, want):
    from clients import ck_consumer
    c = ck_consumer(b)
    try:
        for p in range(partitions):
            assert c.get_watermark_offsets(ck.TopicPartition(topic, p), timeout=30) == want
    finally:
        c.close()


def test_restart_twice_in_a_row_with_kill(own_broker):
    """Recovery after kill -9 must itself leave a state that the next kill -9 recovers from."""
    b = own_broker
    create_topic(b, "twice", partitions=1)
    expected = produce_acked(b, "twice", 1, 100, b"one")[0]
    b.restart(kill=True)
    wait_for_leaders(b, "twice", 1)
    expected += produce_acked(b, "twice", 1, 100, b"two")[0]
    b.restart(kill=True)
    wait_for_leaders(b, "twice", 1)
    got = ck_consume(b, "twice", [0], 200)
    assert [(m.offset(), m.value()) for m in got] == expected
    assert [o for o, _ in expected] == list(range(200))
