#!/usr/bin/env python3
"""Restart-to-ready at scale (issue 19): one broker's data directory with N partitions, restarted again and again.

    python3 bench/ready.py [--partitions 100000] [--restarts 3] [--annal-bin target/ci/annal]
                           [--workdir /tmp/annal-ready-bench] [--drop-caches] [--out FILE]

The first run prepares the directory as bench/scale.py does (topics of up to 1,000 partitions, RF 1, one record in
every partition, a clean stop) and keeps it; later runs reuse it (delete the work directory to start again). Each
restart reports, like scale.py's ready_s: launch until a Metadata answer lists every partition with a leader, then
a Produce of one record to every partition of the first and the last topic succeeds (the partitions are servable,
not only listed), then
the probes of scale_probes.py (Metadata, DescribeConfigs, ListOffsets, OffsetCommit and OffsetFetch, each one
request over every partition, timed and checked), then a clean stop. The broker's own log (annal.log in the work directory) has the start-up phase
timings (`start-up phase` lines). --drop-caches empties the page cache before each start (needs root): the cold
figure. Not a test: nothing here asserts a figure.
"""

import argparse
import json
import os
import subprocess
import struct
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import scale  # noqa: E402
import scale_probes  # noqa: E402
from benchlib import brokers, procs  # noqa: E402


def produce_ok(port, topic, partitions, batches):
    """Produce v3 acks=1 to every partition of one topic; True if every partition answered error 0."""
    conn = scale.Conn(port)
    try:
        parts = b"".join(struct.pack(">ii", p, len(batches[p])) + batches[p] for p in range(partitions))
        body = (struct.pack(">hhi", -1, 1, 30_000) + struct.pack(">i", 1) + scale._str(topic)
                + struct.pack(">i", partitions) + parts)
        _, data = conn.request(0, 3, body)
    finally:
        conn.close()
    # correlation id, topics array (1), name, partitions array, then per partition: index, error, offset, time
    pos = 4 + 4 + 2 + len(topic.encode())
    count = struct.unpack_from(">i", data, pos)[0]
    pos += 4
    errors = [struct.unpack_from(">ih", data, pos + i * 22)[1] for i in range(count)]
    return count == partitions and all(e == 0 for e in errors)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--partitions", type=int, default=100_000)
    ap.add_argument("--restarts", type=int, default=3)
    ap.add_argument("--annal-bin", default=str(HERE.parent / "target/ci/annal"))
    ap.add_argument("--workdir", default="/tmp/annal-ready-bench")
    ap.add_argument("--drop-caches", action="store_true")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    topics = scale.layout(args.partitions)
    batches = [scale.record_batch(b"record %d" % p, 1_700_000_000_000) for p in range(scale.TOPIC_PARTITIONS_MAX)]
    workdir = Path(args.workdir) / f"annal-{args.partitions}"
    broker = brokers.AnnalBroker(workdir, args.annal_bin)
    broker.stop_timeout_s = 600
    marker = workdir / "prepared"
    if not marker.exists():
        broker.remove_data()
        procs.log(f"preparing {args.partitions} partitions in {workdir}")
        broker.start()
        try:
            conn = scale.Conn(broker.port)
            scale.create_topics(conn, topics)
            scale.wait_all_led(broker.port, topics)
            scale.produce_all(conn, topics, batches)
            conn.close()
        finally:
            broker.stop()
        marker.write_text("prepared\n")
    rows = []
    for i in range(args.restarts):
        if args.drop_caches:
            subprocess.run(["sync"], check=True)
            Path("/proc/sys/vm/drop_caches").write_text("3\n")
        t_launch = time.monotonic()
        broker.start()
        try:
            listening_s = broker.startup_s
            scale.wait_all_led(broker.port, topics)
            led_s = time.monotonic() - t_launch
            servable = all(produce_ok(broker.port, name, p, batches) for name, p in (topics[0], topics[-1]))
            servable_s = time.monotonic() - t_launch
            probes = scale_probes.run_all(broker.port, topics)
            fds, rss = scale.fd_count(broker.pid), procs.rss_mib(broker.pid)
        finally:
            broker.stop()
        row = dict(partitions=args.partitions, restart=i + 1, cold=args.drop_caches,
                   listening_s=round(listening_s, 3), ready_s=round(led_s, 3),
                   servable=servable, servable_s=round(servable_s, 3), fds=fds, rss_mib=round(rss, 1), **probes)
        procs.log(json.dumps(row))
        rows.append(row)
    print(json.dumps(rows, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(dict(nofile=os.sysconf("SC_OPEN_MAX"), rows=rows), indent=1) + "\n")


if __name__ == "__main__":
    main()
