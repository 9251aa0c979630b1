"""The partition side of transactions (issue 12), over the raw protocol and with real clients: transactional
batches, WriteTxnMarkers (the coordinator's request, sent here by hand), read_committed fetches that stop at the last
stable offset and report aborted transactions, ListOffsets by isolation level, librdkafka consumers at both
isolation levels, Kafka's own DumpLogSegments reading our `.txnindex` and control batches, and an open transaction
surviving kill -9.

Annal-only: a Kafka 4 broker refuses transactional produce to a partition that no coordinator added to the
transaction (KIP-890 verification), and these tests play the coordinator's part themselves.
"""

import os
import re
import time

import confluent_kafka as ck
import pytest

import kwire
from clients import ck_consumer, create_topic
from test_dump_log_segments import dump, kafka_classpath

pytestmark = [pytest.mark.annal_only, pytest.mark.restart, pytest.mark.ondisk]

# These tests are the coordinator: no coordinator knows their transactions, so KIP-890 verification is off.
NO_VERIFICATION = "transaction.partition.verification.enable=false"


@pytest.fixture
def own_broker(tmp_path):
    """A broker of this test's own (kill -9 and restart), with verification off."""
    from brokers import AnnalBroker
    b = AnnalBroker(os.environ["ANNAL_BIN"], tmp_path, overrides=[NO_VERIFICATION])
    try:
        b.start()
    except BaseException:
        b.close()
        raise
    yield b
    b.close()

ABORTED_TXN_RE = re.compile(r"producerId[=:] ?(\d+),? firstOffset[=:] ?(\d+),? lastOffset[=:] ?(\d+),? "
                            r"lastStableOffset[=:] ?(\d+)")
MARKER_RE = re.compile(r"^\| offset: (\d+) .*endTxnMarker: (COMMIT|ABORT) coordinatorEpoch: (\d+)", re.M)


def new_producer(broker):
    error, producer_id, epoch = kwire.init_producer_id(broker)
    assert error == 0, f"InitProducerId error {error}"
    return producer_id, epoch


def produce(broker, txn_id, topic, partition, values, producer_id, epoch, sequence):
    # Current timestamps: markers carry the broker's clock, and a week's gap would roll the segment (segment.ms).
    batch = kwire.producer_batch(values, producer_id, epoch, sequence, base_timestamp=int(time.time() * 1000))
    error, base = kwire.txn_produce(broker, txn_id, topic, partition, batch)
    assert error == 0, f"transactional produce to {topic}-{partition}: error {error}"
    return base


def consume_all(broker, topic, partition, isolation):
    """Every record a librdkafka consumer at `isolation` gets from the start up to partition EOF."""
    consumer = ck_consumer(broker, **{"isolation.level": isolation, "enable.partition.eof": True})
    out = []
    try:
        consumer.assign([ck.TopicPartition(topic, partition, ck.OFFSET_BEGINNING)])
        while True:
            msg = consumer.poll(10)
            assert msg is not None, f"no partition EOF within 10 s ({isolation}); got {out}"
            if msg.error():
                if msg.error().code() == ck.KafkaError._PARTITION_EOF:
                    return out
                raise AssertionError(f"consume error: {msg.error()}")
            out.append((msg.offset(), msg.value().decode()))
    finally:
        consumer.close()


def test_read_committed_markers_txnindex_and_kill9(own_broker, topic_name):
    b = own_broker
    create_topic(b, topic_name, partitions=2)
    pa, ea = new_producer(b)
    pb, eb = new_producer(b)

    # A writes to both partitions; B opens a transaction on partition 0 behind A's.
    assert produce(b, "txn-a", topic_name, 0, [b"a0", b"a1", b"a2"], pa, ea, 0) == 0
    assert produce(b, "txn-a", topic_name, 1, [b"a-p1-0", b"a-p1-1"], pa, ea, 0) == 0
    assert produce(b, "txn-b", topic_name, 0, [b"b0", b"b1"], pb, eb, 0) == 3

    # Both open: read_committed reads nothing and the LSO is the oldest open transaction's start.
    committed = kwire.fetch_isolated(b, topic_name, 0, 0, isolation=1)
    assert (committed["error"], committed["high_watermark"], committed["last_stable_offset"]) == (0, 5, 0)
    assert committed["records"] == b"" and committed["aborted"] == []
    uncommitted = kwire.fetch_isolated(b, topic_name, 0, 0, isolation=0)
    assert sum(n for _, _, n in kwire.parse_batches(uncommitted["records"])) == 5
    assert uncommitted["aborted"] is None
    assert kwire.list_offset(b, topic_name, 0, isolation=1) == (0, 0)
    assert kwire.list_offset(b, topic_name, 0, isolation=0) == (0, 5)

    # COMMIT A on both partitions: partition 0 is stable up to B's start.
    assert kwire.write_txn_markers(b, [(pa, ea, True, 0, {topic_name: [0, 1]})]) == {
        (pa, topic_name, 0): 0, (pa, topic_name, 1): 0}
    committed = kwire.fetch_isolated(b, topic_name, 0, 0, isolation=1)
    assert committed["last_stable_offset"] == 3
    assert [(base, last) for base, last, _ in kwire.parse_batches(committed["records"])] == [(0, 2)]
    assert kwire.list_offset(b, topic_name, 0, isolation=1) == (0, 3)

    # ABORT B: everything is stable; a read_committed fetch learns B's aborted range from the txn index.
    assert kwire.write_txn_markers(b, [(pb, eb, False, 0, {topic_name: [0]})]) == {(pb, topic_name, 0): 0}
    done = kwire.fetch_isolated(b, topic_name, 0, 0, isolation=1)
    assert (done["high_watermark"], done["last_stable_offset"]) == (7, 7)
    assert done["aborted"] == [(pb, 3)]
    assert kwire.fetch_isolated(b, topic_name, 0, 7, isolation=1)["aborted"] == []
    assert kwire.list_offset(b, topic_name, 0, isolation=1) == (0, 7)

    # Real consumers: read_committed sees A's records only, read_uncommitted everything.
    assert consume_all(b, topic_name, 0, "read_committed") == [(0, "a0"), (1, "a1"), (2, "a2")]
    assert [v for _, v in consume_all(b, topic_name, 0, "read_uncommitted")] == ["a0", "a1", "a2", "b0", "b1"]
    assert consume_all(b, topic_name, 1, "read_committed") == [(0, "a-p1-0"), (1, "a-p1-1")]

    # Kafka's DumpLogSegments decodes our .txnindex and the control batches.
    classpath = kafka_classpath()
    part0 = b.partition_dir(topic_name, 0)
    txnindexes = sorted(part0.glob("*.txnindex"))
    assert [p.name for p in txnindexes] == ["00000000000000000000.txnindex"]
    out = dump(classpath, txnindexes)
    # B aborted at 6 with nothing else open: its last stable offset is the marker's next offset.
    assert ABORTED_TXN_RE.findall(out) == [(str(pb), "3", "6", "7")], out
    log_out = dump(classpath, sorted(part0.glob("*.log")), "--print-data-log")
    assert MARKER_RE.findall(log_out)[:2] == [("5", "COMMIT", "0"), ("6", "ABORT", "0")], log_out
    assert "isTransactional: true isControl: true" in log_out, log_out

    # kill -9 with a transaction open on partition 1: the LSO stays pinned at its start after the restart.
    pc, ec = new_producer(b)
    start = produce(b, "txn-c", topic_name, 1, [b"c0", b"c1"], pc, ec, 0)
    assert start == 3  # after A's two records and its marker
    assert kwire.list_offset(b, topic_name, 1, isolation=1) == (0, 3)
    b.restart(kill=True)
    create_topic_ready = kwire.list_offset(b, topic_name, 1, isolation=1)
    assert create_topic_ready == (0, 3), "the open transaction still pins the LSO after kill -9"
    assert kwire.list_offset(b, topic_name, 1, isolation=0) == (0, 5)
    assert kwire.fetch_isolated(b, topic_name, 0, 0, isolation=1)["aborted"] == [(pb, 3)]
    # The markers still work: C commits, and its records become visible to read_committed.
    assert kwire.write_txn_markers(b, [(pc, ec, True, 0, {topic_name: [1]})]) == {(pc, topic_name, 1): 0}
    assert kwire.list_offset(b, topic_name, 1, isolation=1) == (0, 6)
    assert [v for _, v in consume_all(b, topic_name, 1, "read_committed")] == ["a-p1-0", "a-p1-1", "c0", "c1"]

    # Fencing: a marker from an older producer epoch is INVALID_PRODUCER_EPOCH, one from an older coordinator
    # (after epoch 5 wrote) TRANSACTION_COORDINATOR_FENCED; an unknown partition UNKNOWN_TOPIC_OR_PARTITION.
    assert kwire.write_txn_markers(b, [(pb, eb - 1, True, 0, {topic_name: [0]})]) == {(pb, topic_name, 0): 47}
    assert kwire.write_txn_markers(b, [(pb, eb, False, 5, {topic_name: [0]})]) == {(pb, topic_name, 0): 0}
    assert kwire.write_txn_markers(b, [(pb, eb, True, 4, {topic_name: [0]})]) == {(pb, topic_name, 0): 52}
    assert kwire.write_txn_markers(b, [(pb, eb, True, 5, {topic_name: [7]})]) == {(pb, topic_name, 7): 3}
