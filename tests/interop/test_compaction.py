"""Log compaction end to end with unchanged clients (issue 13).

Keyed updates and deletes go to a compacted topic whose segments roll every 200 ms (segment.ms) and whose dirty
ratio is low; once the broker's cleaner has run, a consumer from the beginning sees exactly the latest value of
each live key (a deleted key shows at most its tombstone), at its original offset. Then Kafka's own
DumpLogSegments reads the cleaned segments (offsets with gaps, rebuilt batches, indexes). Runs against Apache Kafka
too (INTEROP_BROKER=kafka): the test describes Kafka's cleaner.
"""

import time

import confluent_kafka as ck

from clients import ck_consumer, ck_produce_all, ck_producer, create_topic
from test_dump_log_segments import RECORD_RE, dump, kafka_classpath

KEYS = 40
ROUNDS = 6
CLEAN_TIMEOUT_S = 120


def value(key, round_):
    return (f"value-{key}-round-{round_}-" * 8).encode()


def test_compacted_topic_keeps_the_latest_value_of_each_key(own_broker):
    b = own_broker
    topic = "compacted-e2e"
    create_topic(b, topic, partitions=1, config={
        "cleanup.policy": "compact", "segment.ms": "200", "min.cleanable.dirty.ratio": "0.01",
        "delete.retention.ms": "100", "min.compaction.lag.ms": "0"})
    producer = ck_producer(b, **{"linger.ms": 5, "compression.type": "lz4", "enable.idempotence": False})
    expected = {}
    offsets = {}
    for round_ in range(ROUNDS):
        records = []
        for k in range(KEYS):
            key = f"key-{k}".encode()
            if round_ == ROUNDS - 1 and k % 4 == 0:
                records.append((key, None, None, None))  # delete
                expected[key] = None
            else:
                records.append((key, value(k, round_), None, None))
                expected[key] = value(k, round_)
        for r in ck_produce_all(producer, topic, records, partition=0):
            offsets[r.key()] = r.offset()
        time.sleep(0.4)  # the next append rolls the segment (segment.ms)
    # A last record after the gap: the final round's segment is no longer active, so it can be cleaned too.
    ck_produce_all(producer, topic, [(b"sentinel", b"end", None, None)], partition=0)
    total = ROUNDS * KEYS + 1

    def snapshot():
        """Every record from the beginning up to the end (partition EOF)."""
        consumer = ck_consumer(b, **{"enable.partition.eof": True})
        out = []
        try:
            consumer.assign([ck.TopicPartition(topic, 0, ck.OFFSET_BEGINNING)])
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                msg = consumer.poll(0.5)
                if msg is None:
                    continue
                if msg.error():
                    if msg.error().code() == ck.KafkaError._PARTITION_EOF:
                        return out
                    raise AssertionError(f"consume error: {msg.error()}")
                if msg.key() != b"sentinel":
                    out.append((msg.offset(), msg.key(), msg.value()))
            raise AssertionError("no partition EOF within 30s")
        finally:
            consumer.close()

    deadline = time.monotonic() + CLEAN_TIMEOUT_S
    while True:
        got = snapshot()
        keys_seen = [k for _, k, _ in got]
        if len(got) <= KEYS and len(set(keys_seen)) == len(keys_seen):
            break
        assert time.monotonic() < deadline, f"not compacted after {CLEAN_TIMEOUT_S}s: {len(got)} of {total} records"
        time.sleep(2)
        # Another append now and then: the cleaner only cleans below the active segment.
        ck_produce_all(producer, topic, [(b"sentinel", b"end", None, None)], partition=0)

    by_key = {k: (o, v) for o, k, v in got}
    for key, final in expected.items():
        if final is None:
            assert key not in by_key or by_key[key][1] is None, f"deleted {key} still has a value"
        else:
            assert by_key.get(key) == (offsets[key], final), f"{key}: {by_key.get(key)}"
    assert [o for o, _, _ in got] == sorted(o for o, _, _ in got)

    # Kafka's own tool reads the cleaned segments.
    b.stop()
    part = b.partition_dir(topic, 0)
    if part is None:
        return
    logs = sorted(part.glob("*.log"))
    out = dump(kafka_classpath(), logs, "--deep-iteration")
    dumped = [int(m.group(1)) for line in out.splitlines() if (m := RECORD_RE.match(line))]
    assert dumped == sorted(dumped) and len(dumped) == len(set(dumped))
    assert len(dumped) < total, "the dump shows the cleaned log, not the original"
    indexes = sorted(part.glob("*.index")) + sorted(part.glob("*.timeindex"))
    dump(kafka_classpath(), indexes, "--index-sanity-check")


def test_compacted_topic_refuses_records_without_a_key(broker, topic_name):
    """Kafka's LogValidator: INVALID_RECORD (87) for a keyless record on a compacted topic, nothing stored."""
    create_topic(broker, topic_name, partitions=1, config={"cleanup.policy": "compact"})
    producer = ck_producer(broker, **{"linger.ms": 0, "enable.idempotence": False, "retries": 0,
                                      "compression.type": "gzip"})
    errors = []
    producer.produce(topic_name, value=b"no key", partition=0,
                     on_delivery=lambda err, msg: errors.append(err))
    producer.flush(30)
    assert len(errors) == 1 and errors[0] is not None, errors
    assert errors[0].code() == ck.KafkaError.INVALID_RECORD, errors[0]
    # A keyed record is fine, and lands at offset 0: the refused one took no offset.
    reports = ck_produce_all(producer, topic_name, [(b"k", b"v", None, None)], partition=0)
    assert reports[0].offset() == 0


def test_topic_compression_type_recompresses_on_append(own_broker):
    """compression.type=gzip: lz4 batches from the producer are stored as gzip; zstd on a zstd topic stays as sent."""
    b = own_broker
    create_topic(b, "recompressed", partitions=1, config={"compression.type": "gzip", "compression.gzip.level": "9"})
    producer = ck_producer(b, **{"linger.ms": 50, "compression.type": "lz4", "enable.idempotence": False})
    values = [(b"value-%d-" % i) * 10 for i in range(30)]
    ck_produce_all(producer, "recompressed", [(b"k%d" % i, v, None, None) for i, v in enumerate(values)], partition=0)
    consumer = ck_consumer(b)
    try:
        consumer.assign([ck.TopicPartition("recompressed", 0, ck.OFFSET_BEGINNING)])
        got = []
        deadline = time.monotonic() + 30
        while len(got) < len(values) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                got.append(msg.value())
    finally:
        consumer.close()
    assert got == values
    b.stop()
    part = b.partition_dir("recompressed", 0)
    if part is None:
        return
    out = dump(kafka_classpath(), sorted(part.glob("*.log")))
    codecs = {line.split("compresscodec: ")[1].split()[0] for line in out.splitlines() if "compresscodec: " in line}
    assert codecs == {"gzip"}, out[-2000:]
