#!/usr/bin/env python3
"""Transactions bench (issue 12): one Annal node and one Apache Kafka 4.1.1 node in the same run, one after the
other on this machine, the same clients and workload for both (Kafka's own tools, kafka-clients 4.1.1, which speak
transaction version 2 against both brokers: each finalizes `transaction.version` 2).

    ANNAL_BIN=target/release/annal .cache/interop-venv/bin/python bench/transactions.py
        [--brokers annal,kafka] [--records N] [--duration-ms MS] [--out FILE]

Per broker, on a 4-partition topic, 1 KiB records, acks=all:
1. plain: ProducerPerformance at maximum rate, idempotent, not transactional (the baseline);
2. transactional: ProducerPerformance with `--transactional-id` and `--transaction-duration-ms` (a commit every
   `--duration-ms`), so the cost of the coordinator round trips (InitProducerId, the implicit adds, EndTxn) and the
   markers shows against the baseline;
3. read_committed consume: ConsumerPerformance with `isolation.level=read_committed` over the transactional
   topic (LSO, aborted-transaction index lookups, control batches skipped by the client), beside
   read_uncommitted over the same records.
Not a test: nothing here asserts speed; ratios Annal/Kafka are printed and written as JSON.
"""

import argparse
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "interop"))
sys.path.insert(0, str(HERE))

import brokers  # noqa: E402  (tests/interop/brokers.py)
from benchlib import parse, procs  # noqa: E402

PARTITIONS = 4
RECORD_SIZE = 1024


def kafka_classpath():
    from test_dump_log_segments import kafka_classpath as cp
    return cp()


def create_topic(bootstrap, name):
    from kafka.admin import KafkaAdminClient, NewTopic
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
    try:
        admin.create_topics([NewTopic(name, num_partitions=PARTITIONS, replication_factor=1)], timeout_ms=30000)
    finally:
        admin.close()


def produce(bootstrap, topic, records, label, txn_duration_ms=None):
    cmd = ["java", "-Xmx512m", "-cp", kafka_classpath(), "org.apache.kafka.tools.ProducerPerformance",
           "--topic", topic, "--num-records", str(records), "--record-size", str(RECORD_SIZE), "--throughput", "-1"]
    if txn_duration_ms is not None:
        cmd += ["--transactional-id", f"bench-{uuid.uuid4().hex[:8]}", "--transaction-duration-ms",
                str(txn_duration_ms)]
    cmd += ["--producer-props", f"bootstrap.servers={bootstrap}", "acks=all", "linger.ms=5",
            "enable.idempotence=true"]
    code, out = procs.run_tool(cmd, 120 + records / 1000, label, echo=False)
    if code != 0:
        raise RuntimeError(f"{label}: ProducerPerformance exited {code}: {out.strip()[-1500:]}")
    return parse.producer_perf(out)


def consume(bootstrap, topic, records, isolation, label, workdir):
    config = Path(workdir) / f"consumer-{isolation}.properties"
    config.write_text(f"isolation.level={isolation}\nauto.offset.reset=earliest\n")
    cmd = ["java", "-Xmx512m", "-cp", kafka_classpath(), "org.apache.kafka.tools.ConsumerPerformance",
           "--bootstrap-server", bootstrap, "--topic", topic, "--messages", str(records),
           "--group", f"bench-{isolation}-{uuid.uuid4().hex[:6]}", "--consumer.config", str(config),
           "--timeout", "60000"]
    code, out = procs.run_tool(cmd, 180, label, echo=False)
    if code != 0:
        raise RuntimeError(f"{label}: ConsumerPerformance exited {code}: {out.strip()[-1500:]}")
    return parse.consumer_perf(out)


def run_broker(kind, args):
    os.environ.pop("INTEROP_BROKER", None)
    if kind == "kafka":
        os.environ["INTEROP_BROKER"] = "kafka"
    b = brokers.new_broker()
    try:
        out = {}
        with tempfile.TemporaryDirectory() as work:
            plain, txn = f"bench-plain-{uuid.uuid4().hex[:6]}", f"bench-txn-{uuid.uuid4().hex[:6]}"
            create_topic(b.bootstrap, plain)
            create_topic(b.bootstrap, txn)
            procs.log(f"{kind}: plain produce")
            out["plain_produce"] = produce(b.bootstrap, plain, args.records, f"{kind}-plain")
            procs.log(f"{kind}: transactional produce, a commit every {args.duration_ms} ms")
            out["txn_produce"] = produce(b.bootstrap, txn, args.records, f"{kind}-txn", args.duration_ms)
            time.sleep(1)  # the last transaction's markers
            procs.log(f"{kind}: read_committed consume")
            out["read_committed"] = consume(b.bootstrap, txn, args.records, "read_committed", f"{kind}-rc", work)
            procs.log(f"{kind}: read_uncommitted consume")
            out["read_uncommitted"] = consume(b.bootstrap, txn, args.records, "read_uncommitted",
                                              f"{kind}-ru", work)
        return out
    finally:
        b.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--brokers", default="annal,kafka")
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--duration-ms", type=int, default=100)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    results = {"records": args.records, "record_size": RECORD_SIZE, "partitions": PARTITIONS,
               "transaction_duration_ms": args.duration_ms, "brokers": {}}
    for kind in args.brokers.split(","):
        results["brokers"][kind] = run_broker(kind, args)
    rows = [("plain produce records/s", "plain_produce", "records_per_s"),
            ("txn produce records/s", "txn_produce", "records_per_s"),
            ("txn produce p99 ms", "txn_produce", None),
            ("read_committed records/s", "read_committed", "fetch_records_per_s"),
            ("read_uncommitted records/s", "read_uncommitted", "fetch_records_per_s")]
    for name, key, field in rows:
        vals = {}
        for kind, r in results["brokers"].items():
            vals[kind] = r[key]["latency_ms"]["p99"] if field is None else r[key][field]
        line = f"{name:32}" + "".join(f"{k}={v:>12,.1f}  " for k, v in vals.items())
        if "annal" in vals and "kafka" in vals and vals["kafka"]:
            line += f"annal/kafka={vals['annal'] / vals['kafka']:.2f}"
        print(line)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
