#!/usr/bin/env python3
"""Cluster bench (issue 9): how long a 3-node cluster takes to become ready, and each node's memory, for Annal and
Apache Kafka in the same run, one after the other on this machine.

    python3 bench/cluster_ready.py [--runs N] [--brokers annal,kafka] [--annal-bin PATH]

Ready = every node answers Metadata listing all 3 brokers (registered, unfenced) and DescribeQuorum names a
leader, then a topic (6 partitions, RF 3) is created and every node shows its leaders. Measured from the moment the
processes are started (Kafka's storage format step, which Annal does not need, is done before the clock starts).
RSS is read from /proc/<pid>/status (VmRSS) once the topic exists. Both use tests/interop/cluster.py, the harness
the cluster tests use, so the configs are the same shape for both. Prints one line per run and a summary with the
ratios Annal/Kafka. Not a test: nothing here asserts speed.
"""

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "interop"))

import cluster as harness  # noqa: E402  (tests/interop/cluster.py)


def rss_mib(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def create_topic(node, name):
    """CreateTopics through kafka-python's admin client (run this with the interop venv's python)."""
    from kafka.admin import KafkaAdminClient, NewTopic
    admin = KafkaAdminClient(bootstrap_servers=node.bootstrap, request_timeout_ms=30000)
    try:
        admin.create_topics([NewTopic(name, num_partitions=6, replication_factor=3)], timeout_ms=30000)
    finally:
        admin.close()


def one_run(kind, workdir):
    c = harness.Cluster(workdir, size=3, kind=kind)
    try:
        c.workdir.mkdir(parents=True, exist_ok=True)
        for node in c.nodes:
            c.write_config(node)
        c.format()
        start = time.monotonic()
        for node in c.nodes:
            node.start()
        c.wait_ready(timeout=180)
        quorum_s = time.monotonic() - start
        create_topic(c.node(1), "bench-ready")
        c.wait_for_leaders("bench-ready", 6, timeout=60)
        ready_s = time.monotonic() - start
        rss = [rss_mib(n.pid()) for n in c.nodes]
        return quorum_s, ready_s, rss
    finally:
        c.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--brokers", default="annal,kafka")
    ap.add_argument("--annal-bin", default=os.environ.get("ANNAL_BIN", str(HERE.parent / "target/release/annal")))
    args = ap.parse_args()
    os.environ["ANNAL_BIN"] = args.annal_bin
    results = {}
    for kind in args.brokers.split(","):
        for i in range(args.runs):
            with tempfile.TemporaryDirectory(prefix=f"cluster-ready-{kind}-") as d:
                quorum_s, ready_s, rss = one_run(kind, Path(d) / "c")
            results.setdefault(kind, []).append((quorum_s, ready_s, rss))
            print(f"{kind} run {i + 1}: brokers unfenced + quorum leader {quorum_s:.2f} s, topic with leaders "
                  f"{ready_s:.2f} s, RSS per node {', '.join(f'{r:.0f}' for r in rss)} MiB", flush=True)
    summary = {}
    for kind, runs in results.items():
        ready = statistics.median(r[1] for r in runs)
        rss = statistics.median(statistics.mean(r[2]) for r in runs)
        summary[kind] = (ready, rss)
        print(f"{kind}: median ready {ready:.2f} s, median mean RSS {rss:.0f} MiB per node")
    if "annal" in summary and "kafka" in summary:
        (ar, am), (kr, km) = summary["annal"], summary["kafka"]
        print(f"annal/kafka: ready time {ar / kr:.3f}x, RSS {am / km:.3f}x")


if __name__ == "__main__":
    main()
