"""Small helpers around the unchanged Kafka clients (confluent-kafka = librdkafka, and kafka-python).

Consumers here use assign() with explicit start offsets and never commit, so they need no group coordinator:
confluent-kafka insists on a group.id, but librdkafka only talks to the coordinator for committed offsets.
"""

import time

import confluent_kafka as ck
from confluent_kafka.admin import AdminClient, NewTopic
import kafka

TIMEOUT_S = 30


def ck_admin(broker):
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def wait_for_leaders(broker, topic, partitions, timeout=TIMEOUT_S):
    """Waits until metadata shows every partition of `topic` with a leader (Kafka elects them asynchronously)."""
    admin = ck_admin(broker)
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        md = admin.list_topics(topic=topic, timeout=5)
        t = md.topics.get(topic)
        last = t
        if t is not None and t.error is None and len(t.partitions) == partitions and all(
                p.leader >= 0 for p in t.partitions.values()):
            return
        time.sleep(0.1)
    raise AssertionError(f"topic {topic} not ready with {partitions} partitions: {last}")


def create_topic(broker, name, partitions=1, config=None):
    admin = ck_admin(broker)  # keep a reference: a collected AdminClient fails its pending futures
    fs = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=1, config=config or {})],
        operation_timeout=TIMEOUT_S)
    fs[name].result(timeout=TIMEOUT_S)
    wait_for_leaders(broker, name, partitions)


def ck_producer(broker, **conf):
    c = {"bootstrap.servers": broker.bootstrap}
    c.update(conf)
    return ck.Producer(c)


def ck_produce_all(producer, topic, records, partition=None):
    """Produces records [(key, value, headers, timestamp_ms)] and returns the delivery reports, failing on any error."""
    reports = []
    errors = []

    def on_delivery(err, msg):
        if err is not None:
            errors.append(err)
        else:
            reports.append(msg)

    for key, value, headers, ts in records:
        kwargs = {"value": value, "on_delivery": on_delivery}
        if key is not None:
            kwargs["key"] = key
        if headers is not None:
            kwargs["headers"] = headers
        if ts is not None:
            kwargs["timestamp"] = ts
        if partition is not None:
            kwargs["partition"] = partition
        producer.produce(topic, **kwargs)
    remaining = producer.flush(TIMEOUT_S)
    assert remaining == 0, f"{remaining} records not delivered within {TIMEOUT_S}s"
    assert not errors, f"delivery errors: {errors}"
    return reports


def ck_consumer(broker, **conf):
    c = {"bootstrap.servers": broker.bootstrap, "group.id": "interop-assign-only",
         "enable.auto.commit": False, "enable.auto.offset.store": False}
    c.update(conf)
    return ck.Consumer(c)


def ck_consume(broker, topic, partitions, count, start=ck.OFFSET_BEGINNING, timeout=TIMEOUT_S, **conf):
    """Consumes `count` messages from the given partitions starting at `start` (an offset or OFFSET_* constant)."""
    consumer = ck_consumer(broker, **conf)
    try:
        consumer.assign([ck.TopicPartition(topic, p, start) for p in partitions])
        return ck_poll(consumer, count, timeout)
    finally:
        consumer.close()


def ck_poll(consumer, count, timeout=TIMEOUT_S):
    out = []
    deadline = time.monotonic() + timeout
    while len(out) < count and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        if msg.error():
            if msg.error().code() == ck.KafkaError._PARTITION_EOF:
                continue
            raise AssertionError(f"consume error: {msg.error()}")
        out.append(msg)
    assert len(out) == count, f"consumed {len(out)} of {count} records within {timeout}s"
    return out


def ck_wait_for_eof(consumer, timeout=TIMEOUT_S):
    """Polls until librdkafka reports partition EOF (needs enable.partition.eof=true): the consumer has resolved its
    start offset and fetched up to the end, so records produced afterwards are "new" to it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is None:
            continue
        if msg.error() and msg.error().code() == ck.KafkaError._PARTITION_EOF:
            return msg.offset()
        raise AssertionError(f"expected partition EOF, got {msg.error() or (msg.offset(), msg.value())}")
    raise AssertionError(f"no partition EOF within {timeout}s")


def ck_poll_nothing(consumer, seconds):
    """Polls for `seconds` and returns whatever arrives (tests expect nothing)."""
    out = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is not None and not msg.error():
            out.append(msg)
    return out


def kp_producer(broker, **conf):
    return kafka.KafkaProducer(bootstrap_servers=broker.bootstrap, **conf)


def kp_consumer(broker, **conf):
    c = dict(bootstrap_servers=broker.bootstrap, group_id=None, enable_auto_commit=False,
             auto_offset_reset="earliest", consumer_timeout_ms=1000)
    c.update(conf)
    return kafka.KafkaConsumer(**c)


def kp_poll(consumer, count, timeout=TIMEOUT_S):
    out = []
    deadline = time.monotonic() + timeout
    while len(out) < count and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=500).values():
            out.extend(records)
    assert len(out) == count, f"consumed {len(out)} of {count} records within {timeout}s"
    return out


def kp_consume(broker, topic, partitions, count, start="earliest", timeout=TIMEOUT_S):
    """Consumes `count` records; start is 'earliest', 'latest' or an offset."""
    consumer = kp_consumer(broker)
    try:
        tps = [kafka.TopicPartition(topic, p) for p in partitions]
        consumer.assign(tps)
        if start == "earliest":
            consumer.seek_to_beginning(*tps)
        elif start == "latest":
            consumer.seek_to_end(*tps)
        else:
            for tp in tps:
                consumer.seek(tp, start)
        return kp_poll(consumer, count, timeout)
    finally:
        consumer.close()
