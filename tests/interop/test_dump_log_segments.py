"""Kafka's own tool reads the broker's files (issue 2): kafka.tools.DumpLogSegments from the Apache Kafka 4.x jars
decodes every segment (batches, offsets, counts, codecs, payloads, timestamps) and finds the offset and time indexes
sane and consistent with the log, exactly as it does for Kafka's own files.

Index conventions this checks (Kafka's, see LogSegment.append): an offset-index entry maps a batch's LAST offset to
the batch's file position; a time-index entry maps the largest timestamp so far to the offset of the batch that holds
it; time-index timestamps strictly increase; on clean shutdown index files are trimmed to their entries.
"""

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import confluent_kafka as ck
import pytest

from brokers import KAFKA_SCRIPTS, REPO
from clients import ck_consumer, ck_poll, ck_produce_all, ck_producer, create_topic
from kwire import group_partition


CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
BATCH_RE = re.compile(r"^baseOffset: (\d+) lastOffset: (\d+) count: (\d+) .*?position: (\d+) "
                      r"CreateTime: (-?\d+) size: (\d+) magic: (\d+) compresscodec: (\w+) crc: (\d+) isvalid: (\w+)")
RECORD_RE = re.compile(r"^\| offset: (\d+) CreateTime: (-?\d+) keySize: (-?\d+) valueSize: (-?\d+) "
                       r"sequence: (-?\d+) headerKeys: \[(.*?)\](?: key: (.*?))? payload: (.*)$")
INDEX_ENTRY_RE = re.compile(r"^offset: (\d+) position: (\d+)$")
TIME_ENTRY_RE = re.compile(r"^timestamp: (\d+) offset: (\d+)$")
PROBLEM_MARKERS = ["Mismatches in", "not found in the log", "timestamp mismatch", "out of order",
                   "invalid bytes", "isvalid: false", "Exception", "corrupt", "Corrupt"]

TS0 = 1_764_000_000_000


def kafka_classpath():
    cp_file = subprocess.run([str(KAFKA_SCRIPTS / "fetch.sh")], check=True, capture_output=True,
                             text=True).stdout.strip()
    return Path(cp_file).read_text().strip()


def dump(classpath, files, *flags):
    proc = subprocess.run(
        ["java", "-Xmx256m", "-cp", classpath, "kafka.tools.DumpLogSegments", "--files", ",".join(map(str, files)),
         *flags], capture_output=True, text=True, timeout=180)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"DumpLogSegments {flags} failed ({proc.returncode}):\n{out[-4000:]}"
    for marker in PROBLEM_MARKERS:
        assert marker not in out, f"DumpLogSegments {flags} reports '{marker}':\n{out[-4000:]}"
    return out


def payload(i):
    # ASCII (the tool prints payloads as UTF-8 strings), varied, and with a repeated phrase so that every codec
    # (lz4 has no entropy coder) shrinks even a batch of one or two records: librdkafka sends a batch uncompressed
    # when compressing would not make it smaller, and the codec check below relies on it compressing.
    varied = "".join(f"{(i * 7919 + j * 104729) % 65536:04x}" for j in range(200))
    return f"rec-{i:05d}-" + varied + "-annal-keeps-the-log" * 20


def produce_batches(broker, topic, codecs, batches_per_codec, per_batch, start):
    """Each flush() sends what is queued as one batch per partition: batches of exactly `per_batch` records."""
    expected = []
    i = start
    for codec in codecs:
        producer = ck_producer(broker, **{"compression.type": codec, "linger.ms": 10000, "acks": "all",
                                          "batch.num.messages": per_batch})
        for _ in range(batches_per_codec):
            recs = [(f"k-{n}".encode(), payload(n).encode(), [("n", str(n).encode())], TS0 + n)
                    for n in range(i, i + per_batch)]
            ck_produce_all(producer, topic, recs, partition=0)
            expected.extend((n, TS0 + n, f"k-{n}", payload(n), codec) for n in range(i, i + per_batch))
            i += per_batch
    return expected


def check_segments(classpath, part_dir, expected, expect_codecs):
    logs = sorted(part_dir.glob("*.log"))
    assert logs, f"no segments in {part_dir}"
    for log in logs:
        assert re.fullmatch(r"\d{20}\.log", log.name), f"segment name {log.name} is not <20-digit offset>.log"

    out = dump(classpath, logs, "--print-data-log")
    records, batches = [], []
    segment_base = None
    for line in out.splitlines():
        if line.startswith("Log starting offset:"):
            segment_base = int(line.split(":")[1])
        elif m := BATCH_RE.match(line):
            base, last, count = int(m[1]), int(m[2]), int(m[3])
            assert m[7] == "2" and m[10] == "true", line
            assert count == last - base + 1, line
            if not batches or batches[-1][3] != segment_base:
                assert base == segment_base, f"first batch of segment {segment_base} starts at {base}"
            batches.append((base, last, m[8], segment_base))
        elif m := RECORD_RE.match(line):
            records.append((int(m[1]), int(m[2]), m[7], m[8]))
    assert len(batches) >= 2, out[-3000:]
    for (b1, l1, _, _), (b2, _, _, _) in zip(batches, batches[1:]):
        assert b2 == l1 + 1, f"batches not contiguous: ...{l1} then {b2}"
    assert [r for r in records] == [(n, ts, k, p) for n, ts, k, p, _ in expected]
    codecs_seen = {c for _, _, c, _ in batches}
    assert codecs_seen == set(expect_codecs), codecs_seen
    # Batch codec is the producer's: check batch by batch.
    codec_of = {n: c for n, _, _, _, c in expected}
    for base, last, codec, _ in batches:
        assert codec_of[base] == codec_of[last], (base, last, codec)
        # librdkafka sends a batch uncompressed when compressing would not make it smaller (a lone record).
        assert codec == codec_of[base] or (codec == "none" and base == last), (base, last, codec)

    indexes = [p for log in logs for p in (log.with_suffix(".index"), log.with_suffix(".timeindex"))]
    for f in indexes:
        assert f.exists(), f"{f} missing"
    sanity = dump(classpath, indexes, "--index-sanity-check")
    for f in indexes:
        assert f"{f} passed sanity check" in sanity or f"{f} is empty" in sanity, sanity[-3000:]

    # Without --verify-index-only the tool prints each entry and still reports mismatches (checked in dump()).
    entries = dump(classpath, indexes)
    offset_entries = [(int(m[1]), int(m[2])) for m in map(INDEX_ENTRY_RE.match, entries.splitlines()) if m]
    time_entries = [(int(m[1]), int(m[2])) for m in map(TIME_ENTRY_RE.match, entries.splitlines()) if m]
    total_bytes = sum(log.stat().st_size for log in logs)
    max_batch = max(int(m[6]) for m in map(BATCH_RE.match, out.splitlines()) if m)
    # An entry whenever more than index.interval.bytes (4096) were written since the last one.
    assert len(offset_entries) >= total_bytes // (4096 + max_batch) - len(logs), (len(offset_entries), total_bytes)
    last_offsets = {last for _, last, _, _ in batches}
    for off, _ in offset_entries:
        assert off in last_offsets, f"offset index entry {off} is not a batch's last offset"
    assert len(time_entries) >= 1
    ts_of = {n: ts for n, ts, _, _, _ in expected}
    batch_max_ts = {last: max(ts_of[o] for o in range(base, last + 1)) for base, last, _, _ in batches}
    for ts, off in time_entries:
        assert off in last_offsets and ts == batch_max_ts[off], f"time index entry ({ts}, {off})"

    # Producer-state snapshots, if any, must be in Kafka's format too (the tool decodes them).
    snapshots = sorted(part_dir.glob("*.snapshot"))
    if snapshots:
        dump(classpath, snapshots)
    return logs


@pytest.mark.ondisk
@pytest.mark.restart
@pytest.mark.parametrize("history", ["clean", "after-kill9-recovery"])
def test_kafka_dump_log_segments_reads_our_segments(own_broker, history):
    b = own_broker
    classpath = kafka_classpath()
    # 1 MiB segments (Kafka's minimum segment.bytes) so the uncompressed topic rolls into several segments.
    create_topic(b, "dump-plain", partitions=1, config={"segment.bytes": "1048576"})
    create_topic(b, "dump-codecs", partitions=1)
    plain = produce_batches(b, "dump-plain", ["none"], 30, 40, 0)  # ~1.6 MB: at least 2 segments
    mixed = produce_batches(b, "dump-codecs", CODECS, 4, 25, 0)
    if history == "after-kill9-recovery":
        b.restart(kill=True)
        plain += produce_batches(b, "dump-plain", ["none"], 3, 40, len(plain))
        mixed += produce_batches(b, "dump-codecs", ["zstd"], 2, 25, len(mixed))
    b.stop()

    logs = check_segments(classpath, b.partition_dir("dump-plain", 0), plain, ["none"])
    assert len(logs) >= 2, f"expected the 1 MiB segment.bytes to roll the log: {logs}"
    check_segments(classpath, b.partition_dir("dump-codecs", 0), mixed, CODECS)


OFFSETS_RECORD_RE = re.compile(r"^\| offset: (\d+) .*? key: (\{.*?\}) payload: (.*)$")


@pytest.mark.ondisk
def test_kafka_decodes_a_consumer_group_s_records_in_consumer_offsets(own_broker):
    """A KIP-848 group (librdkafka with group.protocol=consumer) leaves its state in __consumer_offsets in Kafka's
    record schemas (types 3-8: group epoch, subscribed topics, member, target assignment, current assignment),
    which Kafka's own decoder reads: every record decodes, and the member's last current assignment holds all
    four partitions at its member epoch."""
    import json

    b = own_broker
    classpath = kafka_classpath()
    create_topic(b, "dump-848", partitions=4)
    producer = ck_producer(b, acks="all")
    for p in range(4):
        ck_produce_all(producer, "dump-848", [(b"k", f"v{p}-{i}".encode(), [], None) for i in range(5)],
                       partition=p)
    group = "dump-848-group"
    consumer = ck_consumer(b, **{"group.id": group, "group.protocol": "consumer",
                                 "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe(["dump-848"])
        ck_poll(consumer, 20)
        consumer.commit(offsets=[ck.TopicPartition("dump-848", p, 5) for p in range(4)], asynchronous=False)
        member_id = consumer.memberid()
    finally:
        consumer.close()
    b.stop()

    part = b.partition_dir("__consumer_offsets", group_partition(group, 50))
    out = dump(classpath, sorted(part.glob("*.log")), "--offsets-decoder")
    assert "Error at offset" not in out and "Unknown record type" not in out, out[-4000:]
    latest = {}
    for line in out.splitlines():
        m = OFFSETS_RECORD_RE.match(line)
        if not m:
            continue
        key = json.loads(m[2])
        if group not in (key["data"].get("groupId"), key["data"].get("group")):  # "group" in offset commits
            continue
        value = None if m[3] == "<DELETE>" else json.loads(m[3])
        latest[(key["type"], key["data"].get("memberId"), key["data"].get("topic"),
                key["data"].get("partition"))] = value
    types = {t for t, *_ in latest}
    # Type 4 (subscribed topics' metadata) is Kafka 4.0's, replaced in 4.1 by a hash in type 3: not required.
    assert {"1", "3", "5", "6", "7", "8"} <= types, (types, out[-4000:])
    # The member left at close: its member, target and current-assignment records end as tombstones.
    for t in ("5", "7", "8"):
        assert latest[(t, member_id, None, None)] is None, (t, latest)
    # Before it left, its current assignment held every partition.
    assignments = []
    for line in out.splitlines():
        m = OFFSETS_RECORD_RE.match(line)
        if m and m[3] != "<DELETE>" and json.loads(m[2]) == {"type": "8", "data": {"groupId": group,
                                                                                     "memberId": member_id}}:
            assignments.append(json.loads(m[3])["data"])
    assert assignments, out[-4000:]
    held = max(assignments, key=lambda a: sum(len(t["partitions"]) for t in a["assignedPartitions"]))
    assert held["memberEpoch"] >= 1, held
    assert sorted(p for t in held["assignedPartitions"] for p in t["partitions"]) == [0, 1, 2, 3], held
    committed = {k[3]: v["data"]["offset"] for k, v in latest.items() if k[0] == "1" and v}
    assert committed == {0: 5, 1: 5, 2: 5, 3: 5}, committed


def sample_writer():
    """annal-log's example that writes a partition directory without any broker (crates/annal-log/examples/
    write_sample.rs). test.sh's `cargo test --release` builds it next to the annal binary; else build it here."""
    candidates = [REPO / "target" / "release" / "examples" / "write_sample"]
    if os.environ.get("ANNAL_BIN"):
        candidates.insert(0, Path(os.environ["ANNAL_BIN"]).parent / "examples" / "write_sample")
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            return c
    if not (REPO / "crates" / "annal-log" / "examples" / "write_sample.rs").exists():
        pytest.skip("crates/annal-log/examples/write_sample.rs is not in this tree")
    if shutil.which("cargo") is None:
        pytest.skip("cargo not found, cannot build the annal-log write_sample example")
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "annal-log", "--example", "write_sample"],
                   cwd=REPO, check=True, timeout=1200)
    return candidates[-1]


def test_kafka_dump_log_segments_reads_annal_log_files_directly():
    """The storage engine alone (no broker): its segment and indexes, written by the write_sample example, decode
    with Kafka's tool. Example data: batch i holds records j=0..4, key "key-{i}", value "value-{i}-{j}",
    CreateTime 1700000000000 + 10*i + j."""
    writer = sample_writer()
    classpath = kafka_classpath()
    with tempfile.TemporaryDirectory(prefix="annal-dump-") as tmp:
        part = Path(tmp) / "sample-0"
        subprocess.run([str(writer), str(part), "400"], check=True, timeout=120)
        expected = [(5 * i + j, 1_700_000_000_000 + 10 * i + j, f"key-{i}", f"value-{i}-{j}", "none")
                    for i in range(400) for j in range(5)]
        check_segments(classpath, part, expected, ["none"])
