"""results.json -> results.md (Annal/Kafka ratios, fractions of the machine's limits) and PNG charts."""

import json
import math
import sys
from pathlib import Path

BROKERS = ("kafka", "annal")


def _get(results, broker, *path):
    node = results.get("brokers", {}).get(broker, {})
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return node


def _fmt(v):
    if v is None:
        return "n/a"
    if isinstance(v, float):
        if v == 0:
            return "0"
        if abs(v) >= 100:
            return f"{v:,.0f}"
        if abs(v) >= 10:
            return f"{v:.1f}"
        return f"{v:.3g}"
    return str(v)


def rows(results):
    """(label, kafka value, annal value, higher_is_better, limit name or None, target text)."""
    out = []
    add = lambda *r: out.append(r)  # noqa: E731
    add("start-up to first answered ApiVersions (s)", _get(results, "kafka", "startup_s"),
        _get(results, "annal", "startup_s"), False, None, "Annal <= 0.1x")
    add("idle RSS (MiB)", _get(results, "kafka", "idle_rss_mib"), _get(results, "annal", "idle_rss_mib"), False,
        None, "Annal <= 0.2x")
    add("peak RSS under load (MiB)", _get(results, "kafka", "peak_rss_under_load_mib"),
        _get(results, "annal", "peak_rss_under_load_mib"), False, None, "Annal <= 0.2x")
    wl = results.get("meta", {}).get("workloads", {})
    for wid, title in wl.items():
        kind = ("assign" if wid == "consume_backlog_assign" else "consume" if wid.startswith("consume")
                else "e2e" if wid == "end_to_end" else "produce")
        fixed = wid == "latency_fixed_rate"
        if kind == "produce" and not fixed:
            target = ">= 1.5x" if wid in ("produce_1k_acks1", "produce_1k_acksall") else ""
            add(f"{title}: MiB/s", _get(results, "kafka", "workloads", wid, "mib_per_s"),
                _get(results, "annal", "workloads", wid, "mib_per_s"), True, "disk_seq_write", target)
            add(f"{title}: records/s", _get(results, "kafka", "workloads", wid, "records_per_s"),
                _get(results, "annal", "workloads", wid, "records_per_s"), True, None, "")
        if kind == "produce":
            add(f"{title}: client request-latency-avg (ms)",
                _get(results, "kafka", "workloads", wid, "client_metrics", "request-latency-avg"),
                _get(results, "annal", "workloads", wid, "client_metrics", "request-latency-avg"), False, None, "")
            for p in (("p50", "p99", "p99.9", "max") if fixed else ("p99",)):
                add(f"{title}: {p} latency (ms)", _get(results, "kafka", "workloads", wid, "latency_ms", p),
                    _get(results, "annal", "workloads", wid, "latency_ms", p), False, None,
                    "<= 0.5x" if fixed and p == "p99" else "")
        if kind == "consume":
            add(f"{title}: MiB/s (fetch time only)", _get(results, "kafka", "workloads", wid, "fetch_mib_per_s"),
                _get(results, "annal", "workloads", wid, "fetch_mib_per_s"), True, "loopback_tcp", "")
            add(f"{title}: MiB/s (incl. group join)", _get(results, "kafka", "workloads", wid, "mib_per_s"),
                _get(results, "annal", "workloads", wid, "mib_per_s"), True, "loopback_tcp", "")
        if kind == "assign":
            add(f"{title}: MiB/s", _get(results, "kafka", "workloads", wid, "mib_per_s"),
                _get(results, "annal", "workloads", wid, "mib_per_s"), True, "loopback_tcp", "")
            for m, unit in (("fetch-latency-avg", "ms"), ("fetch-size-avg", "bytes")):
                add(f"{title}: client {m} ({unit})",
                    _get(results, "kafka", "workloads", wid, "client_metrics", m),
                    _get(results, "annal", "workloads", wid, "client_metrics", m), m == "fetch-size-avg", None, "")
        if kind == "e2e":
            for p in ("p50", "p99", "p99.9"):
                add(f"{title}: {p} (ms)", _get(results, "kafka", "workloads", wid, "latency_ms", p),
                    _get(results, "annal", "workloads", wid, "latency_ms", p), False, None, "")
        if kind != "e2e":
            add(f"{title}: broker CPU s per GiB", _get(results, "kafka", "workloads", wid, "broker_cpu_s_per_gib"),
                _get(results, "annal", "workloads", wid, "broker_cpu_s_per_gib"), False, None, "")
    return out


def markdown(results):
    meta, mach, limits = results.get("meta", {}), results.get("machine", {}), results.get("limits", {})
    lines = [f"# Annal vs Apache Kafka ({meta.get('mode', '?')} mode, run {meta.get('run_id', '?')})", ""]
    lines.append(f"Machine: {mach.get('nproc')} CPUs ({mach.get('cpu_model')}), {mach.get('memory_gib')} GiB RAM, "
                 f"kernel {mach.get('kernel')}, {mach.get('os')}; disk: `{mach.get('disk_df')}`; "
                 f"load average at start: {mach.get('loadavg_at_start')}.")
    lines.append(f"Versions: Kafka {_get(results, 'kafka', 'version')}, Annal {_get(results, 'annal', 'version')} "
                 f"(repo commit {meta.get('repo_commit')}), {mach.get('java')}.")
    lim_txt = []
    for key, label in (("disk_seq_write", "sequential disk write"), ("loopback_tcp", "loopback TCP")):
        lim = limits.get(key, {})
        if "mib_per_s" in lim:
            lim_txt.append(f"{label} {lim['mib_per_s']:,.0f} MiB/s ({lim.get('tool')})")
        elif lim:
            lim_txt.append(f"{label}: failed ({lim.get('error', '?')[:200]})")
    if lim_txt:
        lines.append("Machine limits measured in this run: " + "; ".join(lim_txt) + ".")
    lines.append(f"Client: {meta.get('client')}; 1 topic x {meta.get('partitions')} partitions per workload.")
    lines += ["", "| metric | Kafka | Annal | Annal/Kafka | better | Kafka % of limit | Annal % of limit | target |",
              "|---|---:|---:|---:|---|---:|---:|---|"]
    for label, k, a, higher, limit, target in rows(results):
        ratio = f"{a / k:.3g}x" if isinstance(k, (int, float)) and isinstance(a, (int, float)) and k else "n/a"
        lim = limits.get(limit, {}).get("mib_per_s") if limit else None
        pk = f"{100 * k / lim:.0f}%" if lim and isinstance(k, (int, float)) else ""
        pa = f"{100 * a / lim:.0f}%" if lim and isinstance(a, (int, float)) else ""
        lines.append(f"| {label} | {_fmt(k)} | {_fmt(a)} | {ratio} | {'higher' if higher else 'lower'} | "
                     f"{pk} | {pa} | {target} |")
    rate = meta.get("fixed_rate_records_per_s")
    for b in BROKERS:
        best = _get(results, b, "workloads", "produce_1k_acksall", "records_per_s")
        if rate and best and rate > 0.5 * best:
            lines += ["", f"**Warning**: the fixed rate ({rate} records/s) is over half of {b}'s acks=all maximum "
                          f"({best:,.0f} records/s), so its latency figures include queueing; rerun with a lower "
                          f"--fixed-rate."]
    errors = []
    for b in BROKERS:
        if _get(results, b, "error"):
            errors.append(f"- {b}: {_get(results, b, 'error')}")
        for wid, w in (_get(results, b, "workloads") or {}).items():
            if "error" in w:
                errors.append(f"- {b} / {wid}: {w['error'][:400]}".replace("\n", " "))
            if "warning" in w:
                errors.append(f"- {b} / {wid} (figures kept): {w['warning'][:300]}".replace("\n", " "))
    if errors:
        lines += ["", "## Failures and warnings", ""] + errors
    lines += ["", "Notes: MiB/s counts record values (1 KiB or 100 B each; lz4 figures count uncompressed bytes). "
              "ProducerPerformance reports latencies in whole milliseconds. "
              "% of limit: produce vs the sequential disk write rate, consume vs loopback TCP. "
              "CPU s per GiB: broker process utime+stime (all threads) over the workload / GiB moved. "
              "The consumer reads a backlog that is still in the page cache.", ""]
    return "\n".join(lines)


def charts(results, out_dir):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not available: no charts (run through bench/run.sh, which sets up a venv)",
              file=sys.stderr)
        return []
    colors = {"kafka": "#7f7f7f", "annal": "#1f77b4"}
    made = []
    # Throughput bars.
    items = []
    for wid, title in results.get("meta", {}).get("workloads", {}).items():
        if wid in ("latency_fixed_rate", "end_to_end"):
            continue
        key = "fetch_mib_per_s" if wid == "consume_backlog" else "mib_per_s"
        items.append((title, [_get(results, b, "workloads", wid, key) for b in BROKERS]))
    if items:
        fig, ax = plt.subplots(figsize=(10, 0.7 * len(items) + 2))
        h = 0.38
        for j, b in enumerate(BROKERS):
            ys = [i + (j - 0.5) * h for i in range(len(items))]
            vals = [v[j] or 0 for _, v in items]
            ax.barh(ys, vals, height=h, label=b.capitalize(), color=colors[b])
            for y, v, raw in zip(ys, vals, [v[j] for _, v in items]):
                ax.text(v, y, f" {v:,.0f}" if raw is not None else " n/a", va="center", fontsize=8)
        ax.set_yticks(range(len(items)))
        ax.set_yticklabels([t for t, _ in items], fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel("MiB/s of record values (higher is better)")
        top = max([x or 0 for _, v in items for x in v] + [1])
        notes = []
        for key, style, label in (("disk_seq_write", "--", "disk seq. write"), ("loopback_tcp", ":", "loopback TCP")):
            lim = results.get("limits", {}).get(key, {}).get("mib_per_s")
            if lim and lim <= 3 * top:  # drawn only when it does not squash the bars
                ax.axvline(lim, linestyle=style, color="red", linewidth=1, label=f"{label} {lim:,.0f} MiB/s")
                top = max(top, lim)
            elif lim:
                notes.append(f"{label}: {lim:,.0f} MiB/s")
        ax.set_xlim(0, top * 1.15)
        if notes:
            ax.text(0.99, 0.01, "machine limits (off scale): " + "; ".join(notes), transform=ax.transAxes,
                    ha="right", va="bottom", fontsize=8, color="red")
        ax.legend(loc="center right", fontsize=8)
        ax.set_title(f"Throughput, Annal vs Kafka ({results.get('meta', {}).get('mode')} mode)")
        fig.tight_layout()
        fig.savefig(out_dir / "throughput.png", dpi=110)
        plt.close(fig)
        made.append("throughput.png")
    # Latency percentile curves.
    nines = lambda p: -math.log10(1 - p / 100.0)  # noqa: E731
    panels = [("latency_fixed_rate", ("p50", "p95", "p99", "p99.9", "max")), ("end_to_end", ("p50", "p99", "p99.9"))]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    for ax, (wid, pcts) in zip(axes, panels):
        xs_all = [nines(float(p[1:])) if p != "max" else nines(99.99) for p in pcts]
        for b in BROKERS:
            lat = _get(results, b, "workloads", wid, "latency_ms") or {}
            pts = [(x, lat[p]) for x, p in zip(xs_all, pcts) if lat.get(p) is not None]
            if pts:
                ax.plot([x for x, _ in pts], [y for _, y in pts], marker="o", label=b.capitalize(), color=colors[b])
        ax.set_xticks(xs_all)
        ax.set_xticklabels([p if p != "max" else "max" for p in pcts])
        ax.set_yscale("symlog", linthresh=1)
        ax.set_ylim(bottom=0)
        ax.set_xlabel("percentile")
        ax.set_ylabel("latency, ms (lower is better)")
        ax.set_title(results.get("meta", {}).get("workloads", {}).get(wid, wid), fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(out_dir / "latency.png", dpi=110)
    plt.close(fig)
    made.append("latency.png")
    return made


def write_all(results, out_dir):
    out_dir = Path(out_dir)
    (out_dir / "results.md").write_text(markdown(results))
    return charts(results, out_dir)


if __name__ == "__main__":
    # Re-render a report: python3 bench/benchlib/report.py bench/results/<run>
    d = Path(sys.argv[1])
    write_all(json.loads((d / "results.json").read_text()), d)
