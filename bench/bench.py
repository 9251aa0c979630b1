#!/usr/bin/env python3
"""Annal vs Apache Kafka, side by side, on this machine. Run it through bench/run.sh (see bench/README.md)."""

import argparse
import datetime
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import brokers, machine, procs, workloads  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def run_broker(broker, tools, plan, run_id, payload_file, short):
    """Starts one broker, runs every workload against it, stops it. Never raises: failures are recorded."""
    res = {"workloads": {}, "loadavg_before": open("/proc/loadavg").read().strip()}
    procs.log(f"{broker.name}: starting in {broker.workdir}")
    try:
        res["startup_s"] = round(broker.start(), 3)
    except Exception as e:  # noqa: BLE001 - record and carry on with the other broker
        res["error"] = f"start failed: {e}"
        procs.log(f"{broker.name}: {res['error']}")
        broker.stop()
        return res
    procs.log(f"{broker.name}: serving on {broker.bootstrap} (pid {broker.pid}) {res['startup_s']:.3f} s "
              f"after its process started")
    try:
        time.sleep(2)  # let start-up work (log recovery, JIT, metadata) settle before calling it idle
        res["idle_rss_mib"] = round(procs.rss_mib(broker.pid), 1)
        procs.log(f"{broker.name}: idle RSS {res['idle_rss_mib']} MiB; creating topics")
        tools.create_topics(broker.bootstrap, workloads.topics([workloads.warmup(short)] + plan))
        procs.log(f"{broker.name}: warm-up")
        warm = workloads.run(tools, broker, workloads.warmup(short), f"bench-{run_id}")
        if "error" in warm:
            procs.log(f"{broker.name}: warm-up failed: {warm['error']}")
        for i, w in enumerate(plan, 1):
            procs.log(f"{broker.name}: [{i}/{len(plan)}] {w['title']}")
            r = workloads.run(tools, broker, w, f"bench-{run_id}-{broker.name}", payload_file)
            if "error" not in r and w["kind"] == "produce" and r["records"] < w["records"]:
                r["error"] = f"only {r['records']} of {w['records']} records were acknowledged"
            res["workloads"][w["id"]] = r
            summary = r.get("error") or ", ".join(
                f"{k}={r[k]}" for k in ("mib_per_s", "fetch_mib_per_s", "broker_cpu_s_per_gib") if k in r)
            if "latency_ms" in r:
                summary += f", latency_ms={r['latency_ms']}"
            procs.log(f"{broker.name}: [{i}/{len(plan)}] -> {summary}")
            if not procs.alive(broker.pid):
                res["error"] = f"{broker.name} died during {w['id']}"
                break
        if procs.alive(broker.pid):
            res["rss_after_load_mib"] = round(procs.rss_mib(broker.pid), 1)
            peaks = [r.get("broker_peak_rss_mib", 0) for r in res["workloads"].values()]
            res["peak_rss_under_load_mib"] = max(peaks) if peaks else None
        res["data_dir_bytes"] = dir_bytes(broker.workdir / "data")
    except Exception as e:  # noqa: BLE001
        res["error"] = f"{type(e).__name__}: {e}"
        procs.log(f"{broker.name}: {res['error']}")
    finally:
        procs.log(f"{broker.name}: stopping")
        broker.stop()
        broker.remove_data()
    return res


def dir_bytes(path):
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(root, f))
            except OSError:
                pass
    return total


def git_commit(path):
    try:
        return subprocess.run(["git", "-C", str(path), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--short", action="store_true", help="small sizes: a few minutes in all")
    ap.add_argument("--brokers", default="kafka,annal", help="comma-separated subset of kafka,annal")
    ap.add_argument("--annal-bin", required=True)
    ap.add_argument("--classpath-file", required=True)
    ap.add_argument("--out", required=True, help="results directory")
    ap.add_argument("--work", required=True, help="scratch directory for broker data (removed afterwards)")
    ap.add_argument("--fixed-rate", type=int, default=2000, help="records/s of the latency run (1 KiB records)")
    ap.add_argument("--skip-limits", action="store_true", help="do not measure disk and loopback limits")
    args = ap.parse_args()

    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    work = Path(args.work)
    classpath = Path(args.classpath_file).read_text().strip()
    run_id = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    mode = "short" if args.short else "full"
    plan = workloads.plan(args.short, args.fixed_rate)
    results = {
        "meta": {"run_id": run_id, "mode": mode, "repo_commit": git_commit(REPO),
                 "fixed_rate_records_per_s": args.fixed_rate, "partitions": workloads.PARTITIONS,
                 "client": "Apache Kafka tools (ProducerPerformance, ConsumerPerformance, EndToEndLatency), "
                           "same jars for both brokers, default producer/consumer settings except acks and "
                           "compression.type",
                 "workloads": {w["id"]: w["title"] for w in plan}},
        "machine": machine.describe(work),
        "limits": {},
        "brokers": {},
    }
    save = lambda: (out_dir / "results.json").write_text(json.dumps(results, indent=2) + "\n")  # noqa: E731

    procs.log(f"benchmark {mode} mode: results in {out_dir}")
    if not args.skip_limits:
        procs.log("machine limit: sequential disk write")
        results["limits"]["disk_seq_write"] = machine.disk_seq_write(work / "limits", 512 if args.short else 2048)
        procs.log(f"  -> {results['limits']['disk_seq_write']}")
        procs.log("machine limit: loopback TCP (iperf3)")
        results["limits"]["loopback_tcp"] = machine.loopback_tcp(3 if args.short else 10)
        procs.log(f"  -> {results['limits']['loopback_tcp']}")
        save()

    tools = workloads.Tools(classpath)
    payload_file = work / "payload-1k.jsonl"
    workloads.write_payload_file(payload_file)
    for name in [b.strip() for b in args.brokers.split(",") if b.strip()]:
        if name == "kafka":
            broker = brokers.KafkaBroker(work / "kafka", REPO, Path(args.classpath_file).parent)
            version = broker.version(classpath)
        elif name == "annal":
            broker = brokers.AnnalBroker(work / "annal", args.annal_bin)
            version = broker.version()
        else:
            procs.die(f"unknown broker {name!r}: use kafka and/or annal")
        res = run_broker(broker, tools, plan, run_id, payload_file, args.short)
        res["version"] = version
        if name == "annal":
            res["binary"] = args.annal_bin
        results["brokers"][name] = res
        save()

    from benchlib import report  # noqa: E402 - after the run: a report failure must not lose the results
    report.write_all(results, out_dir)
    procs.log(f"done: {out_dir}/results.md, results.json, throughput.png, latency.png")


if __name__ == "__main__":
    main()
