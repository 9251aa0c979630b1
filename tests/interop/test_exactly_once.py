"""Exactly-once consume-transform-produce (issue 12), with Kafka's own harness: `TransactionalMessageCopier` (the
tool Kafka's system tests use for transactions_test.py) copies an input partition to an output topic, committing
the consumed offsets inside each transaction, with random aborts. It is killed with SIGKILL part-way, a new copier
with the same transactional.id takes over (fencing the dead one's open transaction), and the read_committed output
must hold every input record exactly once, in order. On a 3-node cluster the output partition's leader is also
killed -9 and restarted during the run. Each test also runs against Apache Kafka (INTEROP_BROKER=kafka)."""
import time
import uuid

import confluent_kafka as ck
import pytest

from clients import TIMEOUT_S
from workload import _JavaTool, java_tool_command

pytestmark = pytest.mark.transactions

RECORDS = 2000
TRANSACTION_SIZE = 50
COPIER_TIMEOUT_S = 150
# The dead copier's open transaction holds pending offsets, so the next copier's read_committed consumer waits
# (UNSTABLE_OFFSET_COMMIT) until the coordinator aborts it on timeout: keep the timeout short where no broker
# dies, longer where a leader failover (Kafka's takes its 9 s broker session) must fit inside one transaction.
TXN_TIMEOUT_MS_ONE_NODE = 6000
TXN_TIMEOUT_MS_CLUSTER = 20000


class Copier(_JavaTool):
    """A TransactionalMessageCopier process: `processed` is its last reported count of committed copies, its own
    only (a copier that takes over starts at 0)."""

    def __init__(self, workdir, bootstrap, source, sink, transactional_id, group, name, txn_timeout_ms):
        self.processed = 0
        command = java_tool_command(
            "org.apache.kafka.tools.TransactionalMessageCopier", "--broker-list", bootstrap,
            "--input-topic", source, "--input-partition", "0", "--output-topic", sink,
            "--transactional-id", transactional_id, "--consumer-group", group,
            "--transaction-size", str(TRANSACTION_SIZE), "--transaction-timeout", str(txn_timeout_ms),
            "--enable-random-aborts", "--use-group-metadata")
        super().__init__(name, workdir, command)

    def on_event(self, event):
        if "totalProcessed" in event:
            self.processed = int(event["totalProcessed"])

    def kill9(self):
        self.proc.kill()
        self.proc.wait(10)
        self._thread.join(10)

    def wait_done(self, timeout=COPIER_TIMEOUT_S):
        """Waits for the copier to exit by itself (it stops at the input's end offset as of its start)."""
        try:
            rc = self.proc.wait(timeout)
        except Exception:
            self.stop()
            raise AssertionError(f"{self.name} did not finish within {timeout}s; its log:\n{self.log_tail(40)}")
        self._thread.join(10)
        assert rc == 0, f"{self.name} exited with {rc}; its log:\n{self.log_tail(40)}"


def create_topics(bootstrap, names, replication_factor):
    admin = ck.admin.AdminClient({"bootstrap.servers": bootstrap})
    fs = admin.create_topics([ck.admin.NewTopic(n, num_partitions=1, replication_factor=replication_factor)
                              for n in names], operation_timeout=30)
    for f in fs.values():
        f.result(timeout=60)


def produce_input(bootstrap, topic):
    p = ck.Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all", "linger.ms": 5})
    for i in range(RECORDS):
        p.produce(topic, key=f"k{i % 17}", value=str(i), partition=0)
    assert p.flush(TIMEOUT_S) == 0, "input records left undelivered"


def read_all(bootstrap, topic, isolation):
    """Every value of partition 0 up to its end (read_committed: up to the LSO), in offset order."""
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"eos-reader-{uuid.uuid4().hex[:8]}",
                     "enable.auto.commit": False, "isolation.level": isolation, "enable.partition.eof": True})
    c.assign([ck.TopicPartition(topic, 0, ck.OFFSET_BEGINNING)])
    out = []
    deadline = time.monotonic() + TIMEOUT_S * 2
    try:
        while time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == ck.KafkaError._PARTITION_EOF:
                    return out
                raise AssertionError(f"consume error on {topic}: {msg.error()}")
            out.append(msg.value().decode())
    finally:
        c.close()
    raise AssertionError(f"no end of {topic}-0 within the deadline (read {len(out)} records)")


def wait_processed(copier, at_least, timeout=COPIER_TIMEOUT_S):
    deadline = time.monotonic() + timeout
    while copier.processed < at_least:
        assert copier.proc.poll() is None, f"{copier.name} exited early; its log:\n{copier.log_tail(40)}"
        assert time.monotonic() < deadline, f"{copier.name} copied {copier.processed} in {timeout}s"
        time.sleep(0.1)


def assert_exactly_once(bootstrap, sink):
    committed = read_all(bootstrap, sink, "read_committed")
    expected = [str(i) for i in range(RECORDS)]
    duplicates = len(committed) - len(set(committed))
    missing = sorted(set(expected) - set(committed), key=int)
    assert duplicates == 0 and not missing, (
        f"{sink}: {len(committed)} committed records for {RECORDS} inputs, {duplicates} duplicates, "
        f"missing {missing[:20]}")
    assert committed == expected, f"{sink}: committed records out of input order: {committed[:50]}"
    # The random aborts and the killed copier's open transaction left aborted records behind them in the log, which
    # read_committed skipped: proof that the run aborted transactions rather than only committing.
    everything = read_all(bootstrap, sink, "read_uncommitted")
    assert len(everything) > RECORDS, f"{sink}: no aborted records in {len(everything)} (random aborts never ran?)"


def run_copy(workdir, bootstrap, replication_factor, txn_timeout_ms, during_run=None):
    tag = uuid.uuid4().hex[:8]
    source, sink = f"it-eos-in-{tag}", f"it-eos-out-{tag}"
    transactional_id, group = f"it-eos-copier-{tag}", f"it-eos-group-{tag}"
    create_topics(bootstrap, [source, sink], replication_factor)
    produce_input(bootstrap, source)
    first = Copier(workdir, bootstrap, source, sink, transactional_id, group, "copier-1", txn_timeout_ms)
    try:
        wait_processed(first, RECORDS // 3)
    finally:
        first.kill9()
    assert first.processed < RECORDS, "the first copier finished before it could be killed; make RECORDS larger"
    second = Copier(workdir, bootstrap, source, sink, transactional_id, group, "copier-2", txn_timeout_ms)
    try:
        if during_run:
            # `processed` counts this copier's own copies (from 0): it starts where the first one's commits end,
            # so half of what the first left is the middle of its run.
            wait_processed(second, min(RECORDS // 6, (RECORDS - first.processed) // 2))
            during_run(sink)
        second.wait_done()
    finally:
        if second.proc.poll() is None:
            second.stop()
    assert_exactly_once(bootstrap, sink)


def test_copier_killed_mid_run_copies_every_record_exactly_once(broker, tmp_path):
    run_copy(str(tmp_path), broker.bootstrap, replication_factor=1, txn_timeout_ms=TXN_TIMEOUT_MS_ONE_NODE)


@pytest.fixture(scope="module")
def eos_cluster(tmp_path_factory):
    from cluster import running
    yield from running(tmp_path_factory.mktemp("eos-cluster"), size=3)


@pytest.mark.cluster
def test_copier_on_a_cluster_survives_the_output_leader_killed(eos_cluster, tmp_path):
    c = eos_cluster
    bootstrap = ",".join(n.bootstrap for n in c.live_nodes())

    def kill_output_leader(sink):
        (leader,) = c.partition_leaders(sink, c.live_nodes()[0]).values()
        node = c.node(leader)
        node.kill()
        time.sleep(2)
        node.start()

    try:
        run_copy(str(tmp_path), bootstrap, replication_factor=3, txn_timeout_ms=TXN_TIMEOUT_MS_CLUSTER,
                 during_run=kill_output_leader)
    finally:
        c.heal()
