"""Kafka Streams with `processing.guarantee=exactly_once_v2` (issue 12): a word count (streams/WordCount.java,
Kafka's WordCountDemo topology; kafka-streams 4.1.1 from Maven Central through scripts/kafka/streams/fetch.sh, run as
a single-file source program) counts the words of an input topic while the broker is killed with -9 and restarted; the last count of every word in the output topic, read
read_committed, is exact. Kafka Streams 4.x's producer speaks transaction version 2 against a broker that finalizes
it (Annal by default, Kafka 4.x). Runs against Apache Kafka too (INTEROP_BROKER=kafka)."""
import collections
import os
import struct
import subprocess
import time
import uuid
from pathlib import Path

import confluent_kafka as ck
import pytest

from clients import TIMEOUT_S, create_topic

pytestmark = [pytest.mark.transactions, pytest.mark.restart]

INPUT, OUTPUT = "wc-eos-input", "wc-eos-output"
WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]
FETCH = Path(__file__).resolve().parents[2] / "scripts" / "kafka" / "streams" / "fetch.sh"
APP = Path(__file__).resolve().parent / "streams" / "WordCount.java"


def streams_classpath():
    out = subprocess.run([str(FETCH)], check=True, capture_output=True, text=True, timeout=600)
    return Path(out.stdout.strip()).read_text().strip()


def produce_lines(broker, lines):
    p = ck.Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "acks": "all",
                     "linger.ms": 5})
    for i, line in enumerate(lines):
        p.produce(INPUT, value=line, key=str(i))
    assert p.flush(TIMEOUT_S) == 0


def last_counts(broker):
    """word -> its last count in the output topic, read read_committed to the end."""
    c = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"wc-check-{uuid.uuid4().hex[:6]}",
                     "isolation.level": "read_committed", "enable.partition.eof": True,
                     "enable.auto.commit": False})
    parts = c.list_topics(OUTPUT, timeout=TIMEOUT_S).topics[OUTPUT].partitions
    c.assign([ck.TopicPartition(OUTPUT, p, ck.OFFSET_BEGINNING) for p in parts])
    counts, eofs = {}, set()
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while len(eofs) < len(parts) and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == ck.KafkaError._PARTITION_EOF:
                    eofs.add(msg.partition())
                    continue
                raise AssertionError(f"consume error: {msg.error()}")
            counts[msg.key().decode()] = struct.unpack(">q", msg.value())[0]
    finally:
        c.close()
    return counts


def wait_counts(broker, expected, timeout=90):
    deadline = time.monotonic() + timeout
    while True:
        got = last_counts(broker)
        if got == expected or time.monotonic() > deadline:
            return got
        time.sleep(1)


def test_word_count_exactly_once_v2_survives_a_broker_kill9(own_broker, tmp_path):
    b = own_broker
    create_topic(b, INPUT, 2)
    create_topic(b, OUTPUT, 2)
    props = tmp_path / "streams.properties"
    props.write_text("\n".join([
        f"bootstrap.servers={b.bootstrap}",
        f"application.id=wc-eos-{uuid.uuid4().hex[:6]}",
        "processing.guarantee=exactly_once_v2",
        f"wordcount.input={INPUT}",
        f"wordcount.output={OUTPUT}",
        "commit.interval.ms=100",
        f"state.dir={tmp_path / 'state'}",
        "replication.factor=1",
        # Tolerate the broker's restart: keep retrying rather than failing the task.
        "task.timeout.ms=120000",
        "producer.delivery.timeout.ms=120000",
        "producer.transaction.timeout.ms=30000",
    ]) + "\n")
    log = open(tmp_path / "wordcount.log", "w")
    app = subprocess.Popen(
        ["java", "-Xmx384m", "-XX:+UseSerialGC", "-cp", streams_classpath(),
         "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", str(APP), str(props)],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    expected = collections.Counter()
    try:
        def send(batch, n):
            lines = [" ".join(WORDS[(batch * 7 + i + k) % len(WORDS)] for k in range(1 + i % 4))
                     for i in range(n)]
            for line in lines:
                expected.update(line.split(" "))
            produce_lines(b, lines)

        send(0, 400)
        got = wait_counts(b, dict(expected))
        assert got == dict(expected), f"before the kill: {got} != {dict(expected)}"
        # Kill -9 while the application keeps committing transactions: input arrives before and after.
        send(1, 400)
        time.sleep(0.5)
        b.restart(kill=True)
        send(2, 400)
        got = wait_counts(b, dict(expected), timeout=120)
        assert app.poll() is None, f"WordCount died: {(tmp_path / 'wordcount.log').read_text()[-3000:]}"
        assert got == dict(expected), (
            f"counts after the kill differ from the input's: {got} != {dict(expected)}\n"
            f"{(tmp_path / 'wordcount.log').read_text()[-3000:]}")
    finally:
        if app.poll() is None:
            os.killpg(app.pid, 15)
            try:
                app.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(app.pid, 9)
        log.close()
