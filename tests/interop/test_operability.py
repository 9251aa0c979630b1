"""Operating Annal (issue 14) with real parts: a real `annal serve` with its HTTP listener, real clients
(confluent-kafka/librdkafka) producing, consuming and committing, `/metrics` parsed by the Prometheus project's own
parser (prometheus_client's OpenMetrics parser), `/v1/groups`, and the real `annal group health` CLI.

- The numbers move as they should: records produced equal what was sent, a group's lag equals what it did not
  consume, bytes fetched grow when a consumer reads.
- Lag health by Burrow's rules (https://github.com/linkedin/Burrow/wiki/Consumer-Lag-Evaluation-Rules): a group is
  driven into STALL, STOP, WARN and REWIND with real commits, and `annal group health` exits non-zero each time; a
  caught-up group is OK and passes.
- The retention guard: a topic with small segments and a short retention.ms; a group that committed early is
  warned about before retention deletes its unconsumed records, then the loss is counted exactly (metric and log
  line naming group, partition and offset range).

Annal only (Kafka has no such listener).
"""

import json
import os
import re
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

import confluent_kafka as ck
from confluent_kafka import admin as kadmin
import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from brokers import AnnalBroker, free_port, remove_workdir
from clients import ck_produce_all, ck_producer, create_topic

pytestmark = pytest.mark.annal_only

TIMEOUT_S = 30


@pytest.fixture
def ops_broker():
    if os.environ.get("INTEROP_BOOTSTRAP") or os.environ.get("INTEROP_BROKER") == "kafka":
        pytest.skip("needs Annal's own process (its HTTP listener)")
    http_port = free_port()
    workdir = tempfile.mkdtemp(prefix="annal-interop-ops-")
    b = AnnalBroker(os.environ["ANNAL_BIN"], workdir, overrides=[
        f"http.listen=127.0.0.1:{http_port}",
        "log.retention.check.interval.ms=500",
        "lag.window.commits=5",
        "group.initial.rebalance.delay.ms=0",
    ])
    b.http = f"127.0.0.1:{http_port}"
    try:
        b.start()
    except BaseException:
        remove_workdir(workdir)
        raise
    yield b
    b.close()


def http_get(b, path):
    """(status, body) of GET path on the broker's HTTP listener."""
    try:
        with urllib.request.urlopen(f"http://{b.http}{path}", timeout=TIMEOUT_S) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def scrape(b):
    """{(name, frozenset(labels)): value} of every sample in /metrics, parsed by prometheus_client."""
    status, body = http_get(b, "/metrics")
    assert status == 200
    samples = {}
    for family in text_string_to_metric_families(body.decode()):
        for s in family.samples:
            samples[(s.name, frozenset(s.labels.items()))] = s.value
    return samples


def metric(samples, name, **labels):
    return samples.get((name, frozenset(labels.items())))


def group_report(b, group):
    status, body = http_get(b, f"/v1/groups/{group}")
    assert status == 200, body
    return json.loads(body)


def annal_health(b, *args):
    """Runs `annal group health` against the broker; (exit code, stdout, stderr)."""
    p = subprocess.run([os.environ["ANNAL_BIN"], "group", "health", "--http", b.http, *args],
                       capture_output=True, text=True, timeout=TIMEOUT_S)
    return p.returncode, p.stdout, p.stderr


def committer(b, group):
    """A consumer used only to commit offsets for `group` (commits as an empty group: generation -1)."""
    return ck.Consumer({"bootstrap.servers": b.bootstrap, "group.id": group, "enable.auto.commit": False})


def commit(consumer, topic, offset):
    consumer.commit(offsets=[ck.TopicPartition(topic, 0, offset)], asynchronous=False)


def produce(b, topic, count, start=0):
    producer = ck_producer(b, **{"linger.ms": 5, "enable.idempotence": False})
    ck_produce_all(producer, topic, [(None, f"record-{start + i}".encode() * 4, None, None)
                                     for i in range(count)], partition=0)


def wait_for(predicate, what, timeout=TIMEOUT_S):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_metrics_move_with_real_traffic(ops_broker):
    b = ops_broker
    status, body = http_get(b, "/healthz")
    assert (status, body) == (200, b"ok\n")
    wait_for(lambda: http_get(b, "/readyz")[0] == 200, "/readyz to answer 200")

    topic = "ops-traffic"
    create_topic(b, topic, partitions=1)
    produce(b, topic, 200)

    # A group that reads 120 of the 200 records and commits, with a real subscription (JoinGroup, SyncGroup).
    consumer = ck.Consumer({"bootstrap.servers": b.bootstrap, "group.id": "ops-reader",
                            "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    read = 0
    deadline = time.monotonic() + TIMEOUT_S
    while read < 120 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            read += 1
            if read == 120:
                consumer.commit(message=msg, asynchronous=False)
    assert read == 120
    consumer.close()

    m = scrape(b)
    assert metric(m, "annal_topic_records_produced_total", topic=topic) == 200
    assert metric(m, "annal_partition_high_watermark", topic=topic, partition="0") == 200
    assert metric(m, "annal_partition_log_start_offset", topic=topic, partition="0") == 0
    assert metric(m, "annal_partition_segments", topic=topic, partition="0") >= 1
    assert metric(m, "annal_topic_bytes_fetched_total", topic=topic) > 0
    assert metric(m, "annal_topic_bytes_produced_total", topic=topic) > 0
    assert metric(m, "annal_group_lag_records_sum", group="ops-reader") == 80
    assert metric(m, "annal_group_lag_records_max", group="ops-reader") == 80
    assert metric(m, "annal_group_lag_seconds_max", group="ops-reader") >= 0
    assert metric(m, "annal_requests_total", api="Produce") >= 1
    assert metric(m, "annal_requests_total", api="JoinGroup") >= 1
    assert metric(m, "annal_request_duration_seconds_count", api="Fetch") >= 1
    assert metric(m, "annal_network_received_bytes_total") > 0
    assert metric(m, "annal_network_sent_bytes_total") > 0
    assert metric(m, "annal_connections_accepted_total") >= 2
    assert metric(m, "annal_active_controller") == 1
    assert metric(m, "annal_broker_fenced") == 0
    assert metric(m, "annal_under_replicated_partitions") == 0
    assert metric(m, "annal_offline_partitions") == 0
    assert metric(m, "annal_metadata_applied_offset") >= 0
    assert metric(m, "annal_data_dir_total_bytes") > 0
    assert metric(m, "process_resident_memory_bytes") > 0
    assert metric(m, "annal_group_status", group="ops-reader") is not None

    report = group_report(b, "ops-reader")
    assert report["lag_records_sum"] == 80
    assert report["partitions"][0]["committed_offset"] == 120
    # Exact time lag: the first unconsumed record (offset 120) was produced moments ago.
    assert 0 <= report["partitions"][0]["time_lag_ms"] < 120_000
    status, body = http_get(b, "/v1/topics")
    assert status == 200
    topics = {t["name"]: t for t in json.loads(body)}
    assert topics[topic]["partitions"][0]["high_watermark"] == 200


def test_lag_health_states_by_burrows_rules(ops_broker):
    b = ops_broker
    topic = "ops-health"
    create_topic(b, topic, partitions=1)
    produce(b, topic, 100)

    # Caught up: OK, and the check passes.
    ok = committer(b, "ops-ok")
    commit(ok, topic, 100)
    commit(ok, topic, 100)
    assert group_report(b, "ops-ok")["status"] == "OK"
    rc, out, _ = annal_health(b, "ops-ok")
    assert rc == 0, out

    # STALL: the same offset committed over and over while lagging (rule 4), evaluated within the window's span.
    stall = committer(b, "ops-stall")
    for i in range(4):
        commit(stall, topic, 30)
        if i < 3:
            time.sleep(0.5)
    r = group_report(b, "ops-stall")
    assert r["partitions"][0]["status"] == "STALL", r
    assert r["status"] == "ERR"
    assert r["lag_records_sum"] == 70
    rc, out, err = annal_health(b, "ops-stall")
    assert rc != 0 and "ops-stall" in err, (out, err)

    # STOP: no commit for longer than the window spans, still lagging (rule 3).
    wait_for(lambda: group_report(b, "ops-stall")["partitions"][0]["status"] == "STOP", "STOP")
    rc, out, _ = annal_health(b, "ops-stall", "--format", "json")
    assert rc != 0
    assert json.loads(out)[0]["unhealthy_partitions"][0]["status"] == "STOP"
    assert metric(scrape(b), "annal_group_status", group="ops-stall") == 2

    # WARN: offsets advance but the lag never decreases (rule 5): more is produced than consumed between commits.
    warn = committer(b, "ops-warn")
    offset = 0
    for i in range(4):
        produce(b, topic, 20, start=100 + 20 * i)
        offset += 5
        commit(warn, topic, offset)
        # Spread over 1.5 s: the checks below must come before the commits stop for longer than the window
        # spans (STOP, rule 3), which four commits in a few milliseconds would reach at once.
        if i < 3:
            time.sleep(0.5)
    r = group_report(b, "ops-warn")
    assert r["partitions"][0]["status"] == "WARN", r
    assert r["status"] == "WARN"
    # The gauge before the health command: a process start may take long enough on a loaded machine for the
    # group to reach STOP (ERR, 2), which the command reports as unhealthy just the same.
    assert metric(scrape(b), "annal_group_status", group="ops-warn") == 1
    rc, _, err = annal_health(b, "ops-warn")
    assert rc != 0 and "ops-warn" in err

    # REWIND: an offset lower than the one before (rule 2).
    rewind = committer(b, "ops-rewind")
    commit(rewind, topic, 90)
    commit(rewind, topic, 40)
    r = group_report(b, "ops-rewind")
    assert r["partitions"][0]["status"] == "REWIND", r
    assert r["status"] == "ERR"
    rc, _, _ = annal_health(b, "ops-rewind")
    assert rc != 0

    # The whole view fails while any group is unhealthy.
    rc, out, _ = annal_health(b)
    assert rc != 0 and "ops-ok" in out and "ops-rewind" in out
    for c in (ok, stall, warn, rewind):
        c.close()


def test_retention_guard_warns_then_counts_the_loss(ops_broker):
    b = ops_broker
    topic = "ops-retention"
    # Small segments (about 10 records each) and 10 minutes of retention: within the guard's hour, and long
    # enough that nothing is deleted before the group has committed (its first commit creates
    # __consumer_offsets, which takes a while on a loaded machine). Then 4 s, to delete.
    create_topic(b, topic, partitions=1, config={"segment.bytes": "1024", "retention.ms": "600000"})
    for i in range(10):
        produce(b, topic, 10, start=10 * i)  # one batch per call: the log rolls every batch or two
    lost = committer(b, "ops-lost")
    commit(lost, topic, 10)

    # Before deletion: the guard sees the first unconsumed record will be deleted within the hour.
    r = group_report(b, "ops-lost")
    p = r["partitions"][0]
    assert p["log_start_offset"] == 0, "retention ran too early for this test"
    assert p["retention_warning"] is True and p["retention_time_to_loss_ms"] <= 600_000, r
    rc, out, _ = annal_health(b, "ops-lost")
    assert rc != 0 and "WARNING" in out, out
    assert metric(scrape(b), "annal_group_retention_warning", group="ops-lost") == 1
    admin = kadmin.AdminClient({"bootstrap.servers": b.bootstrap})
    res = kadmin.ConfigResource(kadmin.ResourceType.TOPIC, topic, incremental_configs=[
        kadmin.ConfigEntry("retention.ms", "4000", incremental_operation=kadmin.AlterConfigOpType.SET)])
    for f in admin.incremental_alter_configs([res]).values():
        f.result(timeout=30)

    # Retention deletes every segment (the active one rolls once all have expired): 90 records the group never
    # consumed are gone, and counted.
    wait_for(lambda: group_report(b, "ops-lost")["partitions"][0]["log_start_offset"] == 100,
             "retention to delete the whole log", timeout=60)
    wait_for(lambda: metric(scrape(b), "annal_group_records_lost_to_retention_total",
                            group="ops-lost", topic=topic) == 90,
             "the loss to be counted")
    assert group_report(b, "ops-lost")["records_lost_to_retention"] == 90
    assert metric(scrape(b), "annal_retention_deleted_segments_total") >= 2
    log = re.sub(r"\x1b\[[0-9;]*m", "", b.log_path.read_text(errors="replace"))  # colours, if any
    # One line per retention pass that deleted some of them: segments expire one by one, so a slow run takes
    # several passes. Together the lines name the group and partition and cover offsets 10..99 exactly once.
    lines = [l for l in log.splitlines() if "retention deleted records this group had not consumed" in l]
    ranges = []
    for line in lines:
        assert "group=ops-lost" in line and f"partition={topic}-0" in line, line
        m = re.search(r"from_offset=(\d+) to_offset=(\d+) records=(\d+)", line)
        assert m, line
        first, last, records = (int(g) for g in m.groups())
        assert records == last - first + 1, line
        ranges.append((first, last))
    ranges.sort()
    assert ranges and ranges[0][0] == 10 and ranges[-1][1] == 99, lines
    assert all(a[1] + 1 == b[0] for a, b in zip(ranges, ranges[1:])), lines
    lost.close()
