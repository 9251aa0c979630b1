"""ListOffsets by timestamp and MAX_TIMESTAMP inside compressed batches (issue 13).

Kafka answers record-exactly inside a compressed batch: the first offset whose timestamp is >= T, even when that
record sits in the middle of a gzip/snappy/lz4/zstd batch. Each test produces one compressed batch (linger long
enough to hold all records, then flush) with out-of-order timestamps and compares every answer with the model,
which is what Apache Kafka answers (the suite also runs against Kafka with INTEROP_BROKER=kafka).
"""

import confluent_kafka as ck
from confluent_kafka.admin import OffsetSpec
import pytest

from clients import TIMEOUT_S, ck_admin, ck_consume, ck_produce_all, ck_producer, create_topic
from test_produce_consume import recent_base

COMPRESSED = ["gzip", "snappy", "lz4", "zstd"]
# Deltas in ms: out of order, with a repeated maximum (the first record carrying it answers MAX_TIMESTAMP).
DELTAS = [0, 100, 50, 300, 200, 250, 900, 400, 900, 500, 600, 550, 700, 800, 650, 750]


def expected_offset_for(timestamps, target):
    for offset, ts in enumerate(timestamps):
        if ts >= target:
            return offset, ts
    return None


@pytest.mark.parametrize("codec", COMPRESSED)
def test_list_offsets_by_timestamp_is_record_exact_inside_compressed_batches(broker, topic_name, codec):
    create_topic(broker, topic_name, partitions=1)
    base = recent_base()
    timestamps = [base + d for d in DELTAS]
    records = [(b"k%d" % i, (b"value-%d-" % i) * 20, None, ts) for i, ts in enumerate(timestamps)]
    producer = ck_producer(broker, **{"compression.type": codec, "linger.ms": 5000, "batch.num.messages": 1000,
                                      "enable.idempotence": False})
    reports = ck_produce_all(producer, topic_name, records, partition=0)
    assert sorted(r.offset() for r in reports) == list(range(len(records)))
    got = ck_consume(broker, topic_name, [0], len(records))
    assert [m.timestamp()[1] for m in got] == timestamps

    admin = ck_admin(broker)
    tp = ck.TopicPartition(topic_name, 0)

    def list_offsets(spec):
        return admin.list_offsets({tp: spec}, request_timeout=TIMEOUT_S)[tp].result(timeout=TIMEOUT_S)

    targets = sorted({base + d for d in DELTAS} | {base + d + 1 for d in DELTAS} | {base - 1})
    for target in targets:
        answer = list_offsets(OffsetSpec.for_timestamp(target))
        expected = expected_offset_for(timestamps, target)
        if expected is None:
            assert answer.offset == -1, f"T={target - base}: {answer}"
        else:
            assert (answer.offset, answer.timestamp) == expected, f"{codec} T=base+{target - base}"
    mx = list_offsets(OffsetSpec.max_timestamp())
    assert (mx.offset, mx.timestamp) == (DELTAS.index(900), base + 900)

    # librdkafka's consumer API (offsetsForTimes) agrees.
    consumer = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "interop-assign-only"})
    try:
        found = consumer.offsets_for_times([ck.TopicPartition(topic_name, 0, base + 260)], timeout=TIMEOUT_S)
        assert found[0].offset == DELTAS.index(300)
    finally:
        consumer.close()
