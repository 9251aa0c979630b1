"""Issue 10's fault-injection scenarios: a 3-node cluster (cluster.py) under unchanged idempotent acks=all producers
(librdkafka, and Kafka's own VerifiableProducer) and consumers (librdkafka assign(), and in the coordinator scenario
a consumer group of a librdkafka member and Kafka's VerifiableConsumer), while faults.py crashes, pauses and
partitions nodes; then checker.py looks for Jepsen's queue anomalies in what the clients saw (lost acknowledged
records, changed offsets, duplicates, consumers going backwards or skipping, commits moving backwards).

Every scenario prints its seeded fault schedule (`FAULT_SEED` replays the choices; `pytest -s` shows it live, and
a failure shows it in the captured output and in the checker's message). Run against Apache Kafka 4.x too
(INTEROP_BROKER=kafka INTEROP_CLUSTER=1): there they must pass, which checks the checker and the scenarios.

Knobs (tests/interop/README.md): FAULT_SEED (base seed), FAULT_RUNS (each scenario N times, seeds FAULT_SEED,
FAULT_SEED+1, ...), FAULT_DURATION (extra seconds of load held around every fault; 0 by default, the CI budget),
FAULT_ALL=1 (also the scenarios kept out of the CI run, marked `long_only`; implied by FAULT_RUNS above 1).

Topics: 3 partitions, replication factor 3, min.insync.replicas=2. The cluster uses replica.lag.time.max.ms=4000
so that a cut-off follower leaves the ISR in seconds (Kafka's default is 30 s), and broker.session.timeout.ms=3000
(cluster.py).
"""

import os
import time

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

import kwire
from checker import History, assert_valid
from cluster import SESSION_TIMEOUT_MS, Cluster
from faults import BLACKHOLE, FaultSchedule, Faults, client_bootstrap, proxied, seed_from_env
from workload import (CkConsumer, CkGroupConsumer, CkProducer, JavaConsumer, JavaProducer, read_committed,
                      read_final)

pytestmark = [pytest.mark.cluster, pytest.mark.faults]

PARTITIONS = 3
MIN_ISR = 2
SESSION_S = SESSION_TIMEOUT_MS / 1000
LAG_TIME_MS = 4000
OVERRIDES = {"replica.lag.time.max.ms": str(LAG_TIME_MS), "offsets.topic.num.partitions": "6"}
FAULT_RUNS = int(os.environ.get("FAULT_RUNS", "1"))
FAULT_DURATION = float(os.environ.get("FAULT_DURATION", "0"))
BASE_SEED = seed_from_env()
# Bounds, in seconds, generous for Kafka's JVMs on a loaded 2-core machine (a restarted Kafka node takes 10-20 s).
ELECTION_BOUND_S = SESSION_S + 20  # a dead or paused leader fenced and another elected
ISR_BOUND_S = 90  # a restarted or healed follower caught up and back in the ISR
PROGRESS_BOUND_S = 120  # producers acknowledged again after a fault healed

runs = pytest.mark.parametrize("run", range(FAULT_RUNS), ids=lambda r: f"run{r}")
# Scenarios whose ground other tests already cover in the CI run (test_replication's refusal at two of three
# replicas down; the single failovers here and in test_elections) run only in the long mode (FAULT_ALL=1, or
# FAULT_RUNS above 1), to keep the suite inside its CI budget.
FAULT_ALL = os.environ.get("FAULT_ALL") == "1" or FAULT_RUNS > 1
long_only = pytest.mark.skipif(not FAULT_ALL, reason="long fault mode only: FAULT_ALL=1 (or FAULT_RUNS>1) runs it")


def _start(cluster):
    try:
        cluster.start()
    except BaseException:
        cluster.close()
        raise
    return cluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """3 combined nodes behind a LinkProxy each (so a test can cut links)."""
    c = Cluster(tmp_path_factory.mktemp("faults"), size=3, overrides=OVERRIDES)
    proxy = proxied(c)
    _start(c)
    yield c
    c.close()
    proxy.close()


@pytest.fixture(scope="module")
def split_cluster(tmp_path_factory):
    """A controller-only node (1) and three brokers (2, 3, 4): two brokers can die while the quorum lives."""
    c = Cluster(tmp_path_factory.mktemp("faults-split"), size=4, controllers=1, overrides=OVERRIDES)
    c.proxy = None
    _start(c)
    yield c
    c.close()


class Scenario:
    """One run: a topic, a workload writing into a History, the faults, and the final check."""

    def __init__(self, cluster, name, seed, topic, workdir):
        self.cluster = cluster
        self.schedule = FaultSchedule(name, seed)
        self.faults = Faults(cluster, self.schedule, getattr(cluster, "proxy", None))
        self.topic = topic
        self.workdir = str(workdir)
        self.history = History()
        self.producers = []
        self.consumers = []
        self.groups = []
        self.brokers = {n.node_id for n in cluster.broker_nodes()}

    # ------------------------------------------------------------ setup and observation

    def live_brokers(self):
        return [n for n in self.cluster.live_nodes() if n.node_id in self.brokers]

    def create_topic(self):
        via = self.live_brokers()[0]
        admin = AdminClient({"bootstrap.servers": via.bootstrap})
        fs = admin.create_topics([NewTopic(self.topic, num_partitions=PARTITIONS, replication_factor=3,
                                           config={"min.insync.replicas": str(MIN_ISR)})], operation_timeout=30)
        fs[self.topic].result(timeout=60)
        self.wait_isr_full()
        self.schedule.step(f"topic {self.topic}: {PARTITIONS} partitions, RF 3, min.insync.replicas={MIN_ISR}, "
                           f"leaders {self.leaders()}")

    def observers(self):
        """Live brokers that are not cut off: an isolated node keeps answering the harness (which reaches its real
        port) from its last, stale metadata, as a partitioned Kafka broker does."""
        return [n for n in self.live_brokers() if n.node_id not in self.faults.isolated]

    def view(self, partition, via=None):
        """The partition's Metadata entry as `via` (default: some live, connected broker) sees it, or None."""
        for node in ([via] if via else self.observers()):
            try:
                t = node.metadata(topics=[self.topic])["topics"].get(self.topic)
            except OSError:
                continue
            if t is not None and t["error"] == 0 and partition in t["partitions"]:
                return t["partitions"][partition]
        return None

    def leaders(self):
        return {p: (self.view(p) or {}).get("leader") for p in range(PARTITIONS)}

    def leader_of(self, partition):
        return self.cluster.wait_until(f"{self.topic}-{partition} has a leader",
                                       lambda: (v := self.view(partition)) and v["leader"] >= 0 and v["leader"],
                                       ELECTION_BOUND_S)

    def wait_leader(self, partition, allowed, what):
        allowed = set(allowed)
        got = self.cluster.wait_until(
            f"{self.topic}-{partition} led by one of {sorted(allowed)} ({what})",
            lambda: (v := self.view(partition)) and v["leader"] in allowed and v, ELECTION_BOUND_S)
        self.schedule.step(f"{self.topic}-{partition}: leader {got['leader']} epoch {got['leader_epoch']} "
                           f"ISR {sorted(got['isr'])}")
        return got["leader"]

    def wait_isr(self, partition, predicate, what, timeout=ISR_BOUND_S, via=None):
        def probe():
            v = self.view(partition, via)
            return v if v is not None and v["leader"] >= 0 and predicate(set(v["isr"])) else None

        got = self.cluster.wait_until(f"{self.topic}-{partition}: {what}", probe, timeout)
        self.schedule.step(f"{self.topic}-{partition}: ISR {sorted(got['isr'])} leader {got['leader']} ({what})")
        return got

    def wait_isr_full(self, timeout=ISR_BOUND_S):
        for p in range(PARTITIONS):
            self.cluster.wait_until(
                f"{self.topic}-{p}: ISR of 3 on every live broker",
                lambda p=p: all((v := self.view(p, n)) and len(v["isr"]) == 3 and v["leader"] >= 0
                                for n in self.live_brokers()),
                timeout)

    # ------------------------------------------------------------ workload

    def start_load(self, java=True, group=None):
        bootstrap = client_bootstrap(self.cluster)
        self.producers.append(CkProducer(self.history, bootstrap, self.topic, PARTITIONS).start())
        if java:
            self.producers.append(JavaProducer(self.history, bootstrap, self.topic, self.workdir))
        self.consumers.append(CkConsumer(self.history, bootstrap, self.topic, PARTITIONS).start())
        if group:
            self.groups.append(group)
            self.consumers.append(CkGroupConsumer(self.history, bootstrap, self.topic, group).start())
            self.consumers.append(JavaConsumer(self.history, bootstrap, self.topic, group, self.workdir))
        self.schedule.step(f"load: {[p.name for p in self.producers]} -> {self.topic}, consumers "
                           f"{[c.name for c in self.consumers]}" + (f" (group {group})" if group else ""))
        self.wait_progress("every producer running", n=10, timeout=90)

    def wait_progress(self, what, n=20, timeout=PROGRESS_BOUND_S):
        since = time.monotonic()
        self.cluster.wait_until(
            f"{what}: {n} new acknowledgements from every producer",
            lambda: all(p.count_since(since) >= n for p in self.producers) or self._producer_trouble(), timeout)
        self.schedule.step(f"progress: {what} ({', '.join(f'{p.name} {len(p.times)} acked' for p in self.producers)})")

    def _producer_trouble(self):
        """Raises (not retried by wait_until) when a producer died or reported a fatal error."""
        for p in self.producers:
            if getattr(p, "proc", None) is not None and p.proc.poll() is not None:
                raise RuntimeError(f"{p.name} exited with {p.proc.returncode}:\n{p.log_tail()}")
            if p.fatal:
                raise RuntimeError(f"{p.name} reported fatal errors: {p.fatal[:5]}")
        return False

    def hold(self, what, low, high):
        """Keeps the load running for a seeded while (plus FAULT_DURATION)."""
        seconds = self.schedule.sleep(what, low, high)
        if FAULT_DURATION:
            time.sleep(FAULT_DURATION)
        return seconds + FAULT_DURATION

    def acks_between(self, t0, t1):
        return [(p.name, a) for p in self.producers for a in p.between(t0, t1)]

    # ------------------------------------------------------------ the end

    def finish(self):
        """Heals everything, checks that writes go on, stops the load, reads the final log and checks the history."""
        self.faults.heal()
        self.wait_isr_full()
        self.wait_progress("after healing")
        self.schedule.step("stop the load")
        for p in self.producers:
            left = p.stop()
            if left:
                self.schedule.step(f"{p.name}: {left} deliveries still outstanding at the end (indeterminate)")
        time.sleep(1.0)  # the consumers catch up on the last records
        for c in self.consumers:
            c.stop()
        bootstrap = client_bootstrap(self.cluster)
        highs = read_final(self.history, bootstrap, self.topic, PARTITIONS)
        for group in self.groups:
            read_committed(self.history, bootstrap, self.topic, PARTITIONS, group)
        self.schedule.step(f"final log ends at {highs}; {self.history.summary()}")
        for p in self.producers:
            assert not p.fatal, f"{p.name} reported fatal errors: {p.fatal[:10]}\n{self.schedule.report()}"
        assert_valid(self.history, self.schedule)
        for c in self.consumers:
            assert c.delivered > 0, f"{c.name} delivered nothing\n{self.schedule.report()}"

    def close(self):
        for x in self.producers + self.consumers:
            try:
                x.stop()
            except Exception:  # noqa: BLE001 - already failing; the cluster still gets healed
                pass


@pytest.fixture
def scenario(request, cluster, topic_name, tmp_path):
    yield from _scenario(request, cluster, topic_name, tmp_path)


@pytest.fixture
def split_scenario(request, split_cluster, topic_name, tmp_path):
    yield from _scenario(request, split_cluster, topic_name, tmp_path)


def _scenario(request, cluster, topic_name, tmp_path):
    run = request.node.callspec.params.get("run", 0)
    cluster.heal()
    s = Scenario(cluster, request.node.originalname, BASE_SEED + run, topic_name, tmp_path)
    s.create_topic()
    try:
        yield s
    finally:
        s.close()
        s.faults.heal()


# ---------------------------------------------------------------- scenarios


@runs
def test_leader_kill9_under_load(scenario, run):
    s = scenario
    s.start_load()
    p = s.schedule.choice("partition", range(PARTITIONS))
    leader = s.leader_of(p)
    s.hold("load before the kill", 0.5, 2)
    s.faults.kill(leader)
    s.wait_leader(p, s.brokers - {leader}, "after kill -9 of the leader")
    s.wait_progress("writes go on without the old leader")
    s.hold("load with the old leader down", 0.5, 2)
    s.faults.restart(leader)
    s.finish()


@runs
def test_zombie_leader_paused_past_session_timeout(scenario, run):
    """SIGSTOP of a leader past broker.session.timeout.ms: the controller fences it and elects another; on SIGCONT
    the zombie still believes it leads, and answers whatever its sockets queued meanwhile. No acknowledged write
    may be lost, so nothing the zombie acknowledges may be something the new leader does not have."""
    s = scenario
    s.start_load()
    p = s.schedule.choice("partition", range(PARTITIONS))
    zombie = s.leader_of(p)
    s.hold("load before the pause", 0.5, 1.5)
    s.faults.pause(zombie)
    s.wait_leader(p, s.brokers - {zombie}, "after SIGSTOP of the leader, past the session timeout")
    s.wait_progress("writes go on at the new leader")
    s.hold("the zombie stays frozen", 0.5, SESSION_S)
    s.faults.resume(zombie)
    s.hold("the zombie is back", 1, 3)
    s.finish()


@runs
def test_isolated_follower_leaves_the_isr_and_rejoins(scenario, run):
    s = scenario
    s.start_load()
    p = s.schedule.choice("partition", range(PARTITIONS))
    leader = s.leader_of(p)
    follower = s.schedule.choice("follower to isolate", s.brokers - {leader})
    s.faults.isolate(follower, BLACKHOLE)
    view = s.wait_isr(p, lambda isr: follower not in isr and len(isr) >= MIN_ISR,
                      f"ISR shrank without isolated node {follower}",
                      timeout=LAG_TIME_MS / 1000 + ELECTION_BOUND_S)
    s.wait_progress(f"writes go on with ISR {sorted(view['isr'])}")
    s.hold("load with the follower isolated", 0.5, 2)
    s.faults.heal_network()
    s.wait_isr(p, lambda isr: follower in isr, f"node {follower} back in the ISR")
    s.finish()


@runs
def test_leader_partitioned_from_the_cluster_but_not_from_clients(scenario, run):
    """Jepsen's classic Kafka case: the leader loses the other nodes (followers and controllers) but clients still
    reach it and keep writing to it. It can neither replicate nor shrink its ISR through the controller, so it must
    acknowledge nothing; the controller fences it and elects a follower; on healing it truncates what it took."""
    s = scenario
    s.start_load()
    p = s.schedule.choice("partition", range(PARTITIONS))
    leader = s.leader_of(p)
    s.hold("load before the partition", 0.5, 1.5)
    s.faults.isolate(leader, BLACKHOLE, from_clients=False)
    s.wait_leader(p, s.brokers - {leader}, f"node {leader} cut off from the cluster")
    s.wait_progress("writes go on at the new leader")
    s.hold("the old leader still takes client writes", 1, SESSION_S)
    s.faults.heal_network()
    s.wait_isr(p, lambda isr: leader in isr, f"node {leader} back in the ISR")
    s.finish()


@long_only
@runs
def test_two_of_three_replicas_down_refuse_then_recover(split_scenario, run):
    """Brokers 2-4 (node 1 is the quorum, so it survives): two brokers die, the survivor's ISR shrinks to itself,
    acks=all is refused with NOT_ENOUGH_REPLICAS and nothing is acknowledged until they are back."""
    s = split_scenario
    s.start_load()
    survivor = s.schedule.choice("surviving broker", s.brokers)
    down = sorted(s.brokers - {survivor})
    for b in down:
        s.faults.kill(b)
    for p in range(PARTITIONS):
        s.wait_isr(p, lambda isr: isr == {survivor}, f"ISR is the survivor {survivor} alone",
                   timeout=ELECTION_BOUND_S, via=s.cluster.node(survivor))
    shrunk = time.monotonic()
    probe = ck.Producer({"bootstrap.servers": client_bootstrap(s.cluster), "acks": "all",
                         "enable.idempotence": False, "retries": 0, "message.timeout.ms": 15000})
    errors = []
    for p in range(PARTITIONS):
        probe.produce(s.topic, value=f"probe-{p}".encode(), partition=p, on_delivery=lambda e, m: errors.append(e))
        s.history.attempt(f"probe-{p}", "probe")
    probe.flush(30)
    s.schedule.step(f"probe (acks=all, no retries) answered {[str(e) for e in errors]}")
    refusals = (ck.KafkaError.NOT_ENOUGH_REPLICAS, ck.KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND)
    assert len(errors) == PARTITIONS and all(e is not None and e.code() in refusals for e in errors), (
        f"acks=all with an ISR of one: {errors}\n{s.schedule.report()}")
    s.hold("both down", 1, 3)
    ended = time.monotonic()
    # A reply sent just before the ISR shrank may still be on its way: half a second of grace.
    acked = s.acks_between(shrunk + 0.5, ended)
    assert not acked, f"acknowledged with an ISR of one: {acked[:10]}\n{s.schedule.report()}"
    for b in s.schedule.rng.sample(down, len(down)):
        s.faults.restart(b)
    s.finish()


@runs
def test_a_stale_replica_left_alone_is_not_elected(split_scenario, run):
    """KIP-966's "last replica standing": a broker dies and drops out of the ISR, writes go on with the other two
    (acknowledged at min.insync.replicas=2), then those two die as well and only the stale one comes back. Its log
    lacks acknowledged records, so with unclean.leader.election.enable=false it must lead nothing until an in-sync
    replica returns; then nothing acknowledged is lost."""
    s = split_scenario
    s.start_load()
    stale = s.schedule.choice("broker that falls behind", s.brokers)
    s.faults.kill(stale)
    for p in range(PARTITIONS):
        s.wait_isr(p, lambda isr: stale not in isr and len(isr) == 2, f"ISR without node {stale}",
                   timeout=ELECTION_BOUND_S)
    s.wait_progress(f"writes acknowledged without node {stale}", n=50)
    rest = sorted(s.brokers - {stale})
    for b in s.schedule.rng.sample(rest, len(rest)):
        s.faults.kill(b)
    s.hold("every broker down", 0.5, SESSION_S)
    s.faults.restart(stale)
    s.cluster.wait_until(f"node {stale} registered and serving Metadata",
                         lambda: s.view(0, s.cluster.node(stale)) is not None, ELECTION_BOUND_S)
    deadline = time.monotonic() + s.schedule.uniform("watch the stale replica alone (s)", SESSION_S + 2,
                                                      SESSION_S + 5)
    led = {}
    while time.monotonic() < deadline:
        for p in range(PARTITIONS):
            v = s.view(p, s.cluster.node(stale))
            if v is not None and v["leader"] == stale:
                led[p] = v
        time.sleep(0.2)
    s.schedule.step(f"node {stale} alone led {sorted(led)}")
    assert not led, (f"node {stale}, whose log lacks acknowledged records, was elected leader of {led} "
                     f"(unclean.leader.election.enable=false)\n{s.schedule.report()}")
    for b in s.schedule.rng.sample(rest, len(rest)):
        s.faults.restart(b)
    s.finish()


@long_only
@runs
def test_two_failovers_in_quick_succession(scenario, run):
    """kill -9 of a leader, then of its successor as soon as it leads (the first is restarting, not yet caught
    up): the third replica leads, writes wait until a second replica is in sync again, nothing acknowledged is
    lost."""
    s = scenario
    s.start_load()
    p = s.schedule.choice("partition", range(PARTITIONS))
    first = s.leader_of(p)
    s.hold("load before the first kill", 0.5, 1.5)
    s.faults.kill(first)
    second = s.wait_leader(p, s.brokers - {first}, "first failover")
    s.faults.restart(first)
    s.faults.kill(second)
    s.wait_leader(p, s.brokers - {second}, "second failover")
    s.wait_progress("writes go on after two failovers")
    s.faults.restart(second)
    s.finish()


@runs
def test_kill_every_node_and_restart(scenario, run):
    s = scenario
    s.start_load()
    s.hold("load before the crash", 0.5, 2)
    order = [n.node_id for n in s.cluster.nodes]
    s.schedule.rng.shuffle(order)
    s.faults.kill_all(order, gap_s=s.schedule.uniform("gap between kills (s)", 0, 0.5))
    s.hold("everything down", 0.5, 2)
    s.schedule.rng.shuffle(order)
    s.faults.restart_all(order)
    s.cluster.wait_ready()
    s.finish()


@runs
def test_zombie_group_coordinator(scenario, run):
    """SIGSTOP of a group's coordinator past the session timeout: another broker takes its __consumer_offsets
    partition over; on SIGCONT the zombie answers the commits its sockets queued. A commit may only be acknowledged
    once replicated, so none it acknowledges may be missing from the committed offsets read back at the end."""
    s = scenario
    group = f"g-{s.topic}"
    s.start_load(group=group)
    s.cluster.wait_until(f"group {group} committing", lambda: len(s.history.commits) >= 5, 90)
    zombie = s.cluster.wait_until(f"the coordinator of {group}", lambda: coordinator_of(s, group), 30)
    s.schedule.step(f"group {group}: coordinator is node {zombie}")
    s.hold("group running", 0.5, 1.5)
    s.faults.pause(zombie)
    moved = s.cluster.wait_until(f"a new coordinator of {group}",
                                 lambda: (c := coordinator_of(s, group)) not in (None, zombie) and c,
                                 ELECTION_BOUND_S + 30)
    s.schedule.step(f"group {group}: coordinator is now node {moved}")
    s.hold("the zombie coordinator stays frozen", 0.5, SESSION_S)
    s.faults.resume(zombie)
    before = len(s.history.commits)
    s.cluster.wait_until(f"group {group} commits again", lambda: len(s.history.commits) >= before + 5,
                         PROGRESS_BOUND_S)
    s.hold("the zombie is back", 1, 3)
    s.finish()


def coordinator_of(s, group):
    """The group's coordinator id as the first connected broker that knows one names it, else None."""
    for n in s.observers():
        try:
            error, node_id, _, _ = kwire.find_coordinator(n, group)
        except OSError:
            continue
        if error == 0 and node_id >= 0:
            return node_id
    return None


NEMESIS_STEPS = int(os.environ.get("FAULT_NEMESIS_STEPS", "3"))


@runs
def test_random_nemesis(scenario, run):
    """Jepsen's nemesis: a seeded sequence of faults (kill -9, SIGSTOP shorter or longer than the session timeout,
    a node blackholed, the leader cut off from the cluster but not from clients), one node at a time so that the
    quorum lives, each healed before the next; FAULT_NEMESIS_STEPS steps (3 by default, more in the long mode)."""
    s = scenario
    s.start_load()
    for step in range(NEMESIS_STEPS):
        p = s.schedule.choice(f"step {step}: partition", range(PARTITIONS))
        leader = s.leader_of(p)
        victim = s.schedule.choice(f"step {step}: node (its leader is {leader})", s.brokers)
        fault = s.schedule.choice(f"step {step}: fault", ["kill", "pause", "isolate", "cut-leader"])
        if fault == "kill":
            s.faults.kill(victim)
            s.hold("down", 0.5, SESSION_S + 2)
            s.faults.restart(victim)
        elif fault == "pause":
            s.faults.pause(victim)
            s.hold("paused", 0.5, SESSION_S * 2)
            s.faults.resume(victim)
        elif fault == "isolate":
            s.faults.isolate(victim, BLACKHOLE)
            s.hold("isolated", 0.5, SESSION_S * 2)
            s.faults.heal_network()
        else:
            s.faults.isolate(leader, BLACKHOLE, from_clients=False)
            s.hold("leader cut off", 0.5, SESSION_S * 2)
            s.faults.heal_network()
        s.faults.heal()
        s.wait_isr_full()
        s.wait_progress(f"step {step} healed")
    s.finish()


@runs
def test_group_coordinator_killed_during_a_group_run(scenario, run):
    """A consumer group of a librdkafka member and Kafka's VerifiableConsumer, committing after every batch; kill -9
    of the group's coordinator: another broker coordinates, commits go on, none moves backwards."""
    s = scenario
    group = f"g-{s.topic}"
    s.start_load(group=group)
    commits_before = s.cluster.wait_until(f"group {group} committing", lambda: len(s.history.commits) >= 5 and
                                          len(s.history.commits), 90)

    def coordinator():
        for n in s.live_brokers():
            error, node_id, _, _ = kwire.find_coordinator(n, group)
            if error == 0 and node_id >= 0:
                return node_id
        return None

    victim = s.cluster.wait_until(f"the coordinator of {group}", coordinator, 30)
    s.schedule.step(f"group {group}: coordinator is node {victim}, {commits_before} commits so far")
    s.hold("group running", 0.5, 2)
    s.faults.kill(victim)
    moved = s.cluster.wait_until(f"a new coordinator of {group}",
                                 lambda: (c := coordinator()) not in (None, victim) and c, ELECTION_BOUND_S + 30)
    s.schedule.step(f"group {group}: coordinator is now node {moved}")
    before = len(s.history.commits)
    s.cluster.wait_until(f"group {group} commits again after the coordinator died",
                         lambda: len(s.history.commits) >= before + 5, PROGRESS_BOUND_S)
    s.schedule.step(f"group {group}: {len(s.history.commits) - before} commits acknowledged by the new coordinator")
    s.hold("group running on the new coordinator", 0.5, 2)
    s.faults.restart(victim)
    s.finish()

