"""Client quotas (issue 17): byte-rate quotas set and described with Kafka's own kafka-configs tool
(kafka.admin.ConfigCommand, from the jars in .cache), and the throttling a client over its quota gets.

The broker measures a client's rate over quota.window.num (11) windows of quota.window.size.seconds (1 s), answers
throttle_time_ms and mutes the connection that long (KIP-219); librdkafka reports the throttle through throttle_cb.
The assertions are about behaviour with generous bounds, and every speed is compared with a client without a quota
measured in the same run: over its quota a client is held near the quota (below 3x), one without exceeds it by far.
The same test runs against Apache Kafka (INTEROP_BROKER=kafka)."""
import time
import uuid

import confluent_kafka as ck
import pytest

from clients import TIMEOUT_S, create_topic
from test_kafka_tools import kafka_tool

pytestmark = pytest.mark.security

# 10 KiB/s; 300 KiB takes ~20 s at that rate once the first ~100 KiB (the 10 s minimum span of the rate) are spent.
QUOTA = 10240
RECORD = 1024
CHUNK = 8
VOLUME = 300 * 1024


def configs(broker, *args):
    return kafka_tool("kafka.admin.ConfigCommand", "--bootstrap-server", broker.bootstrap, *args)


def produce_measured(broker, topic, client_id):
    """Produces VOLUME bytes as fast as the client may; returns (bytes per second, throttle times reported)."""
    throttles = []
    errors = []
    producer = ck.Producer({"bootstrap.servers": broker.bootstrap, "client.id": client_id, "linger.ms": 5,
                            "throttle_cb": lambda event: throttles.append(event.throttle_time)})

    def on_delivery(err, _msg):
        if err is not None:
            errors.append(err)

    value = b"q" * RECORD
    started = time.monotonic()
    # CHUNK records at a time, each chunk delivered before the next is produced: a throttle (answered at once,
    # KIP-219) then holds back the following requests, which is what the rate over the whole run shows. One
    # flush of everything would go in a request or two, answered before any throttle could apply.
    for _ in range(VOLUME // RECORD // CHUNK):
        for _ in range(CHUNK):
            producer.produce(topic, value, on_delivery=on_delivery)
        assert producer.flush(120) == 0, "chunk not delivered within 120 s"
    elapsed = time.monotonic() - started
    producer.poll(0)
    assert not errors, f"errors {errors[:3]}"
    return VOLUME / elapsed, throttles


def consume_measured(broker, topic, client_id, count):
    """Consumes `count` records from the start; returns (bytes per second, throttle times reported)."""
    throttles = []
    consumer = ck.Consumer({"bootstrap.servers": broker.bootstrap, "client.id": client_id,
                            "group.id": f"quota-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False,
                            "auto.offset.reset": "earliest",
                            "throttle_cb": lambda event: throttles.append(event.throttle_time)})
    consumer.assign([ck.TopicPartition(topic, 0, ck.OFFSET_BEGINNING)])
    got = 0
    started = None
    deadline = time.monotonic() + 120
    try:
        while got < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            if started is None:
                started = time.monotonic()
            got += 1
        elapsed = time.monotonic() - started
    finally:
        consumer.close()
    assert got == count, f"consumed {got} of {count}"
    return (count - 1) * RECORD / elapsed, throttles


def quota_lines(out):
    return [line for line in out.splitlines() if line.startswith("Quota configs")]


def test_producer_byte_rate_set_by_kafka_configs_throttles_and_deleting_it_stops(broker, topic_name):
    create_topic(broker, topic_name)
    run = uuid.uuid4().hex[:8]
    limited, free = f"quota-limited-{run}", f"quota-free-{run}"

    free_rate, free_throttles = produce_measured(broker, topic_name, free)
    assert free_rate > 3 * QUOTA, f"an unthrottled producer reached only {free_rate:.0f} B/s"
    assert not [t for t in free_throttles if t > 0], free_throttles

    configs(broker, "--alter", "--add-config", f"producer_byte_rate={QUOTA}", "--entity-type", "clients",
            "--entity-name", limited)
    described = configs(broker, "--describe", "--entity-type", "clients", "--entity-name", limited)
    assert f"producer_byte_rate={QUOTA}" in described, described

    rate, throttles = produce_measured(broker, topic_name, limited)
    print(f"producer_byte_rate={QUOTA}: limited {rate:.0f} B/s (throttled {len(throttles)} times, longest "
          f"{max(throttles, default=0):.2f} s), unlimited {free_rate:.0f} B/s")
    assert [t for t in throttles if t > 0], "no response carried throttle_time_ms > 0"
    assert rate < 3 * QUOTA, f"a producer over its {QUOTA} B/s quota went at {rate:.0f} B/s"

    configs(broker, "--alter", "--delete-config", "producer_byte_rate", "--entity-type", "clients",
            "--entity-name", limited)
    described = configs(broker, "--describe", "--entity-type", "clients", "--entity-name", limited)
    assert "producer_byte_rate" not in described, described

    again, throttles = produce_measured(broker, topic_name, limited)
    assert not [t for t in throttles if t > 0], throttles
    assert again > 3 * QUOTA, f"with its quota deleted the producer went at only {again:.0f} B/s"


def test_consumer_byte_rate_throttles_a_consumer(broker, topic_name):
    create_topic(broker, topic_name)
    run = uuid.uuid4().hex[:8]
    limited, free = f"quota-consumer-{run}", f"quota-consumer-free-{run}"
    produce_measured(broker, topic_name, f"quota-filler-{run}")
    count = VOLUME // RECORD // CHUNK * CHUNK

    free_rate, free_throttles = consume_measured(broker, topic_name, free, count)
    assert free_rate > 3 * QUOTA, f"an unthrottled consumer reached only {free_rate:.0f} B/s"

    configs(broker, "--alter", "--add-config", f"consumer_byte_rate={QUOTA}", "--entity-type", "clients",
            "--entity-name", limited)
    rate, throttles = consume_measured(broker, topic_name, limited, count)
    print(f"consumer_byte_rate={QUOTA}: limited {rate:.0f} B/s (throttled {len(throttles)} times), "
          f"unlimited {free_rate:.0f} B/s")
    assert [t for t in throttles if t > 0], "no fetch response carried throttle_time_ms > 0"
    assert rate < 3 * QUOTA, f"a consumer over its {QUOTA} B/s quota went at {rate:.0f} B/s"
    configs(broker, "--alter", "--delete-config", "consumer_byte_rate", "--entity-type", "clients",
            "--entity-name", limited)


def test_kafka_configs_sets_describes_and_deletes_user_and_client_quotas(broker):
    user = f"alice-{uuid.uuid4().hex[:6]}"
    configs(broker, "--alter", "--add-config", "producer_byte_rate=1024", "--entity-type", "users",
            "--entity-name", user)
    configs(broker, "--alter", "--add-config", "consumer_byte_rate=2048,request_percentage=50", "--entity-type",
            "users", "--entity-name", user, "--entity-type", "clients", "--entity-name", "app")
    configs(broker, "--alter", "--add-config", "producer_byte_rate=4096", "--entity-type", "users",
            "--entity-default")

    out = configs(broker, "--describe", "--entity-type", "users", "--entity-name", user)
    lines = quota_lines(out)
    assert len(lines) == 1 and f"user-principal '{user}'" in lines[0] and "producer_byte_rate=1024" in lines[0], out

    out = configs(broker, "--describe", "--entity-type", "users", "--entity-name", user, "--entity-type", "clients",
                  "--entity-name", "app")
    lines = quota_lines(out)
    assert len(lines) == 1 and "consumer_byte_rate=2048" in lines[0] and "request_percentage=50" in lines[0], out

    out = configs(broker, "--describe", "--entity-type", "users", "--entity-default")
    assert any("default user-principal" in line and "producer_byte_rate=4096" in line for line in quota_lines(out)), out

    # Every user entity, the default one included.
    out = configs(broker, "--describe", "--entity-type", "users")
    assert any(f"'{user}'" in line for line in quota_lines(out)) and \
        any("default user-principal" in line for line in quota_lines(out)), out

    # A value Kafka refuses: fractional byte rates.
    proc_out = None
    try:
        configs(broker, "--alter", "--add-config", "producer_byte_rate=1.5", "--entity-type", "users",
                "--entity-name", user)
    except AssertionError as e:
        proc_out = str(e)
    assert proc_out is not None and "fractional" in proc_out, proc_out

    configs(broker, "--alter", "--delete-config", "producer_byte_rate", "--entity-type", "users",
            "--entity-name", user)
    configs(broker, "--alter", "--delete-config", "consumer_byte_rate,request_percentage", "--entity-type", "users",
            "--entity-name", user, "--entity-type", "clients", "--entity-name", "app")
    configs(broker, "--alter", "--delete-config", "producer_byte_rate", "--entity-type", "users", "--entity-default")
    out = configs(broker, "--describe", "--entity-type", "users", "--entity-name", user)
    assert not quota_lines(out), out
    out = configs(broker, "--describe", "--entity-type", "users", "--entity-default")
    assert not quota_lines(out), out
