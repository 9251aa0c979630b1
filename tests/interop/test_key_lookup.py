"""Records by key (issue 15) with real parts: a real `annal serve`, real clients producing keyed records to a topic
created with key.index.enable=true (kafka-python, whose default partitioner is Kafka's murmur2, and
librdkafka/confluent-kafka, whose default partitioner is not), then the real `annal lookup` CLI and the broker's
HTTP route (`/v1/topics/{topic}/records?key=`) must find exactly the records a full scan by a consumer finds.

Annal only (Kafka has no key index).
"""

import json
import os
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

from brokers import AnnalBroker, free_port, remove_workdir
from clients import ck_produce_all, ck_producer, create_topic, kp_consume, kp_producer

pytestmark = pytest.mark.annal_only

TIMEOUT_S = 30
PARTITIONS = 4
KEYS = 50
ROUNDS = 8


@pytest.fixture
def keyed_broker():
    if os.environ.get("INTEROP_BOOTSTRAP") or os.environ.get("INTEROP_BROKER") == "kafka":
        pytest.skip("needs Annal's own process (its HTTP listener and key index)")
    http_port = free_port()
    workdir = tempfile.mkdtemp(prefix="annal-interop-keys-")
    b = AnnalBroker(os.environ["ANNAL_BIN"], workdir, overrides=[f"http.listen=127.0.0.1:{http_port}"])
    b.http = f"127.0.0.1:{http_port}"
    try:
        b.start()
    except BaseException:
        remove_workdir(workdir)
        raise
    yield b
    b.close()


def http_get(b, path):
    try:
        with urllib.request.urlopen(f"http://{b.http}{path}", timeout=TIMEOUT_S) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def lookup_cli(b, *args):
    p = subprocess.run([os.environ["ANNAL_BIN"], "lookup", "--http", b.http, "--format", "json", *args],
                       capture_output=True, text=True, timeout=TIMEOUT_S)
    assert p.returncode == 0, p.stderr
    return [json.loads(line) for line in p.stdout.splitlines() if line.strip()]


def scan(b, topic):
    """{key: [(partition, offset, value)]} of every record, read by a kafka-python consumer (the full scan)."""
    total = KEYS * ROUNDS * 2
    records = kp_consume(b, topic, list(range(PARTITIONS)), total)
    out = {}
    for r in records:
        out.setdefault(r.key.decode(), []).append((r.partition, r.offset, r.value.decode()))
    for v in out.values():
        v.sort()
    return out


def test_lookup_finds_exactly_what_a_scan_finds(keyed_broker):
    broker = keyed_broker
    topic = "keyed"
    create_topic(broker, topic, partitions=PARTITIONS,
                 config={"key.index.enable": "true", "segment.bytes": "8192"})
    # kafka-python: murmur2 partitioning (the broker's default partition for a key) and gzip.
    producer = kp_producer(broker, compression_type="gzip", linger_ms=5)
    for r in range(ROUNDS):
        for k in range(KEYS):
            producer.send(topic, key=f"user-{k}".encode(), value=f"kp-{r}-{k}".encode())
    producer.flush(TIMEOUT_S)
    producer.close()
    # librdkafka: its own default partitioner (consistent_random, CRC32), so only partition=all finds these; zstd.
    ck = ck_producer(broker, **{"compression.type": "zstd", "linger.ms": 5, "enable.idempotence": False})
    ck_produce_all(ck, topic, [(f"user-{k}".encode(), f"ck-{r}-{k}".encode(), [("src", b"rdkafka")], None)
                               for r in range(ROUNDS) for k in range(KEYS)])
    expected = scan(broker, topic)
    assert len(expected) == KEYS

    for k in [0, 13, 49]:
        key = f"user-{k}"
        want = expected[key]
        # HTTP, every partition, paged with limit=7.
        got = []
        for p in range(PARTITIONS):
            frm = 0
            while True:
                status, body = http_get(broker, f"/v1/topics/{topic}/records?key={key}&partition={p}&limit=7&from={frm}")
                assert status == 200, body
                part = body["partitions"][0]
                got += [(p, r["offset"], r["value"]["data"]) for r in part["records"]]
                assert all(r["key"]["data"] == key for r in part["records"])
                if part["next_offset"] is None:
                    break
                frm = part["next_offset"]
        assert sorted(got) == want, key

        # The CLI, partition=all: the same records.
        cli = lookup_cli(broker, topic, key, "--partition", "all")
        assert sorted((r["partition"], r["offset"], r["value"]) for r in cli) == want, key
        assert all(r["key"] == key for r in cli)

        # Default partition = the key's murmur2 partition: exactly kafka-python's records of this key.
        default = lookup_cli(broker, topic, key)
        kp_records = [w for w in want if w[2].startswith("kp-")]
        assert sorted((r["partition"], r["offset"], r["value"]) for r in default) == \
            [w for w in want if w[0] == kp_records[0][0]], key
        assert {r["partition"] for r in default} == {kp_records[0][0]}

        # --latest: the newest record with the key in its murmur2 partition.
        latest = lookup_cli(broker, topic, key, "--latest")
        newest = max((w for w in want if w[0] == kp_records[0][0]), key=lambda w: w[1])
        assert [(r["partition"], r["offset"], r["value"]) for r in latest] == [newest]

    # A key nobody wrote: nothing, and exit 0.
    assert lookup_cli(broker, topic, "nobody", "--partition", "all") == []

    # A topic without the index: a clear error that says how to enable it.
    create_topic(broker, "plain")
    status, body = http_get(broker, "/v1/topics/plain/records?key=a")
    assert status == 409 and "key.index.enable=true" in body["error"], body
    p = subprocess.run([os.environ["ANNAL_BIN"], "lookup", "--http", broker.http, "plain", "a"],
                       capture_output=True, text=True, timeout=TIMEOUT_S)
    assert p.returncode != 0 and "key.index.enable=true" in p.stderr, p.stderr
    status, body = http_get(broker, "/v1/topics/nope/records?key=a")
    assert status == 404, body

    # The key index metrics, parsed by Prometheus's own OpenMetrics parser.
    from prometheus_client.openmetrics.parser import text_string_to_metric_families
    with urllib.request.urlopen(f"http://{broker.http}/metrics", timeout=TIMEOUT_S) as r:
        families = {f.name: f for f in text_string_to_metric_families(r.read().decode())}
    samples = lambda name: {tuple(sorted(s.labels.items())): s.value for s in families[name].samples}
    lookups = samples("annal_key_lookups")
    assert lookups[(("outcome", "ok"),)] >= 3 * PARTITIONS, lookups
    assert lookups[(("outcome", "no_key_index"),)] >= 1, lookups
    assert (("topic", topic),) in samples("annal_key_index_file_bytes")  # > 0: test_key_lookup_cluster.py
    assert samples("annal_key_index_memory_entries")[(("topic", topic),)] > 0
    assert samples("annal_key_index_unindexed_bytes")[(("topic", topic),)] == 0
    assert (("topic", "plain"),) not in samples("annal_key_index_file_bytes")


def test_the_index_survives_a_restart_and_dump_log_checks_it(keyed_broker):
    broker = keyed_broker
    topic = "restarted"
    create_topic(broker, topic, config={"key.index.enable": "true", "segment.bytes": "4096"})
    producer = kp_producer(broker, compression_type="lz4", linger_ms=5)
    for r in range(20):
        for k in range(10):
            # Incompressible padding, so the topic rolls several 4 KiB segments and sealed ones get their files.
            producer.send(topic, key=f"k{k}".encode(), value=f"v{r}-{k} {os.urandom(100).hex()}".encode(),
                          partition=0)
    producer.flush(TIMEOUT_S)
    producer.close()
    before = lookup_cli(broker, topic, "k3", "--partition", "0")
    assert [r["value"].split(" ")[0] for r in before] == [f"v{r}-3" for r in range(20)]
    # The housekeeping writes sealed segments' files within a tick or two.
    part_dir = broker.partition_dir(topic, 0)
    deadline = time.monotonic() + TIMEOUT_S
    while not list(part_dir.glob("*.keyindex")) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert list(part_dir.glob("*.keyindex")), "no key index file was written"
    broker.stop()
    dump = subprocess.run([os.environ["ANNAL_BIN"], "dump-log", str(part_dir)],
                          capture_output=True, text=True, timeout=TIMEOUT_S)
    assert dump.returncode == 0, dump.stdout + dump.stderr
    assert "(checked against the log)" in dump.stdout
    broker.start()
    after = lookup_cli(broker, topic, "k3", "--partition", "0")
    assert after == before
