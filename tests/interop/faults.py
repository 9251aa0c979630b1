"""Fault injection for the cluster tests (issue 10's "Proof"): crashes, pauses, restarts and network partitions of
the nodes of a cluster.py cluster, driven by a seeded schedule that prints every step so that a failure replays.

Faults, on real processes and loopback:
- kill -9 of a node (`Faults.kill`), every node (`kill_all`), and restarts (`restart`, `restart_all`);
- SIGSTOP / SIGCONT (`pause` / `resume`): a frozen node keeps its sockets, misses its heartbeats and comes back
  believing what it believed before (a zombie leader, once it was paused past broker.session.timeout.ms);
- network partitions through `LinkProxy`, a TCP proxy in front of every listener of every node (below).

Why a proxy and not network namespaces: iptables and tc do not work on this machine, so a namespace per node could
only be cut off whole, by taking its veth link down, and needs a bridge, root and `ip netns exec` around each
broker (for Kafka's JVM too). A proxy needs none of that, works the same for both brokers, and cuts single
directed links: follower -> leader only, or a node from clients but not from the quorum. Its cost: every byte is
copied once more by this Python process (the workloads here are small), and a blackholed connection is reset when
the partition heals, as a TCP connection whose peer stayed silent too long would be (bytes were thrown away, so the
stream cannot resume).

How the proxy knows who connects: every node advertises its proxy's ports (advertised.listeners, and
controller.quorum.voters for the controller listener; cluster.py's Node.advertised_port), so replica fetchers,
heartbeats, Raft and clients all go through it. Everything is 127.0.0.1, so the proxy finds the process that owns
the connecting socket: the socket's inode from /proc/net/tcp (or /proc/net/tcp6: Java connects IPv6 sockets to
::ffff:127.0.0.1), then the node process holding that inode in /proc/PID/fd. A connection from no node process is a client ("client"). The harness's own observations (kwire.py
via Node.bootstrap) go straight to the nodes' real ports and are never cut.

Seeds: `FAULT_SEED` (default: random) seeds every choice a scenario makes (which node, which partition, how long
to wait); the seed and every step are printed with a timestamp relative to the start. Re-running with the printed
seed makes the same choices (the cluster's own timing still varies).
"""

import asyncio
import os
import random
import socket
import sys
import threading
import time

from cluster import HOST

CLIENT = "client"
DROP = "drop"  # connections are reset and new ones refused: a peer that is down or a firewall that rejects
BLACKHOLE = "blackhole"  # bytes are swallowed both ways, connections stay open: a partition (packets lost)
_CHUNK = 64 * 1024


def seed_from_env():
    """FAULT_SEED, or a fresh random seed (printed by FaultSchedule, so the run can be replayed)."""
    text = os.environ.get("FAULT_SEED")
    return int(text) if text else random.SystemRandom().randrange(1, 2**31)


class FaultSchedule:
    """A seeded random source whose every use is printed: `step()` prints what is done now, `choice()`/`uniform()`
    print what was chosen. The printout starts with the seed and how to replay it."""

    def __init__(self, name, seed=None):
        self.name = name
        self.seed = seed_from_env() if seed is None else seed
        self.rng = random.Random(self.seed)
        self.started = time.monotonic()
        self.steps = []
        self.step(f"schedule {name}: FAULT_SEED={self.seed} (replay: FAULT_SEED={self.seed} pytest -k {name})")

    def step(self, what):
        line = f"[faults {self.name} +{time.monotonic() - self.started:6.2f}s] {what}"
        self.steps.append(line)
        print(line, flush=True)

    def choice(self, what, options):
        options = sorted(options)
        got = self.rng.choice(options)
        self.step(f"choose {what}: {got} of {options}")
        return got

    def uniform(self, what, low, high):
        got = round(self.rng.uniform(low, high), 2)
        self.step(f"choose {what}: {got}")
        return got

    def sleep(self, what, low, high):
        seconds = self.uniform(f"{what} (s)", low, high)
        time.sleep(seconds)
        return seconds

    def report(self):
        return "\n".join(self.steps)


class _Link:
    """One proxied connection: src (node id or CLIENT) -> dst (node id)."""

    def __init__(self, src, dst, client_writer):
        self.src = src
        self.dst = dst
        self.client_writer = client_writer
        self.upstream_writer = None
        self.blackholed = False

    def abort(self):
        for w in (self.client_writer, self.upstream_writer):
            if w is not None:
                w.transport.abort()  # RST: the peer sees the connection fail at once


class LinkProxy:
    """TCP proxies in front of node listeners, on an asyncio loop of their own (a daemon thread), with rules per
    directed link (src, dst): pass, DROP or BLACKHOLE. `owners()` returns {pid: node id} of the running nodes."""

    def __init__(self, owners):
        self.owners = owners
        self.rules = {}  # (src, dst) -> DROP | BLACKHOLE
        self.links = set()
        self.counts = {"accepted": 0, "dropped": 0, "blackholed": 0}
        self._lock = threading.Lock()
        self._servers = []
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="fault-proxy", daemon=True)
        self._thread.start()

    def _call(self, coro, timeout=10):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def listen(self, dst, target_port):
        """A proxy for node `dst`'s listener at target_port; returns the proxy's port."""

        async def start():
            server = await asyncio.start_server(
                lambda r, w: self._serve(dst, target_port, r, w), HOST, 0, reuse_address=True)
            self._servers.append(server)
            return server.sockets[0].getsockname()[1]

        return self._call(start())

    # ------------------------------------------------------------ rules

    def set_rule(self, src, dst, mode):
        """Cuts the directed link src -> dst (new and existing connections) with `mode` (DROP or BLACKHOLE)."""
        assert mode in (DROP, BLACKHOLE)
        with self._lock:
            self.rules[(src, dst)] = mode
            hit = [link for link in self.links if (link.src, link.dst) == (src, dst)]
        self.loop.call_soon_threadsafe(self._apply, hit, mode)

    def _apply(self, links, mode):
        for link in links:
            if mode == DROP:
                link.abort()
            else:
                link.blackholed = True

    def clear(self):
        """Heals every link; connections that were blackholed are reset (their lost bytes broke the stream)."""
        with self._lock:
            self.rules.clear()
            broken = [link for link in self.links if link.blackholed]
        self.loop.call_soon_threadsafe(lambda: [link.abort() for link in broken])

    def sources(self):
        """{src: number of open connections} over the links open now."""
        with self._lock:
            out = {}
            for link in self.links:
                out[link.src] = out.get(link.src, 0) + 1
            return out

    def rule(self, src, dst):
        with self._lock:
            return self.rules.get((src, dst))

    def close(self):
        async def stop():
            for s in self._servers:
                s.close()
            for link in list(self.links):
                link.abort()

        try:
            self._call(stop())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)

    # ------------------------------------------------------------ forwarding

    def _owner(self, peer_port, listen_port):
        """The node id owning the client end of a connection from 127.0.0.1:peer_port to our listen_port, else
        CLIENT."""
        inode = _socket_inode(peer_port, listen_port)
        if inode is None:
            return CLIENT
        wanted = f"socket:[{inode}]"
        for pid, node_id in self.owners().items():
            try:
                fds = os.listdir(f"/proc/{pid}/fd")
            except OSError:
                continue
            for fd in fds:
                try:
                    if os.readlink(f"/proc/{pid}/fd/{fd}") == wanted:
                        return node_id
                except OSError:
                    continue
        return CLIENT

    async def _serve(self, dst, target_port, reader, writer):
        peer_port = writer.get_extra_info("peername")[1]
        listen_port = writer.get_extra_info("sockname")[1]
        src = self._owner(peer_port, listen_port)
        link = _Link(src, dst, writer)
        mode = None if src == dst else self.rule(src, dst)
        self.counts["accepted"] += 1
        if mode == DROP:
            self.counts["dropped"] += 1
            writer.transport.abort()
            return
        with self._lock:
            self.links.add(link)
        try:
            if mode == BLACKHOLE:
                self.counts["blackholed"] += 1
                link.blackholed = True
                while await reader.read(_CHUNK):
                    pass
                return
            try:
                up_reader, up_writer = await asyncio.open_connection(HOST, target_port)
            except OSError:
                writer.transport.abort()  # the node is down: the client sees what it would see without us
                return
            link.upstream_writer = up_writer
            await asyncio.gather(self._pump(link, reader, up_writer), self._pump(link, up_reader, writer),
                                 return_exceptions=True)
        finally:
            with self._lock:
                self.links.discard(link)
            link.abort()

    async def _pump(self, link, reader, writer):
        try:
            while True:
                data = await reader.read(_CHUNK)
                if not data:
                    break
                if link.blackholed:
                    continue
                writer.write(data)
                await writer.drain()
        finally:
            link.abort()  # one side ended: end both, as a direct connection would


def _socket_inode(local_port, remote_port):
    """The inode of the socket 127.0.0.1:local_port -> 127.0.0.1:remote_port: an IPv4 socket in /proc/net/tcp, or
    (Java's default) an IPv6 socket connected to the IPv4-mapped ::ffff:127.0.0.1 in /proc/net/tcp6."""
    for table, host in (("/proc/net/tcp", "0100007F"), ("/proc/net/tcp6", "0000000000000000FFFF00000100007F")):
        want_local = f"{host}:{local_port:04X}"
        want_remote = f"{host}:{remote_port:04X}"
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    cols = line.split()
                    if len(cols) > 9 and cols[1] == want_local and cols[2] == want_remote:
                        return cols[9]
        except OSError:
            continue
    return None


class Faults:
    """The faults a scenario applies to a cluster.py Cluster, each printed through the schedule."""

    def __init__(self, cluster, schedule, proxy=None):
        self.cluster = cluster
        self.schedule = schedule
        self.proxy = proxy
        self.isolated = set()  # node ids cut off by isolate(): their view of the cluster is stale

    def _say(self, what):
        self.schedule.step(what)

    def kill(self, node_id):
        self._say(f"kill -9 node {node_id}")
        self.cluster.node(node_id).kill()

    def pause(self, node_id):
        self._say(f"SIGSTOP node {node_id}")
        self.cluster.node(node_id).pause()

    def resume(self, node_id):
        self._say(f"SIGCONT node {node_id}")
        self.cluster.node(node_id).resume()

    def restart(self, node_id):
        """Starts a node that was killed (or kills and starts one that runs)."""
        node = self.cluster.node(node_id)
        if node.alive():
            self._say(f"kill -9 node {node_id} (for a restart)")
            node.kill()
        self._say(f"start node {node_id}")
        node.start()

    def kill_all(self, order=None, gap_s=0.0):
        order = order or [n.node_id for n in self.cluster.nodes]
        for i, node_id in enumerate(order):
            self.kill(node_id)
            if gap_s and i + 1 < len(order):
                time.sleep(gap_s)

    def restart_all(self, order=None):
        for node_id in order or [n.node_id for n in self.cluster.nodes]:
            if not self.cluster.node(node_id).alive():
                self._say(f"start node {node_id}")
                self.cluster.node(node_id).start()

    def isolate(self, node_id, mode=BLACKHOLE, from_clients=True):
        """Cuts every link to and from node_id (the other nodes; clients too unless from_clients=False)."""
        assert self.proxy is not None, "isolate needs a proxied cluster (faults.proxied_cluster)"
        peers = [n.node_id for n in self.cluster.nodes if n.node_id != node_id]
        if from_clients:
            peers.append(CLIENT)
        # If the proxy could not tell this node's own connections from clients', cutting "its" links would cut
        # only half of them (a harness bug that looks like a broker bug): it must have seen some.
        outgoing = self.proxy.sources()
        assert node_id in outgoing, (f"the proxy attributes no open connection to node {node_id} (sources seen: "
                                     f"{outgoing}); its peer identification is broken")
        self._say(f"isolate node {node_id} ({mode}) from {peers}")
        self.isolated.add(node_id)
        for peer in peers:
            self.proxy.set_rule(peer, node_id, mode)
            if peer != CLIENT:
                self.proxy.set_rule(node_id, peer, mode)

    def cut(self, src, dst, mode=BLACKHOLE):
        assert self.proxy is not None, "cut needs a proxied cluster (faults.proxied_cluster)"
        self._say(f"cut link {src} -> {dst} ({mode})")
        self.proxy.set_rule(src, dst, mode)

    def heal_network(self):
        if self.proxy is not None:
            self._say("heal the network (every link passes; blackholed connections are reset)")
            self.proxy.clear()
        self.isolated.clear()

    def heal(self):
        """Network healed, paused nodes resumed, dead ones started; waits until the cluster is ready."""
        self.heal_network()
        self._say("heal: resume paused nodes, start stopped ones, wait until the cluster is ready")
        self.cluster.heal()
        self._say("cluster ready")


def proxied(cluster):
    """Puts a LinkProxy in front of both listeners of every node of a not yet started cluster; returns it. Clients
    then bootstrap with `client_bootstrap(cluster)`."""
    proxy = LinkProxy(lambda: {n.pid(): n.node_id for n in cluster.nodes if n.alive()})
    for node in cluster.nodes:
        node.advertised_port = proxy.listen(node.node_id, node.port)
        node.advertised_controller_port = proxy.listen(node.node_id, node.controller_port)
    cluster.proxy = proxy
    return proxy


def client_bootstrap(cluster):
    """bootstrap.servers for clients: every broker at the address it advertises (its proxy, if there is one)."""
    return ",".join(f"{n.host}:{n.advertised_port}" for n in cluster.broker_nodes())


def _closed(sock):
    try:
        return sock.recv(10) == b""
    except ConnectionResetError:
        return True


def _selftest():
    """python3 faults.py: a proxy in front of a local echo server, cut and healed."""
    echo = socket.create_server((HOST, 0))
    port = echo.getsockname()[1]

    def serve():
        while True:
            c, _ = echo.accept()
            threading.Thread(target=lambda c=c: [c.sendall(d) for d in iter(lambda: c.recv(100), b"")],
                             daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    proxy = LinkProxy(lambda: {})
    p = proxy.listen(1, port)
    s = socket.create_connection((HOST, p), timeout=2)
    s.sendall(b"hi")
    assert s.recv(10) == b"hi"
    proxy.set_rule(CLIENT, 1, BLACKHOLE)
    time.sleep(0.1)
    s.sendall(b"lost")
    s.settimeout(0.5)
    try:
        got = s.recv(10)
        raise AssertionError(f"blackholed link passed {got!r}")
    except socket.timeout:
        pass
    proxy.clear()
    time.sleep(0.1)
    assert _closed(s), "a blackholed connection is reset on heal"
    s = socket.create_connection((HOST, p), timeout=2)
    s.sendall(b"back")
    assert s.recv(10) == b"back"
    proxy.set_rule(CLIENT, 1, DROP)
    time.sleep(0.1)
    s2 = socket.create_connection((HOST, p), timeout=2)
    assert _closed(s2), "a dropped link refuses new connections"
    print("faults.py self-test passed", proxy.counts)
    proxy.close()


if __name__ == "__main__":
    sys.exit(_selftest())
