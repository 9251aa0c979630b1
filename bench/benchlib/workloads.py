"""The workloads (modelled on the OpenMessaging Benchmark's), sized for the short and full modes, and how each
is run with Kafka's own perf tools against a broker."""

import time
from pathlib import Path

from . import parse, procs

MIB = 1 << 20
GIB = 1 << 30
PARTITIONS = 8
JAVA_DIR = Path(__file__).resolve().parents[1] / "java"


def plan(short, fixed_rate):
    """Ordered workloads. Every produce workload writes to its own fresh 8-partition topic."""
    n1k = 150_000 if short else 1_000_000          # 1 KiB records: ~146 MiB short, ~977 MiB full
    n100 = 600_000 if short else 5_000_000         # 100-byte records
    backlog_bytes = 200 * MIB if short else 2 * GIB
    rate_s = 10 if short else 60                   # duration of the fixed-rate latency run
    return [
        dict(id="produce_1k_acks1", kind="produce", title="produce 1 KiB, acks=1, max rate", topic="b-1k-acks1",
             size=1024, records=n1k, rate=-1, props={"acks": "1"}),
        dict(id="produce_1k_acksall", kind="produce", title="produce 1 KiB, acks=all, max rate",
             topic="b-1k-acksall", size=1024, records=n1k, rate=-1, props={"acks": "all"}),
        dict(id="latency_fixed_rate", kind="produce",
             title=f"produce 1 KiB, acks=all, fixed {fixed_rate} records/s", topic="b-fixed", size=1024,
             records=fixed_rate * rate_s, rate=fixed_rate, props={"acks": "all"}),
        dict(id="produce_100b_acks1", kind="produce", title="produce 100 B, acks=1, max rate", topic="b-100b",
             size=100, records=n100, rate=-1, props={"acks": "1"}),
        dict(id="produce_1k_lz4", kind="produce", title="produce 1 KiB JSON-like lz4, acks=1, max rate",
             topic="b-lz4", size=1024, records=n1k, rate=-1, props={"acks": "1", "compression.type": "lz4"},
             payload_file=True),
        dict(id="backlog_fill", kind="produce", title=f"fill a {backlog_bytes // MIB} MiB backlog (acks=1)",
             topic="b-backlog", size=1024, records=backlog_bytes // 1024, rate=-1, props={"acks": "1"}),
        dict(id="consume_backlog", kind="consume", title=f"consumer catching up on {backlog_bytes // MIB} MiB",
             topic="b-backlog", size=1024, records=backlog_bytes // 1024),
        dict(id="consume_backlog_assign", kind="assign",
             title=f"consumer without a group (assign) catching up on {backlog_bytes // MIB} MiB",
             topic="b-backlog", size=1024, records=backlog_bytes // 1024),
        dict(id="end_to_end", kind="e2e", title="end-to-end latency, 1 KiB, acks=1, one record at a time",
             topic="b-e2e", size=1024, records=2_000 if short else 10_000),
    ]


_WORDS = ("order", "payment", "checkout", "user", "session", "cart", "item", "shipped", "created", "updated",
          "failed", "retry", "timeout", "ok", "warehouse", "eu-west", "us-east", "latency", "cache", "miss")


def write_payload_file(path, lines=2000, size=1024):
    """JSON-like log records of exactly `size` bytes, one per line, for the compressed workload: --record-size
    payloads are random letters that lz4 cannot shrink (the producer's compression-rate-avg stays 1.0), while
    real topics usually compress. Deterministic (fixed seed), so every run and both brokers get the same bytes."""
    import random
    rnd = random.Random(5)
    with open(path, "w") as f:
        for i in range(lines):
            head = (f'{{"ts":{1764460800000 + i * 37},"level":"{rnd.choice(("INFO", "WARN", "DEBUG"))}",'
                    f'"service":"{rnd.choice(_WORDS)}-{rnd.randrange(8)}","host":"node-{rnd.randrange(64):02d}",'
                    f'"trace":"{rnd.getrandbits(64):016x}","msg":"')
            words = []
            while len(head) + len(" ".join(words)) < size - 2:
                words.append(rnd.choice(_WORDS) if rnd.random() < 0.9 else str(rnd.randrange(100000)))
            line = (head + " ".join(words))[:size - 2] + '"}'
            f.write(line + "\n")


def warmup(short):
    """Run first and not reported: lets Kafka's JIT warm up so its first measured workload is not penalised
    (a full run on 2 CPUs showed Kafka's CPU per GiB halving over its first GiB after a 30k-record warm-up)."""
    return dict(id="warmup", kind="produce", title="warm-up", topic="b-warmup", size=1024,
                records=50_000 if short else 400_000, rate=-1, props={"acks": "1"})


def topics(workloads):
    """Topics to create up front (EndToEndLatency creates its own single-partition topic)."""
    seen = []
    for w in workloads:
        if w["kind"] == "produce" and w["topic"] not in seen:
            seen.append(w["topic"])
    return seen


class Tools:
    """Kafka's tools (kafka-tools jar, same version as the Kafka broker), run as separate JVMs."""

    def __init__(self, classpath):
        self.java = ["java", "-Xmx512m", "-cp", classpath]

    def create_topics(self, bootstrap, names, partitions=PARTITIONS):
        """All topics in one Admin call (bench/java/CreateTopics.java, run as a single-file source program)."""
        code, out = procs.run_tool(self.java + [str(JAVA_DIR / "CreateTopics.java"), bootstrap, str(partitions)]
                                   + list(names), 180, "topics", echo=False)
        if code != 0:
            raise RuntimeError(f"creating topics {names} failed (exit {code}):\n{out.strip()[-2000:]}")

    def command(self, w, bootstrap, group, payload_file=None):
        if w["kind"] == "produce":
            props = [f"bootstrap.servers={bootstrap}"] + [f"{k}={v}" for k, v in w["props"].items()]
            payload = (["--payload-file", str(payload_file)] if w.get("payload_file")
                       else ["--record-size", str(w["size"])])
            return self.java + ["org.apache.kafka.tools.ProducerPerformance", "--topic", w["topic"],
                                "--num-records", str(w["records"])] + payload + [
                                "--throughput", str(w["rate"]), "--print-metrics", "--producer-props"] + props
        if w["kind"] == "consume":
            return self.java + ["org.apache.kafka.tools.ConsumerPerformance", "--bootstrap-server", bootstrap,
                                "--topic", w["topic"], "--messages", str(w["records"]), "--timeout", "30000",
                                "--group", group]
        if w["kind"] == "assign":
            return self.java + [str(JAVA_DIR / "AssignConsumer.java"), bootstrap, w["topic"], str(w["records"]),
                                "30000"]
        if w["kind"] == "e2e":
            return self.java + ["org.apache.kafka.tools.EndToEndLatency", bootstrap, w["topic"],
                                str(w["records"]), "1", str(w["size"])]
        raise ValueError(w["kind"])


def timeout_for(w):
    """Generous but bounded: a broker that stalls fails the workload instead of hanging the run."""
    if w["kind"] == "e2e":
        return min(600, 60 + w["records"] * 0.2)
    if w.get("rate", -1) > 0:
        return 60 + w["records"] / w["rate"] * 2
    return min(900, 60 + w["records"] * w["size"] / (2 * MIB))


def run(tools, broker, w, group, payload_file=None):
    """Runs one workload against a running broker; returns its figures (or an error) as a dict."""
    result = {"title": w["title"], "record_size": w["size"], "records_requested": w["records"],
              # The machine may be shared: the load before the run tells how much to trust the figures.
              "loadavg_1m_before": float(open("/proc/loadavg").read().split()[0])}
    cmd = tools.command(w, broker.bootstrap, group, payload_file)
    cpu0 = procs.cpu_seconds(broker.pid)
    t0 = time.monotonic()
    with procs.Sampler(broker.pid) as sampler:
        code, out = procs.run_tool(cmd, timeout_for(w), f"{broker.name}:{w['id']}")
    result["wall_s"] = round(time.monotonic() - t0, 3)
    result["broker_peak_rss_mib"] = round(sampler.peak_mib, 1)
    if not procs.alive(broker.pid):
        result["error"] = f"{broker.name} died during the workload (exit code {code}); see its log"
        return result
    cpu = procs.cpu_seconds(broker.pid) - cpu0
    result["broker_cpu_s"] = round(cpu, 3)
    try:
        if w["kind"] == "produce":
            result.update(parse.producer_perf(out))
            result["client_metrics"] = parse.producer_metrics(out)
            moved = result["records"] * w["size"]
        elif w["kind"] == "consume":
            result.update(parse.consumer_perf(out))
            moved = result["mib"] * MIB
            if result["records"] < w["records"]:
                raise ValueError(f"consumed {result['records']} of {w['records']} records")
        elif w["kind"] == "assign":
            result.update(parse.assign_consumer(out))
            result["client_metrics"] = parse.assign_consumer_metrics(out)
            moved = result["mib"] * MIB
            if result["records"] < w["records"]:
                raise ValueError(f"consumed {result['records']} of {w['records']} records")
        else:
            result.update(parse.end_to_end(out))
            moved = w["records"] * w["size"]
    except ValueError as e:
        result["error"] = f"{e}; last output: {out.strip()[-600:]}"
        return result
    if code != 0:
        # The summary was printed (so every record made its round trip) but the tool failed afterwards, e.g.
        # EndToEndLatency's final offset commit on a broker without consumer-group APIs.
        result["warning"] = f"tool exited with code {code} after its summary: {out.strip()[-300:]}"
    result["bytes_moved"] = int(moved)
    if moved > 0:
        result["broker_cpu_s_per_gib"] = round(cpu / (moved / GIB), 3)
    return result
