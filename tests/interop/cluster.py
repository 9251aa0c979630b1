"""A real N-node cluster on loopback for the cluster tests (issue 9's "Proof"), Annal or Apache Kafka 4.x.

Every node is its own process started from its OWN server.properties, written here in Kafka's names, in the same
shape for both brokers: KRaft combined mode (process.roles=broker,controller), node ids 1..N, a static quorum
(controller.quorum.voters), a PLAINTEXT and a CONTROLLER listener per node, its own log.dirs.

  INTEROP_BROKER=kafka   each node runs `java kafka.Kafka server.properties`, after `kafka.tools.StorageTool
                         format -t <cluster id> -c server.properties` (Kafka keeps the cluster id in meta.properties).
  otherwise              each node runs `$ANNAL_BIN serve --config server.properties --cluster-id <cluster id>`
                         (no format step: with a static quorum every node must be told the same cluster id, and
                         Annal refuses a data directory that already belongs to another one).

The harness only observes the cluster through the Kafka protocol, asking one node at a time (kwire.py): Metadata v12
(brokers, controller id, leaders/replicas/ISR/leader epochs), DescribeCluster v0, DescribeQuorum v1 (the active
controller: the metadata quorum's leader). Stdlib only, so it also runs as a command for people and for the Java
tests:

  python3 tests/interop/cluster.py start DIR [--nodes 3] [--base-port P]   starts, waits until ready, prints
                                          "bootstrap=127.0.0.1:P" (node 1), "cluster_id=ID", "controller=ID" and
                                          per node "node=ID HOST:PORT PID" (DIR/cluster.json holds the same)
  python3 tests/interop/cluster.py stop DIR [--kill]                       SIGTERM (or SIGKILL) every node;
                                                                           SIGKILL what still runs after 60 s
Node i listens on BASE+2(i-1) (PLAINTEXT) and BASE+2(i-1)+1 (CONTROLLER). Node i's files: DIR/node-i/
(server.properties, node.log, data/).
"""

import argparse
import base64
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import kwire  # noqa: E402
from brokers import KAFKA_SCRIPTS, free_port, remove_workdir  # noqa: E402

HOST = "127.0.0.1"
# Bounds on every wait, in seconds. Kafka's JVMs on a shared 2-core machine are the slow case.
READY_TIMEOUT_S = float(os.environ.get("INTEROP_CLUSTER_READY_TIMEOUT", "120"))
STOP_TIMEOUT_S = 60.0  # a controlled shutdown (SIGTERM) of one node, also the CLI's grace for all of them
REFUSAL_TIMEOUT_S = 60.0
# Short lease, so that fencing tests take seconds rather than Kafka's default 9 s (+ 2 s heartbeats).
SESSION_TIMEOUT_MS = 3000
HEARTBEAT_INTERVAL_MS = 500
KAFKA_JAVA_OPTS = os.environ.get(
    "INTEROP_CLUSTER_JAVA_OPTS", "-Xms64m -Xmx384m -XX:+UseSerialGC -XX:TieredStopAtLevel=1").split()

LOG4J2 = """status = warn
appender.console.type = Console
appender.console.name = STDOUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.stdout.ref = STDOUT
logger.state.name = state.change.logger
logger.state.level = warn
"""


def broker_kind():
    return "kafka" if os.environ.get("INTEROP_BROKER") == "kafka" else "annal"


def new_cluster_id():
    """A cluster id in Kafka's format (a random UUID, URL-safe base64 without padding: 22 characters). Like Kafka's
    Uuid.randomUuid(), never one that starts with '-': on a command line (`--cluster-id -x...`, `format -t -x...`)
    it would read as an option (about one cluster start in 64 failed so)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


def wait_until(what, probe, timeout, interval=0.2, describe_failure=None):
    """Calls probe() until it returns something truthy and returns that; on timeout raises an AssertionError that
    says what was awaited, the last observation (or exception) and, if given, describe_failure()."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        try:
            got = probe()
            if got:
                return got
            last = got
        except (OSError, ValueError, AssertionError) as e:  # a node not (yet) answering, or answering oddly
            last = f"{type(e).__name__}: {e}"
        if time.monotonic() >= deadline:
            extra = f"\n{describe_failure()}" if describe_failure else ""
            raise AssertionError(f"{what}: not within {timeout:.0f} s; last observation: {last}{extra}")
        time.sleep(interval)


class NodeExited(RuntimeError):
    """A node's process ended while the harness waited for it to serve."""


class Node:
    """One node process. The cluster writes its config and tells it what to run; the node owns the process."""

    def __init__(self, cluster, node_id, port, controller_port):
        self.cluster = cluster
        self.node_id = node_id
        self.host = HOST
        self.port = port
        self.controller_port = controller_port
        self.workdir = cluster.workdir / f"node-{node_id}"
        self.config_path = self.workdir / "server.properties"
        self.log_path = self.workdir / "node.log"
        self.data_dir = self.workdir / "data"
        self.proc = None
        self.paused = False
        self.returncode = None
        # Where the other nodes and clients are told to connect (advertised.listeners, controller.quorum.voters):
        # the node's own ports unless a test puts a proxy in front of it (faults.py's LinkProxy).
        self.advertised_port = port
        self.advertised_controller_port = controller_port

    def __repr__(self):
        state = "paused" if self.paused else ("running" if self.alive() else f"exited {self.returncode}")
        return f"node {self.node_id} ({self.bootstrap}, {state})"

    @property
    def bootstrap(self):
        return f"{self.host}:{self.port}"

    def start(self, config_path=None):
        """Starts the process in the background (does not wait for it to serve: see Cluster.wait_ready)."""
        assert not self.alive(), f"{self} is already running"
        self.workdir.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            log.write(f"==== harness: starting node {self.node_id} at {time.strftime('%H:%M:%S')}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(self.cluster.command(self, config_path or self.config_path),
                                         stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True)
        self.paused = False
        self.returncode = None

    def pid(self):
        return self.proc.pid if self.proc is not None else None

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def kill(self):
        """SIGKILL: a crash. Waits until the process is gone."""
        if self.alive():
            self.proc.send_signal(signal.SIGKILL)
        self._reap(timeout=STOP_TIMEOUT_S)

    def stop(self, timeout=STOP_TIMEOUT_S):
        """SIGTERM (a controlled shutdown) and waits; fails if the process does not exit cleanly in time."""
        if not self.alive():
            self._reap(timeout=1)
            return
        if self.paused:
            self.resume()
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"node {self.node_id} did not exit within {timeout:.0f} s of SIGTERM:\n"
                                 f"{self.log_tail()}")
        self._reap(timeout=1)
        clean = self.cluster.clean_exit_codes
        assert self.returncode in clean, (f"node {self.node_id} exited with {self.returncode} after SIGTERM "
                                          f"(clean is {clean}):\n{self.log_tail()}")

    def pause(self):
        """SIGSTOP: the process is frozen (no heartbeats, no answers) but keeps its sockets open."""
        assert self.alive(), f"cannot pause {self}"
        self.proc.send_signal(signal.SIGSTOP)
        self.paused = True

    def resume(self):
        """SIGCONT after pause()."""
        if self.alive():
            self.proc.send_signal(signal.SIGCONT)
        self.paused = False

    def wait_exit(self, timeout):
        """Waits for the process to exit on its own; returns its exit code, or None if it is still running."""
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
        self._reap(timeout=1)
        return self.returncode

    def _reap(self, timeout):
        if self.proc is None:
            return
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"node {self.node_id} (pid {self.proc.pid}) did not exit")
        self.returncode = self.proc.returncode
        self.proc = None
        self.paused = False

    def log_text(self):
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines=30):
        text = self.log_text().splitlines()
        return "\n".join(text[-lines:]) if text else "(no log)"

    # The cluster as this one node sees it (each request goes to this node only).
    def metadata(self, topics=None):
        return kwire.metadata(self, topics)

    def describe_cluster(self):
        return kwire.describe_cluster(self)

    def describe_quorum(self):
        return kwire.describe_quorum(self)


class Cluster:
    """N KRaft combined-mode nodes on loopback. Node ids are 1..N; node(i) is node id i."""

    def __init__(self, workdir, size=3, kind=None, base_port=None, overrides=None, cluster_id=None, controllers=None):
        """`controllers=k` (k < size) splits the roles: nodes 1..k are controller-only (process.roles=controller),
        the rest broker-only; by default every node is combined (broker,controller)."""
        assert size >= 1
        assert controllers is None or 1 <= controllers < size
        self.controllers = controllers
        self.kind = kind or broker_kind()
        self.workdir = Path(workdir)
        self.size = size
        self.cluster_id = cluster_id or new_cluster_id()
        self.overrides = dict(overrides or {})
        base = base_port or free_port(consecutive=2 * size)
        self.nodes = [Node(self, i, base + 2 * (i - 1), base + 2 * (i - 1) + 1) for i in range(1, size + 1)]
        if self.kind == "kafka":
            self.clean_exit_codes = (0, 143)  # the JVM exits 128+SIGTERM after running its shutdown hooks
            self._classpath = None
        else:
            self.annal_bin = os.environ.get("ANNAL_BIN")
            if not self.annal_bin or not os.access(self.annal_bin, os.X_OK):
                raise RuntimeError("set ANNAL_BIN to the annal binary (or INTEROP_BROKER=kafka)")
            self.clean_exit_codes = (0,)

    def __repr__(self):
        return f"{self.kind} cluster {self.cluster_id}: {self.nodes}"

    def node(self, node_id):
        return self.nodes[node_id - 1]

    @property
    def bootstrap(self):
        return self.broker_nodes()[0].bootstrap

    def live_nodes(self):
        return [n for n in self.nodes if n.alive() and not n.paused]

    def other_nodes(self, *excluded):
        ids = {n.node_id if isinstance(n, Node) else n for n in excluded}
        return [n for n in self.nodes if n.node_id not in ids]

    # ---------------------------------------------------------------- configuration

    @property
    def voters(self):
        return ",".join(f"{n.node_id}@{n.host}:{n.advertised_controller_port}" for n in self.nodes
                        if self.is_controller(n))

    def is_controller(self, node):
        return self.controllers is None or node.node_id <= self.controllers

    def is_broker(self, node):
        return self.controllers is None or node.node_id > self.controllers

    def broker_nodes(self):
        return [n for n in self.nodes if self.is_broker(n)]

    def properties(self, node):
        """node's server.properties as an ordered dict, in Kafka's names."""
        props = {
            "process.roles": "broker,controller",
            "node.id": str(node.node_id),
            "controller.quorum.voters": self.voters,
            "listeners": f"PLAINTEXT://{node.host}:{node.port},CONTROLLER://{node.host}:{node.controller_port}",
            "advertised.listeners": f"PLAINTEXT://{node.host}:{node.advertised_port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(node.data_dir),
            "broker.session.timeout.ms": str(SESSION_TIMEOUT_MS),
            "broker.heartbeat.interval.ms": str(HEARTBEAT_INTERVAL_MS),
            "offsets.topic.replication.factor": str(min(3, self.size)),
            "transaction.state.log.replication.factor": str(min(3, self.size)),
            "transaction.state.log.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
        }
        if node.advertised_controller_port != node.controller_port and self.is_controller(node):
            # Proxied: the controller listener is reached at another address than it binds, which a combined or
            # controller node says in advertised.listeners (KIP-853; Annal checks the voters entry against it).
            props["advertised.listeners"] += f",CONTROLLER://{node.host}:{node.advertised_controller_port}"
        if not self.is_broker(node):
            props.update({"process.roles": "controller",
                          "listeners": f"CONTROLLER://{node.host}:{node.controller_port}",
                          "advertised.listeners": (f"CONTROLLER://{node.host}:{node.advertised_controller_port}"
                                                   if node.advertised_controller_port != node.controller_port
                                                   else None),
                          "inter.broker.listener.name": None,
                          "listener.security.protocol.map": "CONTROLLER:PLAINTEXT"})
        elif not self.is_controller(node):
            props.update({"process.roles": "broker", "listeners": f"PLAINTEXT://{node.host}:{node.port}"})
        props.update(self.overrides)
        return props

    def write_config(self, node, props=None, path=None):
        """Writes node's server.properties (or `props` to `path`) and returns the path."""
        path = Path(path or node.config_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        props = self.properties(node) if props is None else props
        lines = [f"# node {node.node_id} of {self.kind} cluster {self.cluster_id}, written by tests/interop/cluster.py"]
        lines += [f"{k}={v}" for k, v in props.items() if v is not None]
        path.write_text("\n".join(lines) + "\n")
        return path

    # ---------------------------------------------------------------- processes

    def classpath(self):
        if self._classpath is None:
            out = subprocess.run([str(KAFKA_SCRIPTS / "fetch.sh")], check=True, capture_output=True, text=True)
            self._classpath = Path(out.stdout.strip()).read_text().strip()
        return self._classpath

    def _java(self, main, *args):
        log4j = self.workdir / "log4j2.properties"
        if not log4j.exists():
            log4j.write_text(LOG4J2)
        return ["java", "-cp", self.classpath(), *KAFKA_JAVA_OPTS, "-Djava.awt.headless=true",
                f"-Dlog4j2.configurationFile={log4j}", main, *args]

    def command(self, node, config_path):
        if self.kind == "kafka":
            return self._java("kafka.Kafka", str(config_path))
        return [self.annal_bin, "serve", "--config", str(config_path), "--cluster-id", self.cluster_id]

    def format(self, nodes=None):
        """Kafka only: `StorageTool format` for every node not yet formatted (in parallel: each is a JVM start).
        A failed format is tried once more (one failure in about ten full runs was seen on the shared machine, its
        cause unrecorded); the first attempt's output stays in format.log.1 and both are in the error."""
        if self.kind != "kafka":
            return
        pending = [n for n in (nodes or self.nodes) if not (n.data_dir / "meta.properties").exists()]
        for attempt in (1, 2):
            running = []
            for node in pending:
                log = open(node.workdir / "format.log", "wb")
                cmd = self._java("kafka.tools.StorageTool", "format", "-t", self.cluster_id, "-c",
                                 str(node.config_path))
                running.append((node, log, subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                                            stdin=subprocess.DEVNULL)))
            pending = []
            for node, log, proc in running:
                rc = proc.wait(timeout=READY_TIMEOUT_S)
                log.close()
                if rc != 0:
                    pending.append(node)
                    if attempt == 1:
                        (node.workdir / "format.log").rename(node.workdir / "format.log.1")
                    else:
                        first = (node.workdir / "format.log.1").read_text(errors="replace")
                        second = (node.workdir / "format.log").read_text(errors="replace")
                        raise RuntimeError(f"kafka storage format of node {node.node_id} failed twice (last exit "
                                           f"{rc}):\n{first}\n---- second attempt:\n{second}")
            if not pending:
                return
            print(f"cluster.py: kafka storage format failed for nodes {[n.node_id for n in pending]}, retrying; "
                  f"first output: {(pending[0].workdir / 'format.log.1').read_text(errors='replace')[-2000:]}",
                  file=sys.stderr)

    def start(self, timeout=READY_TIMEOUT_S):
        """Writes every node's config, formats (Kafka), starts every node and waits until the cluster is ready."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        for node in self.nodes:
            self.write_config(node)
        self.format()
        for node in self.nodes:
            node.start()
        return self.wait_ready(timeout=timeout)

    def crashed_nodes(self):
        """Nodes whose process exited although the harness neither killed nor stopped it."""
        return [n for n in self.nodes if n.proc is not None and n.proc.poll() is not None]

    def heal(self, timeout=READY_TIMEOUT_S):
        """Resumes paused nodes, starts stopped ones, and waits until all N are ready again (between tests). A node
        that crashed on its own is restarted too, and then reported: an AssertionError with its exit code and log."""
        crashes = []
        for node in self.crashed_nodes():
            node._reap(timeout=1)
            crashes.append(f"node {node.node_id} exited with {node.returncode} on its own:\n{node.log_tail()}")
        for node in self.nodes:
            if node.paused:
                node.resume()
            if not node.alive():
                node.start()
        leader = self.wait_ready(timeout=timeout)
        assert not crashes, "\n".join(crashes)
        return leader

    def close(self):
        """Kills every node (SIGKILL: the test is over) and removes the work directory unless INTEROP_KEEP=1."""
        for node in self.nodes:
            try:
                node.kill()
            except AssertionError:
                pass
        remove_workdir(self.workdir)

    # ---------------------------------------------------------------- observation

    def failure_report(self, lines=25):
        """The last lines of every node's log, for assertion messages."""
        parts = [f"---- {n} log tail ({n.log_path}):\n{n.log_tail(lines)}" for n in self.nodes]
        return "\n".join(parts)

    def wait_until(self, what, probe, timeout, interval=0.2):
        return wait_until(what, probe, timeout, interval, describe_failure=self.failure_report)

    def _ready_view(self, expected_ids):
        """Every live node lists exactly `expected_ids` as brokers and names the same quorum leader; returns the
        quorum leader id then, else None."""
        leaders = set()
        for node in self.live_nodes():
            if not self.is_broker(node):
                continue  # a controller-only node serves no Metadata
            if set(node.metadata(topics=[])["brokers"]) != expected_ids:
                return None
            quorum = node.describe_quorum()
            if quorum["error"] != 0 or quorum["leader_id"] < 0:
                return None
            leaders.add(quorum["leader_id"])
        return leaders.pop() if len(leaders) == 1 else None

    def wait_ready(self, timeout=READY_TIMEOUT_S):
        """Waits until every running node answers Metadata listing every running broker (all registered and
        unfenced) and DescribeQuorum names one leader; returns that leader (the active controller) id."""
        expected = {n.node_id for n in self.broker_nodes() if n.proc is not None and not n.paused}

        def probe():
            for node in self.crashed_nodes():
                node._reap(timeout=1)
                # Not an AssertionError: wait_until retries those, and a dead node will not come back by itself.
                raise NodeExited(f"node {node.node_id} exited with {node.returncode} while the cluster was "
                                 f"forming:\n{node.log_tail()}")
            return self._ready_view(expected)

        return self.wait_until(f"cluster ready with brokers {sorted(expected)}", probe, timeout, interval=0.3)

    def active_controller(self, via=None):
        """The metadata quorum's leader id, asked of `via` (default: the first live node)."""
        node = via or self.live_nodes()[0]
        quorum = node.describe_quorum()
        assert quorum["error"] == 0, f"DescribeQuorum via node {node.node_id}: error {quorum['error']}"
        return quorum["leader_id"]

    def partition_leaders(self, topic, via):
        """{partition: leader id} for `topic` as node `via` sees it."""
        t = via.metadata(topics=[topic])["topics"].get(topic)
        assert t is not None and t["error"] == 0, f"topic {topic} via node {via.node_id}: {t}"
        return {p: info["leader"] for p, info in t["partitions"].items()}

    def wait_for_leaders(self, topic, partitions, via=None, timeout=30, allowed=None):
        """Waits until every live node (or `via`) shows `partitions` partitions of `topic`, each led by a live
        broker (from `allowed`, if given); returns the Metadata topic entry from the last node asked."""
        allowed = set(allowed or [n.node_id for n in self.live_nodes()])
        nodes = [via] if via else self.live_nodes()

        def probe():
            entry = None
            for node in nodes:
                entry = node.metadata(topics=[topic])["topics"].get(topic)
                if entry is None or entry["error"] != 0 or len(entry["partitions"]) != partitions:
                    return None
                if not all(p["leader"] in allowed for p in entry["partitions"].values()):
                    return None
            return entry

        return self.wait_until(f"{topic}: {partitions} partitions led by brokers {sorted(allowed)}", probe, timeout)


class HttpCluster(Cluster):
    """An Annal Cluster whose nodes each serve the HTTP listener on a port of their own."""

    def __init__(self, workdir, **kwargs):
        super().__init__(workdir, **kwargs)
        self.http = {n.node_id: f"127.0.0.1:{free_port()}" for n in self.nodes}

    def properties(self, node):
        props = super().properties(node)
        props["http.listen"] = self.http[node.node_id]
        return props


def running(workdir, **kwargs):
    """A started Cluster(workdir, **kwargs) for a pytest fixture: `yield from running(...)`. A cluster that fails
    to start is closed (its processes stopped) before the error propagates; one that started is closed after."""
    c = Cluster(workdir, **kwargs)
    try:
        c.start()
    except BaseException:
        c.close()
        raise
    try:
        yield c
    finally:
        c.close()


# ---------------------------------------------------------------- command line


def _state_path(workdir):
    return Path(workdir) / "cluster.json"


def _main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    start = sub.add_parser("start", help="start a cluster in DIR and wait until it is ready")
    start.add_argument("dir")
    start.add_argument("--nodes", type=int, default=3)
    start.add_argument("--base-port", type=int, default=None)
    stop = sub.add_parser("stop", help="stop the cluster started in DIR")
    stop.add_argument("dir")
    stop.add_argument("--kill", action="store_true", help="SIGKILL instead of SIGTERM")
    args = parser.parse_args(argv)

    if args.cmd == "start":
        if _state_path(args.dir).exists():
            parser.error(f"{_state_path(args.dir)} exists: a cluster may be running there; stop it first")
        cluster = Cluster(args.dir, size=args.nodes, base_port=args.base_port)
        try:
            began = time.monotonic()
            controller = cluster.start()
        except BaseException:
            for node in cluster.nodes:
                node.kill()
            raise
        _state_path(args.dir).write_text(json.dumps({
            "kind": cluster.kind, "cluster_id": cluster.cluster_id, "bootstrap": cluster.bootstrap,
            "nodes": [{"id": n.node_id, "pid": n.pid(), "port": n.port, "controller_port": n.controller_port}
                      for n in cluster.nodes]}, indent=2))
        print(f"{cluster.kind} cluster {cluster.cluster_id} ready in {time.monotonic() - began:.1f} s, "
              f"active controller {controller}", file=sys.stderr)
        print(f"bootstrap={cluster.bootstrap}")
        print(f"cluster_id={cluster.cluster_id}")
        print(f"controller={controller}")
        for n in cluster.nodes:
            print(f"node={n.node_id} {n.bootstrap} {n.pid()}")
        return 0

    state = json.loads(_state_path(args.dir).read_text())
    sig = signal.SIGKILL if args.kill else signal.SIGTERM
    pids = [n["pid"] for n in state["nodes"] if n["pid"]]
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while time.monotonic() < deadline and any(_pid_alive(p) for p in pids):
        time.sleep(0.2)
    alive = [p for p in pids if _pid_alive(p)]
    if alive:
        # Kafka's last node standing can wait a long time for a controlled shutdown that needs a quorum which the
        # others took with them: after the grace period the stragglers are killed.
        print(f"still running {STOP_TIMEOUT_S:.0f} s after SIGTERM (no quorum left to shut down through?): "
              f"pids {alive}; sending SIGKILL", file=sys.stderr)
        for pid in alive:
            os.kill(pid, signal.SIGKILL)
    _state_path(args.dir).unlink()
    return 0


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (our child only if started in this process, which the CLI never is) counts as gone.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
