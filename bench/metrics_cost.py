#!/usr/bin/env python3
"""The cost of Annal's metrics (issue 14): produce and fetch throughput with metrics on versus off in the same run
(target: under 2% apart), and the cost of one /metrics scrape with 10,000 partitions.

    .cache/interop-venv/bin/python bench/metrics_cost.py [--annal-bin target/release/annal] [--rounds 3]
        [--records 200000] [--partitions 10000] [--out FILE.json]

- **On versus off.** The hot-path counters (per-API request counters and latency histograms, per-partition
  produce/fetch atomics) are compiled in and cannot be turned off, so "off" is what an operator can switch off:
  `http.listen=` (no listener, nothing scraped). "On" is the listener with a scraper fetching `/metrics` every
  second, as Prometheus would (its 1 s interval is harsher than the usual 15 s). Rounds alternate off/on, each on a
  fresh broker and data directory, and the median of each side is compared, so drift on a shared machine hits
  both sides alike. Beside throughput (which on a shared machine swings with the other tenants' load), each round
  records the broker's CPU time per record (utime+stime from /proc, produce and fetch phases apart, scrapes
  included on the "on" side): the cost metrics add is CPU, and CPU per record is far steadier than records/s
  under contention. Each off/on pair gives a ratio; the median ratio and the range of the pairs are reported.
- **Workload.** librdkafka (confluent-kafka) producing `--records` 1 KiB records to 8 partitions at full speed
  (acks=1, linger.ms=5), then one consumer assigned to every partition reading them all back from offset 0.
- **Scrape cost.** One broker with `--partitions` partitions (topics of 1,000 partitions each), a few records and
  a committed group on each topic; then 20 scrapes, timed at the client (wall) and on the broker (its CPU time
  from /proc). Reports median and worst, and the exposition's size.
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import confluent_kafka as ck
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import procs  # noqa: E402
from benchlib.brokers import AnnalBroker  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
RECORD = b"x" * 1024


class Annal(AnnalBroker):
    """`annal serve` with extra overrides (`http.listen`, ...)."""

    def __init__(self, workdir, annal_bin, overrides):
        super().__init__(workdir, annal_bin)
        self.overrides = overrides

    def start(self):
        self.port = procs.free_port()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._log = open(self.workdir / "annal.log", "ab")
        t_launch = time.monotonic()
        cmd = [self.annal_bin, "serve", "--data-dir", str(self.workdir / "data"), "--listen", self.bootstrap,
               "--override", "group.initial.rebalance.delay.ms=0"]
        for o in self.overrides:
            cmd += ["--override", o]
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True)
        self.pid = self.proc.pid
        self.startup_s = self._await_first_response(t_launch, lambda: self.proc.poll() is None)
        return self.startup_s


def create_topics(bootstrap, names, partitions):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(n, partitions, 1) for n in names], operation_timeout=120,
                                  request_timeout=120)
    for name, f in futures.items():
        f.result(timeout=300)
    # Wait until the metadata shows every partition with a leader.
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        md = admin.list_topics(timeout=30)
        if all(n in md.topics and len(md.topics[n].partitions) == partitions
               and all(p.leader >= 0 for p in md.topics[n].partitions.values()) for n in names):
            return
        time.sleep(0.5)
    raise SystemExit(f"topics {names[:3]}... did not get leaders in time")


def produce(bootstrap, topic, records):
    p = ck.Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 5, "batch.size": 1 << 20,
                     "enable.idempotence": False, "queue.buffering.max.messages": 1_000_000,
                     "queue.buffering.max.kbytes": 1 << 20})
    t0 = time.monotonic()
    for i in range(records):
        while True:
            try:
                p.produce(topic, RECORD, partition=i % 8)
                break
            except BufferError:
                p.poll(0.01)
    left = p.flush(120)
    if left:
        raise SystemExit(f"{left} records not acknowledged")
    return records / (time.monotonic() - t0)


def consume(bootstrap, topic, records):
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-metrics", "enable.auto.commit": False,
                     "fetch.max.bytes": 50 << 20, "max.partition.fetch.bytes": 8 << 20})
    c.assign([ck.TopicPartition(topic, p, 0) for p in range(8)])
    got = 0
    t0 = time.monotonic()
    deadline = t0 + 300
    while got < records and time.monotonic() < deadline:
        for m in c.consume(num_messages=10_000, timeout=1.0):
            if m.error() is None:
                got += 1
    elapsed = time.monotonic() - t0
    c.close()
    if got < records:
        raise SystemExit(f"consumed {got} of {records} records")
    return records / elapsed


class Scraper(threading.Thread):
    """GET /metrics every `interval_s`, as Prometheus does."""

    def __init__(self, http, interval_s=1.0):
        super().__init__(daemon=True)
        self.url = f"http://{http}/metrics"
        self.interval_s = interval_s
        self.stop = threading.Event()
        self.scrapes = 0

    def run(self):
        while not self.stop.wait(self.interval_s):
            with urllib.request.urlopen(self.url, timeout=30) as r:
                r.read()
            self.scrapes += 1


def throughput_round(annal_bin, metrics_on, records):
    workdir = Path(tempfile.mkdtemp(prefix="annal-bench-metrics-"))
    http_port = procs.free_port()
    overrides = [f"http.listen=127.0.0.1:{http_port}"] if metrics_on else ["http.listen="]
    b = Annal(workdir, annal_bin, overrides)
    b.start()
    scraper = None
    try:
        create_topics(b.bootstrap, ["bench"], 8)
        if metrics_on:
            scraper = Scraper(f"127.0.0.1:{http_port}")
            scraper.start()
        cpu0 = procs.cpu_seconds(b.pid)
        produced = produce(b.bootstrap, "bench", records)
        cpu1 = procs.cpu_seconds(b.pid)
        fetched = consume(b.bootstrap, "bench", records)
        cpu2 = procs.cpu_seconds(b.pid)
    finally:
        if scraper:
            scraper.stop.set()
            scraper.join()
        b.stop()
        subprocess.run(["rm", "-rf", str(workdir)])
    return {"metrics": "on" if metrics_on else "off", "produce_rps": round(produced),
            "fetch_rps": round(fetched), "scrapes": scraper.scrapes if scraper else 0,
            "produce_cpu_us_per_record": round((cpu1 - cpu0) / records * 1e6, 3),
            "fetch_cpu_us_per_record": round((cpu2 - cpu1) / records * 1e6, 3)}


def raise_nofile_soft_limit():
    """The broker inherits the soft limit; its open-file budget (`log.open.files.max`) is sized from it, so any
    partition count fits (segment files are opened on demand), but a larger budget keeps more of them open."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def scrape_cost(annal_bin, partitions):
    workdir = Path(tempfile.mkdtemp(prefix="annal-bench-scrape-"))
    http_port = procs.free_port()
    b = Annal(workdir, annal_bin, [f"http.listen=127.0.0.1:{http_port}"])
    b.start()
    try:
        per_topic = min(1000, partitions)
        names = [f"wide-{i}" for i in range(partitions // per_topic)]
        t0 = time.monotonic()
        create_topics(b.bootstrap, names, per_topic)
        procs.log(f"created {len(names)} x {per_topic} partitions in {time.monotonic() - t0:.1f} s")
        # A record on every partition and a group with committed offsets on each topic, so the partition and
        # group series all have something to say.
        p = ck.Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 20, "enable.idempotence": False})
        for n in names:
            for i in range(per_topic):
                p.produce(n, b"r", partition=i)
            p.poll(0)
        p.flush(120)
        del p
        c = ck.Consumer({"bootstrap.servers": b.bootstrap, "group.id": "bench-scrape"})
        for n in names:
            offsets = [ck.TopicPartition(n, i, 1) for i in range(per_topic)]
            # The first commit creates __consumer_offsets; its coordinator may still be loading.
            for attempt in range(60):
                try:
                    c.commit(offsets=offsets, asynchronous=False)
                    break
                except ck.KafkaException as e:
                    if attempt == 59:
                        raise
                    procs.log(f"commit on {n} failed ({e}); retrying")
                    time.sleep(1)
        c.close()
        url = f"http://127.0.0.1:{http_port}/metrics"
        walls, cpus, size = [], [], 0
        for _ in range(20):
            cpu0 = procs.cpu_seconds(b.pid)
            t = time.monotonic()
            with urllib.request.urlopen(url, timeout=60) as r:
                body = r.read()
            walls.append(time.monotonic() - t)
            cpus.append(procs.cpu_seconds(b.pid) - cpu0)
            size = len(body)
        series = sum(1 for line in body.decode().splitlines() if line and not line.startswith("#"))
        return {"partitions": len(names) * per_topic, "scrapes": len(walls),
                "wall_ms_median": round(statistics.median(walls) * 1000, 1),
                "wall_ms_max": round(max(walls) * 1000, 1),
                "broker_cpu_ms_median": round(statistics.median(cpus) * 1000, 1),
                "bytes": size, "samples": series}
    finally:
        b.stop()
        subprocess.run(["rm", "-rf", str(workdir)])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--annal-bin", default=os.environ.get("ANNAL_BIN", str(REPO / "target/release/annal")))
    ap.add_argument("--rounds", type=int, default=3, help="rounds per side (alternating off, on)")
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--partitions", default="10000",
                    help="partition counts of the scrape-cost runs, comma-separated (e.g. 2000,6000)")
    ap.add_argument("--skip-scrape", action="store_true")
    ap.add_argument("--out")
    args = ap.parse_args()
    results = {"loadavg_1m_before": float(open("/proc/loadavg").read().split()[0]), "rounds": []}
    for r in range(args.rounds):
        for on in (False, True):
            res = throughput_round(args.annal_bin, on, args.records)
            procs.log(f"round {r + 1} metrics {res['metrics']}: produce {res['produce_rps']} rec/s, "
                      f"fetch {res['fetch_rps']} rec/s ({res['scrapes']} scrapes)")
            results["rounds"].append(res)
    for kind in ("produce_rps", "fetch_rps") if results["rounds"] else ():
        off = statistics.median(x[kind] for x in results["rounds"] if x["metrics"] == "off")
        on = statistics.median(x[kind] for x in results["rounds"] if x["metrics"] == "on")
        results[kind] = {"off_median": off, "on_median": on, "on_vs_off_pct": round((on - off) / off * 100, 2)}
        procs.log(f"{kind}: off {off:.0f}, on {on:.0f}: {results[kind]['on_vs_off_pct']:+.2f}%")
    offs = [x for x in results["rounds"] if x["metrics"] == "off"]
    ons = [x for x in results["rounds"] if x["metrics"] == "on"]
    for kind in ("produce_cpu_us_per_record", "fetch_cpu_us_per_record") if ons else ():
        # Round r's off and on ran back to back, so their ratio cancels the drift between rounds.
        ratios = [on[kind] / off[kind] for off, on in zip(offs, ons) if off[kind] > 0]
        pct = [round((r - 1) * 100, 2) for r in ratios]
        results[kind] = {"off_median": statistics.median(x[kind] for x in offs),
                         "on_median": statistics.median(x[kind] for x in ons),
                         "paired_on_vs_off_pct": pct,
                         "paired_median_pct": round(statistics.median(pct), 2) if pct else None}
        procs.log(f"{kind}: off {results[kind]['off_median']}, on {results[kind]['on_median']} us/record; "
                  f"paired on vs off {pct} %, median {results[kind]['paired_median_pct']:+.2f}%")
    if not args.skip_scrape:
        raise_nofile_soft_limit()
        results["scrape"] = []
        for count in (int(c) for c in args.partitions.split(",")):
            res = scrape_cost(args.annal_bin, count)
            procs.log(f"scrape with {res['partitions']} partitions: {res}")
            results["scrape"].append(res)
    print(json.dumps(results, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
