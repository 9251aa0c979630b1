"""Real broker processes for the interop tests.

Which broker the tests drive is chosen by the environment:
  INTEROP_BOOTSTRAP=host:port   an already running broker (any Kafka-protocol broker); tests that restart, kill or
                                read the broker's files are skipped.
  INTEROP_BROKER=kafka          a real Apache Kafka 4.x started with scripts/kafka/start.sh (to validate the tests
                                themselves: every test must pass against Kafka).
  ANNAL_BIN=/path/to/annal      (default) `annal serve` processes.
"""

import os
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
KAFKA_SCRIPTS = REPO / "scripts" / "kafka"

START_TIMEOUT_S = float(os.environ.get("INTEROP_START_TIMEOUT", "60"))
# INTEROP_KEEP=1 keeps each broker's work directory (data and log) for a look after the run.
KEEP_WORKDIRS = os.environ.get("INTEROP_KEEP") == "1"


def remove_workdir(path):
    if KEEP_WORKDIRS:
        print(f"interop: kept broker work directory {path}")
    else:
        shutil.rmtree(path, ignore_errors=True)


def free_port(consecutive=1):
    """A loopback port that is free now (and, with consecutive=2, the next one too, for Kafka's controller)."""
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


def api_versions_answered(host, port, timeout=2.0):
    """True when the broker answers an ApiVersions v0 request (so it is really serving, not just listening)."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            client_id = b"interop-probe"
            body = struct.pack(">hhih", 18, 0, 1, len(client_id)) + client_id
            s.sendall(struct.pack(">i", len(body)) + body)
            head = _recv_exact(s, 8)
            return head is not None and struct.unpack(">ii", head)[1] == 1
    except OSError:
        return False


def _recv_exact(s, n):
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


class Broker:
    """A broker the tests talk to. Subclasses that own a process can stop, restart and kill it."""

    kind = "abstract"
    owns_process = False

    def __init__(self):
        self.host = "127.0.0.1"
        self.port = None

    @property
    def bootstrap(self):
        return f"{self.host}:{self.port}"

    def start(self):
        pass

    def stop(self, kill=False):
        pass

    def restart(self, kill=False):
        """Stops the broker (SIGTERM and wait, or SIGKILL) and starts it again on the same port and data."""
        self.stop(kill=kill)
        self.start()

    def pid(self):
        return None

    def alive(self):
        """False when a process this fixture started has died (e.g. crashed on bad input)."""
        return True

    def data_root(self):
        """Directory under which partition directories (<topic>-<partition>) live."""
        return None

    def partition_dir(self, topic, partition):
        root = self.data_root()
        if root is None:
            return None
        matches = [p for p in Path(root).rglob(f"{topic}-{partition}") if p.is_dir()]
        if len(matches) != 1:
            raise AssertionError(
                f"expected one directory {topic}-{partition} under {root}, found {matches}")
        return matches[0]

    def log_tail(self, lines=40):
        return ""

    def close(self):
        self.stop()


class ExternalBroker(Broker):
    kind = "external"

    def __init__(self, bootstrap):
        super().__init__()
        host, port = bootstrap.rsplit(":", 1)
        self.host, self.port = host, int(port)


class AnnalBroker(Broker):
    kind = "annal"
    owns_process = True

    def __init__(self, annal_bin, workdir, overrides=()):
        super().__init__()
        self.annal_bin = annal_bin
        # `--override key=value` settings for `annal serve` (tests of Annal-only settings).
        self.overrides = list(overrides)
        self.workdir = Path(workdir)
        self.data_dir = self.workdir / "data"
        self.log_path = self.workdir / "annal.log"
        self.port = free_port()
        self.proc = None
        self._log_file = None

    def start(self):
        self._log_file = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [self.annal_bin, "serve", "--data-dir", str(self.data_dir), "--listen", self.bootstrap]
            + [a for o in self.overrides for a in ("--override", o)],
            stdout=self._log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"annal serve exited with {self.proc.returncode} during start-up:\n{self.log_tail()}")
            if api_versions_answered(self.host, self.port, timeout=1.0):
                return
            time.sleep(0.1)
        raise RuntimeError(f"annal serve did not answer ApiVersions on {self.bootstrap} within "
                           f"{START_TIMEOUT_S}s:\n{self.log_tail()}")

    def stop(self, kill=False):
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError(f"annal did not exit within 30 s of SIGTERM:\n{self.log_tail()}")
        if not kill and self.proc.returncode != 0:
            raise AssertionError(f"annal exited with {self.proc.returncode} after SIGTERM:\n{self.log_tail()}")
        self.proc = None
        self._log_file.close()

    def pid(self):
        return self.proc.pid if self.proc and self.proc.poll() is None else None

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def data_root(self):
        return self.data_dir

    def log_tail(self, lines=40):
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def close(self):
        try:
            self.stop()
        finally:
            remove_workdir(self.workdir)


class KafkaProcessBroker(Broker):
    """Apache Kafka via scripts/kafka/start.sh: used to check that the tests describe Kafka's behaviour."""

    kind = "kafka"
    owns_process = True

    def __init__(self, workdir):
        super().__init__()
        self.workdir = Path(workdir)
        self.port = free_port(consecutive=2)
        self._running = False

    def start(self):
        subprocess.run([str(KAFKA_SCRIPTS / "start.sh"), str(self.workdir), str(self.port)], check=True,
                       stdout=subprocess.DEVNULL)
        self._running = True

    def stop(self, kill=False):
        if not self._running:
            return
        args = [str(KAFKA_SCRIPTS / "stop.sh"), str(self.workdir)] + (["--kill"] if kill else [])
        subprocess.run(args, check=True)
        self._running = False

    def pid(self):
        try:
            return int((self.workdir / "kafka.pid").read_text())
        except (OSError, ValueError):
            return None

    def alive(self):
        pid = self.pid()
        if not self._running or pid is None:
            return False
        try:
            os.kill(pid, 0)
        except OSError:
            return False
        return True

    def data_root(self):
        return self.workdir / "data"

    def log_tail(self, lines=40):
        try:
            return "\n".join((self.workdir / "kafka.log").read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def close(self):
        try:
            self.stop()
        finally:
            remove_workdir(self.workdir)


def new_broker():
    """Starts (or points at) the broker chosen by the environment; the caller must close() it."""
    external = os.environ.get("INTEROP_BOOTSTRAP")
    if external:
        return ExternalBroker(external)
    workdir = tempfile.mkdtemp(prefix="annal-interop-")
    if os.environ.get("INTEROP_BROKER") == "kafka":
        broker = KafkaProcessBroker(workdir)
    else:
        annal_bin = os.environ.get("ANNAL_BIN")
        if not annal_bin or not os.access(annal_bin, os.X_OK):
            raise RuntimeError("set ANNAL_BIN to the annal binary (or INTEROP_BOOTSTRAP=host:port, "
                               "or INTEROP_BROKER=kafka)")
        broker = AnnalBroker(annal_bin, workdir)
    try:
        broker.start()
    except BaseException:
        broker.close()
        raise
    return broker
