#!/usr/bin/env python3
"""Prints the log/plain throughput table from criterion's output of `cargo bench -p annal-log --bench log`.

Usage: python3 crates/annal-log/benches/ratios.py [target/criterion]
Reads <group>/{log,plain}/<shape>/new/{benchmark,estimates}.json; throughput uses the median sample time.
"""
import json
import os
import sys

root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "target", "criterion")


def rate(group, impl, shape):
    base = os.path.join(root, group, impl, shape, "new")
    try:
        with open(os.path.join(base, "benchmark.json")) as f:
            nbytes = json.load(f)["throughput"]["Bytes"]
        with open(os.path.join(base, "estimates.json")) as f:
            est = json.load(f)
    except (OSError, KeyError, ValueError):
        return None
    # bytes per second from the median and the mean's confidence bounds
    to_mib_s = lambda ns: nbytes / (ns / 1e9) / 2**20
    return to_mib_s(est["median"]["point_estimate"]), to_mib_s(est["mean"]["point_estimate"])


rows = []
for group in sorted(os.listdir(root)) if os.path.isdir(root) else []:
    gdir = os.path.join(root, group, "log")
    if not os.path.isdir(gdir):
        continue
    for shape in sorted(os.listdir(gdir)):
        log, plain = rate(group, "log", shape), rate(group, "plain", shape)
        if log and plain:
            rows.append((group, shape, plain[0], log[0], log[0] / plain[0], log[1] / plain[1]))

if not rows:
    sys.exit(f"no log/plain pairs under {root}; run `cargo bench -p annal-log --bench log` first")
print(f"{'benchmark':<28} {'batches':<14} {'plain MiB/s':>12} {'log MiB/s':>10} {'log/plain':>10} {'(means)':>8}")
for group, shape, p, l, r, rm in rows:
    print(f"{group:<28} {shape.replace('_batches', ''):<14} {p:>12.0f} {l:>10.0f} {r:>9.1%} {rm:>8.1%}")
