"""Topic administration with unchanged admin clients: librdkafka (confluent-kafka) and kafka-python."""

import time

import confluent_kafka as ck
from confluent_kafka.admin import (AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource, NewPartitions,
                                   NewTopic, ResourceType)
import kafka
import kafka.admin as kadmin
import kafka.errors as kerrors
import pytest

from clients import TIMEOUT_S, ck_admin, ck_consume, ck_produce_all, ck_producer, create_topic, wait_for_leaders


def wait_until(predicate, what, timeout=TIMEOUT_S):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for: {what}")


def ck_topic_configs(admin, topic):
    res = admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)], request_timeout=TIMEOUT_S)
    return list(res.values())[0].result(timeout=TIMEOUT_S)


def ck_result(futures):
    return {k: f.result(timeout=TIMEOUT_S) for k, f in futures.items()}


def test_librdkafka_create_describe_alter_delete(broker, topic_name):
    admin = ck_admin(broker)
    ck_result(admin.create_topics([NewTopic(topic_name, num_partitions=3, replication_factor=1,
                                            config={"retention.ms": "3600000", "cleanup.policy": "delete"})],
                                  operation_timeout=TIMEOUT_S))
    wait_for_leaders(broker, topic_name, 3)

    md = admin.list_topics(timeout=TIMEOUT_S)
    assert topic_name in md.topics
    t = md.topics[topic_name]
    assert sorted(t.partitions) == [0, 1, 2]
    node_ids = {b.id for b in md.brokers.values()}
    for p in t.partitions.values():
        assert p.leader in node_ids and p.replicas == [p.leader] and p.isrs == [p.leader]

    desc = ck_result(admin.describe_topics(ck.TopicCollection([topic_name]), request_timeout=TIMEOUT_S))
    d = desc[topic_name]
    assert d.name == topic_name and not d.is_internal and len(d.partitions) == 3

    configs = ck_topic_configs(admin, topic_name)
    assert configs["retention.ms"].value == "3600000"
    assert configs["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["cleanup.policy"].value == "delete"
    # Unset topic configs are described with the broker's value and a non-topic source.
    assert configs["segment.bytes"].value == "1073741824"
    assert configs["segment.bytes"].source != ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["max.message.bytes"].value == "1048588"

    # IncrementalAlterConfigs: set two, delete one.
    res = ConfigResource(ResourceType.TOPIC, topic_name, incremental_configs=[
        ConfigEntry("retention.ms", "7200000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("segment.bytes", "10485760", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("cleanup.policy", None, incremental_operation=AlterConfigOpType.DELETE)])
    ck_result(admin.incremental_alter_configs([res]))
    # Kafka applies config changes asynchronously (through its metadata log): wait for them to show.
    wait_until(lambda: ck_topic_configs(admin, topic_name)["retention.ms"].value == "7200000",
               "retention.ms altered to 7200000")
    configs = ck_topic_configs(admin, topic_name)
    assert configs["segment.bytes"].value == "10485760"
    assert configs["segment.bytes"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["cleanup.policy"].source != ConfigSource.DYNAMIC_TOPIC_CONFIG.value

    ck_result(admin.delete_topics([topic_name], operation_timeout=TIMEOUT_S))
    wait_until(lambda: topic_name not in admin.list_topics(timeout=TIMEOUT_S).topics, f"{topic_name} deleted")


def test_librdkafka_create_topic_errors(broker, topic_name):
    admin = ck_admin(broker)

    def create_error(new_topic, **kw):
        f = admin.create_topics([new_topic], operation_timeout=TIMEOUT_S, **kw)[new_topic.topic]
        with pytest.raises(ck.KafkaException) as exc:
            f.result(timeout=TIMEOUT_S)
        return exc.value.args[0].code()

    # One broker: replication factor 2 is impossible.
    assert create_error(NewTopic(topic_name, 1, 2)) == ck.KafkaError.INVALID_REPLICATION_FACTOR
    assert create_error(NewTopic(topic_name, 0, 1)) == ck.KafkaError.INVALID_PARTITIONS
    assert create_error(NewTopic(topic_name, 1, 1, config={"no.such.config": "1"})) == ck.KafkaError.INVALID_CONFIG
    assert create_error(NewTopic(topic_name, 1, 1, config={"retention.ms": "soon"})) == ck.KafkaError.INVALID_CONFIG
    assert create_error(NewTopic("bad/name", 1, 1)) == ck.KafkaError.TOPIC_EXCEPTION
    assert create_error(NewTopic("x" * 250, 1, 1)) == ck.KafkaError.TOPIC_EXCEPTION

    # validate_only checks but creates nothing.
    ck_result(admin.create_topics([NewTopic(topic_name, 2, 1)], validate_only=True, operation_timeout=TIMEOUT_S))
    assert topic_name not in admin.list_topics(timeout=TIMEOUT_S).topics
    assert create_error(NewTopic(topic_name, 1, 2), validate_only=True) == ck.KafkaError.INVALID_REPLICATION_FACTOR

    create_topic(broker, topic_name, partitions=1)
    assert create_error(NewTopic(topic_name, 1, 1)) == ck.KafkaError.TOPIC_ALREADY_EXISTS

    # Deleting a topic that does not exist.
    f = admin.delete_topics([topic_name + "-missing"], operation_timeout=TIMEOUT_S)[topic_name + "-missing"]
    with pytest.raises(ck.KafkaException) as exc:
        f.result(timeout=TIMEOUT_S)
    assert exc.value.args[0].code() == ck.KafkaError.UNKNOWN_TOPIC_OR_PART


def test_librdkafka_create_partitions(broker, topic_name):
    admin = ck_admin(broker)
    create_topic(broker, topic_name, partitions=2)
    ck_result(admin.create_partitions([NewPartitions(topic_name, 5)], operation_timeout=TIMEOUT_S))
    wait_for_leaders(broker, topic_name, 5)
    # Fewer partitions than now is refused.
    f = admin.create_partitions([NewPartitions(topic_name, 3)], operation_timeout=TIMEOUT_S)[topic_name]
    with pytest.raises(ck.KafkaException) as exc:
        f.result(timeout=TIMEOUT_S)
    assert exc.value.args[0].code() == ck.KafkaError.INVALID_PARTITIONS
    # The new partitions work.
    ck_produce_all(ck_producer(broker), topic_name, [(None, b"p4", None, None)], partition=4)
    assert ck_consume(broker, topic_name, [4], 1)[0].value() == b"p4"


def test_librdkafka_describe_cluster_and_broker_configs(broker):
    admin = ck_admin(broker)
    cluster = admin.describe_cluster(request_timeout=TIMEOUT_S).result(timeout=TIMEOUT_S)
    assert cluster.cluster_id
    assert len(cluster.nodes) == 1
    node = cluster.nodes[0]
    assert (node.host, node.port) == (broker.host, broker.port)
    assert cluster.controller is not None

    res = admin.describe_configs([ConfigResource(ResourceType.BROKER, str(node.id))], request_timeout=TIMEOUT_S)
    configs = list(res.values())[0].result(timeout=TIMEOUT_S)
    assert configs["message.max.bytes"].value == "1048588"
    assert configs["log.retention.check.interval.ms"].value == "300000"
    assert configs["auto.create.topics.enable"].value == "true"
    assert configs["num.partitions"].value == "1"
    assert configs["num.partitions"].is_default


def test_kafka_python_admin_create_describe_alter_delete(broker, topic_name):
    admin = kafka.KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        admin.create_topics({topic_name: {"num_partitions": 2, "replication_factor": 1,
                                          "configs": {"retention.bytes": "1048576"}}})
        wait_for_leaders(broker, topic_name, 2)
        assert topic_name in admin.list_topics()
        [desc] = admin.describe_topics([topic_name])
        assert desc["name"] == topic_name and desc["error_code"] == 0
        assert sorted(p["partition_index"] for p in desc["partitions"]) == [0, 1]

        def configs():
            out = admin.describe_configs([kadmin.ConfigResource("TOPIC", topic_name)], config_filter="ALL")
            return out["topic"][topic_name]

        assert configs()["retention.bytes"]["value"] == "1048576"
        admin.alter_configs([kadmin.ConfigResource("TOPIC", topic_name, configs={"retention.ms": "60000"})])
        wait_until(lambda: configs()["retention.ms"]["value"] == "60000", "retention.ms altered to 60000")
        c = configs()
        assert c["retention.ms"]["value"] == "60000"
        assert c["retention.bytes"]["value"] == "1048576"  # incremental: untouched

        admin.create_partitions({topic_name: 4})
        wait_for_leaders(broker, topic_name, 4)

        with pytest.raises(kerrors.TopicAlreadyExistsError):
            admin.create_topics({topic_name: {"num_partitions": 1, "replication_factor": 1}})

        admin.delete_topics([topic_name])
        wait_until(lambda: topic_name not in admin.list_topics(), f"{topic_name} deleted")
    finally:
        admin.close()
