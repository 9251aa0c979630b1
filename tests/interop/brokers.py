"""Real broker processes for the interop tests.

Which broker the tests drive is chosen by the environment:
  INTEROP_BOOTSTRAP=host:port   an already running broker (any Kafka-protocol broker); tests that restart, kill or
                                read the broker's files are skipped.
  INTEROP_BROKER=kafka          a real Apache Kafka 4.x started with scripts/kafka/start.sh (to validate the tests
                                themselves: every test must pass against Kafka).
  ANNAL_BIN=/path/to/annal      (default) `annal serve` processes.
"""

import os
import random
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


# Ports are handed out below the kernel's ephemeral range: a port from bind(("127.0.0.1", 0)) is an ephemeral one,
# and any outgoing connection (a client's, a cluster node's to its peers) may take it as its local port before the
# broker it was meant for binds it: CI lost a cluster to that ("http.listen=127.0.0.1:39837: cannot listen: Address
# already in use"). Below the range a port is only ever taken by a bind to that port by name.
_PORT_FLOOR = 10000
_handed_out = set()  # every port this process handed out: two brokers, or two listeners of one, never share one
_rng = random.Random(os.getpid() ^ time.time_ns())


def _ephemeral_floor():
    try:
        low, _high = (int(v) for v in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
        return low
    except (OSError, ValueError):
        return 32768  # Linux's default


def _bindable(port):
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def free_port(consecutive=1):
    """A loopback port that is free now and below the ephemeral range (with consecutive=k, the k-1 next ones too,
    e.g. for a Kafka node's controller port). No port is handed out twice by one test process."""
    ceiling = _ephemeral_floor()
    if ceiling - consecutive <= _PORT_FLOOR:
        raise RuntimeError(f"the ephemeral port range starts at {ceiling}: no room below it for test brokers; "
                           f"raise it with sysctl net.ipv4.ip_local_port_range")
    for _ in range(1000):
        port = _rng.randrange(_PORT_FLOOR, ceiling - consecutive + 1)
        run = range(port, port + consecutive)
        if any(p in _handed_out for p in run) or not all(_bindable(p) for p in run):
            continue
        _handed_out.update(run)
        return port
    raise RuntimeError(f"no run of {consecutive} free loopback ports found in {_PORT_FLOOR}..{ceiling - 1}")


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
