"""Transactions (issue 12), with unchanged clients: librdkafka's transactional producer (confluent-kafka), a
read_committed consumer, Kafka's own `kafka-transactions` tool (org.apache.kafka.tools.TransactionsCommand), and raw
protocol for the bad sequences. Every test also runs against Apache Kafka (INTEROP_BROKER=kafka)."""
import signal
import struct
import subprocess
import sys
import textwrap
import time
import uuid

import confluent_kafka as ck
import pytest

import kwire
from clients import TIMEOUT_S, ck_consumer, create_topic
from test_kafka_tools import kafka_tool

pytestmark = pytest.mark.transactions

TXN_TIMEOUT_MS = 60_000


def txn_id(prefix="it-txn"):
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def txn_producer(broker, transactional_id, **conf):
    c = {"bootstrap.servers": broker.bootstrap, "transactional.id": transactional_id,
         "transaction.timeout.ms": TXN_TIMEOUT_MS, "linger.ms": 5}
    c.update(conf)
    return ck.Producer(c)


def read_committed(broker, topic, partitions=(0,), **conf):
    consumer = ck_consumer(broker, **{"isolation.level": "read_committed", "enable.partition.eof": True, **conf})
    consumer.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in partitions])
    return consumer


def values_until_eof(consumer, partitions=1, timeout=TIMEOUT_S):
    """Every value read until each assigned partition reports EOF (read_committed: up to the LSO)."""
    out, eofs = [], set()
    deadline = time.monotonic() + timeout
    while len(eofs) < partitions and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        if msg.error():
            if msg.error().code() == ck.KafkaError._PARTITION_EOF:
                eofs.add((msg.topic(), msg.partition()))
                continue
            raise AssertionError(f"consume error: {msg.error()}")
        out.append(msg.value().decode())
    assert len(eofs) == partitions, f"no EOF within {timeout}s (read {out})"
    return out


def transactions_tool(broker, *args):
    return kafka_tool("org.apache.kafka.tools.TransactionsCommand", "--bootstrap-server", broker.bootstrap, *args)


def describe_row(broker, transactional_id):
    """`kafka-transactions describe`: {column: value} of the one row."""
    out = transactions_tool(broker, "describe", "--transactional-id", transactional_id)
    lines = [l for l in out.splitlines() if l.strip()]
    header = lines[0].split()
    values = lines[1].split(None, len(header) - 1)
    return dict(zip(header, (v.strip() for v in values)))


def wait_describe(broker, transactional_id, state, timeout=60):
    deadline = time.monotonic() + timeout
    while True:
        row = describe_row(broker, transactional_id)
        if row["TransactionState"] == state or time.monotonic() > deadline:
            assert row["TransactionState"] == state, row
            return row
        time.sleep(1)


def test_commit_and_abort_across_two_topics_read_committed(broker, topic_name):
    a, b = topic_name + "-a", topic_name + "-b"
    create_topic(broker, a, 1)
    create_topic(broker, b, 1)
    p = txn_producer(broker, txn_id())
    p.init_transactions(TIMEOUT_S)
    p.begin_transaction()
    for i in range(5):
        p.produce(a, value=f"c1-{i}", partition=0)
        p.produce(b, value=f"c1-{i}", partition=0)
    p.commit_transaction(TIMEOUT_S)
    p.begin_transaction()
    for i in range(5):
        p.produce(a, value=f"aborted-{i}", partition=0)
        p.produce(b, value=f"aborted-{i}", partition=0)
    p.flush(TIMEOUT_S)
    p.abort_transaction(TIMEOUT_S)
    p.begin_transaction()
    p.produce(a, value="c2-0", partition=0)
    p.produce(b, value="c2-0", partition=0)
    p.commit_transaction(TIMEOUT_S)
    for topic in (a, b):
        c = read_committed(broker, topic)
        try:
            got = values_until_eof(c)
        finally:
            c.close()
        assert got == [f"c1-{i}" for i in range(5)] + ["c2-0"], f"{topic}: {got}"
    # read_uncommitted sees the aborted records too (they are in the log, between the markers).
    c = ck_consumer(broker, **{"enable.partition.eof": True, "isolation.level": "read_uncommitted"})
    c.assign([ck.TopicPartition(a, 0, ck.OFFSET_BEGINNING)])
    try:
        assert len(values_until_eof(c)) == 11
    finally:
        c.close()


def test_zombie_producer_is_fenced(broker, topic_name):
    create_topic(broker, topic_name, 1)
    tid = txn_id()
    zombie = txn_producer(broker, tid)
    zombie.init_transactions(TIMEOUT_S)
    current = txn_producer(broker, tid)
    current.init_transactions(TIMEOUT_S)
    zombie.begin_transaction()
    zombie.produce(topic_name, value="zombie", partition=0)
    with pytest.raises(ck.KafkaException) as fenced:
        zombie.commit_transaction(TIMEOUT_S)
    assert fenced.value.args[0].fatal() or fenced.value.args[0].code() in (
        ck.KafkaError._FENCED, ck.KafkaError.PRODUCER_FENCED, ck.KafkaError.INVALID_PRODUCER_EPOCH), fenced.value
    current.begin_transaction()
    current.produce(topic_name, value="current", partition=0)
    current.commit_transaction(TIMEOUT_S)
    c = read_committed(broker, topic_name)
    try:
        assert values_until_eof(c) == ["current"]
    finally:
        c.close()


def test_transaction_left_open_is_aborted_after_its_timeout(broker, topic_name):
    create_topic(broker, topic_name, 1)
    tid = txn_id()
    p = txn_producer(broker, tid, **{"transaction.timeout.ms": 2000})
    p.init_transactions(TIMEOUT_S)
    p.begin_transaction()
    p.produce(topic_name, value="left-open", partition=0)
    p.flush(TIMEOUT_S)
    # Kafka checks every transaction.abort.timed.out.transaction.cleanup.interval.ms (10 s).
    row = wait_describe(broker, tid, "CompleteAbort", timeout=60)
    assert int(row["ProducerEpoch"]) >= 1, row
    # The LSO moved on: a read_committed consumer reaches the end and sees nothing.
    c = read_committed(broker, topic_name)
    try:
        assert values_until_eof(c) == []
    finally:
        c.close()
    with pytest.raises(ck.KafkaException):
        p.commit_transaction(TIMEOUT_S)


KILLED_PRODUCER = textwrap.dedent("""
    import os, sys, confluent_kafka as ck
    bootstrap, tid, topic = sys.argv[1:4]
    p = ck.Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "transaction.timeout.ms": 60000})
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(10):
        p.produce(topic, value=f"from-the-dead-{i}", partition=0)
    p.flush(30)
    print("produced", flush=True)
    os.kill(os.getpid(), 9)
""")


def test_init_producer_id_recovers_after_the_producer_is_killed(broker, topic_name):
    create_topic(broker, topic_name, 1)
    tid = txn_id()
    proc = subprocess.run([sys.executable, "-c", KILLED_PRODUCER, broker.bootstrap, tid, topic_name],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL and "produced" in proc.stdout, proc.stdout + proc.stderr
    assert describe_row(broker, tid)["TransactionState"] == "Ongoing"
    # The restarted producer's InitProducerId aborts the transaction the dead one left open.
    p = txn_producer(broker, tid)
    p.init_transactions(TIMEOUT_S)
    p.begin_transaction()
    p.produce(topic_name, value="after-recovery", partition=0)
    p.commit_transaction(TIMEOUT_S)
    c = read_committed(broker, topic_name)
    try:
        assert values_until_eof(c) == ["after-recovery"]
    finally:
        c.close()


def test_send_offsets_to_transaction_commits_offsets_only_on_commit(broker, topic_name):
    source, sink = topic_name + "-in", topic_name + "-out"
    create_topic(broker, source, 1)
    create_topic(broker, sink, 1)
    plain = ck.Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(6):
        plain.produce(source, value=f"in-{i}", partition=0)
    assert plain.flush(TIMEOUT_S) == 0
    group = f"it-txn-group-{uuid.uuid4().hex[:8]}"
    consumer = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False,
                            "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    consumer.assign([ck.TopicPartition(source, 0, 0)])
    p = txn_producer(broker, txn_id())
    p.init_transactions(TIMEOUT_S)

    def copy(count, commit):
        msgs = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(msgs) < count and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is not None and not m.error():
                msgs.append(m)
        assert len(msgs) == count
        p.begin_transaction()
        for m in msgs:
            p.produce(sink, value=m.value(), partition=0)
        p.send_offsets_to_transaction([ck.TopicPartition(source, 0, msgs[-1].offset() + 1)],
                                      consumer.consumer_group_metadata(), TIMEOUT_S)
        if commit:
            p.commit_transaction(TIMEOUT_S)
        else:
            p.abort_transaction(TIMEOUT_S)

    def committed():
        return consumer.committed([ck.TopicPartition(source, 0)], timeout=TIMEOUT_S)[0].offset

    copy(3, commit=True)
    assert committed() == 3
    copy(3, commit=False)
    assert committed() == 3, "an aborted transaction's offsets are never committed"
    consumer.seek(ck.TopicPartition(source, 0, 3))
    copy(3, commit=True)
    assert committed() == 6
    consumer.close()
    c = read_committed(broker, sink)
    try:
        assert values_until_eof(c) == [f"in-{i}" for i in range(6)]
    finally:
        c.close()


def test_kafka_transactions_tool_lists_and_describes(broker, topic_name):
    create_topic(broker, topic_name, 2)
    tid = txn_id()
    p = txn_producer(broker, tid)
    p.init_transactions(TIMEOUT_S)
    p.begin_transaction()
    p.produce(topic_name, value="x", partition=0)
    p.produce(topic_name, value="y", partition=1)
    p.flush(TIMEOUT_S)
    listed = transactions_tool(broker, "list")
    rows = [l.split() for l in listed.splitlines()[1:] if l.strip()]
    mine = [r for r in rows if r[0] == tid]
    assert mine and mine[0][3] == "Ongoing", listed
    row = describe_row(broker, tid)
    assert row["TransactionState"] == "Ongoing", row
    assert row["TransactionTimeoutMs"] == str(TXN_TIMEOUT_MS), row
    assert set(row["TopicPartitions"].split(",")) == {f"{topic_name}-0", f"{topic_name}-1"}, row
    p.commit_transaction(TIMEOUT_S)
    wait_describe(broker, tid, "CompleteCommit")


def test_transaction_version_2_java_beside_version_1_librdkafka(broker, topic_name):
    """KIP-890 part 2: Java's kafka-clients 4.x speak transaction version 2 when the broker finalizes
    `transaction.version` 2 in ApiVersions (as Kafka 4.x does and Annal does by default): no AddPartitionsToTxn, and
    every EndTxn bumps the epoch, so after N transactions the id's epoch is about N. librdkafka stays at version 1
    (explicit AddPartitionsToTxn, one epoch for all its transactions). Both write the same topic at once; a
    read_committed consumer sees every committed record of both and none of the aborted ones."""
    import threading
    from test_dump_log_segments import kafka_classpath
    create_topic(broker, topic_name, 2)
    java_id, rd_id = txn_id("it-tv2-java"), txn_id("it-tv1-rd")
    records = 4000

    def java_producer():
        # ProducerPerformance commits a transaction every 100 ms and the last one when it is done.
        out = subprocess.run(
            ["java", "-Xmx256m", "-cp", kafka_classpath(), "org.apache.kafka.tools.ProducerPerformance",
             "--topic", topic_name, "--num-records", str(records), "--record-size", "64", "--throughput", "4000",
             "--transactional-id", java_id, "--transaction-duration-ms", "100",
             "--producer-props", f"bootstrap.servers={broker.bootstrap}", "acks=all", "linger.ms=5"],
            capture_output=True, text=True, timeout=120)
        java_result.append(out)

    java_result = []
    t = threading.Thread(target=java_producer)
    t.start()
    p = txn_producer(broker, rd_id)
    p.init_transactions(TIMEOUT_S)
    expected_rd = []
    for n in range(7):  # aborts the 3rd and 6th, ends with a commit
        p.begin_transaction()
        for i in range(10):
            p.produce(topic_name, value=f"rd-{n}-{i}", partition=i % 2)
        if n % 3 == 2:
            p.flush(TIMEOUT_S)
            p.abort_transaction(TIMEOUT_S)
        else:
            p.commit_transaction(TIMEOUT_S)
            expected_rd += [f"rd-{n}-{i}" for i in range(10)]
        time.sleep(0.2)
    t.join(150)
    assert java_result and java_result[0].returncode == 0, java_result and java_result[0].stderr[-3000:]
    java_row = wait_describe(broker, java_id, "CompleteCommit")
    rd_row = wait_describe(broker, rd_id, "CompleteCommit")
    # ProducerPerformance ran >= 1 s with a transaction every 100 ms: version 2 bumped the epoch at each.
    assert int(java_row["ProducerEpoch"]) >= 5, java_row
    assert int(rd_row["ProducerEpoch"]) == 0, f"librdkafka uses transaction version 1: {rd_row}"
    c = read_committed(broker, topic_name, partitions=(0, 1))
    try:
        got = values_until_eof(c, partitions=2)
    finally:
        c.close()
    rd_got = [v for v in got if v.startswith("rd-")]
    assert sorted(rd_got) == sorted(expected_rd), rd_got
    for part in (0, 1):
        mine = [v for v in rd_got if int(v.rsplit("-", 1)[1]) % 2 == part]
        assert mine == [v for v in expected_rd if int(v.rsplit("-", 1)[1]) % 2 == part], "in order per partition"
    assert len(got) - len(rd_got) == records, f"{len(got) - len(rd_got)} Java records committed, not {records}"


GO_CLIENT_DIR = __import__("pathlib").Path(__file__).parent / "go" / "txnclient"


@pytest.fixture(scope="session")
def franz_go_client(tmp_path_factory):
    """tests/interop/go/txnclient (franz-go's transactional producer), built once with `go build` (modules from the
    Go proxy on first use)."""
    import shutil
    if shutil.which("go") is None:
        pytest.skip("no Go toolchain: install Go to run the franz-go transactional tests")
    out = tmp_path_factory.mktemp("go") / "txnclient"
    build = subprocess.run(["go", "build", "-o", str(out), "."], cwd=GO_CLIENT_DIR, capture_output=True, text=True,
                           timeout=300)
    assert build.returncode == 0, f"go build failed:\n{build.stderr[-3000:]}"
    return out


def run_franz_go(binary, *args):
    proc = subprocess.run([str(binary), *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"txnclient {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr[-3000:]}"
    return proc.stdout


def test_franz_go_commit_and_abort_across_two_topics(broker, topic_name, franz_go_client):
    a, b = topic_name + "-a", topic_name + "-b"
    create_topic(broker, a, 1)
    create_topic(broker, b, 1)
    tid = txn_id("it-franz")
    out = run_franz_go(franz_go_client, "commit-abort", broker.bootstrap, tid, a, b)
    assert out.count("ok transaction") == 3, out
    for topic in (a, b):
        c = read_committed(broker, topic)
        try:
            got = values_until_eof(c)
        finally:
            c.close()
        assert got == [f"c1-{i}" for i in range(5)] + ["c2-0"], f"{topic}: {got}"
    wait_describe(broker, tid, "CompleteCommit")


def test_franz_go_zombie_is_fenced(broker, topic_name, franz_go_client):
    create_topic(broker, topic_name, 1)
    out = run_franz_go(franz_go_client, "zombie", broker.bootstrap, txn_id("it-franz-z"), topic_name)
    assert "fenced:" in out, out
    c = read_committed(broker, topic_name)
    try:
        assert values_until_eof(c) == ["a-0", "b-0", "b-1"]
    finally:
        c.close()


@pytest.mark.restart
def test_coordinator_state_survives_kill9_and_restart(own_broker, topic_name):
    b = own_broker
    create_topic(b, topic_name, 1)
    tid = txn_id()
    p = txn_producer(b, tid)
    p.init_transactions(TIMEOUT_S)
    p.begin_transaction()
    p.produce(topic_name, value="before-kill", partition=0)
    p.commit_transaction(TIMEOUT_S)
    before = wait_describe(b, tid, "CompleteCommit")
    del p
    b.restart(kill=True)
    after = wait_describe(b, tid, "CompleteCommit")
    assert (after["ProducerId"], after["ProducerEpoch"]) == (before["ProducerId"], before["ProducerEpoch"])
    # The replayed state fences by epoch: a new producer of the id gets the next epoch of the same producer id.
    p2 = txn_producer(b, tid)
    p2.init_transactions(TIMEOUT_S)
    row = describe_row(b, tid)
    assert row["ProducerId"] == before["ProducerId"]
    assert int(row["ProducerEpoch"]) == int(before["ProducerEpoch"]) + 1
    p2.begin_transaction()
    p2.produce(topic_name, value="after-restart", partition=0)
    p2.commit_transaction(TIMEOUT_S)
    c = read_committed(b, topic_name)
    try:
        assert values_until_eof(c) == ["before-kill", "after-restart"]
    finally:
        c.close()


# ---------------------------------------------------------------- raw protocol: bad sequences

API_FIND_COORDINATOR, API_INIT_PRODUCER_ID, API_ADD_PARTITIONS, API_END_TXN = 10, 22, 24, 26


def raw(sock, api, version, body, cid=[0]):
    cid[0] += 1
    return kwire.roundtrip(sock, api, version, cid[0], body)


def raw_find_txn_coordinator(sock, tid):
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        r = raw(sock, API_FIND_COORDINATOR, 1, kwire.string(tid) + b"\x01")
        r.i32()
        error = r.i16()
        if error == 0 or time.monotonic() > deadline:
            assert error == 0, f"FindCoordinator(TRANSACTION) answered {error}"
            return
        time.sleep(0.2)


def raw_init(sock, tid, timeout_ms=60000):
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        r = raw(sock, API_INIT_PRODUCER_ID, 1, kwire.string(tid) + struct.pack(">i", timeout_ms))
        r.i32()
        error, pid, epoch = r.i16(), r.i64(), r.i16()
        if error not in (14, 15, 16, 51) or time.monotonic() > deadline:
            return error, pid, epoch
        time.sleep(0.2)


def raw_end(sock, tid, pid, epoch, commit):
    r = raw(sock, API_END_TXN, 1, kwire.string(tid) + struct.pack(">qhb", pid, epoch, 1 if commit else 0))
    r.i32()
    return r.i16()


def raw_add(sock, tid, pid, epoch, topic, partition):
    body = kwire.string(tid) + struct.pack(">qh", pid, epoch) + struct.pack(">i", 1) + kwire.string(topic)
    body += struct.pack(">ii", 1, partition)
    r = raw(sock, API_ADD_PARTITIONS, 1, body)
    r.i32()
    errors = []
    for _ in range(r.i32()):
        r.string()
        for _ in range(r.i32()):
            r.i32()
            errors.append(r.i16())
    return errors


def test_raw_bad_sequences_get_kafkas_error_codes(broker, topic_name):
    create_topic(broker, topic_name, 1)
    tid = txn_id("it-raw")
    with kwire.connect(broker) as s:
        raw_find_txn_coordinator(s, tid)
        # EndTxn and AddPartitionsToTxn before any InitProducerId: INVALID_PRODUCER_ID_MAPPING (49).
        assert raw_end(s, tid, 12345, 0, True) == 49
        assert raw_add(s, tid, 12345, 0, topic_name, 0) == [49]
        # A timeout above transaction.max.timeout.ms: INVALID_TRANSACTION_TIMEOUT (50).
        assert raw_init(s, tid, timeout_ms=900_001)[0] == 50
        error, pid, epoch = raw_init(s, tid)
        assert error == 0
        # EndTxn with nothing added: INVALID_TXN_STATE (48).
        assert raw_end(s, tid, pid, epoch, True) == 48
        error, pid2, epoch2 = raw_init(s, tid)
        assert (error, pid2, epoch2) == (0, pid, epoch + 1)
        # The fenced epoch: INVALID_PRODUCER_EPOCH (47) at these v1 requests (PRODUCER_FENCED, 90, from v2: KIP-588).
        assert raw_add(s, tid, pid, epoch, topic_name, 0) == [47]
        assert raw_end(s, tid, pid, epoch, False) == 47
        # The connection still serves; the current producer is unaffected.
        assert raw_add(s, tid, pid, epoch2, topic_name, 0) == [0]
        assert raw_end(s, tid, pid, epoch2, False) == 0


def raw_end_v5(sock, tid, pid, epoch, commit):
    """EndTxn v5 (transaction version 2): (error, producer id, producer epoch) to continue with."""
    body = kwire.string(tid, True) + struct.pack(">qhb", pid, epoch, 1 if commit else 0) + kwire.TAGS_NONE
    r = raw(sock, API_END_TXN, 5, body)
    r.i32()
    return r.i16(), r.i64(), r.i16()


def raw_end_v5_settled(sock, tid, pid, epoch, commit):
    """EndTxn v5, retried while the previous transaction's markers are written (CONCURRENT_TRANSACTIONS)."""
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        answer = raw_end_v5(sock, tid, pid, epoch, commit)
        if answer[0] != 51 or time.monotonic() > deadline:
            return answer
        time.sleep(0.1)


def wait_for_markers_v5(sock, tid, pid, epoch):
    """Waits until the transaction that bumped the producer to `epoch` is complete (its markers written). Until then
    it is PrepareCommit, where Kafka's TV2 table accepts only the retry (the epoch below) and answers an EndTxn at
    the new epoch PRODUCER_FENCED; once complete, a commit with nothing added is INVALID_TXN_STATE (48), which
    changes nothing, so it serves as the probe."""
    deadline = time.monotonic() + TIMEOUT_S
    while raw_end_v5(sock, tid, pid, epoch, True)[0] != 48:
        assert time.monotonic() < deadline, "the transaction's markers were not written in time"
        time.sleep(0.05)


def produce_v12_settled(broker, tid, topic, pid, epoch, value):
    """A Produce v12 (a version-2 client: the partition is added implicitly), retried on NOT_ENOUGH_REPLICAS."""
    batch = kwire.producer_batch([value], pid, epoch, 0, base_timestamp=int(time.time() * 1000))
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        error = kwire.txn_produce(broker, tid, topic, 0, batch, version=12)[0]
        if error != 19 or time.monotonic() > deadline:
            return error
        time.sleep(0.1)


def test_raw_transaction_version_2_sequences_get_kafkas_answers(broker, topic_name):
    """KIP-890 part 2 over raw protocol, the same answers as Kafka 4.1: Produce v12 adds the partition itself,
    EndTxn v5 bumps the epoch and answers it, a lost-answer retry gets the current epoch, a stale epoch is
    PRODUCER_FENCED (90) with -1/-1, and after a new producer fenced the id an implicit add at the old epoch is
    INVALID_PRODUCER_EPOCH (47) on the produce."""
    create_topic(broker, topic_name, 1)
    tid = txn_id("it-raw-tv2")
    with kwire.connect(broker) as s:
        raw_find_txn_coordinator(s, tid)
        error, pid, epoch = raw_init(s, tid)
        assert error == 0
        assert produce_v12_settled(broker, tid, topic_name, pid, epoch, b"one") == 0
        assert raw_end_v5_settled(s, tid, pid, epoch, True) == (0, pid, epoch + 1)
        assert raw_end_v5_settled(s, tid, pid, epoch, True) == (0, pid, epoch + 1), "a retry: the current epoch"
        assert raw_end_v5_settled(s, tid, pid, epoch, False)[0] == 48, "the other outcome: INVALID_TXN_STATE"
        assert produce_v12_settled(broker, tid, topic_name, pid, epoch + 1, b"two") == 0
        assert raw_end_v5_settled(s, tid, pid, epoch + 1, True) == (0, pid, epoch + 2)
        wait_for_markers_v5(s, tid, pid, epoch + 2)
        assert raw_end_v5_settled(s, tid, pid, epoch, True) == (90, -1, -1), "two behind: fenced"
        # Aborting a transaction that added nothing is allowed at version 2 and bumps the epoch.
        assert raw_end_v5_settled(s, tid, pid, epoch + 2, False) == (0, pid, epoch + 3)
        error, pid2, epoch2 = raw_init(s, tid)
        assert (error, pid2) == (0, pid) and epoch2 > epoch + 3
        assert produce_v12_settled(broker, tid, topic_name, pid, epoch + 3, b"zombie") == 47
        assert raw_end_v5_settled(s, tid, pid, epoch + 3, True) == (90, -1, -1)
    consumer = read_committed(broker, topic_name)
    try:
        assert values_until_eof(consumer) == ["one", "two"]
    finally:
        consumer.close()


def test_produce_to_a_partition_outside_the_transaction_is_refused(broker, topic_name):
    """KIP-890 part 1: a transactional batch for a partition never added to the transaction would open a
    transaction no marker closes (a hanging transaction, stalling read_committed readers); the partition leader
    verifies with the coordinator and refuses it with INVALID_TXN_STATE (48)."""
    create_topic(broker, topic_name, 2)
    tid = txn_id("it-verify")
    with kwire.connect(broker) as s:
        raw_find_txn_coordinator(s, tid)
        error, pid, epoch = raw_init(s, tid)
        assert error == 0
        assert raw_add(s, tid, pid, epoch, topic_name, 0) == [0]
    now = int(time.time() * 1000)
    added = kwire.producer_batch([b"in"], pid, epoch, 0, base_timestamp=now)
    assert kwire.txn_produce(broker, tid, topic_name, 0, added)[0] == 0
    stray = kwire.producer_batch([b"stray"], pid, epoch, 0, base_timestamp=now)
    assert kwire.txn_produce(broker, tid, topic_name, 1, stray)[0] == 48
    with kwire.connect(broker) as s:
        raw_find_txn_coordinator(s, tid)
        assert raw_end(s, tid, pid, epoch, True) == 0
    consumer = read_committed(broker, topic_name, partitions=(0, 1))
    try:
        assert values_until_eof(consumer, partitions=2) == ["in"]
    finally:
        consumer.close()


# ---------------------------------------------------------------- a 3-node cluster: replicated __transaction_state


@pytest.fixture(scope="module")
def txn_cluster(tmp_path_factory):
    from cluster import running
    yield from running(tmp_path_factory.mktemp("txn-cluster"), size=3)


@pytest.mark.cluster
def test_coordinator_failover_on_a_cluster(txn_cluster):
    """Commit and abort on RF-3 topics; kill -9 the transaction coordinator: another broker replays the replicated
    `__transaction_state` partition, fences by epoch, and the next transactions commit."""
    c = txn_cluster
    topic = f"it-txn-cluster-{uuid.uuid4().hex[:8]}"
    node = c.live_nodes()[0]
    admin = ck.admin.AdminClient({"bootstrap.servers": node.bootstrap})
    fs = admin.create_topics([ck.admin.NewTopic(topic, num_partitions=2, replication_factor=3)], operation_timeout=30)
    fs[topic].result(timeout=60)
    bootstrap = ",".join(n.bootstrap for n in c.live_nodes())

    class Via:  # what txn_producer / describe_row / read_committed need of a broker
        pass
    via = Via()
    via.bootstrap = bootstrap
    tid = txn_id("it-txn-cluster")
    p = txn_producer(via, tid, **{"acks": "all"})
    p.init_transactions(TIMEOUT_S)
    p.begin_transaction()
    p.produce(topic, value="one", partition=0)
    p.produce(topic, value="one", partition=1)
    p.commit_transaction(TIMEOUT_S)
    p.begin_transaction()
    p.produce(topic, value="aborted", partition=0)
    p.flush(TIMEOUT_S)
    p.abort_transaction(TIMEOUT_S)
    before = wait_describe(via, tid, "CompleteAbort")
    coordinator = c.node(int(before["CoordinatorId"]))
    coordinator.kill()
    via.bootstrap = ",".join(n.bootstrap for n in c.live_nodes())
    # A restarted application: InitProducerId on the new coordinator, from the replayed state.
    p2 = txn_producer(via, tid, **{"acks": "all"})
    p2.init_transactions(TIMEOUT_S * 2)
    row = describe_row(via, tid)
    assert row["CoordinatorId"] != before["CoordinatorId"], row
    assert row["ProducerId"] == before["ProducerId"] and int(row["ProducerEpoch"]) > int(before["ProducerEpoch"]), row
    p2.begin_transaction()
    p2.produce(topic, value="two", partition=0)
    p2.commit_transaction(TIMEOUT_S)
    consumer = read_committed(via, topic, partitions=(0, 1))
    try:
        got = values_until_eof(consumer, partitions=2)
    finally:
        consumer.close()
    assert sorted(got) == ["one", "one", "two"], got
    c.heal()
