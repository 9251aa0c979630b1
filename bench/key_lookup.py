#!/usr/bin/env python3
"""Key lookup through a real broker (issue 15), not a test: one `annal serve`, two topics of P partitions, one with
key.index.enable=true and one without, filled in alternating chunks by librdkafka (murmur2 partitioner, so a key's
records are in its default lookup partition) so that produce throughput with the index on and off is measured in
the same run, under the same conditions. Then:

- index size: the key index files' bytes (annal_key_index_file_bytes) over the topic's log bytes
  (annal_partition_size_bytes), once the background indexing has no backlog (annal_key_index_unindexed_bytes = 0);
- lookup latency over HTTP (`/v1/topics/{topic}/records?key=K`, every record of the key, pages of 1000; and
  `&latest=true`), p50/p99 over random keys, end to end (connection, JSON, Python's parsing included);
- a full scan by a real consumer (librdkafka, every partition from the beginning to the end offsets, keeping the
  records of the key): what finding a key costs without the index; median of a few runs;

and prints a Markdown table. Run with the interop venv's Python (confluent-kafka):

    .cache/interop-venv/bin/python bench/key_lookup.py --annal-bin target/release/annal \
        [--records 1000000] [--keys 10000] [--record-bytes 1024] [--partitions 8]

Data goes to .cache/bench/key-lookup/ and is deleted at the end (--keep to keep it).
"""

import argparse
import json
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import confluent_kafka as ck
from confluent_kafka.admin import AdminClient, NewTopic

ROOT = Path(__file__).resolve().parent.parent


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(addr, path, timeout=120):
    with urllib.request.urlopen(f"http://{addr}{path}", timeout=timeout) as r:
        return r.status, r.read()


def metric_sum(text, name, topic):
    total, found = 0.0, False
    for line in text.splitlines():
        if line.startswith(name + "{") and f'topic="{topic}"' in line:
            total += float(line.split()[-1])
            found = True
    return total if found else None


def percentile(values, p):
    s = sorted(values)
    return s[min(len(s) - 1, int(round((len(s) - 1) * p)))]


def produce(bootstrap, topic, first, count, keys, record_bytes, rng_seed):
    """Produces records first..first+count-1 (key = record % keys); returns seconds."""
    p = ck.Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random", "linger.ms": 20,
                     "batch.size": 1 << 20, "compression.type": "lz4", "acks": "1",
                     "queue.buffering.max.kbytes": 1 << 20, "enable.idempotence": False})
    rng = random.Random(rng_seed)
    # JSON-ish values, about 2:1 compressible: a text frame around random hex.
    pool = [(b'{"event":"page_view","payload":"' + rng.randbytes(record_bytes // 2).hex().encode())[:record_bytes - 2]
            + b'"}' for _ in range(64)]
    started = time.monotonic()
    for i in range(first, first + count):
        while True:
            try:
                p.produce(topic, key=f"user-{i % keys:06d}".encode(), value=pool[i % 64])
                break
            except BufferError:
                p.poll(0.05)
        if i % 1000 == 0:
            p.poll(0)
    left = p.flush(300)
    assert left == 0, f"{left} records not delivered"
    return time.monotonic() - started


def end_offsets(bootstrap, topic, partitions):
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-offsets", "enable.auto.commit": False})
    ends = {p: c.get_watermark_offsets(ck.TopicPartition(topic, p), timeout=30)[1] for p in range(partitions)}
    c.close()
    return ends


def scan(bootstrap, topic, partitions, key, ends):
    """A consumer's full scan for `key`: (seconds, matching records)."""
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-scan", "enable.auto.commit": False,
                     "fetch.max.bytes": 64 << 20, "max.partition.fetch.bytes": 16 << 20})
    started = time.monotonic()
    c.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in range(partitions)])
    done = {p for p, e in ends.items() if e == 0}
    found = 0
    while len(done) < partitions:
        for m in c.consume(10000, timeout=5):
            if m.error():
                continue
            if m.key() == key:
                found += 1
            if m.offset() + 1 >= ends[m.partition()]:
                done.add(m.partition())
    seconds = time.monotonic() - started
    c.close()
    return seconds, found


def lookup(addr, topic, key, latest=False):
    """Every record of `key` in its default partition (pages of 1000), or the latest: (seconds, records)."""
    started = time.monotonic()
    records, frm = 0, 0
    while True:
        q = f"/v1/topics/{topic}/records?key={key}&limit=1000&from={frm}" + ("&latest=true" if latest else "")
        status, body = http(addr, q)
        assert status == 200, body
        part = json.loads(body)["partitions"][0]
        records += len(part["records"])
        if latest or part["next_offset"] is None:
            break
        frm = part["next_offset"]
    return time.monotonic() - started, records


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--annal-bin", default=os.environ.get("ANNAL_BIN", str(ROOT / "target/release/annal")))
    ap.add_argument("--records", type=int, default=1_000_000, help="records per topic")
    ap.add_argument("--keys", type=int, default=10_000)
    ap.add_argument("--record-bytes", type=int, default=1024)
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--chunks", type=int, default=6, help="alternating produce chunks per topic")
    ap.add_argument("--lookups", type=int, default=200)
    ap.add_argument("--scans", type=int, default=3)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()

    work = ROOT / ".cache/bench/key-lookup"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    port, http_port = free_port(), free_port()
    bootstrap, addr = f"127.0.0.1:{port}", f"127.0.0.1:{http_port}"
    log = open(work / "annal.log", "w")
    proc = subprocess.Popen([args.annal_bin, "serve", "--data-dir", str(work / "data"), "--listen", bootstrap,
                             "--override", f"http.listen={addr}"], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if http(addr, "/readyz")[0] == 200:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, "the broker did not become ready"
            time.sleep(0.2)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        on, off = "keyed-index-on", "keyed-index-off"
        # 64 MiB segments (both topics): most of the index is in sealed segments' files, as on a real topic.
        segment = {"segment.bytes": str(64 << 20)}
        fs = admin.create_topics([NewTopic(on, args.partitions, 1, config={"key.index.enable": "true", **segment}),
                                  NewTopic(off, args.partitions, 1, config=segment)])
        for f in fs.values():
            f.result(60)
        time.sleep(2)

        chunk = args.records // args.chunks
        secs = {on: 0.0, off: 0.0}
        for i in range(args.chunks):
            # Alternate which topic goes first, so neither always meets a warmer (or fuller) page cache.
            for t in ((on, off) if i % 2 == 0 else (off, on)):
                secs[t] += produce(bootstrap, t, i * chunk, chunk, args.keys, args.record_bytes, i)
        produced = chunk * args.chunks
        mib = produced * args.record_bytes / (1 << 20)

        indexed_at = time.monotonic()
        while True:
            text = http(addr, "/metrics")[1].decode()
            backlog = metric_sum(text, "annal_key_index_unindexed_bytes", on)
            if backlog == 0:
                break
            assert time.monotonic() - indexed_at < 600, f"the index backlog stays at {backlog} bytes"
            time.sleep(0.5)
        catch_up = time.monotonic() - indexed_at
        index_bytes = metric_sum(text, "annal_key_index_file_bytes", on)
        memory_entries = metric_sum(text, "annal_key_index_memory_entries", on)
        log_bytes = metric_sum(text, "annal_partition_size_bytes", on)
        off_bytes = metric_sum(text, "annal_partition_size_bytes", off)

        rng = random.Random(7)
        keys = [f"user-{rng.randrange(args.keys):06d}" for _ in range(args.lookups)]
        all_times, latest_times, per_key = [], [], []
        for k in keys:
            s, n = lookup(addr, on, k)
            all_times.append(s)
            per_key.append(n)
            s, n = lookup(addr, on, k, latest=True)
            assert n == 1
            latest_times.append(s)

        ends = end_offsets(bootstrap, on, args.partitions)
        scans = []
        for k in keys[:args.scans]:
            s, n = scan(bootstrap, on, args.partitions, k.encode(), ends)
            expected = lookup(addr, on, k)[1]
            assert n == expected, f"scan found {n} records of {k}, the index {expected}"
            scans.append(s)
        scan_s = statistics.median(scans)

        ms = lambda s: f"{s * 1000:.2f} ms"
        p50a, p99a = percentile(all_times, 0.5), percentile(all_times, 0.99)
        p50l, p99l = percentile(latest_times, 0.5), percentile(latest_times, 0.99)
        print(f"\n{produced} records of {args.record_bytes} B per topic ({mib:.0f} MiB), {args.keys} keys "
              f"({produced // args.keys} records per key), {args.partitions} partitions, lz4 batches; "
              f"{args.lookups} lookups, {args.scans} scans\n")
        print("| | index (HTTP) | full scan (consumer) | scan / index |")
        print("|---|---|---|---|")
        print(f"| all {statistics.median(per_key):.0f} records of a key, p50 | {ms(p50a)} | {ms(scan_s)} | "
              f"{scan_s / p50a:.0f}x |")
        print(f"| all records of a key, p99 | {ms(p99a)} | | {scan_s / p99a:.0f}x |")
        print(f"| latest record of a key, p50 | {ms(p50l)} | | {scan_s / p50l:.0f}x |")
        print(f"| latest record of a key, p99 | {ms(p99l)} | | {scan_s / p99l:.0f}x |")
        print()
        whole = index_bytes + 8 * memory_entries  # what the active segments' entries take once written out
        print(f"- index: {index_bytes / (1 << 20):.1f} MiB of files plus {memory_entries:.0f} entries in memory "
              f"(active segments) for {log_bytes / (1 << 20):.0f} MiB of log: {100 * whole / log_bytes:.2f}% "
              f"at 8 bytes an entry")
        print(f"- produce: index on {mib / secs[on]:.1f} MiB/s, off {mib / secs[off]:.1f} MiB/s "
              f"(on/off {secs[off] / secs[on]:.3f}); logs {log_bytes / (1 << 20):.0f} / {off_bytes / (1 << 20):.0f} MiB")
        print(f"- background index backlog drained {catch_up:.1f} s after the last produce")
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
