#!/usr/bin/env python3
"""bench/run.sh --selftest: the parsers against recorded tool outputs (bench/testdata/), and a report rendered
from a synthetic result. Starts no broker; takes a second."""

import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import parse, report  # noqa: E402

DATA = Path(__file__).resolve().parent / "testdata"
failures = []


def check(name, cond):
    print(f"{'ok  ' if cond else 'FAIL'} {name}")
    if not cond:
        failures.append(name)


def raises(fn, *args):
    try:
        fn(*args)
    except ValueError:
        return True
    return False


p = parse.producer_perf((DATA / "producer_perf.txt").read_text())
check("producer: takes the final line, not the periodic one", p["records"] == 20000 and p["mib_per_s"] == 5.42)
check("producer: percentiles", p["latency_ms"] == {"avg": 643.87, "p50": 746, "p95": 869, "p99": 909,
                                                   "p99.9": 926, "max": 1467.0})
check("producer: a killed run (no summary) is an error",
      raises(parse.producer_perf, "149537 records sent, 29901.4 records/sec (29.20 MB/sec), 722.9 ms avg latency, "
                                  "1301.0 ms max latency.\n"))
m = parse.producer_metrics("producer-metrics:request-latency-avg:{client-id=perf-producer-client}    : 35.725\n"
                           "producer-metrics:request-latency-avg:{client-id=x, node-id=node-1}  : 99.0\n"
                           "producer-metrics:batch-size-avg:{client-id=perf-producer-client}   : NaN\n")
check("producer metrics: client-wide only", m.get("request-latency-avg") == 35.725)
m = parse.assign_consumer_metrics("assign-consumer-metric: fetch-latency-avg=12.5\n")
check("assign consumer metrics", m == {"fetch-latency-avg": 12.5})
c = parse.consumer_perf((DATA / "consumer_perf.txt").read_text())
check("consumer: fields", c["records"] == 20000 and c["fetch_mib_per_s"] == 34.8151 and c["rebalance_ms"] == 1227)
check("consumer: missing result line is an error", raises(parse.consumer_perf, "start.time, end.time\n"))
a = parse.assign_consumer("x\nassign-consumer: records=204800 bytes=209715200 seconds=4.000\n")
check("assign consumer", a["records"] == 204800 and a["mib_per_s"] == 50.0)
check("assign consumer: failure is an error", raises(parse.assign_consumer, "Exception in thread main\n"))
e = parse.end_to_end((DATA / "end_to_end.txt").read_text())
check("end-to-end", e["latency_ms"] == {"avg": 4.7091, "p50": 2, "p99": 29, "p99.9": 108})
check("end-to-end: failure is an error", raises(parse.end_to_end, "Exception in thread main\n"))
f = parse.fio_write((DATA / "fio.json").read_text())
check("fio: KiB/s -> MiB/s", abs(f["mib_per_s"] - 324235 / 1024) < 1e-6)
i = parse.iperf3_tcp((DATA / "iperf3.json").read_text())
check("iperf3: receiver bandwidth", 100 < i["mib_per_s"] < 1e6)
d = parse.dd_write((DATA / "dd.txt").read_text())
check("dd: bytes/seconds", abs(d["mib_per_s"] - 268435456 / 1.04041 / 2**20) < 1e-6)
stat = "1234 (java (x) y) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 40 0 987654 0 0"
check("/proc/pid/stat: utime+stime despite ')' in the name", parse.proc_stat_cpu_ticks(stat) == 300)
check("/proc/pid/stat: start time", parse.proc_stat_start_ticks(stat) == 987654)
check("/proc/pid/status: VmRSS", parse.proc_status_rss_kib("Name:\tx\nVmRSS:\t  51200 kB\n") == 51200)

sample = {
    "meta": {"mode": "short", "run_id": "selftest", "partitions": 8, "client": "test",
             "workloads": {"produce_1k_acks1": "produce 1 KiB, acks=1, max rate",
                           "latency_fixed_rate": "fixed rate", "consume_backlog": "consume",
                           "end_to_end": "e2e"}},
    "machine": {"nproc": 2},
    "limits": {"disk_seq_write": {"mib_per_s": 400.0, "tool": "fio"}, "loopback_tcp": {"mib_per_s": 2000.0}},
    "brokers": {
        "kafka": {"startup_s": 4.0, "idle_rss_mib": 300.0, "workloads": {
            "produce_1k_acks1": {"mib_per_s": 100.0, "records_per_s": 102400.0, "broker_cpu_s_per_gib": 10.0},
            "latency_fixed_rate": {"latency_ms": {"p50": 2, "p95": 4, "p99": 10, "p99.9": 30, "max": 80}},
            "consume_backlog": {"fetch_mib_per_s": 500.0, "mib_per_s": 300.0},
            "end_to_end": {"latency_ms": {"p50": 1, "p99": 5, "p99.9": 20}}}},
        "annal": {"startup_s": 0.01, "idle_rss_mib": 10.0, "workloads": {
            "produce_1k_acks1": {"mib_per_s": 200.0, "records_per_s": 204800.0, "broker_cpu_s_per_gib": 2.0},
            "latency_fixed_rate": {"latency_ms": {"p50": 0, "p95": 1, "p99": 2, "p99.9": 4, "max": 9}},
            "consume_backlog": {"error": "consumer group APIs not supported"},
            "end_to_end": {"latency_ms": {"p50": 0, "p99": 1, "p99.9": 3}}}},
    },
}
md = report.markdown(sample)
check("report: ratio", "| produce 1 KiB, acks=1, max rate: MiB/s | 100 | 200 | 2x | higher | 25% | 50% |" in md)
check("report: start-up ratio", "| 0.01 | 0.0025x" in md)
check("report: failures listed", "annal / consume_backlog: consumer group APIs not supported" in md)
with tempfile.TemporaryDirectory() as tmp:
    made = report.charts(sample, Path(tmp))
    check("report: charts written", made == ["throughput.png", "latency.png"]
          and all((Path(tmp) / m).stat().st_size > 10_000 for m in made))
    json.dumps(sample)

print("selftest:", "FAILED " + ", ".join(failures) if failures else "all ok")
sys.exit(1 if failures else 0)
