"""Processes: running tools with a timeout while showing their output, reading /proc figures of a broker,
and probing a broker with a tiny Kafka request."""

import os
import socket
import struct
import subprocess
import sys
import threading
import time

from . import parse

CLK_TCK = os.sysconf("SC_CLK_TCK")
T0 = time.monotonic()


def log(msg):
    """Progress line with the time since the harness started."""
    el = time.monotonic() - T0
    print(f"[{int(el // 60):02d}:{el % 60:04.1f}] {msg}", flush=True)


def run_tool(cmd, timeout_s, label, echo=True, env=None, cwd=None):
    """Runs cmd, echoing its output lines (prefixed) as they come, and returns (exit code, output).
    Kills its process group after timeout_s so no run can hang the harness."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            text=True, errors="replace", start_new_session=True, env=env, cwd=cwd)
    lines = []
    timed_out = threading.Event()

    def killer():
        timed_out.set()
        try:
            os.killpg(proc.pid, 9)
        except ProcessLookupError:
            pass

    timer = threading.Timer(timeout_s, killer)
    timer.start()
    try:
        for line in proc.stdout:
            lines.append(line)
            if echo and len(lines) <= 400 and ":{client-id=" not in line and not line.startswith("Metric Name"):
                print(f"    {label}| {line.rstrip()}", flush=True)
        proc.wait()
    finally:
        timer.cancel()
    out = "".join(lines)
    if timed_out.is_set():
        out += f"\n[harness] killed after {timeout_s} s timeout\n"
        return -9, out
    return proc.returncode, out


def read_file(path):
    with open(path) as f:
        return f.read()


def cpu_seconds(pid):
    return parse.proc_stat_cpu_ticks(read_file(f"/proc/{pid}/stat")) / CLK_TCK


def rss_mib(pid):
    return parse.proc_status_rss_kib(read_file(f"/proc/{pid}/status")) / 1024.0


def process_age_s(pid):
    """Seconds since the process started (10 ms resolution: clock ticks)."""
    uptime = float(read_file("/proc/uptime").split()[0])
    start = parse.proc_stat_start_ticks(read_file(f"/proc/{pid}/stat")) / CLK_TCK
    return uptime - start


def alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except OSError:
        return False


def free_port(consecutive=1):
    """A loopback port free now, with the next consecutive-1 ports free too (Kafka's controller uses port+1)."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port + consecutive > 65535:
            continue
        ok = True
        for extra in range(1, consecutive):
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port + extra))
                except OSError:
                    ok = False
        if ok:
            return port
    raise RuntimeError("no free loopback port found")


def _recv_exact(s, n):
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def api_versions_ok(port, timeout=1.0):
    """True when a broker on 127.0.0.1:port answers ApiVersions v0 with error_code 0: it serves requests, it is
    not merely listening."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            client_id = b"annal-bench-probe"
            body = struct.pack(">hhih", 18, 0, 7, len(client_id)) + client_id
            s.sendall(struct.pack(">i", len(body)) + body)
            head = _recv_exact(s, 10)  # size, correlation id, error code
            if head is None:
                return False
            size, corr, err = struct.unpack(">iih", head)
            return corr == 7 and err == 0 and 6 <= size <= 1 << 20
    except OSError:
        return False


class Sampler:
    """Samples a process's RSS every interval_s in a thread while a workload runs; keeps the peak."""

    def __init__(self, pid, interval_s=0.25):
        self.pid = pid
        self.interval_s = interval_s
        self.peak_mib = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            try:
                self.peak_mib = max(self.peak_mib, rss_mib(self.pid))
            except (OSError, ValueError):
                return
            self._stop.wait(self.interval_s)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=5)


def die(msg):
    print(f"error: {msg}", file=sys.stderr, flush=True)
    sys.exit(1)
