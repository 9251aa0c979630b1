#!/usr/bin/env python3
"""Produce and consume throughput over TLS versus plaintext (issue 17), for Annal and beside Apache Kafka over
TLS, in the same run.

    python3 bench/tls.py [--annal-bin target/release/annal] [--brokers annal,kafka] [--records 200000]
        [--record-size 1024] [--rounds 3] [--out FILE.json]

- **Brokers.** Annal and Kafka run from one `server.properties` each, the same text for both, with a PLAINTEXT
  and an SSL listener (and the CONTROLLER listener); Kafka as `java kafka.Kafka` with scripts/kafka/start.sh's JVM
  settings. Both run for the whole bench, but only one is given work at a time. The SSL listener has a server certificate for
  127.0.0.1 (PEM keystore and truststore, made with the openssl CLI as the interop tests make them), no client
  authentication. TLS on both brokers: whatever the Java client and the broker negotiate (TLS 1.3 here).
- **Workload.** The clients of bench.py, Apache Kafka's own perf tools as separate JVMs: ProducerPerformance
  writing `--records` records of `--record-size` bytes to a fresh 8-partition topic at full speed (acks=1, the
  client's defaults otherwise), then ConsumerPerformance reading them all back in a consumer group (the
  fetch-only rate, without the group join, is what is compared). The SSL runs differ from the plaintext runs only
  by `--producer.config` / `--consumer.config` files with `security.protocol=SSL` and the PEM truststore.
- **Order.** After a warm-up produce on each broker's two listeners (not reported: Kafka's JIT), each round runs
  every (broker, listener) pair, in an order rotated by one each round, and the median over the rounds of each
  pair is compared, so drift on a shared machine hits every side alike.
- **Reported.** MiB/s of produce and of consume, and the broker's CPU seconds per GiB moved (from /proc), for each
  broker and listener; the ratios Annal TLS / Annal plaintext, Kafka TLS / Kafka plaintext and Annal TLS / Kafka
  TLS.

Needs Java 17+, Maven (scripts/kafka/fetch.sh resolves the Kafka jars) and openssl. No Python packages.
"""

import argparse
import base64
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import parse, procs  # noqa: E402
from benchlib.workloads import GIB, JAVA_DIR, MIB, PARTITIONS  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
START_TIMEOUT_S = 180
LISTENERS = ("PLAINTEXT", "SSL")


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_pki(d):
    """ca.pem and server.pem (PKCS#8 key + chain: Kafka's PEM keystore file), as tests/interop/test_security.py."""
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca-key.pem", "-out", "ca.pem",
            "-days", "2", "-subj", "/CN=annal-bench-ca", cwd=d)
    (d / "server.ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server-key.pem", "-out", "server.csr",
            "-subj", "/CN=localhost", cwd=d)
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca-key.pem", "-CAcreateserial",
            "-out", "server-cert.pem", "-days", "2", "-extfile", "server.ext", cwd=d)
    (d / "server.pem").write_text((d / "server-key.pem").read_text() + (d / "server-cert.pem").read_text()
                                  + (d / "ca.pem").read_text())


class SecureBroker:
    """Annal or Kafka from one server.properties with PLAINTEXT and SSL listeners."""

    def __init__(self, kind, workdir, annal_bin, classpath):
        self.name = kind
        self.dir = Path(workdir)
        self.annal_bin = annal_bin
        self.classpath = classpath
        self.ports = {}
        self.proc = None
        self.pid = None

    def bootstrap(self, listener):
        return f"127.0.0.1:{self.ports[listener]}"

    def start(self):
        self.dir.mkdir(parents=True, exist_ok=True)
        make_pki(self.dir)
        self.ports = {n: procs.free_port() for n in LISTENERS}
        ctrl = procs.free_port()
        listeners = ",".join(f"{n}://{self.bootstrap(n)}" for n in LISTENERS)
        props = self.dir / "server.properties"
        props.write_text("\n".join([
            "process.roles=broker,controller",
            "node.id=1",
            f"controller.quorum.voters=1@127.0.0.1:{ctrl}",
            f"listeners={listeners},CONTROLLER://127.0.0.1:{ctrl}",
            f"advertised.listeners={listeners}",
            "inter.broker.listener.name=PLAINTEXT",
            "controller.listener.names=CONTROLLER",
            "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL",
            f"log.dirs={self.dir}/data",
            "offsets.topic.replication.factor=1",
            "share.coordinator.state.topic.replication.factor=1",
            "share.coordinator.state.topic.min.isr=1",
            "transaction.state.log.replication.factor=1",
            "transaction.state.log.min.isr=1",
            "group.initial.rebalance.delay.ms=0",
            "ssl.keystore.type=PEM",
            f"ssl.keystore.location={self.dir}/server.pem",
            "ssl.truststore.type=PEM",
            f"ssl.truststore.location={self.dir}/ca.pem",
            "",
        ]))
        log = open(self.dir / "broker.log", "ab")
        if self.name == "kafka":
            # scripts/kafka/start.sh's JVM settings.
            java = ["java", "-Xms256m", "-Xmx512m", "-XX:+UseG1GC", "-Djava.awt.headless=true", "-cp", self.classpath]
            cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
            subprocess.run(java + ["kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(props)],
                           check=True, capture_output=True)
            cmd = java + ["kafka.Kafka", str(props)]
        else:
            cmd = [self.annal_bin, "serve", "--config", str(props)]
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True)
        log.close()
        self.pid = self.proc.pid
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited during start-up; see {self.dir}/broker.log")
            if procs.api_versions_ok(self.ports["PLAINTEXT"], timeout=1.0):
                return
            time.sleep(0.1)
        raise RuntimeError(f"{self.name} did not serve within {START_TIMEOUT_S} s; see {self.dir}/broker.log")

    def stop(self):
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            procs.log(f"{self.name} did not stop within 60 s of SIGTERM; killing it")
            self.proc.kill()
            self.proc.wait(timeout=10)


class Clients:
    def __init__(self, classpath, workdir):
        self.java = ["java", "-Xmx512m", "-cp", classpath]
        self.dir = Path(workdir)

    def client_config(self, broker, listener):
        """The --producer.config / --consumer.config file for `listener` (empty for PLAINTEXT)."""
        path = self.dir / f"client-{broker.name}-{listener}.properties"
        lines = []
        if listener == "SSL":
            lines = ["security.protocol=SSL", "ssl.truststore.type=PEM",
                     f"ssl.truststore.location={broker.dir}/ca.pem"]
        path.write_text("\n".join(lines) + "\n")
        return path

    def create_topics(self, broker, names):
        code, out = procs.run_tool(self.java + [str(JAVA_DIR / "CreateTopics.java"), broker.bootstrap("PLAINTEXT"),
                                                str(PARTITIONS)] + list(names), 180, "topics", echo=False)
        if code != 0:
            raise RuntimeError(f"creating topics failed (exit {code}):\n{out.strip()[-2000:]}")

    def produce(self, broker, listener, topic, records, size):
        cmd = self.java + ["org.apache.kafka.tools.ProducerPerformance", "--topic", topic,
                           "--num-records", str(records), "--record-size", str(size), "--throughput", "-1",
                           "--producer.config", str(self.client_config(broker, listener)),
                           "--producer-props", f"bootstrap.servers={broker.bootstrap(listener)}", "acks=1"]
        return self._run(broker, cmd, f"{broker.name}:{listener}:produce", records * size,
                         parse.producer_perf, records)

    def consume(self, broker, listener, topic, records, size):
        cmd = self.java + ["org.apache.kafka.tools.ConsumerPerformance", "--bootstrap-server",
                           broker.bootstrap(listener), "--topic", topic, "--messages", str(records),
                           "--timeout", "30000", "--group", f"g-{topic}",
                           "--consumer.config", str(self.client_config(broker, listener))]
        return self._run(broker, cmd, f"{broker.name}:{listener}:consume", records * size,
                         parse.consumer_perf, records)

    def _run(self, broker, cmd, label, nbytes, parser, records):
        cpu0 = procs.cpu_seconds(broker.pid)
        code, out = procs.run_tool(cmd, min(900, 60 + nbytes / (2 * MIB)), label, echo=False)
        cpu = procs.cpu_seconds(broker.pid) - cpu0
        if broker.proc.poll() is not None:
            raise RuntimeError(f"{broker.name} died during {label}; see {broker.dir}/broker.log")
        try:
            res = parser(out)
        except ValueError as e:
            raise RuntimeError(f"{label}: {e}; exit {code}; last output:\n{out.strip()[-1500:]}") from None
        if res["records"] < records:
            raise RuntimeError(f"{label}: {res['records']} of {records} records")
        # ConsumerPerformance's fetch-only rate leaves out the group join; ProducerPerformance has one rate.
        res["mib_per_s_compared"] = res.get("fetch_mib_per_s", res["mib_per_s"])
        res["broker_cpu_s"] = round(cpu, 3)
        res["broker_cpu_s_per_gib"] = round(cpu / (nbytes / GIB), 3)
        return res


def run_all(kinds, args, classpath, work):
    """Starts every broker, then runs the rounds: each round visits every (broker, listener) pair, produce then
    consume, in an order rotated by one each round, so load that drifts on a shared machine spreads over all pairs
    (an idle broker costs next to nothing while another is measured)."""
    clients = Clients(classpath, work)
    brokers = {}
    rows = []
    try:
        for kind in kinds:
            b = SecureBroker(kind, work / kind, args.annal_bin, classpath)
            brokers[kind] = b
            b.start()
            procs.log(f"{kind} serving PLAINTEXT on {b.bootstrap('PLAINTEXT')} and SSL on {b.bootstrap('SSL')}")
            clients.create_topics(b, [f"warmup-{listener}" for listener in LISTENERS] + [
                f"tls-{listener}-{r}" for r in range(args.rounds) for listener in LISTENERS])
            # Not reported: warms Kafka's JIT (and both brokers' page cache and allocators) on both listeners.
            for listener in LISTENERS:
                clients.produce(b, listener, f"warmup-{listener}", max(args.records // 4, 10_000), args.record_size)
        pairs = [(kind, listener) for kind in kinds for listener in LISTENERS]
        for r in range(args.rounds):
            shift = r % len(pairs)
            for kind, listener in pairs[shift:] + pairs[:shift]:
                b = brokers[kind]
                topic = f"tls-{listener}-{r}"
                for workload in ("produce", "consume"):
                    load = float(open("/proc/loadavg").read().split()[0])
                    fn = clients.produce if workload == "produce" else clients.consume
                    res = fn(b, listener, topic, args.records, args.record_size)
                    row = {"broker": kind, "listener": listener, "round": r + 1, "workload": workload,
                           "mib_per_s": res["mib_per_s_compared"], "broker_cpu_s_per_gib": res["broker_cpu_s_per_gib"],
                           "loadavg_1m_before": load, "detail": res}
                    procs.log(f"round {r + 1} {kind} {listener:9} {workload:7}: {row['mib_per_s']:8.1f} MiB/s, "
                              f"broker {row['broker_cpu_s_per_gib']:.2f} CPU s/GiB (load {load:.2f})")
                    rows.append(row)
    finally:
        for b in brokers.values():
            b.stop()
            shutil.rmtree(b.dir / "data", ignore_errors=True)
    return rows


def summarise(rows):
    med = {}
    for (b, listener, w) in sorted({(r["broker"], r["listener"], r["workload"]) for r in rows}):
        sel = [r for r in rows if (r["broker"], r["listener"], r["workload"]) == (b, listener, w)]
        med[f"{b}/{listener}/{w}"] = {
            "mib_per_s": round(statistics.median(r["mib_per_s"] for r in sel), 1),
            "broker_cpu_s_per_gib": round(statistics.median(r["broker_cpu_s_per_gib"] for r in sel), 3),
            "runs": len(sel)}
    ratios = {}

    def ratio(name, a, b, field="mib_per_s"):
        if a in med and b in med and med[b][field]:
            ratios[name] = round(med[a][field] / med[b][field], 3)

    for w in ("produce", "consume"):
        ratio(f"annal_tls_vs_annal_plaintext/{w}", f"annal/SSL/{w}", f"annal/PLAINTEXT/{w}")
        ratio(f"kafka_tls_vs_kafka_plaintext/{w}", f"kafka/SSL/{w}", f"kafka/PLAINTEXT/{w}")
        ratio(f"annal_tls_vs_kafka_tls/{w}", f"annal/SSL/{w}", f"kafka/SSL/{w}")
        ratio(f"annal_plaintext_vs_kafka_plaintext/{w}", f"annal/PLAINTEXT/{w}", f"kafka/PLAINTEXT/{w}")
        ratio(f"cpu_per_gib/annal_tls_vs_kafka_tls/{w}", f"annal/SSL/{w}", f"kafka/SSL/{w}",
              "broker_cpu_s_per_gib")
    return med, ratios


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--annal-bin", default=os.environ.get("ANNAL_BIN", str(REPO / "target/release/annal")))
    ap.add_argument("--brokers", default="annal,kafka")
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--record-size", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=3, help="rounds per broker, alternating the listener first")
    ap.add_argument("--out")
    args = ap.parse_args()
    if shutil.which("openssl") is None:
        procs.die("the openssl CLI is needed to make the certificates")
    brokers = [b.strip() for b in args.brokers.split(",") if b.strip()]
    if "annal" in brokers and not os.access(args.annal_bin, os.X_OK):
        procs.die(f"{args.annal_bin} is not an executable; build it (cargo build --release --bin annal)")
    cp_file = subprocess.run([str(REPO / "scripts/kafka/fetch.sh")], check=True, capture_output=True,
                             text=True).stdout.strip().splitlines()[-1]
    classpath = Path(cp_file).read_text().strip()
    work = Path(tempfile.mkdtemp(prefix="annal-bench-tls-"))
    results = {"command": " ".join(sys.argv), "records": args.records, "record_size": args.record_size,
               "rounds": args.rounds, "loadavg_1m_before": float(open("/proc/loadavg").read().split()[0]),
               "rows": []}
    try:
        results["rows"] = run_all(brokers, args, classpath, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    results["medians"], results["ratios"] = summarise(results["rows"])
    print("\n| broker / listener / workload | MiB/s (median) | broker CPU s/GiB |\n|---|---|---|")
    for k, v in results["medians"].items():
        print(f"| {k} | {v['mib_per_s']} | {v['broker_cpu_s_per_gib']} |")
    print()
    for k, v in results["ratios"].items():
        print(f"{k}: {v}")
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
