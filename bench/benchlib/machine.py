"""The machine's own limits, measured in the same run (so broker figures can be shown as a fraction of them),
and its description."""

import os
import platform
import shutil
import subprocess
import time

from . import parse, procs


def disk_seq_write(directory, size_mib):
    """Sequential buffered write of size_mib with one fsync at the end (what a broker that leaves flushing to the
    page cache can at best sustain once the cache is full). fio when installed, else dd conv=fdatasync."""
    os.makedirs(directory, exist_ok=True)
    target = os.path.join(directory, "seqwrite.tmp")
    try:
        if shutil.which("fio"):
            code, out = procs.run_tool(["fio", "--name=seqwrite", f"--filename={target}", "--rw=write",
                                        "--bs=1M", f"--size={size_mib}M", "--ioengine=psync", "--end_fsync=1",
                                        "--output-format=json"], 600, "fio", echo=False)
            if code == 0:
                r = parse.fio_write(out)
                r["tool"] = f"fio rw=write bs=1M size={size_mib}M ioengine=psync end_fsync=1 (buffered)"
                return r
            procs.log(f"fio failed ({code}); falling back to dd")
        code, out = procs.run_tool(["dd", "if=/dev/zero", f"of={target}", "bs=1M", f"count={size_mib}",
                                    "conv=fdatasync"], 600, "dd", echo=False)
        if code != 0:
            return {"error": out.strip()[-500:]}
        r = parse.dd_write(out)
        r["tool"] = f"dd bs=1M count={size_mib} conv=fdatasync"
        return r
    finally:
        try:
            os.unlink(target)
        except OSError:
            pass


def loopback_tcp(seconds):
    """One TCP stream over 127.0.0.1 with iperf3 (a broker's produce and fetch traffic crosses loopback)."""
    if not shutil.which("iperf3"):
        return {"error": "iperf3 not installed (apt-get install -y iperf3)"}
    port = procs.free_port()
    server = subprocess.Popen(["iperf3", "-s", "-1", "-B", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        out = ""
        for _ in range(50):  # bounded wait for the server to listen
            code, out = procs.run_tool(["iperf3", "-c", "127.0.0.1", "-p", str(port), "-t", str(seconds),
                                        "--json"], seconds + 60, "iperf3", echo=False)
            if code == 0:
                r = parse.iperf3_tcp(out)
                r["tool"] = f"iperf3 -c 127.0.0.1 -t {seconds} (1 stream)"
                return r
            time.sleep(0.1)
        return {"error": out.strip()[-500:]}
    finally:
        server.kill()
        server.wait()


def _first_line(cmd):
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
        return (r.stdout + r.stderr).strip().splitlines()[0]
    except (OSError, subprocess.TimeoutExpired, IndexError):
        return "unknown"


def describe(data_dir):
    cpu_model = "unknown"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_kib = 0
    for line in open("/proc/meminfo"):
        if line.startswith("MemTotal:"):
            mem_kib = int(line.split()[1])
    df = subprocess.run(["df", "-hT", str(data_dir)], capture_output=True, text=True).stdout.strip().splitlines()
    lsblk = subprocess.run(["lsblk", "-d", "-o", "NAME,SIZE,ROTA,MODEL"], capture_output=True,
                           text=True).stdout.strip()
    return {
        "nproc": os.cpu_count(),
        "cpu_model": cpu_model,
        "memory_gib": round(mem_kib / (1 << 20), 1),
        "kernel": platform.release(),
        "os": _first_line(["sh", "-c", ". /etc/os-release && echo $PRETTY_NAME"]),
        "disk_df": df[-1] if df else "unknown",
        "block_devices": lsblk,
        "java": _first_line(["java", "-version"]),
        "python": platform.python_version(),
        "fio": _first_line(["fio", "--version"]) if shutil.which("fio") else None,
        "iperf3": _first_line(["iperf3", "--version"]) if shutil.which("iperf3") else None,
        "loadavg_at_start": open("/proc/loadavg").read().strip(),
    }
