#!/usr/bin/env python3
"""Scale bench (issue 19): how a single broker's cost grows with its partition count, Annal beside Apache Kafka.

    python3 bench/scale.py [--counts 1000,10000,100000] [--brokers annal,kafka] [--annal-bin PATH]
                           [--kafka-max 10000] [--stop-timeout 300] [--out bench/results/DATE-scale.json]

For each partition count N: a fresh broker, topics of up to 1,000 partitions each (N partitions in all, RF 1), one
record produced to every partition, then a clean restart. Reported per (broker, N):
  create_s      CreateTopics for all the topics, one request per topic, until a Metadata answer lists every
                partition with a leader
  produce_rps   records/s producing one record to every partition (acks=1, requests of 1,000 partitions)
  metadata_s    one Metadata request for all topics (v1, null topic list): request sent to response read,
                median of 5
  fds           open descriptors of the broker process (/proc/PID/fd) once every partition has a record
  rss_mib       its VmRSS then
  stop_s        the clean stop (SIGINT, or Kafka's stop) until the process exited (--stop-timeout, then killed)
  ready_s       after a clean stop and start: launch until a Metadata answer lists every partition with a
                leader (every partition servable)
  ready_fds, ready_rss_mib  the same figures right after that restart
  describe_configs_s, list_offsets_s, offset_commit_s, offset_fetch_s  one request each over every topic or
                partition (scale_probes.py), before the restart; probes_ok says whether each answer was right
  serving_wait_s  after create_s, until every partition answers ListOffsets without error (the produce waits for
                it: Kafka lists leaders in Metadata before it leads them)
The client is raw Kafka protocol over one socket (no client library), so the figures are the broker's.
Kafka runs only up to --kafka-max partitions (it needs far more memory and time per partition here). Not a test:
nothing here asserts a figure.
"""

import argparse
import json
import os
import socket
import statistics
import struct
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from benchlib import brokers, procs  # noqa: E402

TOPIC_PARTITIONS_MAX = 1000

# ---- the Kafka protocol, the few requests this bench sends -------------------------------------------------


def _str(s):
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def _crc32c_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_CRC_TABLE = _crc32c_table()


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = _CRC_TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def _varint(n):
    n = (n << 1) ^ (n >> 63)  # zigzag
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def record_batch(value, ts_ms):
    """A v2 batch of one uncompressed record."""
    body = b"\x00" + _varint(0) + _varint(0) + _varint(-1) + _varint(len(value)) + value + _varint(0)
    record = _varint(len(body)) + body
    after_crc = struct.pack(">hiqqqhii", 0, 0, ts_ms, ts_ms, -1, -1, -1, 1) + record
    crc = crc32c(after_crc)
    after_length = struct.pack(">ibI", -1, 2, crc) + after_crc  # partition leader epoch, magic, crc
    return struct.pack(">qi", 0, len(after_length)) + after_length


class Conn:
    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=600)
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.correlation = 0
        self.stray = 0

    def request(self, api_key, version, body):
        """Sends one request; returns (seconds until the whole response was read, response bytes)."""
        self.correlation += 1
        header = struct.pack(">hhi", api_key, version, self.correlation) + _str("scale-bench")
        frame = header + body
        start = time.monotonic()
        self.s.sendall(struct.pack(">i", len(frame)) + frame)
        while True:
            size = struct.unpack(">i", self._read(4))[0]
            data = self._read(size)
            if struct.unpack_from(">i", data, 0)[0] == self.correlation:
                return time.monotonic() - start, data
            self.stray += 1  # an answer to an earlier request: not this one's

    def _read(self, n):
        chunks, got = [], 0
        while got < n:
            c = self.s.recv(min(n - got, 1 << 20))
            if not c:
                raise RuntimeError("broker closed the connection")
            chunks.append(c)
            got += len(c)
        return b"".join(chunks)

    def close(self):
        self.s.close()


def create_topics(conn, topics):
    """CreateTopics v2, one request per topic; returns total seconds. Fails on any error but TOPIC_ALREADY_EXISTS."""
    total = 0.0
    for name, partitions in topics:
        body = (struct.pack(">i", 1) + _str(name) + struct.pack(">ihii", partitions, 1, 0, 0)
                + struct.pack(">ib", 600_000, 0))
        took, data = conn.request(19, 2, body)
        total += took
        # correlation id, throttle time, topics array length, name, error code
        code = struct.unpack(">h", data[4 + 4 + 4 + 2 + len(name.encode()):][:2])[0]
        if code not in (0, 36):
            raise RuntimeError(f"CreateTopics {name}: error {code}")
    return total


def metadata_all(conn):
    """Metadata v1 for every topic: (seconds, {topic: [leader per partition]})."""
    took, data = conn.request(3, 1, struct.pack(">i", -1))
    pos = 4  # correlation id
    topics = {}

    def i16():
        nonlocal pos
        v = struct.unpack_from(">h", data, pos)[0]
        pos += 2
        return v

    def i32():
        nonlocal pos
        v = struct.unpack_from(">i", data, pos)[0]
        pos += 4
        return v

    def string():
        nonlocal pos
        n = i16()
        if n < 0:
            return None
        v = data[pos:pos + n].decode()
        pos += n
        return v

    for _ in range(i32()):  # brokers: node id, host, port, rack
        i32(), string(), i32(), string()
    i32()  # controller id
    for _ in range(i32()):
        i16()
        name = string()
        pos += 1  # is_internal
        leaders = []
        for _ in range(i32()):
            i16(), i32()
            leaders.append(i32())
            for _ in range(2):  # replicas, isr
                n = i32()
                pos += 4 * n
        topics[name] = leaders
    return took, topics


def produce_all(conn, topics, batches):
    """Produce v3, acks=1, one request per topic (all its partitions); returns records/s."""
    records = 0
    start = time.monotonic()
    for name, partitions in topics:
        parts = b"".join(struct.pack(">ii", p, len(batches[p])) + batches[p] for p in range(partitions))
        body = struct.pack(">hhi", -1, 1, 30_000) + struct.pack(">i", 1) + _str(name) + struct.pack(">i", partitions) + parts
        conn.request(0, 3, body)
        records += partitions
    return records / (time.monotonic() - start)


# ---- the run -------------------------------------------------------------------------------------------------


def fd_count(pid):
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return -1


def layout(n):
    topics, left, i = [], n, 0
    while left > 0:
        p = min(TOPIC_PARTITIONS_MAX, left)
        topics.append((f"scale-{i:04d}", p))
        left -= p
        i += 1
    return topics


def wait_all_led(port, topics, timeout_s=900):
    want = {name: p for name, p in topics}
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            conn = Conn(port)
            try:
                _, seen = metadata_all(conn)
            finally:
                conn.close()
            if all(len(seen.get(t, [])) == p and all(l >= 0 for l in seen[t]) for t, p in want.items()):
                return
        except (OSError, RuntimeError, struct.error):
            pass
        time.sleep(0.05)
    raise RuntimeError("not every partition got a leader in time")


def one(broker, n, batches):
    topics = layout(n)
    broker.start()
    try:
        conn = Conn(broker.port)
        t_create = time.monotonic()
        create_topics(conn, topics)
        wait_all_led(broker.port, topics)
        create_s = time.monotonic() - t_create
        import scale_probes  # here: it imports this module

        # Kafka lists leaders in Metadata before it leads: a produce then fails on most new partitions.
        serving_wait_s = scale_probes.wait_serving(broker.port, topics)
        produce_rps = produce_all(conn, topics, batches)
        metadata_s = statistics.median(metadata_all(conn)[0] for _ in range(5))
        conn.close()
        probes = scale_probes.run_all(broker.port, topics)
        probes["serving_wait_s"] = round(serving_wait_s, 3)
        fds, rss = fd_count(broker.pid), procs.rss_mib(broker.pid)
    finally:
        t_stop = time.monotonic()
        broker.stop()
        stop_s = time.monotonic() - t_stop
    t_launch = time.monotonic()
    broker.start()
    try:
        wait_all_led(broker.port, topics)
        ready_s = time.monotonic() - t_launch
        ready_fds, ready_rss = fd_count(broker.pid), procs.rss_mib(broker.pid)
    finally:
        broker.stop()
        broker.remove_data()
    row = dict(broker=broker.name, partitions=n, create_s=round(create_s, 3), produce_rps=round(produce_rps),
               metadata_s=round(metadata_s, 4), fds=fds, rss_mib=round(rss, 1), stop_s=round(stop_s, 3),
               ready_s=round(ready_s, 3),
               ready_fds=ready_fds, ready_rss_mib=round(ready_rss, 1),
               **{k: v for k, v in probes.items() if k != "metadata_s"})
    procs.log(json.dumps(row))
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--counts", default="1000,10000,100000")
    ap.add_argument("--brokers", default="annal,kafka")
    ap.add_argument("--annal-bin", default=str(HERE.parent / "target/release/annal"))
    ap.add_argument("--kafka-cache", default=os.environ.get("KAFKA_CACHE", str(HERE.parent / ".cache/kafka")))
    ap.add_argument("--kafka-max", type=int, default=10000)
    ap.add_argument("--workdir", default="/tmp/annal-scale-bench")
    ap.add_argument("--out", default=None)
    ap.add_argument("--stop-timeout", type=float, default=300.0,
                    help="seconds a clean stop may take before the broker is killed (then the restart is unclean)")
    args = ap.parse_args()
    counts = [int(c) for c in args.counts.split(",")]
    batches = [record_batch(b"record %d" % p, 1_700_000_000_000) for p in range(max(counts))]
    rows = []
    for n in counts:
        for kind in args.brokers.split(","):
            if kind == "kafka" and n > args.kafka_max:
                continue
            workdir = Path(args.workdir) / f"{kind}-{n}"
            if kind == "annal":
                broker = brokers.AnnalBroker(workdir, args.annal_bin)
            else:
                broker = brokers.KafkaBroker(workdir, HERE.parent, args.kafka_cache)
            broker.stop_timeout_s = args.stop_timeout
            try:
                rows.append(one(broker, n, batches))
            except Exception as e:  # noqa: BLE001 (a failed point is recorded, the curve goes on)
                procs.log(f"{kind} at {n} partitions failed: {e}")
                rows.append(dict(broker=kind, partitions=n, error=str(e)))
    print(json.dumps(rows, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(dict(nofile=os.sysconf("SC_OPEN_MAX"), rows=rows), indent=1) + "\n")


if __name__ == "__main__":
    main()
