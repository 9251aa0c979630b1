#!/usr/bin/env python3
"""Log cleaner throughput and memory (issue 13): Annal's cleaner beside Apache Kafka's on the same data, in one run.

    .cache/interop-venv/bin/python bench/cleaner.py [--mib 128] [--keys 100000] [--codec none] [--out FILE.json]

1. **Annal.** Builds and runs `cargo run --release -p annal-log --example cleaner_bench -- MIB KEYS CODEC`
   (crates/annal-log/examples/cleaner_bench.rs): one partition written in-process (batches of 100 records, keys
   `key-%012d` round robin, 200-byte values of b'x', one timestamp, 64 MiB segments), the active segment rolled,
   then one cleaning pass timed (key map + rewrite + swap) with the default 128 MiB dedupe buffer. Its figures are
   parsed from its output line; its peak RSS is the process's VmHWM (writing phase and pass together, both
   in-process) and also read back from wait4's ru_maxrss.
2. **Kafka.** A real single-node Apache Kafka 4.x (KRaft combined, the jars of scripts/kafka/fetch.sh, heap as in
   scripts/kafka/start.sh) with one cleaner thread, the same 128 MiB `log.cleaner.dedupe.buffer.size`, and
   `log.cleaner.backoff.ms` short. One compacted topic, 1 partition, `segment.bytes` as Annal's bench,
   `min.cleanable.dirty.ratio=0.01`, and `min.compaction.lag.ms` of a day while it is filled, so nothing is cleaned
   before the whole data set is in. librdkafka (confluent-kafka) produces exactly the records Annal's bench wrote
   (same count, keys, order, values, codec, batches of 100, one timestamp). A last record with its own key and a
   later timestamp, produced after `segment.ms` is lowered, rolls the segment so the whole data set is
   cleanable (as `log.roll()` does in Annal's bench). Then `min.compaction.lag.ms=0` lets the cleaner run; its own
   report (the CleanerThread's INFO block: "MB of log processed in ... seconds (... MB/sec)", index and clean
   times, buffer utilization, start/end size) is read from `log-cleaner.log`, to which this script's log4j2 config
   routes the cleaner's loggers. The JVM's VmRSS is sampled every 100 ms during the pass, beside VmHWM, the
   dedupe buffer (allocated whole on the heap at start-up) and the cleaner thread's CPU time.

Prints a Markdown table and, with --out, writes everything as JSON. Both sides read data the page cache holds
(just written), so neither figure includes disk reads. Work files go to .cache/bench/cleaner/ (deleted at the end
unless --keep).
"""

import argparse
import json
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import confluent_kafka as ck
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic,
                                   ResourceType)

ROOT = Path(__file__).resolve().parent.parent
TOPIC = "cleaner-bench"
WARMUP_TOPIC = "cleaner-warmup"
MIB = 1 << 20
# What crates/annal-log/examples/cleaner_bench.rs uses (it takes no option for these): keep them in step.
ANNAL_SEGMENT_BYTES = 64 << 20
ANNAL_DEDUPE_BYTES = 128 << 20  # CleanerConfig::default().dedupe_buffer_bytes
VALUE = b"x" * 200
BATCH_RECORDS = 100
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def key_of(i, keys):
    return f"key-{i % keys:012d}".encode()


# ---------------------------------------------------------------------------------------------------------- Annal

ANNAL_LINE = re.compile(
    r"cleaner: (?P<codec>\w+) (?P<dirty_mib>[\d.]+) MiB dirty \((?P<records>\d+) records, (?P<keys>\d+) keys\) "
    r"cleaned in (?P<seconds>[\d.]+) s = (?P<mib_s>[\d.]+) MiB/s(?: \(CPU (?P<pass_cpu_s>[\d.]+) s\))?; (?P<left_mib>[\d.]+) MiB left; "
    r"peak RSS (?P<peak_rss_mib>\d+) MiB \(before the pass (?P<rss_before_mib>\d+) MiB\); "
    r"key map (?P<map_keys>\d+) of (?P<map_capacity>\d+) entries")


def parse_annal(text):
    """The figures of cleaner_bench's output line (numbers as numbers); None when the line is missing."""
    m = ANNAL_LINE.search(text)
    if not m:
        return None
    out = {}
    for k, v in m.groupdict().items():
        if v is not None:
            out[k] = v if k == "codec" else (float(v) if "." in v else int(v))
    return out


def build_annal_bench():
    env = dict(os.environ, CARGO_PROFILE_DEV_DEBUG=os.environ.get("CARGO_PROFILE_DEV_DEBUG", "line-tables-only"))
    log("building cleaner_bench (cargo build --release -p annal-log --example cleaner_bench)")
    subprocess.run(["cargo", "build", "--release", "-p", "annal-log", "--example", "cleaner_bench"], cwd=ROOT,
                   env=env, check=True)
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    return target / "release" / "examples" / "cleaner_bench"


def run_annal(bench_bin, mib, keys, codec, work):
    """Runs cleaner_bench with its temporary log under `work` (the same file system as Kafka's data)."""
    tmp = work / "annal-tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    cmd = [str(bench_bin), str(mib), str(keys), codec]
    log(f"annal: {' '.join(cmd)}")
    started = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=dict(os.environ, TMPDIR=str(tmp)))
    out = proc.stdout.read().decode(errors="replace")
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.monotonic() - started
    print(out.rstrip(), flush=True)
    if proc.returncode != 0:
        raise SystemExit(f"cleaner_bench exited with {proc.returncode}; its output is above")
    figures = parse_annal(out)
    if figures is None:
        raise SystemExit("cleaner_bench printed no 'cleaner: ...' line this script understands (see above); "
                         "update ANNAL_LINE in bench/cleaner.py to its format")
    figures.update(command=" ".join(cmd), process_wall_s=round(wall, 2), ru_maxrss_mib=round(usage.ru_maxrss / 1024, 1),
                   process_cpu_s=round(usage.ru_utime + usage.ru_stime, 2), output=out.strip())
    return figures


# ---------------------------------------------------------------------------------------------------------- Kafka

def proc_status_kib(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def mem(pid):
    return {"rss_mib": round(proc_status_kib(pid, "VmRSS") / 1024, 1),
            "hwm_mib": round(proc_status_kib(pid, "VmHWM") / 1024, 1)}


def cleaner_thread_cpu_s(pid):
    """CPU seconds of the JVM's cleaner thread ("kafka-log-cleaner-thread-0", comm truncated to 15 bytes), from
    the scheduler's nanosecond account (/proc/.../schedstat), as Annal's bench measures its own pass."""
    total, found = 0.0, False
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            if not (task / "comm").read_text().startswith("kafka-log-clea"):
                continue
            total += int((task / "schedstat").read_text().split()[0]) / 1e9
        except (OSError, ValueError, IndexError):
            continue
        found = True
    return total if found else None


class RssSampler:
    """Peak VmRSS of a process, sampled every `interval_s` while in the with-block."""

    def __init__(self, pid, interval_s=0.1):
        self.pid, self.interval_s = pid, interval_s
        self.peak_kib, self._stop = 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            try:
                self.peak_kib = max(self.peak_kib, proc_status_kib(self.pid, "VmRSS"))
            except OSError:
                return
            self._stop.wait(self.interval_s)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def free_port_pair():
    """A loopback port P with P+1 free too (clients, controller)."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port >= 65535:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port + 1))
                return port
            except OSError:
                pass
    raise SystemExit("no pair of free loopback ports")


def kafka_classpath():
    cached = ROOT / ".cache" / "kafka" / "classpath.txt"
    if cached.is_file() and all(Path(j).is_file() for j in cached.read_text().strip().split(":")):
        return cached.read_text().strip()
    out = subprocess.run([str(ROOT / "scripts" / "kafka" / "fetch.sh")], check=True, stdout=subprocess.PIPE, text=True)
    return Path(out.stdout.strip()).read_text().strip()


LOG4J2 = """status = warn
appender.console.type = Console
appender.console.name = STDOUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
appender.cleaner.type = File
appender.cleaner.name = CLEANER
appender.cleaner.fileName = {cleaner_log}
appender.cleaner.layout.type = PatternLayout
appender.cleaner.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.stdout.ref = STDOUT
logger.kafka.name = kafka
logger.kafka.level = info
logger.state.name = state.change.logger
logger.state.level = warn
# The cleaner (LogCleaner, its CleanerThread, LogCleanerManager, Cleaner) logs under this package in Kafka 4.1;
# kafka.log.LogCleaner is the Scala name of Kafka 3.x and of Kafka's own config/log4j2.yaml.
logger.cleaner.name = org.apache.kafka.storage.internals.log
logger.cleaner.level = info
logger.cleaner.additivity = false
logger.cleaner.appenderRef.cleaner.ref = CLEANER
logger.cleanerOld.name = kafka.log.LogCleaner
logger.cleanerOld.level = info
logger.cleanerOld.additivity = false
logger.cleanerOld.appenderRef.cleaner.ref = CLEANER
"""


class Kafka:
    def __init__(self, work, heap_opts, dedupe_bytes, backoff_ms):
        self.dir = work / "kafka"
        self.dir.mkdir(parents=True)
        self.port = free_port_pair()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.cleaner_log = self.dir / "log-cleaner.log"
        self.proc = None
        self.classpath = kafka_classpath()
        (self.dir / "server.properties").write_text(f"""process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:{self.port + 1}
listeners=PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.port + 1}
advertised.listeners=PLAINTEXT://127.0.0.1:{self.port}
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs={self.dir / 'data'}
offsets.topic.replication.factor=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
group.initial.rebalance.delay.ms=0
log.cleaner.threads=1
log.cleaner.dedupe.buffer.size={dedupe_bytes}
log.cleaner.backoff.ms={backoff_ms}
""")
        (self.dir / "log4j2.properties").write_text(LOG4J2.format(cleaner_log=self.cleaner_log))
        self.java_opts = heap_opts.split() + ["-XX:+UseG1GC", "-Djava.awt.headless=true",
                                              f"-Dlog4j2.configurationFile={self.dir / 'log4j2.properties'}"]

    def start(self):
        java = ["java", "-cp", self.classpath] + self.java_opts
        cluster_id = subprocess.run(java + ["kafka.tools.StorageTool", "random-uuid"], check=True,
                                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True).stdout.split()[-1]
        subprocess.run(java + ["kafka.tools.StorageTool", "format", "-t", cluster_id, "-c",
                               str(self.dir / "server.properties")], check=True, stdout=subprocess.DEVNULL)
        self._out = open(self.dir / "kafka.log", "wb")
        self.proc = subprocess.Popen(java + ["kafka.Kafka", str(self.dir / "server.properties")], stdout=self._out,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"kafka exited during start-up with {self.proc.returncode}; see {self.dir}/kafka.log")
            if b"Kafka Server started" in (self.dir / "kafka.log").read_bytes():
                return
            time.sleep(0.5)
        raise SystemExit(f"kafka did not start within 120 s; see {self.dir}/kafka.log")

    def stop(self):
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._out.close()

    def partition_dir(self, topic):
        return self.dir / "data" / f"{topic}-0"


def alter_topic(admin, topic, configs):
    res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()])
    for f in admin.incremental_alter_configs([res]).values():
        f.result(60)


def produce_dataset(bootstrap, topic, records, keys, codec, timestamp_ms):
    """Annal's bench's records, in its order: record i has key i % keys, a 200-byte value and one timestamp."""
    p = ck.Producer({"bootstrap.servers": bootstrap, "acks": "1", "enable.idempotence": False,
                     "compression.type": codec, "batch.num.messages": BATCH_RECORDS, "batch.size": 1 << 20,
                     "linger.ms": 50, "queue.buffering.max.messages": 1_000_000,
                     "queue.buffering.max.kbytes": 1 << 20, "max.in.flight.requests.per.connection": 5})
    errors = []

    def on_delivery(err, _msg):
        if err is not None and len(errors) < 10:
            errors.append(str(err))

    started = time.monotonic()
    for i in range(records):
        while True:
            try:
                p.produce(topic, key=key_of(i, keys), value=VALUE, partition=0, timestamp=timestamp_ms,
                          on_delivery=on_delivery)
                break
            except BufferError:
                p.poll(0.05)
        if i % 10_000 == 0:
            p.poll(0)
    left = p.flush(600)
    if left or errors:
        raise SystemExit(f"producing to kafka failed: {left} records not delivered, errors {errors}")
    return time.monotonic() - started


def produce_one(bootstrap, topic, key, timestamp_ms):
    p = ck.Producer({"bootstrap.servers": bootstrap, "acks": "1", "enable.idempotence": False})
    p.produce(topic, key=key, value=b"", partition=0, timestamp=timestamp_ms)
    if p.flush(60):
        raise SystemExit("the roll record was not delivered")


CLEANER_BLOCK = re.compile(
    r"cleaned log (?P<log>\S+) \(dirty section = \[(?P<first>\d+), (?P<end>\d+)\]\)\s*"
    r"(?P<processed_mb>[\d,.]+) MB of log processed in (?P<seconds>[\d,.]+) seconds \((?P<mb_s>[\d,.]+) MB/sec\)\.\s*"
    r"Indexed (?P<indexed_mb>[\d,.]+) MB in (?P<index_s>[\d,.]+) seconds \((?P<index_mb_s>[\d,.]+) Mb/sec, "
    r"(?P<index_pct>[\d,.]+)% of total time\)\s*"
    r"Buffer utilization: (?P<buffer_utilization_pct>[\d,.]+)%\s*"
    r"Cleaned (?P<cleaned_mb>[\d,.]+) MB in (?P<clean_s>[\d,.]+) seconds \((?P<clean_mb_s>[\d,.]+) Mb/sec, "
    r"(?P<clean_pct>[\d,.]+)% of total time\)\s*"
    r"Start size: (?P<start_mb>[\d,.]+) MB \((?P<start_messages>[\d,]+) messages\)\s*"
    r"End size: (?P<end_mb>[\d,.]+) MB \((?P<end_messages>[\d,]+) messages\)\s*"
    r"(?P<size_reduction_pct>[\d,.]+)% size reduction \((?P<fewer_messages_pct>[\d,.]+)% fewer messages\)")


LOG_TIME = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3})\]", re.M)


def log_time_s(stamp):
    """Seconds since the epoch (local time, as the broker logs it) of a "[2026-12-02 01:50:00,123]" match."""
    return time.mktime(time.strptime(stamp.group(1), "%Y-%m-%d %H:%M:%S")) + int(stamp.group(2)) / 1000


def parse_cleaner_log(text):
    """Every pass report in Kafka's log-cleaner.log, numbers parsed ("MB" there is MiB: bytes / 1048576).

    The report gives its times to 0.1 s only, so each pass also gets `log_seconds`: from the log line "Beginning
    cleaning of log L" to the report's own line, in milliseconds (the same span the report's seconds cover,
    plus the few log calls around it)."""
    passes = []
    for m in CLEANER_BLOCK.finditer(text):
        d = {"log_seconds": None}
        before = text[:m.start()]
        report_stamp = list(LOG_TIME.finditer(before))
        begin = before.rfind(f"Beginning cleaning of log {m.group('log')}")
        if report_stamp and begin >= 0:
            begin_stamp = list(LOG_TIME.finditer(before[:begin]))
            if begin_stamp:
                d["log_seconds"] = round(log_time_s(report_stamp[-1]) - log_time_s(begin_stamp[-1]), 3)
        for k, v in m.groupdict().items():
            if k == "log":
                d[k] = v
            else:
                v = v.replace(",", "")
                d[k] = float(v) if "." in v else int(v)
        passes.append(d)
    return passes


def log_bytes(partition_dir):
    return sum(f.stat().st_size for f in partition_dir.glob("*.log"))


def fill_and_clean(kafka, admin, topic, records, args):
    """Fills `topic` (created with min.compaction.lag.ms of a day, so nothing is cleaned meanwhile), rolls its
    active segment, lets the cleaner at it and waits for its report; returns the figures."""
    pid = kafka.proc.pid
    pdir = kafka.partition_dir(topic)
    out = {"topic": topic, "records": records}
    timestamp = int(time.time() * 1000)
    log(f"kafka: producing {records} records to {topic} ({args.keys} keys, codec {args.codec})")
    out["produce_s"] = round(produce_dataset(kafka.bootstrap, topic, records, args.keys, args.codec, timestamp), 2)
    # Roll: a record 10 s later than the data set's timestamp, with segment.ms at 1 s, starts a new segment.
    alter_topic(admin, topic, {"segment.ms": "1000"})
    time.sleep(2)
    produce_one(kafka.bootstrap, topic, b"roll-marker", timestamp + 10_000)
    segments = sorted(pdir.glob("*.log"))
    active = segments[-1]
    dirty = log_bytes(pdir) - active.stat().st_size
    out.update(segments_before=len(segments), dirty_bytes=dirty, dirty_mib=round(dirty / MIB, 1),
               active_segment_bytes=active.stat().st_size)
    if active.stat().st_size > 4096:
        raise SystemExit(f"the roll did not happen: the active segment {active} holds {active.stat().st_size} bytes")
    out["jvm_before_pass"] = mem(pid)
    cpu_before = cleaner_thread_cpu_s(pid)
    log(f"kafka: {dirty / MIB:.1f} MiB dirty in {len(segments) - 1} segments; min.compaction.lag.ms=0, "
        f"waiting for the cleaner's report in {kafka.cleaner_log}")
    with RssSampler(pid) as sampler:
        alter_topic(admin, topic, {"min.compaction.lag.ms": "0"})
        deadline = time.monotonic() + args.kafka_timeout
        passes = []
        while time.monotonic() < deadline:
            text = kafka.cleaner_log.read_text(errors="replace") if kafka.cleaner_log.exists() else ""
            passes = [p for p in parse_cleaner_log(text) if p["log"] == f"{topic}-0"]
            if passes and passes[-1]["end"] >= records:
                break
            time.sleep(0.2)
        else:
            raise SystemExit(f"no cleaner report for {topic} covering offset {records} within "
                             f"{args.kafka_timeout} s; see {kafka.cleaner_log} and {kafka.dir}/kafka.log")
    cpu_after = cleaner_thread_cpu_s(pid)
    out["jvm_peak_rss_during_pass_mib"] = round(sampler.peak_kib / 1024, 1)
    out["jvm_after_pass"] = mem(pid)
    if cpu_before is not None and cpu_after is not None:
        out["cleaner_thread_cpu_s"] = round(cpu_after - cpu_before, 2)
    out["passes"] = passes
    out["left_bytes"] = log_bytes(pdir)
    out["left_mib"] = round(out["left_bytes"] / MIB, 1)
    precise = all(p["log_seconds"] is not None for p in passes)
    seconds = sum(p["log_seconds"] if precise else p["seconds"] for p in passes)
    out["pass_seconds_source"] = "log timestamps (ms)" if precise else "the report (0.1 s)"
    out["pass_seconds"] = round(seconds, 3)
    out["mib_s"] = round(dirty / MIB / seconds, 1) if seconds else None
    return out


def run_kafka(args, records, work):
    kafka = Kafka(work, args.kafka_heap, ANNAL_DEDUPE_BYTES, args.backoff_ms)
    out = {"heap_opts": args.kafka_heap, "dedupe_buffer_mib": ANNAL_DEDUPE_BYTES / MIB, "cleaner_threads": 1,
           "backoff_ms": args.backoff_ms, "segment_bytes": ANNAL_SEGMENT_BYTES}
    try:
        log(f"kafka: starting on {kafka.bootstrap} (data {kafka.dir})")
        kafka.start()
        time.sleep(2)
        out["jvm_idle"] = mem(kafka.proc.pid)
        admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
        config = {"cleanup.policy": "compact", "segment.bytes": str(ANNAL_SEGMENT_BYTES),
                  "compression.type": "producer", "min.cleanable.dirty.ratio": "0.01",
                  "min.compaction.lag.ms": str(86_400_000)}
        topics = [TOPIC] + ([WARMUP_TOPIC] if args.warmup_fraction > 0 else [])
        for f in admin.create_topics([NewTopic(t, 1, 1, config=config) for t in topics]).values():
            f.result(60)
        time.sleep(1)
        if args.warmup_fraction > 0:
            # The JVM's first pass runs the cleaner's code cold (interpreted, then JIT-compiled while it runs):
            # a smaller pass first, on another topic, so the measured pass is a warm broker's.
            warm = max(BATCH_RECORDS, int(records * args.warmup_fraction) // BATCH_RECORDS * BATCH_RECORDS)
            out["warmup"] = fill_and_clean(kafka, admin, WARMUP_TOPIC, warm, args)
        out.update(fill_and_clean(kafka, admin, TOPIC, records, args))
        text = kafka.cleaner_log.read_text(errors="replace")
        out["report"] = [line for line in text.splitlines()
                         if f"{TOPIC}-0" in line or "MB" in line or "utilization" in line][-12:]
        return out
    finally:
        kafka.stop()


# ---------------------------------------------------------------------------------------------------------- report

def table(a, k):
    p = k["passes"][-1] if k.get("passes") else {}
    lines = [
        "| | Annal | Kafka 4.1 |",
        "|---|---|---|",
        f"| dirty log cleaned | {a['dirty_mib']} MiB ({a['records']:,} records, {a['keys']:,} keys) | "
        f"{k['dirty_mib']} MiB ({len(k['passes'])} pass{'es' if len(k['passes']) != 1 else ''}, dirty section "
        f"[{p.get('first')}, {p.get('end')})) |",
        f"| pass time | {a['seconds']} s | {k['pass_seconds']} s from {k['pass_seconds_source']}; the report: "
        f"{p.get('seconds')} s = index {p.get('index_s')} s + clean {p.get('clean_s')} s |",
        f"| **throughput (dirty MiB / pass s)** | **{a['mib_s']} MiB/s** | **{k['mib_s']} MiB/s** "
        f"(its own report: {p.get('mb_s')} MB/sec of {p.get('processed_mb')} MB read) |",
        f"| Annal / Kafka | {a['mib_s'] / k['mib_s']:.2f}x | |" if k.get("mib_s") else "| Annal / Kafka | n/a | |",
        (f"| Kafka's warm-up pass before it (another topic, cold JIT) | | {k['warmup']['dirty_mib']} MiB in "
         f"{k['warmup']['pass_seconds']} s = {k['warmup']['mib_s']} MiB/s |" if k.get("warmup") else
         "| Kafka's warm-up pass | | none (the measured pass ran on a cold JIT) |"),
        f"| log left after the pass | {a['left_mib']} MiB | {k['left_mib']} MiB |",
        f"| CPU of the pass (the cleaning thread) | {a.get('pass_cpu_s')} s (whole process, writing the log "
        f"included: {a['process_cpu_s']} s) | {k.get('cleaner_thread_cpu_s')} s |",
        f"| key map | {a['map_keys']:,} of {a['map_capacity']:,} entries (128 MiB budget) | 128 MiB dedupe buffer, "
        f"{p.get('buffer_utilization_pct')}% used |",
        f"| peak RSS | {a['peak_rss_mib']} MiB: the whole bench process (VmHWM; {a['rss_before_mib']} MiB before the "
        f"pass) | JVM {k['jvm_peak_rss_during_pass_mib']} MiB during the pass (VmRSS sampled at 10 Hz; "
        f"{k['jvm_before_pass']['rss_mib']} MiB just before it, {k['jvm_idle']['rss_mib']} MiB idle after start-up, "
        f"VmHWM {k['jvm_after_pass']['hwm_mib']} MiB) |",
    ]
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib", type=int, default=128, help="MiB of dirty log (Annal's bench writes until its log "
                                                         "holds this much; Kafka gets the same records)")
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--codec", choices=CODECS, default="none")
    ap.add_argument("--annal-bench", help="a built cleaner_bench (default: cargo build --release it)")
    ap.add_argument("--kafka-heap", default=os.environ.get("KAFKA_HEAP_OPTS", "-Xms256m -Xmx512m"),
                    help="JVM heap options (scripts/kafka/start.sh's default)")
    ap.add_argument("--backoff-ms", type=int, default=200, help="log.cleaner.backoff.ms")
    ap.add_argument("--warmup-fraction", type=float, default=0.25,
                    help="Kafka first cleans a warm-up topic of this fraction of the records (0: none)")
    ap.add_argument("--kafka-timeout", type=float, default=600, help="seconds to wait for Kafka's pass")
    ap.add_argument("--out", help="write the figures as JSON here")
    ap.add_argument("--keep", action="store_true", help="keep .cache/bench/cleaner/ (logs and data)")
    ap.add_argument("--kafka-only", type=int, metavar="RECORDS",
                    help="a check of the Kafka side alone: skip Annal, produce RECORDS records; no table")
    args = ap.parse_args()

    work = ROOT / ".cache" / "bench" / "cleaner"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    try:
        if args.kafka_only:
            kafka = run_kafka(args, args.kafka_only, work)
            print(json.dumps(kafka, indent=2))
            return
        bench_bin = Path(args.annal_bench) if args.annal_bench else build_annal_bench()
        annal = run_annal(bench_bin, args.mib, args.keys, args.codec, work)
        shutil.rmtree(work / "annal-tmp", ignore_errors=True)
        kafka = run_kafka(args, annal["records"], work)
        for line in kafka["report"]:
            print(f"  kafka | {line}")
        text = table(annal, kafka)
        print()
        print(f"{args.mib} MiB target, {args.keys:,} keys, codec {args.codec}, {len(VALUE)}-byte values, batches "
              f"of {BATCH_RECORDS}, {ANNAL_SEGMENT_BYTES // MIB} MiB segments, 128 MiB dedupe buffer, 1 cleaner "
              f"thread; page cache warm on both sides\n")
        print(text)
        if args.out:
            result = {"time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                      "machine": {"cpus": os.cpu_count(), "kernel": platform.release(),
                                  "loadavg": os.getloadavg()},
                      "args": vars(args), "annal": annal, "kafka": kafka, "table": text}
            Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
            log(f"wrote {args.out}")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
