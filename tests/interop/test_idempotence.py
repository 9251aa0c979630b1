"""Idempotent producer (issue 6): librdkafka with enable.idempotence=true keeps producing while the broker is killed
with SIGKILL and restarted. Its retries must not duplicate or reorder records, and no acknowledged record may be
lost: the partition must hold exactly the produced sequence, once each, in order."""

import threading
import time

import confluent_kafka as ck
import pytest

from clients import ck_consume, ck_producer, create_topic


TOTAL = 6000
PARTITIONS = 2


@pytest.mark.restart
@pytest.mark.idempotence
def test_librdkafka_idempotent_producer_across_kill9(own_broker):
    b = own_broker
    create_topic(b, "idem", partitions=PARTITIONS)
    producer = ck_producer(b, **{"enable.idempotence": True, "linger.ms": 5, "batch.num.messages": 50,
                                 "message.timeout.ms": 120000, "retry.backoff.ms": 100})
    acked = {p: [] for p in range(PARTITIONS)}
    errors = []
    lock = threading.Lock()

    def on_delivery(err, msg):
        with lock:
            if err is not None:
                errors.append(err)
            else:
                acked[msg.partition()].append((msg.offset(), msg.value()))

    killer_done = threading.Event()
    kill_error = []

    def kill_and_restart():
        try:
            b.restart(kill=True)
        except BaseException as e:  # noqa: BLE001 - reported by the test thread
            kill_error.append(e)
        finally:
            killer_done.set()

    killer = None
    for i in range(TOTAL):
        while True:
            try:
                producer.produce("idem", value=b"seq-%06d" % i, partition=i % PARTITIONS, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
        if i % 10 == 9:
            time.sleep(0.01)  # a steady stream (~6 s), so the kill lands mid-flight
        if killer is None and sum(len(v) for v in acked.values()) >= TOTAL // 3:
            killer = threading.Thread(target=kill_and_restart)
            killer.start()
            killed_at = i
    assert killer is not None, "the broker was never killed: too few acknowledgements"
    assert killed_at < TOTAL - 1000, f"kill came too late in the stream (at record {killed_at})"
    killer.join(180)
    assert killer_done.is_set() and not kill_error, f"restart failed: {kill_error}"
    assert producer.flush(150) == 0, "records still undelivered 150 s after the restart"

    fatal = [e for e in errors if e.fatal()]
    assert not fatal, f"fatal idempotence errors: {fatal}"
    assert not errors, f"delivery errors: {errors[:5]}"

    for p in range(PARTITIONS):
        want = [b"seq-%06d" % i for i in range(p, TOTAL, PARTITIONS)]
        got = ck_consume(b, "idem", [p], len(want), timeout=60)
        values = [m.value() for m in got]
        assert len(set(values)) == len(values), f"partition {p}: duplicates"
        assert values == want, f"partition {p}: records missing or out of order"
        assert [m.offset() for m in got] == list(range(len(want)))
        # Acknowledged offsets are where the records really are.
        by_offset = {m.offset(): m.value() for m in got}
        for offset, value in acked[p]:
            assert by_offset.get(offset) == value, f"partition {p}: acked {value} at {offset}"
        # And nothing beyond: the log ends right after the last record.
        consumer = ck.Consumer({"bootstrap.servers": b.bootstrap, "group.id": "interop-assign-only"})
        try:
            assert consumer.get_watermark_offsets(ck.TopicPartition("idem", p), timeout=30) == (0, len(want))
        finally:
            consumer.close()


@pytest.mark.idempotence
def test_kafka_python_default_producer_is_idempotent_and_exactly_once(broker, topic_name):
    """kafka-python 3.x, like the Java client, defaults to enable_idempotence=True with acks=all."""
    import kafka
    from clients import kp_consume
    create_topic(broker, topic_name, partitions=1)
    producer = kafka.KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=5)
    try:
        futures = [producer.send(topic_name, value=b"d-%d" % i) for i in range(500)]
        producer.flush(timeout=60)
        offsets = [f.get(timeout=60).offset for f in futures]
    finally:
        producer.close()
    assert offsets == list(range(500))
    got = kp_consume(broker, topic_name, [0], 500)
    assert [r.value for r in got] == [b"d-%d" % i for i in range(500)]
    # The broker tracked the producer's sequence numbers (DescribeProducers): one producer, last sequence 499.
    admin = kafka.KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        tp = kafka.TopicPartition(topic_name, 0)
        state = admin.describe_producers([tp])[tp]
    finally:
        admin.close()
    assert len(state.active_producers) == 1, state
    p = state.active_producers[0]
    assert p.producer_id >= 0 and p.producer_epoch >= 0 and p.last_sequence == 499, p
