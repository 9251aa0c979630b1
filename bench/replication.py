#!/usr/bin/env python3
"""Replication bench (issue 10): a 3-node Annal cluster and a 3-node Apache Kafka cluster in the same run, one
after the other on this machine, replication factor 3, acks=all, min.insync.replicas=2, 1 KiB records.

    .cache/interop-venv/bin/python bench/replication.py [--brokers annal,kafka] [--records N] [--rate R]
                                                         [--failover-rate R] [--annal-bin PATH] [--out FILE]

Three figures per broker, each the same workload with the same client for both:
1. throughput: Kafka's ProducerPerformance at maximum rate (acks=all, 8 partitions, `--records` records);
2. latency at a fixed rate: ProducerPerformance at `--rate` records/s for 20 s, its p50/p99/p99.9;
3. failover gap: an idempotent librdkafka producer (acks=all) writes `--failover-rate` records/s to a one-partition
   topic; 5 s in, the partition's leader is killed with -9; the gap is the longest time between two consecutive
   acknowledgements from 1 s before the kill to the end (20 s after it). The killed node's absence must be
   noticed by the controller before a new leader is elected, so this is mostly `broker.session.timeout.ms`; both
   clusters run with Kafka's defaults (9000 ms session, 2000 ms heartbeat), not the short test values. Every
   acknowledged record is then read back (by offset) and checked, so a fast failover that lost data shows up as
   an error, not a good figure.
Not a test: nothing here asserts speed; the ratios Annal/Kafka are printed at the end and written as JSON.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "interop"))
sys.path.insert(0, str(HERE))

import cluster as harness  # noqa: E402  (tests/interop/cluster.py)
from benchlib import parse, procs  # noqa: E402

# Kafka's defaults: the failover figure is meant "with default settings".
DEFAULT_LEASE = {"broker.session.timeout.ms": "9000", "broker.heartbeat.interval.ms": "2000"}
PARTITIONS = 8


def create_topic(bootstrap, name, partitions):
    from kafka.admin import KafkaAdminClient, NewTopic
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
    try:
        admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=3,
                                      topic_configs={"min.insync.replicas": "2"})], timeout_ms=30000)
    finally:
        admin.close()


_CLASSPATH = []


def kafka_classpath():
    """Apache Kafka's jars (broker + tools) from Maven Central, as the interop tests fetch them."""
    if not _CLASSPATH:
        out = subprocess.run([str(harness.KAFKA_SCRIPTS / "fetch.sh")], check=True, capture_output=True, text=True)
        _CLASSPATH.append(Path(out.stdout.strip()).read_text().strip())
    return _CLASSPATH[0]


def perf(bootstrap, topic, records, rate, label):
    cmd = ["java", "-Xmx512m", "-cp", kafka_classpath(), "org.apache.kafka.tools.ProducerPerformance",
           "--topic", topic, "--num-records", str(records), "--record-size", "1024", "--throughput", str(rate),
           "--producer-props", f"bootstrap.servers={bootstrap}", "acks=all", "linger.ms=5"]
    timeout = 120 + (records / rate * 2 if rate > 0 else records / 2000)
    code, out = procs.run_tool(cmd, timeout, label, echo=False)
    if code != 0:
        raise RuntimeError(f"{label}: ProducerPerformance exited {code}: {out.strip()[-1500:]}")
    return parse.producer_perf(out)


def failover_gap(c, topic, rate, before_s=5.0, after_s=20.0):
    """Produces at `rate` records/s, kills the partition's leader with -9 after `before_s`, keeps producing for
    `after_s`; returns the longest acknowledgement gap around the kill and the checks of what was acknowledged."""
    from confluent_kafka import Producer
    c.wait_for_leaders(topic, 1, timeout=60)
    leader_id = c.partition_leaders(topic, c.live_nodes()[0])[0]
    survivors = ",".join(n.bootstrap for n in c.nodes if n.node_id != leader_id)
    producer = Producer({"bootstrap.servers": f"{survivors},{c.node(leader_id).bootstrap}", "acks": "all",
                         "enable.idempotence": True, "linger.ms": 1, "message.timeout.ms": 120000})
    acks, errors, lock = [], [], threading.Lock()

    def on_delivery(err, msg):
        now = time.monotonic()
        with lock:
            if err is None:
                acks.append((now, msg.offset(), msg.value()))
            else:
                errors.append(str(err))

    start = time.monotonic()
    kill_at = start + before_s
    end = kill_at + after_s
    killed_at = None
    n = 0
    while time.monotonic() < end:
        due = start + n / rate
        now = time.monotonic()
        if now < due:
            producer.poll(min(due - now, 0.005))
            continue
        producer.produce(topic, value=f"r{n:08d}".encode() + b"x" * 1014, partition=0, on_delivery=on_delivery)
        n += 1
        producer.poll(0)
        if killed_at is None and now >= kill_at:
            c.node(leader_id).kill()
            killed_at = time.monotonic()
            procs.log(f"{c.kind}: killed leader node {leader_id} (-9) after {n} records")
    remaining = producer.flush(120)
    with lock:
        times = [t for t, _, _ in acks if t >= killed_at - 1.0]
        gaps = [b - a for a, b in zip(times, times[1:])]
        gap_s = max(gaps) if gaps else float("inf")
        acked = list(acks)
        errs = list(errors)
    # Every acknowledged record is where it was acknowledged.
    from confluent_kafka import Consumer, TopicPartition
    consumer = Consumer({"bootstrap.servers": survivors, "group.id": f"check-{time.time_ns()}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    want = {off: val for _, off, val in acked}
    seen = {}
    deadline = time.monotonic() + 60
    while len(seen) < len(want) and time.monotonic() < deadline:
        for m in consumer.consume(1000, 1.0):
            if m.error() is None:
                seen[m.offset()] = m.value()
    consumer.close()
    lost = [off for off, val in want.items() if seen.get(off) != val]
    return {"records_sent": n, "acknowledged": len(acked), "delivery_errors": len(errs) + remaining,
            "first_errors": errs[:3], "gap_ms": round(gap_s * 1000, 1), "killed_leader": leader_id,
            "acknowledged_but_not_read_back": len(lost)}


def run_kind(kind, args, workdir):
    c = harness.Cluster(workdir, size=3, kind=kind, overrides=DEFAULT_LEASE)
    try:
        c.workdir.mkdir(parents=True, exist_ok=True)
        for node in c.nodes:
            c.write_config(node)
        c.format()
        for node in c.nodes:
            node.start()
        c.wait_ready(timeout=180)
        bootstrap = ",".join(n.bootstrap for n in c.nodes)
        create_topic(bootstrap, "rep-warmup", PARTITIONS)
        create_topic(bootstrap, "rep-max", PARTITIONS)
        create_topic(bootstrap, "rep-fixed", PARTITIONS)
        create_topic(bootstrap, "rep-failover", 1)
        for t in ("rep-warmup", "rep-max", "rep-fixed"):
            c.wait_for_leaders(t, PARTITIONS, timeout=60)
        out = {}
        procs.log(f"{kind}: warm-up")
        perf(bootstrap, "rep-warmup", 30_000, -1, f"{kind}:warmup")
        procs.log(f"{kind}: max-rate throughput, {args.records} records")
        out["max_rate"] = perf(bootstrap, "rep-max", args.records, -1, f"{kind}:max")
        procs.log(f"{kind}: fixed rate {args.rate}/s for 20 s")
        out["fixed_rate"] = perf(bootstrap, "rep-fixed", args.rate * 20, args.rate, f"{kind}:fixed")
        procs.log(f"{kind}: failover at {args.failover_rate}/s")
        out["failover"] = failover_gap(c, "rep-failover", args.failover_rate)
        procs.log(f"{kind}: {json.dumps(out)}")
        return out
    finally:
        c.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--brokers", default="annal,kafka")
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--rate", type=int, default=2000)
    ap.add_argument("--failover-rate", type=int, default=1000)
    ap.add_argument("--annal-bin", default=os.environ.get("ANNAL_BIN", str(HERE.parent / "target/release/annal")))
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    os.environ["ANNAL_BIN"] = args.annal_bin
    results = {"loadavg_before": open("/proc/loadavg").read().split()[:3], "args": vars(args)}
    for kind in args.brokers.split(","):
        with tempfile.TemporaryDirectory(prefix=f"bench-repl-{kind}-") as d:
            results[kind] = run_kind(kind, args, Path(d) / "c")
    if "annal" in results and "kafka" in results:
        a, k = results["annal"], results["kafka"]
        ratios = {
            "throughput_records_per_s": a["max_rate"]["records_per_s"] / k["max_rate"]["records_per_s"],
            "fixed_rate_p50": a["fixed_rate"]["latency_ms"]["p50"] / max(k["fixed_rate"]["latency_ms"]["p50"], 1),
            "fixed_rate_p99": a["fixed_rate"]["latency_ms"]["p99"] / max(k["fixed_rate"]["latency_ms"]["p99"], 1),
            "fixed_rate_p99.9": (a["fixed_rate"]["latency_ms"]["p99.9"]
                                 / max(k["fixed_rate"]["latency_ms"]["p99.9"], 1)),
            "failover_gap": a["failover"]["gap_ms"] / max(k["failover"]["gap_ms"], 1),
        }
        results["annal_over_kafka"] = {k2: round(v, 3) for k2, v in ratios.items()}
        print("annal/kafka: " + ", ".join(f"{k2} {v:.3f}x" for k2, v in ratios.items()))
    text = json.dumps(results, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
