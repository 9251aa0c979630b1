"""Produce and consume with unchanged clients: librdkafka (confluent-kafka) and kafka-python."""

import time

import confluent_kafka as ck
from confluent_kafka.admin import OffsetSpec
import kafka
from kafka.partitioner.default import murmur2
import pytest

from clients import (TIMEOUT_S, ck_admin, ck_consume, ck_consumer, ck_poll, ck_poll_nothing, ck_wait_for_eof, ck_produce_all,
                     ck_producer, create_topic, kp_consume, kp_consumer, kp_poll, kp_producer)

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
ACKS = ["0", "1", "all"]


def sample_records(n):
    """Records with and without keys, empty and compressible values, headers; offsets map to index."""
    out = []
    for i in range(n):
        key = None if i % 3 == 0 else f"key-{i % 7}".encode()
        value = b"" if i == 1 else (f"value-{i}-".encode() * (1 + i % 20))
        headers = [("h", f"{i}".encode())] if i % 2 == 0 else None
        out.append((key, value, headers, None))
    return out


def kp_send_all(producer, topic, records, partition=None):
    futures = []
    for key, value, headers, ts in records:
        futures.append(producer.send(topic, key=key, value=value, headers=headers, timestamp_ms=ts,
                                     partition=partition))
    producer.flush(timeout=TIMEOUT_S)
    return [f.get(timeout=TIMEOUT_S) for f in futures]


# ---------------------------------------------------------------- codecs x acks


@pytest.mark.parametrize("acks", ACKS)
@pytest.mark.parametrize("codec", CODECS)
def test_librdkafka_produce_codec_acks(broker, topic_name, codec, acks):
    create_topic(broker, topic_name, partitions=1)
    records = sample_records(60)
    # linger so that records travel in multi-record batches, compressed as one unit.
    producer = ck_producer(broker, **{"compression.type": codec, "acks": acks, "linger.ms": 20})
    reports = ck_produce_all(producer, topic_name, records)
    if acks != "0":
        assert sorted(r.offset() for r in reports) == list(range(60))
    got = ck_consume(broker, topic_name, [0], 60)
    assert [m.offset() for m in got] == list(range(60))
    assert [(m.key(), m.value()) for m in got] == [(k, v) for k, v, _, _ in records]


@pytest.mark.parametrize("acks", [0, 1, "all"])
@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_produce_codec_acks(broker, topic_name, codec, acks):
    create_topic(broker, topic_name, partitions=1)
    records = sample_records(60)
    producer = kp_producer(broker, compression_type=None if codec == "none" else codec, acks=acks, linger_ms=20)
    try:
        metas = kp_send_all(producer, topic_name, records)
    finally:
        producer.close()
    if acks != 0:
        assert [m.offset for m in metas] == list(range(60))
    got = kp_consume(broker, topic_name, [0], 60)
    assert [r.offset for r in got] == list(range(60))
    assert [(r.key, r.value) for r in got] == [(k, v) for k, v, _, _ in records]


# ---------------------------------------------------------------- keyed records and murmur2


def expected_partition(key, partitions):
    # Kafka's default partitioner: toPositive(murmur2(key)) % partitions.
    return (murmur2(key) & 0x7FFFFFFF) % partitions


KEYS = [f"user-{i}".encode() for i in range(80)]


def test_librdkafka_keyed_records_land_in_murmur2_partitions(broker, topic_name):
    create_topic(broker, topic_name, partitions=6)
    # librdkafka's own default is crc32-based; murmur2_random is its Java-compatible partitioner.
    producer = ck_producer(broker, partitioner="murmur2_random", **{"linger.ms": 5})
    reports = ck_produce_all(producer, topic_name, [(k, b"v-" + k, None, None) for k in KEYS])
    for r in reports:
        assert r.partition() == expected_partition(r.key(), 6), r.key()
    assert len({r.partition() for r in reports}) == 6, "80 keys should spread over all 6 partitions"
    for p in range(6):
        want = [k for k in KEYS if expected_partition(k, 6) == p]
        got = ck_consume(broker, topic_name, [p], len(want))
        assert [m.key() for m in got] == want
        assert all(m.partition() == p for m in got)


def test_kafka_python_keyed_records_land_in_murmur2_partitions(broker, topic_name):
    create_topic(broker, topic_name, partitions=6)
    producer = kp_producer(broker, linger_ms=5)
    try:
        metas = kp_send_all(producer, topic_name, [(k, b"v-" + k, None, None) for k in KEYS])
    finally:
        producer.close()
    for k, m in zip(KEYS, metas):
        assert m.partition == expected_partition(k, 6), k
    for p in range(6):
        want = [k for k in KEYS if expected_partition(k, 6) == p]
        got = kp_consume(broker, topic_name, [p], len(want))
        assert [r.key for r in got] == want


# ---------------------------------------------------------------- earliest / latest


def test_librdkafka_consume_from_earliest_and_latest(broker, topic_name):
    create_topic(broker, topic_name, partitions=1)
    producer = ck_producer(broker)
    ck_produce_all(producer, topic_name, [(None, b"old-%d" % i, None, None) for i in range(5)])

    latest = ck_consumer(broker, **{"enable.partition.eof": True})
    try:
        latest.assign([ck.TopicPartition(topic_name, 0, ck.OFFSET_END)])
        # Wait until the consumer has resolved "latest" (offset 5) before producing more.
        assert ck_wait_for_eof(latest) == 5
        ck_produce_all(producer, topic_name, [(None, b"new-%d" % i, None, None) for i in range(3)])
        got = ck_poll(latest, 3)
        assert [(m.offset(), m.value()) for m in got] == [(5, b"new-0"), (6, b"new-1"), (7, b"new-2")]
        assert ck_poll_nothing(latest, 1.0) == []
    finally:
        latest.close()

    got = ck_consume(broker, topic_name, [0], 8, start=ck.OFFSET_BEGINNING)
    assert [m.value() for m in got] == [b"old-%d" % i for i in range(5)] + [b"new-%d" % i for i in range(3)]


def test_kafka_python_consume_from_earliest_and_latest(broker, topic_name):
    create_topic(broker, topic_name, partitions=1)
    producer = kp_producer(broker)
    try:
        kp_send_all(producer, topic_name, [(None, b"old-%d" % i, None, None) for i in range(5)])
        consumer = kp_consumer(broker)
        try:
            tp = kafka.TopicPartition(topic_name, 0)
            consumer.assign([tp])
            consumer.seek_to_end(tp)
            assert consumer.position(tp) == 5
            kp_send_all(producer, topic_name, [(None, b"new-%d" % i, None, None) for i in range(3)])
            got = kp_poll(consumer, 3)
            assert [(r.offset, r.value) for r in got] == [(5, b"new-0"), (6, b"new-1"), (7, b"new-2")]
            consumer.seek_to_beginning(tp)
            got = kp_poll(consumer, 8)
            assert [r.offset for r in got] == list(range(8))
        finally:
            consumer.close()
    finally:
        producer.close()


# ---------------------------------------------------------------- by timestamp





def timestamped_records(n, base):
    return [(None, b"t-%d" % i, None, base + i * 1000) for i in range(n)]


def recent_base():
    # Timestamps must be within retention (7 days by default) or the broker could delete the segment; use
    # "an hour ago", rounded to the second so test arithmetic stays simple.
    return (int(time.time()) - 3600) * 1000


def test_librdkafka_offsets_for_times(broker, topic_name):
    create_topic(broker, topic_name, partitions=1)
    base = recent_base()
    ck_produce_all(ck_producer(broker, **{"linger.ms": 5}), topic_name, timestamped_records(10, base))
    consumer = ck_consumer(broker)
    try:
        def lookup(ts):
            return consumer.offsets_for_times([ck.TopicPartition(topic_name, 0, ts)], timeout=TIMEOUT_S)[0].offset
        assert lookup(base - 5000) == 0
        assert lookup(base) == 0
        assert lookup(base + 2500) == 3
        assert lookup(base + 3000) == 3
        assert lookup(base + 9000) == 9
        assert lookup(base + 9001) == -1  # no such record: librdkafka reports OFFSET_END (-1)
        consumer.assign([ck.TopicPartition(topic_name, 0, lookup(base + 6500))])
        got = ck_poll(consumer, 3)
        assert [(m.offset(), m.timestamp()) for m in got] == [
            (7, (ck.TIMESTAMP_CREATE_TIME, base + 7000)),
            (8, (ck.TIMESTAMP_CREATE_TIME, base + 8000)),
            (9, (ck.TIMESTAMP_CREATE_TIME, base + 9000))]
    finally:
        consumer.close()


def test_kafka_python_offsets_for_times(broker, topic_name):
    create_topic(broker, topic_name, partitions=1)
    base = recent_base()
    producer = kp_producer(broker, linger_ms=5)
    try:
        kp_send_all(producer, topic_name, timestamped_records(10, base))
    finally:
        producer.close()
    consumer = kp_consumer(broker)
    try:
        tp = kafka.TopicPartition(topic_name, 0)
        found = consumer.offsets_for_times({tp: base + 2500})[tp]
        assert (found.offset, found.timestamp) == (3, base + 3000)
        assert consumer.offsets_for_times({tp: base})[tp].offset == 0
        assert consumer.offsets_for_times({tp: base + 9001})[tp] is None
        assert consumer.beginning_offsets([tp])[tp] == 0
        assert consumer.end_offsets([tp])[tp] == 10
    finally:
        consumer.close()


def test_admin_list_offsets_earliest_latest_max_timestamp(broker, topic_name):
    create_topic(broker, topic_name, partitions=1)
    base = recent_base()
    # Out-of-order timestamps: the maximum is at offset 4, not at the end.
    ts = [base + d for d in (0, 1000, 2000, 3000, 9000, 4000, 5000)]
    ck_produce_all(ck_producer(broker), topic_name, [(None, b"m-%d" % i, None, t) for i, t in enumerate(ts)])
    admin = ck_admin(broker)
    tp = ck.TopicPartition(topic_name, 0)

    def list_offsets(spec):
        res = admin.list_offsets({tp: spec}, request_timeout=TIMEOUT_S)
        return res[tp].result(timeout=TIMEOUT_S)

    assert list_offsets(OffsetSpec.earliest()).offset == 0
    assert list_offsets(OffsetSpec.latest()).offset == 7
    mx = list_offsets(OffsetSpec.max_timestamp())
    assert (mx.offset, mx.timestamp) == (4, base + 9000)
    at = list_offsets(OffsetSpec.for_timestamp(base + 4500))
    # First offset whose timestamp is >= T: offset 4 (9000) comes before offset 6 (5000).
    assert at.offset == 4


# ---------------------------------------------------------------- headers and timestamps


HEADERS = [("trace-id", b"abc123"), ("dup", b"first"), ("dup", b"second"), ("empty", b""),
           ("bin", bytes(range(256))), ("ünï", "cödé".encode())]


def test_librdkafka_headers_and_timestamps_intact(broker, topic_name):
    create_topic(broker, topic_name, partitions=1)
    base = recent_base()
    records = [(b"k%d" % i, b"v%d" % i, HEADERS + [("i", b"%d" % i)], base + 17 * i) for i in range(20)]
    records.append((b"null-header", b"x", [("nothing", None)], base + 999))
    records.append((b"no-headers", b"y", None, base + 1000))
    ck_produce_all(ck_producer(broker, **{"linger.ms": 10}), topic_name, records)
    got = ck_consume(broker, topic_name, [0], len(records))
    for m, (k, v, h, ts) in zip(got, records):
        assert (m.key(), m.value()) == (k, v)
        assert m.headers() == h
        assert m.timestamp() == (ck.TIMESTAMP_CREATE_TIME, ts)


def test_kafka_python_headers_and_timestamps_intact(broker, topic_name):
    create_topic(broker, topic_name, partitions=1)
    base = recent_base()
    records = [(b"k%d" % i, b"v%d" % i, HEADERS + [("i", b"%d" % i)], base + 17 * i) for i in range(20)]
    records.append((b"no-headers", b"y", [], base + 1000))
    producer = kp_producer(broker, linger_ms=10)
    try:
        kp_send_all(producer, topic_name, records)
    finally:
        producer.close()
    got = kp_consume(broker, topic_name, [0], len(records))
    for r, (k, v, h, ts) in zip(got, records):
        assert (r.key, r.value) == (k, v)
        assert list(r.headers) == h
        assert (r.timestamp, r.timestamp_type) == (ts, 0)  # 0 = CreateTime


def test_log_append_time_topic_overrides_producer_timestamps(broker, topic_name):
    create_topic(broker, topic_name, partitions=1, config={"message.timestamp.type": "LogAppendTime"})
    before = int(time.time() * 1000)
    reports = ck_produce_all(ck_producer(broker, **{"linger.ms": 10}), topic_name,
                             [(None, b"a%d" % i, None, 1_000_000 + i) for i in range(5)])
    after = int(time.time() * 1000)
    for r in reports:
        kind, ts = r.timestamp()
        assert kind == ck.TIMESTAMP_LOG_APPEND_TIME and before - 1000 <= ts <= after + 1000, r.timestamp()
    got = ck_consume(broker, topic_name, [0], 5)
    for m in got:
        kind, ts = m.timestamp()
        assert kind == ck.TIMESTAMP_LOG_APPEND_TIME, m.timestamp()
        assert before - 1000 <= ts <= after + 1000, (before, ts, after)


# ---------------------------------------------------------------- fetch from the middle of a batch


def test_librdkafka_fetch_from_middle_of_batch(broker, topic_name):
    create_topic(broker, topic_name, partitions=1)
    # A long linger and one flush: the 10 records travel (and are stored) as one batch, offsets 0..9.
    producer = ck_producer(broker, **{"linger.ms": 5000, "batch.num.messages": 1000})
    ck_produce_all(producer, topic_name, [(None, b"r%d" % i, None, None) for i in range(10)] )
    ck_produce_all(producer, topic_name, [(None, b"r%d" % i, None, None) for i in range(10, 15)])
    got = ck_consume(broker, topic_name, [0], 10, start=5)
    assert [(m.offset(), m.value()) for m in got] == [(i, b"r%d" % i) for i in range(5, 15)]


def test_kafka_python_fetch_from_middle_of_batch(broker, topic_name):
    create_topic(broker, topic_name, partitions=1)
    producer = kp_producer(broker, linger_ms=5000, batch_size=1 << 20)
    try:
        kp_send_all(producer, topic_name, [(None, b"r%d" % i, None, None) for i in range(10)])
        kp_send_all(producer, topic_name, [(None, b"r%d" % i, None, None) for i in range(10, 15)])
    finally:
        producer.close()
    got = kp_consume(broker, topic_name, [0], 8, start=7)
    assert [(r.offset, r.value) for r in got] == [(i, b"r%d" % i) for i in range(7, 15)]


# ---------------------------------------------------------------- errors the broker must give


def test_record_larger_than_topic_max_message_bytes_is_rejected(broker, topic_name):
    create_topic(broker, topic_name, partitions=1, config={"max.message.bytes": "2000"})
    producer = ck_producer(broker, **{"compression.type": "none", "message.timeout.ms": 10000})
    errors = []
    producer.produce(topic_name, value=b"x" * 5000, on_delivery=lambda err, msg: errors.append(err))
    producer.flush(TIMEOUT_S)
    assert len(errors) == 1 and errors[0] is not None
    assert errors[0].code() == ck.KafkaError.MSG_SIZE_TOO_LARGE, errors[0]
    # A record that fits is still accepted afterwards.
    ck_produce_all(producer, topic_name, [(None, b"y" * 500, None, None)])
    assert ck_consume(broker, topic_name, [0], 1)[0].value() == b"y" * 500


def test_delete_records_moves_log_start_and_out_of_range_resets(broker, topic_name):
    create_topic(broker, topic_name, partitions=1)
    ck_produce_all(ck_producer(broker), topic_name, [(None, b"d%d" % i, None, None) for i in range(10)])
    admin = ck_admin(broker)
    res = admin.delete_records([ck.TopicPartition(topic_name, 0, 4)], request_timeout=TIMEOUT_S)
    for f in res.values():
        assert f.result(timeout=TIMEOUT_S).low_watermark == 4
    consumer = ck_consumer(broker)
    try:
        assert consumer.get_watermark_offsets(ck.TopicPartition(topic_name, 0), timeout=TIMEOUT_S) == (4, 10)
    finally:
        consumer.close()
    # From the beginning now means from offset 4.
    got = ck_consume(broker, topic_name, [0], 6)
    assert [m.offset() for m in got] == list(range(4, 10))
    # Offset 1 is below the log start: OFFSET_OUT_OF_RANGE, and the client applies auto.offset.reset=earliest.
    got = ck_consume(broker, topic_name, [0], 6, start=1, **{"auto.offset.reset": "earliest"})
    assert [m.offset() for m in got] == list(range(4, 10))
    # Offset 50 is above the end: reset to latest, then only new records arrive.
    consumer = ck_consumer(broker, **{"auto.offset.reset": "latest", "enable.partition.eof": True})
    try:
        consumer.assign([ck.TopicPartition(topic_name, 0, 50)])
        assert ck_wait_for_eof(consumer) == 10
        ck_produce_all(ck_producer(broker), topic_name, [(None, b"after", None, None)])
        got = ck_poll(consumer, 1)
        assert (got[0].offset(), got[0].value()) == (10, b"after")
    finally:
        consumer.close()
    # kafka-python sees the same log start.
    got = kp_consume(broker, topic_name, [0], 7)
    assert [r.offset for r in got] == list(range(4, 11))
