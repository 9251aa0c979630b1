"""Parsers for the outputs of the tools the harness runs. Pure functions, so `run.sh --selftest` can check them
against the samples in bench/testdata/ without starting anything."""

import json
import re

# Final summary line of org.apache.kafka.tools.ProducerPerformance (the periodic lines lack the percentiles), e.g.
# "20000 records sent, 5549.4 records/sec (5.42 MB/sec), 643.87 ms avg latency, 1467.00 ms max latency,
#  746 ms 50th, 869 ms 95th, 909 ms 99th, 926 ms 99.9th."
_PRODUCER_FINAL = re.compile(
    r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency, "
    r"([\d.]+) ms max latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th, (\d+) ms 99\.9th")


def producer_perf(text):
    """Summary of a ProducerPerformance run; raises ValueError if the output has no final summary line
    (the tool failed or was killed: its output says why)."""
    matches = _PRODUCER_FINAL.findall(text)
    if not matches:
        raise ValueError("ProducerPerformance printed no final summary line")
    records, rps, mbps, avg, mx, p50, p95, p99, p999 = matches[-1]
    return {
        "records": int(records),
        "records_per_s": float(rps),
        # The tool's "MB" is 2^20 bytes of record values (keys are null).
        "mib_per_s": float(mbps),
        "latency_ms": {"avg": float(avg), "p50": float(p50), "p95": float(p95), "p99": float(p99),
                       "p99.9": float(p999), "max": float(mx)},
    }


_CONSUMER_FIELDS = ["start.time", "end.time", "data.consumed.in.MB", "MB.sec", "data.consumed.in.nMsg",
                    "nMsg.sec", "rebalance.time.ms", "fetch.time.ms", "fetch.MB.sec", "fetch.nMsg.sec"]


def consumer_perf(text):
    """Summary of a ConsumerPerformance run (header line + one CSV line). fetch_* figures exclude the time spent
    joining the consumer group, so they measure the fetch path alone."""
    lines = [ln.strip() for ln in text.splitlines()]
    for i, line in enumerate(lines):
        if line.startswith("start.time, end.time"):
            header = [h.strip() for h in line.split(",")]
            if i + 1 >= len(lines):
                break
            values = [v.strip() for v in lines[i + 1].split(",")]
            if len(values) != len(header):
                break
            row = dict(zip(header, values))
            missing = [f for f in _CONSUMER_FIELDS if f not in row]
            if missing:
                raise ValueError(f"ConsumerPerformance output lacks fields {missing}")
            return {
                "mib": float(row["data.consumed.in.MB"]),
                "records": int(row["data.consumed.in.nMsg"]),
                "mib_per_s": float(row["MB.sec"]),
                "records_per_s": float(row["nMsg.sec"]),
                "rebalance_ms": float(row["rebalance.time.ms"]),
                "fetch_ms": float(row["fetch.time.ms"]),
                "fetch_mib_per_s": float(row["fetch.MB.sec"]),
                "fetch_records_per_s": float(row["fetch.nMsg.sec"]),
            }
    raise ValueError("ConsumerPerformance printed no result line")


_ASSIGN = re.compile(r"assign-consumer: records=(\d+) bytes=(\d+) seconds=([\d.]+)")


def assign_consumer(text):
    """Summary of bench/java/AssignConsumer.java (consumer without a group, from the first poll to the last
    record)."""
    m = _ASSIGN.findall(text)
    if not m:
        raise ValueError("AssignConsumer printed no summary line")
    records, nbytes, secs = int(m[-1][0]), int(m[-1][1]), float(m[-1][2])
    secs = max(secs, 1e-3)
    return {"records": records, "mib": nbytes / (1 << 20), "seconds": secs,
            "mib_per_s": nbytes / (1 << 20) / secs, "records_per_s": records / secs}


_CLIENT_METRICS = ("request-latency-avg", "request-latency-max", "records-per-request-avg", "batch-size-avg",
                   "record-queue-time-avg", "compression-rate-avg")


def producer_metrics(text):
    """The few producer-metrics (whole client, not per node/topic) that `--print-metrics` prints and that tell
    the broker's share of the latency: request-latency-avg is the time from sending a Produce request to its
    response, record-queue-time-avg the time records wait in the client for a free in-flight slot."""
    out = {}
    for m in re.finditer(r"^producer-metrics:([a-z-]+):\{client-id=[^,}]*\}\s*:\s*([-\d.NaEe]+)\s*$", text, re.M):
        if m.group(1) in _CLIENT_METRICS:
            try:
                v = float(m.group(2))
            except ValueError:
                continue
            if v == v:  # NaN (no samples) would not be valid JSON
                out[m.group(1)] = v
    return out


def assign_consumer_metrics(text):
    out = {}
    for m in re.finditer(r"^assign-consumer-metric: ([a-z-]+)=([-\d.NaEe]+)\s*$", text, re.M):
        try:
            out[m.group(1)] = float(m.group(2))
        except ValueError:
            pass
    return out


_E2E_AVG = re.compile(r"Avg latency: ([\d.]+) ms")
_E2E_PCT = re.compile(r"Percentiles: 50th = (\d+), 99th = (\d+), 99\.9th = (\d+)")


def end_to_end(text):
    """Summary of org.apache.kafka.tools.EndToEndLatency (produce one record, wait until it is consumed, repeat)."""
    avg = _E2E_AVG.findall(text)
    pct = _E2E_PCT.findall(text)
    if not avg or not pct:
        raise ValueError("EndToEndLatency printed no latency summary")
    p50, p99, p999 = pct[-1]
    return {"latency_ms": {"avg": float(avg[-1]), "p50": float(p50), "p99": float(p99), "p99.9": float(p999)}}


def fio_write(text):
    """Sequential write bandwidth (MiB/s) from `fio --output-format=json`."""
    data = json.loads(text[text.index("{"):])
    job = data["jobs"][0]
    bw_kib = job["write"]["bw"]  # KiB/s
    return {"mib_per_s": bw_kib / 1024.0}


def iperf3_tcp(text):
    """Loopback TCP bandwidth (MiB/s) from `iperf3 --json` (receiver side)."""
    data = json.loads(text[text.index("{"):])
    if "error" in data:
        raise ValueError(f"iperf3: {data['error']}")
    bps = data["end"]["sum_received"]["bits_per_second"]
    return {"mib_per_s": bps / 8 / 1024 / 1024}


_DD = re.compile(r"([\d.,]+) ([kMG]?B)/s")


def dd_write(text):
    """Bandwidth from GNU dd's final line, e.g. '1073741824 bytes (1.1 GB, 1.0 GiB) copied, 2.1 s, 511 MB/s'.
    Recomputed from bytes and seconds so the unit is always MiB/s."""
    m = re.search(r"(\d+) bytes .* copied, ([\d.,]+) s", text)
    if not m:
        raise ValueError("dd printed no summary line")
    nbytes = int(m.group(1))
    secs = float(m.group(2).replace(",", "."))
    return {"mib_per_s": nbytes / secs / 1024 / 1024}


def proc_stat_cpu_ticks(stat_line):
    """utime + stime (clock ticks, all threads) from a /proc/<pid>/stat line. The command name (field 2) may
    contain spaces and parentheses, so split after its last ')'."""
    rest = stat_line[stat_line.rindex(")") + 2:].split()
    # rest[0] is field 3 (state); utime and stime are fields 14 and 15.
    return int(rest[11]) + int(rest[12])


def proc_stat_start_ticks(stat_line):
    """Process start time (clock ticks after boot), field 22 of /proc/<pid>/stat."""
    rest = stat_line[stat_line.rindex(")") + 2:].split()
    return int(rest[19])


def proc_status_rss_kib(status_text):
    """VmRSS (KiB) from /proc/<pid>/status; 0 if absent (a zombie)."""
    for line in status_text.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0
