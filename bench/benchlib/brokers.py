"""The two brokers under test, each started on its own loopback port(s) in its own fresh directory, one at a time.
Start-up time is measured the same way for both: from the broker process's start to its first answered
ApiVersions request."""

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from . import procs

START_TIMEOUT_S = 180
PROBE_INTERVAL_S = 0.005


class Broker:
    name = "abstract"

    def __init__(self, workdir):
        self.workdir = Path(workdir)
        self.port = None
        self.pid = None
        self.startup_s = None

    @property
    def bootstrap(self):
        return f"127.0.0.1:{self.port}"

    def _await_first_response(self, t_launch, still_starting):
        """Polls ApiVersions until answered; returns seconds since t_launch (a time.monotonic() value)."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if procs.api_versions_ok(self.port, timeout=1.0):
                return time.monotonic() - t_launch
            if not still_starting():
                raise RuntimeError(f"{self.name} exited during start-up; see its log in {self.workdir}")
            time.sleep(PROBE_INTERVAL_S)
        raise RuntimeError(f"{self.name} did not answer ApiVersions on {self.bootstrap} within "
                           f"{START_TIMEOUT_S} s; see its log in {self.workdir}")

    def remove_data(self):
        shutil.rmtree(self.workdir / "data", ignore_errors=True)


class KafkaBroker(Broker):
    """Apache Kafka in KRaft combined mode, started by scripts/kafka/start.sh (Kafka's defaults except ports,
    data dir and the single-node settings of Kafka's own config/server.properties)."""

    name = "kafka"

    def __init__(self, workdir, repo, kafka_cache):
        super().__init__(workdir)
        self.repo = Path(repo)
        self.env = dict(os.environ, KAFKA_CACHE=str(kafka_cache))

    def start(self):
        self.port = procs.free_port(consecutive=2)
        self.workdir.mkdir(parents=True, exist_ok=True)
        pid_file = self.workdir / "kafka.pid"
        pid_file.unlink(missing_ok=True)
        script = subprocess.Popen([str(self.repo / "scripts/kafka/start.sh"), str(self.workdir), str(self.port)],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                  text=True, env=self.env, start_new_session=True)
        # start.sh formats the storage (a separate JVM) first, then launches the broker and writes its pid.
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                self.pid = int(pid_file.read_text().strip())
                break
            except (OSError, ValueError):
                if script.poll() is not None:
                    raise RuntimeError(f"scripts/kafka/start.sh failed:\n{script.stdout.read()}")
                time.sleep(PROBE_INTERVAL_S)
        else:
            script.kill()
            raise RuntimeError("scripts/kafka/start.sh wrote no pid file in time")
        # The broker process started a moment before its pid file appeared: date its launch from /proc.
        t_launch = time.monotonic() - procs.process_age_s(self.pid)
        self.startup_s = self._await_first_response(t_launch, lambda: procs.alive(self.pid))
        try:
            out, _ = script.communicate(timeout=START_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            script.kill()
            raise RuntimeError("scripts/kafka/start.sh did not report the broker ready")
        if script.returncode != 0:
            raise RuntimeError(f"scripts/kafka/start.sh failed:\n{out}")
        return self.startup_s

    def stop(self):
        code, out = procs.run_tool([str(self.repo / "scripts/kafka/stop.sh"), str(self.workdir)], 120, "stop",
                                   echo=False, env=self.env)
        if code != 0:
            procs.log(f"kafka stop.sh failed ({code}): {out.strip()}")
            if self.pid and procs.alive(self.pid):
                os.kill(self.pid, signal.SIGKILL)

    def version(self, classpath):
        for jar in classpath.split(":"):
            base = os.path.basename(jar)
            if base.startswith("kafka_2.13-") and base.endswith(".jar"):
                return base[len("kafka_2.13-"):-len(".jar")]
        return "unknown"


class AnnalBroker(Broker):
    """`annal serve` with its defaults (like Kafka: no fsync per write, flushing left to the OS page cache)."""

    name = "annal"

    def __init__(self, workdir, annal_bin):
        super().__init__(workdir)
        self.annal_bin = str(annal_bin)
        self.proc = None
        self._log = None

    def start(self):
        self.port = procs.free_port()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._log = open(self.workdir / "annal.log", "ab")
        t_launch = time.monotonic()
        # The same single-node group setting scripts/kafka/start.sh gives Kafka (its config/server.properties):
        # no initial rebalance delay, so "incl. group join" figures compare like with like.
        self.proc = subprocess.Popen([self.annal_bin, "serve", "--data-dir", str(self.workdir / "data"),
                                      "--listen", self.bootstrap,
                                      "--override", "group.initial.rebalance.delay.ms=0"],
                                     stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True)
        self.pid = self.proc.pid
        self.startup_s = self._await_first_response(t_launch, lambda: self.proc.poll() is None)
        return self.startup_s

    def stop(self):
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # `annal serve` shuts down cleanly on Ctrl-C
            timeout = getattr(self, "stop_timeout_s", 60)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                procs.log(f"annal did not stop within {timeout} s of SIGINT; killing it")
                self.proc.kill()
                self.proc.wait(timeout=10)
        self._log.close()

    def version(self):
        try:
            out = subprocess.run([self.annal_bin, "--version"], capture_output=True, text=True, timeout=10)
            return out.stdout.strip() or "unknown"
        except (OSError, subprocess.TimeoutExpired):
            return "unknown"
