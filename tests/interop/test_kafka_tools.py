"""Kafka's own CLI tools (kafka-tools 4.x from Maven Central, run by main class) against the broker.

Issue 4 asks that `kafka-consumer-groups` (org.apache.kafka.tools.consumer.group.ConsumerGroupCommand) works:
list, describe (offsets and lag) and reset-offsets. Issue 3's admin path is exercised with TopicCommand."""
import subprocess
import time

import confluent_kafka as ck
import pytest

from clients import TIMEOUT_S, ck_produce_all, ck_producer, create_topic
from test_dump_log_segments import kafka_classpath

pytestmark = pytest.mark.groups


def kafka_tool(main_class, *args, timeout=120):
    proc = subprocess.run(["java", "-Xmx256m", "-cp", kafka_classpath(), main_class, *args],
                          capture_output=True, text=True, timeout=timeout)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{main_class} {' '.join(args)} failed ({proc.returncode}):\n{out[-4000:]}"
    return proc.stdout


def consumer_groups(broker, *args):
    return kafka_tool("org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
                      "--bootstrap-server", broker.bootstrap, *args)


def describe_rows(out, group):
    """GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG ... rows of `--describe`, keyed by partition."""
    rows = {}
    for line in out.splitlines():
        cols = line.split()
        if len(cols) >= 6 and cols[0] == group and cols[2].isdigit():
            rows[int(cols[2])] = (cols[3], cols[4], cols[5])
    return rows


def test_kafka_topics_tool_lists_and_describes(broker, topic_name):
    create_topic(broker, topic_name, partitions=3)
    listed = kafka_tool("org.apache.kafka.tools.TopicCommand", "--bootstrap-server", broker.bootstrap, "--list")
    assert topic_name in listed.split()
    described = kafka_tool("org.apache.kafka.tools.TopicCommand", "--bootstrap-server", broker.bootstrap,
                           "--describe", "--topic", topic_name)
    assert f"PartitionCount: 3" in described, described


def test_kafka_consumer_groups_tool_list_describe_reset(broker, topic_name):
    group = f"tools-{topic_name}"
    create_topic(broker, topic_name, partitions=2)
    records = [(None, b"v%d" % i, None, None) for i in range(10)]
    ck_produce_all(ck_producer(broker), topic_name, records, partition=0)
    ck_produce_all(ck_producer(broker), topic_name, records[:4], partition=1)

    # A real consumer group member reads 6 records of partition 0 and commits; partition 1 gets no commit yet.
    consumer = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                            "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.assign([ck.TopicPartition(topic_name, 0, 0)])
    got = 0
    deadline = time.time() + TIMEOUT_S
    while got < 6 and time.time() < deadline:
        m = consumer.poll(1.0)
        if m is not None and m.error() is None:
            got += 1
    assert got == 6
    consumer.commit(offsets=[ck.TopicPartition(topic_name, 0, 6)], asynchronous=False)
    consumer.commit(offsets=[ck.TopicPartition(topic_name, 1, 1)], asynchronous=False)
    consumer.close()

    assert group in consumer_groups(broker, "--list").split()

    rows = describe_rows(consumer_groups(broker, "--describe", "--group", group), group)
    assert rows == {0: ("6", "10", "4"), 1: ("1", "4", "3")}, rows

    # Dry run changes nothing; --execute moves both partitions to the earliest offset.
    consumer_groups(broker, "--reset-offsets", "--group", group, "--topic", topic_name, "--to-earliest",
                    "--dry-run")
    assert describe_rows(consumer_groups(broker, "--describe", "--group", group), group)[0][0] == "6"
    consumer_groups(broker, "--reset-offsets", "--group", group, "--topic", topic_name, "--to-earliest",
                    "--execute")
    rows = describe_rows(consumer_groups(broker, "--describe", "--group", group), group)
    assert rows == {0: ("0", "10", "10"), 1: ("0", "4", "4")}, rows

    consumer_groups(broker, "--delete", "--group", group)
    assert group not in consumer_groups(broker, "--list").split()
