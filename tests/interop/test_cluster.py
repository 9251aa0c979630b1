"""Issue 9's proof: a real 3-node cluster (each node from its own server.properties, cluster.py) driven by unchanged
clients bootstrapped to ONE node. Every assertion is true of Apache Kafka 4.x (INTEROP_BROKER=kafka) and must become
true of `annal serve` nodes; where Kafka's replication makes more true (leaders fail over), the tests assert only
what also holds for a broker whose partitions have a single in-sync replica (Annal until issue 10).

Kafka facts the tests encode:
- In KRaft, Metadata's and DescribeCluster's controller id is a random live broker (clients send controller-bound
  requests to any broker, which forwards them), so it may differ per response. The active controller is the
  metadata quorum's leader: DescribeQuorum, which every broker forwards to the controller.
- Metadata lists registered, unfenced brokers only: a fenced broker drops out of it.
- A partition whose only in-sync replica is fenced or shut down has no leader (-1); it is elected again when that
  broker is unfenced.
"""

import threading
import time

import confluent_kafka as ck
from confluent_kafka.admin import AdminClient, NewTopic
import kafka
import kafka.admin
import pytest

import kwire
from cluster import REFUSAL_TIMEOUT_S, SESSION_TIMEOUT_MS, Cluster
from clients import ck_consume, ck_produce_all, ck_producer, kp_consume, kp_producer

pytestmark = pytest.mark.cluster

SIZE = 3
ALL_IDS = set(range(1, SIZE + 1))
# Bounds, in seconds, on what the tests wait for. Kafka meets each with room to spare on a loaded 2-core machine.
ELECTION_BOUND_S = 15  # a new active controller after the old one is killed
FENCE_BOUND_S = SESSION_TIMEOUT_MS / 1000 + 12  # a frozen broker fenced and its leaderships moved
UNFENCE_BOUND_S = 30  # a resumed broker unfenced and leading again
PROPAGATION_BOUND_S = 15  # a committed metadata change visible on every live broker


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("cluster"), size=SIZE)
    began = time.monotonic()
    try:
        c.start()
    except BaseException:
        c.close()
        raise
    print(f"{c.kind} cluster of {SIZE} ready in {time.monotonic() - began:.1f} s")
    yield c
    c.close()


@pytest.fixture
def healthy(cluster):
    """The shared cluster with all nodes running, ready, before (and repaired after) a test that breaks a node."""
    cluster.heal()
    yield cluster
    cluster.heal()


def admin_via(node):
    return AdminClient({"bootstrap.servers": node.bootstrap})


def create_topic_via(node, name, partitions, replication_factor, config=None):
    admin = admin_via(node)  # keep the reference alive until the future resolves
    fs = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=replication_factor,
                                       config=config or {})], operation_timeout=30)
    fs[name].result(timeout=60)


def non_controllers(cluster):
    controller = cluster.active_controller()
    return [n for n in cluster.nodes if n.node_id != controller], controller


# ---------------------------------------------------------------- formation


def test_formation_every_node_sees_the_whole_cluster(healthy):
    c = healthy
    quorum_leaders = set()
    for node in c.nodes:
        md = node.metadata(topics=[])
        assert md["brokers"] == {n.node_id: (n.host, n.port, None) for n in c.nodes}, f"Metadata via {node}"
        assert md["cluster_id"] == c.cluster_id, f"Metadata via {node}"
        assert md["controller_id"] in ALL_IDS, f"Metadata via {node}: controller {md['controller_id']}"

        dc = node.describe_cluster()
        assert dc["error"] == 0, f"DescribeCluster via {node}: {dc}"
        assert dc["cluster_id"] == c.cluster_id
        assert dc["brokers"] == md["brokers"], f"DescribeCluster via {node}"
        assert dc["controller_id"] in ALL_IDS

        quorum = node.describe_quorum()
        assert quorum["error"] == 0, f"DescribeQuorum via {node}: {quorum}"
        assert sorted(quorum["voters"]) == sorted(ALL_IDS), f"DescribeQuorum via {node}: {quorum}"
        assert quorum["leader_epoch"] >= 1
        quorum_leaders.add(quorum["leader_id"])
    assert len(quorum_leaders) == 1 and quorum_leaders <= ALL_IDS, f"nodes disagree on the leader: {quorum_leaders}"

    # Unchanged clients bootstrapped to one node learn all three brokers and the same cluster id.
    md = admin_via(c.node(1)).list_topics(timeout=30)
    assert {b.id for b in md.brokers.values()} == ALL_IDS
    assert md.cluster_id == c.cluster_id
    admin = admin_via(c.node(2))  # keep the reference: a collected AdminClient fails its pending futures
    described = admin.describe_cluster().result(timeout=30)
    assert {n.id for n in described.nodes} == ALL_IDS and described.cluster_id == c.cluster_id
    kp = kafka.admin.KafkaAdminClient(bootstrap_servers=c.node(3).bootstrap)
    try:
        kp_view = kp.describe_cluster()
        assert {b["broker_id"] for b in kp_view["brokers"]} == ALL_IDS
        assert kp_view["cluster_id"] == c.cluster_id
    finally:
        kp.close()


def test_topic_created_through_one_node_is_the_same_on_all(healthy, topic_name):
    c = healthy
    create_topic_via(c.node(1), topic_name, partitions=6, replication_factor=3)
    c.wait_for_leaders(topic_name, 6)

    def same_view_everywhere():
        views = [n.metadata(topics=[topic_name])["topics"][topic_name]["partitions"] for n in c.nodes]
        shape = [{p: (v["leader"], v["leader_epoch"], v["replicas"]) for p, v in view.items()} for view in views]
        return views[0] if all(s == shape[0] for s in shape) else None

    view = c.wait_until(f"{topic_name}: the same leaders, epochs and replicas on every node", same_view_everywhere,
                        PROPAGATION_BOUND_S)
    leaders = {}
    for p, info in view.items():
        assert info["error"] == 0, f"partition {p}: {info}"
        assert sorted(info["replicas"]) == sorted(ALL_IDS), f"partition {p}: RF 3 over 3 brokers: {info}"
        assert info["leader"] in info["replicas"] and info["leader"] in info["isr"], f"partition {p}: {info}"
        assert set(info["isr"]) <= set(info["replicas"]), f"partition {p}: {info}"
        leaders[info["leader"]] = leaders.get(info["leader"], 0) + 1
    # Kafka places leaders round robin: 6 partitions over 3 brokers is 2 each.
    assert leaders == {i: 2 for i in ALL_IDS}, f"leaders not balanced: {leaders}"

    # kafka-python bootstrapped to the third node agrees.
    kp = kafka.admin.KafkaAdminClient(bootstrap_servers=c.node(3).bootstrap)
    try:
        (described,) = kp.describe_topics([topic_name])
        got = {p["partition_index"]: (p["leader_id"], sorted(p["replica_nodes"])) for p in described["partitions"]}
        assert got == {p: (v["leader"], sorted(v["replicas"])) for p, v in view.items()}
    finally:
        kp.close()

    # A replication factor above the number of brokers is refused, through any node.
    with pytest.raises(ck.KafkaException) as refused:
        create_topic_via(c.node(2), topic_name + "-rf4", partitions=1, replication_factor=4)
    assert refused.value.args[0].code() == ck.KafkaError.INVALID_REPLICATION_FACTOR


def test_a_produce_to_a_follower_names_the_leader(healthy, topic_name):
    """KIP-951: NOT_LEADER_OR_FOLLOWER carries the current leader and its endpoint, so the client need not ask
    Metadata where the partition went."""
    c = healthy
    create_topic_via(c.node(1), topic_name, partitions=1, replication_factor=2)
    c.wait_for_leaders(topic_name, 1)
    info = c.node(1).metadata(topics=[topic_name])["topics"][topic_name]["partitions"][0]
    leader = c.node(info["leader"])
    other = next(n for n in c.nodes if n.node_id != info["leader"])
    got = kwire.produce_with_hints(other, topic_name, 0)
    assert got["error"] == 6, got  # NOT_LEADER_OR_FOLLOWER
    assert got["current_leader"] == (info["leader"], info["leader_epoch"]), got
    assert got["node_endpoints"] == {leader.node_id: (leader.host, leader.port)}, got
    # The leader itself takes the record.
    assert kwire.produce_with_hints(leader, topic_name, 0)["error"] == 0


def test_produce_through_one_node_consume_through_another(healthy, topic_name):
    c = healthy
    partitions, per_partition = 6, 100
    create_topic_via(c.node(2), topic_name, partitions=partitions, replication_factor=3)
    c.wait_for_leaders(topic_name, partitions)

    # acks=1: until Annal replicates (issue 10) its ISR is the leader alone, and acks=all means the same thing then.
    producer = ck_producer(c.node(1), **{"acks": "1", "linger.ms": 5, "enable.idempotence": False})
    expected = {}
    for p in range(partitions):
        records = [(b"k%d" % i, b"ck-p%d-%d" % (p, i), None, None) for i in range(per_partition)]
        reports = ck_produce_all(producer, topic_name, records, partition=p)
        expected[p] = [(r.offset(), r.value()) for r in reports]
    kp = kp_producer(c.node(3), acks=1)
    try:
        sends = [(p, b"kp-p%d-%d" % (p, i)) for p in range(partitions) for i in range(per_partition)]
        futures = [(p, value, kp.send(topic_name, value=value, partition=p)) for p, value in sends]
        kp.flush(timeout=30)
        for p, value, f in futures:
            expected[p].append((f.get(timeout=30).offset, value))
    finally:
        kp.close()

    for p in range(partitions):
        offsets = [o for o, _ in expected[p]]
        assert offsets == list(range(2 * per_partition)), f"partition {p}: acknowledged offsets {offsets[:5]}..."
        got = ck_consume(c.node(3), topic_name, [p], 2 * per_partition)
        assert [(m.offset(), m.value()) for m in got] == expected[p], f"partition {p} via node 3 (librdkafka)"
        got = kp_consume(c.node(2), topic_name, [p], 2 * per_partition)
        assert [(r.offset, r.value) for r in got] == expected[p], f"partition {p} via node 2 (kafka-python)"


# ---------------------------------------------------------------- failures


def test_controller_kill9_elects_a_new_controller_and_admin_works(healthy, topic_name):
    c = healthy
    old = c.active_controller()
    victim = c.node(old)
    survivors = c.other_nodes(victim)
    victim.kill()
    killed_at = time.monotonic()

    def new_leader_agreed():
        leaders = {n.describe_quorum()["leader_id"] for n in survivors}
        leader = leaders.pop() if len(leaders) == 1 else -1
        return leader if leader in {n.node_id for n in survivors} else None

    new = c.wait_until(f"a new active controller after killing controller {old}", new_leader_agreed,
                       ELECTION_BOUND_S)
    elected_s = time.monotonic() - killed_at
    assert new != old

    # The dead broker's lease lapses: it drops out of Metadata on every survivor.
    c.wait_until(f"killed broker {old} fenced (out of Metadata)",
                 lambda: all(old not in n.metadata(topics=[])["brokers"] for n in survivors), FENCE_BOUND_S)

    # Admin through a surviving node that is not the new controller (so the request must reach it), with RF 2:
    # only two brokers are alive.
    via = next((n for n in survivors if n.node_id != new), survivors[0])
    create_topic_via(via, topic_name, partitions=3, replication_factor=2)
    c.wait_for_leaders(topic_name, 3, allowed={n.node_id for n in survivors})
    for node in survivors:
        for p, info in node.metadata(topics=[topic_name])["topics"][topic_name]["partitions"].items():
            assert set(info["replicas"]) <= {n.node_id for n in survivors}, f"partition {p} via {node}: {info}"
    admin = admin_via(via)
    admin.delete_topics([topic_name], operation_timeout=30)[topic_name].result(timeout=60)
    print(f"new controller {new} elected {elected_s:.1f} s after kill -9 of {old}")

    # The killed node comes back (from its data) and rejoins as a broker and a voter.
    victim.start()
    c.wait_ready()
    assert old in c.node(new).metadata(topics=[])["brokers"]


def test_sigstop_past_session_timeout_fences_and_sigcont_unfences(healthy, topic_name):
    c = healthy
    candidates, controller = non_controllers(c)
    victim = candidates[-1]
    watcher = next(n for n in c.nodes if n is not victim)
    rf1, rf3 = topic_name + "-rf1", topic_name + "-rf3"
    create_topic_via(watcher, rf1, partitions=6, replication_factor=1)
    create_topic_via(watcher, rf3, partitions=6, replication_factor=3)
    c.wait_for_leaders(rf1, 6)
    c.wait_for_leaders(rf3, 6)
    rf1_on_victim = sorted(p for p, leader in c.partition_leaders(rf1, watcher).items() if leader == victim.node_id)
    rf3_on_victim = sorted(p for p, leader in c.partition_leaders(rf3, watcher).items() if leader == victim.node_id)
    assert rf1_on_victim and rf3_on_victim, "placement gave the victim no leadership to lose"
    others = c.other_nodes(victim)

    victim.pause()
    paused_at = time.monotonic()

    def fenced_everywhere():
        for node in others:
            md = node.metadata(topics=[rf1, rf3])
            if victim.node_id in md["brokers"]:
                return None
            if any(md["topics"][t]["partitions"][p]["leader"] == victim.node_id
                   for t, ps in ((rf1, rf1_on_victim), (rf3, rf3_on_victim)) for p in ps):
                return None
        return md

    md = c.wait_until(f"broker {victim.node_id} fenced after SIGSTOP", fenced_everywhere, FENCE_BOUND_S)
    fenced_s = time.monotonic() - paused_at
    # A lease, not a reaction to a dropped connection (SIGSTOP drops none): not fenced before it can have lapsed
    # (the last heartbeat may precede the pause by one heartbeat interval).
    assert fenced_s >= (SESSION_TIMEOUT_MS - 1000) / 1000, f"fenced after {fenced_s:.1f} s, before the lease lapsed"
    for p in rf1_on_victim:
        assert md["topics"][rf1]["partitions"][p]["leader"] == -1, f"{rf1}-{p}: its only replica is fenced"
    # The cluster still works without it: a topic can be created through the watcher.
    create_topic_via(watcher, topic_name + "-while-fenced", partitions=1, replication_factor=2)

    victim.resume()
    resumed_at = time.monotonic()

    def unfenced_everywhere():
        for node in c.nodes:
            md = node.metadata(topics=[rf1])
            if victim.node_id not in md["brokers"]:
                return None
            if any(md["topics"][rf1]["partitions"][p]["leader"] != victim.node_id for p in rf1_on_victim):
                return None
        return True

    c.wait_until(f"broker {victim.node_id} unfenced and leading {rf1} {rf1_on_victim} again after SIGCONT",
                 unfenced_everywhere, UNFENCE_BOUND_S)
    print(f"fenced {fenced_s:.1f} s after SIGSTOP, unfenced {time.monotonic() - resumed_at:.1f} s after SIGCONT "
          f"(controller {controller}, victim {victim.node_id})")
    # Its RF 1 partitions serve again.
    producer = ck_producer(c.node(controller), **{"acks": "all", "enable.idempotence": False})
    ck_produce_all(producer, rf1, [(None, b"after-unfence", None, None)], partition=rf1_on_victim[0])


def test_controlled_shutdown_under_produce_loses_no_acknowledged_record(healthy, topic_name):
    c = healthy
    partitions = 6
    create_topic_via(c.node(1), topic_name, partitions=partitions, replication_factor=3)
    c.wait_for_leaders(topic_name, partitions)
    candidates, _ = non_controllers(c)
    victim = candidates[-1]
    entry = next(n for n in c.nodes if n is not victim)
    assert victim.node_id in c.partition_leaders(topic_name, entry).values()

    acked, delivery_errors, client_errors = [], [], []

    def on_delivery(err, msg):
        if err is not None:
            delivery_errors.append(err)
        else:
            acked.append((msg.partition(), msg.offset(), msg.value()))

    producer = ck.Producer({
        "bootstrap.servers": entry.bootstrap, "acks": "all", "enable.idempotence": False, "linger.ms": 5,
        # Retries are on (librdkafka's default: unbounded within the delivery timeout); the timeout outlasts the
        # victim's whole absence, so a partition that cannot fail over waits for it to come back.
        "delivery.timeout.ms": 120000, "retry.backoff.ms": 100,
        "error_cb": lambda err: client_errors.append(err)})
    stop = threading.Event()
    sent = [0]

    def produce_loop():
        i = 0
        while not stop.is_set():
            try:
                producer.produce(topic_name, value=b"r%d" % i, partition=i % partitions, on_delivery=on_delivery)
                i += 1
            except BufferError:
                pass
            producer.poll(0.005)
        sent[0] = i

    thread = threading.Thread(target=produce_loop, daemon=True)
    thread.start()
    try:
        time.sleep(2)
        stopped_at = time.monotonic()
        victim.stop()  # SIGTERM: a controlled shutdown; fails the test unless it exits cleanly in time
        shutdown_s = time.monotonic() - stopped_at
        # Its leaderships moved away (Kafka: to another in-sync replica; a sole in-sync replica leaves no leader).
        c.wait_until(f"no partition of {topic_name} led by the stopped broker {victim.node_id}",
                     lambda: all(victim.node_id not in c.partition_leaders(topic_name, n).values()
                                 for n in c.live_nodes()), PROPAGATION_BOUND_S)
        time.sleep(2)
        victim.start()
        c.wait_ready()
        time.sleep(2)
    finally:
        stop.set()
        thread.join(timeout=30)
    remaining = producer.flush(120)
    assert remaining == 0, f"{remaining} records neither acknowledged nor failed within the delivery timeout"
    print(f"controlled shutdown took {shutdown_s:.1f} s; sent {sent[0]}, acknowledged {len(acked)}, "
          f"delivery errors {len(delivery_errors)}, client errors {[str(e) for e in client_errors][:5]}")

    fatal = [e for e in delivery_errors + client_errors
             if not (e.retriable() or e.code() in (ck.KafkaError._TRANSPORT, ck.KafkaError._ALL_BROKERS_DOWN))]
    assert not fatal, f"non-retriable errors: {fatal}"
    assert len(acked) + len(delivery_errors) == sent[0]
    assert len(acked) > sent[0] // 2, f"only {len(acked)} of {sent[0]} acknowledged"

    # Every acknowledged record is where its acknowledgement said, read through another node.
    by_partition = {}
    for p, offset, value in acked:
        by_partition.setdefault(p, {})[offset] = value
    reader = next(n for n in c.nodes if n is not entry)
    for p, want in sorted(by_partition.items()):
        end = max(want) + 1
        got = {m.offset(): m.value() for m in ck_consume(reader, topic_name, [p], end, timeout=60)}
        lost = {o: v for o, v in want.items() if got.get(o) != v}
        assert not lost, f"partition {p}: {len(lost)} acknowledged records missing or changed, e.g. " \
                         f"{sorted(lost.items())[:3]}"


def test_broker_restarted_after_kill9_keeps_every_acknowledged_record(healthy, topic_name):
    """kill -9 of a broker, then a restart from its data directory: once it is back, every record acknowledged
    before the kill is served again, at the same offsets (a restarting node must not act on the partial metadata it
    replays at start, e.g. by deleting topics it has not yet read about)."""
    c = healthy
    partitions, per_partition = 3, 50
    create_topic_via(c.node(1), topic_name, partitions=partitions, replication_factor=3)
    c.wait_for_leaders(topic_name, partitions)
    # acks=all: with replication an acks=1 record may exist only on the leader that is killed, and Kafka
    # (rightly) loses it when an in-sync follower takes over.
    producer = ck_producer(c.node(1), **{"acks": "all", "enable.idempotence": False})
    expected = {}
    for p in range(partitions):
        reports = ck_produce_all(producer, topic_name, [(None, b"r-p%d-%d" % (p, i), None, None)
                                                        for i in range(per_partition)], partition=p)
        expected[p] = [(r.offset(), r.value()) for r in reports]
    victim = c.node(c.partition_leaders(topic_name, c.node(1))[0])
    victim.kill()
    victim.start()
    c.wait_ready()
    c.wait_for_leaders(topic_name, partitions)
    for p in range(partitions):
        got = ck_consume(c.node(2), topic_name, [p], per_partition)
        assert [(m.offset(), m.value()) for m in got] == expected[p], f"partition {p} after node {victim.node_id} restarted"


# ---------------------------------------------------------------- separate roles


def test_controller_only_and_broker_only_nodes(tmp_path, topic_name):
    """process.roles=controller on three nodes and =broker on two: the brokers register with the controllers'
    quorum, list only each other, and serve a topic created through one and consumed through the other."""
    c = Cluster(tmp_path / "roles", size=5, controllers=3)
    try:
        controller = c.start()
        assert controller in (1, 2, 3), f"the active controller {controller} is not a controller-only node"
        b4, b5 = c.node(4), c.node(5)
        for b in (b4, b5):
            assert set(b.metadata(topics=[])["brokers"]) == {4, 5}, f"brokers via node {b.node_id}"
        create_topic_via(b5, topic_name, partitions=4, replication_factor=2)
        c.wait_for_leaders(topic_name, 4, via=b4, allowed={4, 5})
        producer = ck_producer(b4, **{"acks": "1", "enable.idempotence": False})
        reports = ck_produce_all(producer, topic_name, [(None, b"v%d" % i, None, None) for i in range(20)],
                                 partition=0)
        got = ck_consume(b5, topic_name, [0], 20)
        assert [m.value() for m in got] == [r.value() for r in reports]
    except AssertionError as e:
        raise AssertionError(f"{e}\n{c.failure_report()}") from e
    finally:
        c.close()


# ---------------------------------------------------------------- producer ids


def test_producer_ids_are_unique_across_the_cluster(healthy):
    """Idempotent producers that bootstrap to different brokers never share a producer id (ids come from blocks
    the controller hands out through the metadata log), so their sequences never collide on a shared partition."""
    c = healthy
    seen = {}
    deadline = time.monotonic() + 30
    for node in c.live_nodes():
        for _ in range(5):
            while True:
                error, pid, epoch = kwire.init_producer_id(node)
                if error == 0 or time.monotonic() > deadline:
                    break
                time.sleep(0.2)  # retriable while a block is being fetched
            assert error == 0, f"InitProducerId via node {node.node_id}: error {error}"
            assert pid >= 0 and epoch == 0, (pid, epoch)
            assert pid not in seen, f"producer id {pid} handed out by node {seen.get(pid)} and node {node.node_id}"
            seen[pid] = node.node_id


# ---------------------------------------------------------------- bad configuration


def start_refused(tmp_path, mutate, size=SIZE):
    """Starts node 1 of a `size`-node cluster from a file `mutate(cluster, props)` spoiled; returns the exit code and
    output once it exits (it must refuse to start, not run). For Kafka the storage is formatted from the good file
    first, so that it is the server, not the format tool, that refuses."""
    c = Cluster(tmp_path / "refused", size=size)
    node = c.node(1)
    try:
        c.write_config(node)
        c.format([node])
        bad = c.write_config(node, mutate(c, c.properties(node)), path=node.workdir / "bad.properties")
        node.start(bad)
        rc = node.wait_exit(REFUSAL_TIMEOUT_S)
        if rc is None:
            node.kill()
            raise AssertionError(f"node started from a bad file was still running after {REFUSAL_TIMEOUT_S:.0f} s:"
                                 f"\n{bad.read_text()}\n{node.log_tail()}")
        return rc, node.log_text()
    finally:
        c.close()


def without_own_voter(c, props):
    props["controller.quorum.voters"] = ",".join(f"{n.node_id}@{n.host}:{n.controller_port}" for n in c.nodes[1:])
    return props


def without_controller_listener(c, props):
    node = c.node(1)
    props["listeners"] = f"PLAINTEXT://{node.host}:{node.port}"
    return props


def with_unmapped_listener(c, props):
    node = c.node(1)
    props["listeners"] += f",EXTERNAL://{node.host}:{node.port + 2 * SIZE}"  # a port no node uses
    return props


@pytest.mark.parametrize("mutate, named", [
    (without_own_voter, ["controller.quorum.voters"]),
    (without_controller_listener, ["controller.listener.names", "listeners"]),
    (with_unmapped_listener, ["EXTERNAL"]),
], ids=["node-id-not-a-voter", "controller-listener-missing", "listener-not-in-protocol-map"])
def test_bad_configuration_is_a_startup_error_naming_the_setting(tmp_path, mutate, named):
    rc, output = start_refused(tmp_path, mutate)
    assert rc != 0, f"exit code {rc}\n{output[-3000:]}"
    for word in named:
        assert word in output, f"output does not name {word!r}:\n{output[-3000:]}"


@pytest.mark.annal_only
def test_listener_not_in_protocol_map_names_the_map(tmp_path):
    """Kafka names only the listener; Annal also names the setting to fix."""
    rc, output = start_refused(tmp_path, with_unmapped_listener)
    assert rc != 0 and "listener.security.protocol.map" in output, output[-3000:]


@pytest.mark.annal_only
def test_data_directory_of_another_cluster_is_refused(tmp_path):
    c = Cluster(tmp_path / "one", size=1)
    try:
        c.start()
        c.node(1).stop()
        first = c.cluster_id
        c.cluster_id = first[::-1]
        c.node(1).start()
        rc = c.node(1).wait_exit(REFUSAL_TIMEOUT_S)
        output = c.node(1).log_text()
        assert rc not in (None, 0), f"started with cluster id {c.cluster_id} on a directory of {first}"
        assert "cluster.id" in output or "cluster id" in output, output[-3000:]
        assert first in output, f"the output should name the directory's cluster id {first}:\n{output[-3000:]}"
    finally:
        c.close()


@pytest.mark.annal_only
def test_two_nodes_with_one_id_is_refused(healthy, tmp_path):
    """A fourth process claiming node 2's id (its own ports and data) must exit, and the cluster stays as it was."""
    c = healthy
    impostor_cluster = Cluster(tmp_path / "impostor", size=1)
    impostor = impostor_cluster.node(1)
    try:
        props = c.properties(c.node(2))
        props["listeners"] = f"PLAINTEXT://{impostor.host}:{impostor.port}," \
                             f"CONTROLLER://{impostor.host}:{impostor.controller_port}"
        props["advertised.listeners"] = f"PLAINTEXT://{impostor.host}:{impostor.port}"
        props["log.dirs"] = str(impostor.data_dir)
        impostor_cluster.cluster_id = c.cluster_id
        path = impostor_cluster.write_config(impostor, props)
        impostor.start(path)
        rc = impostor.wait_exit(REFUSAL_TIMEOUT_S)
        assert rc not in (None, 0), "a second node with node.id=2 kept running"
        assert "node.id" in impostor.log_text(), impostor.log_tail()
        md = c.node(1).metadata(topics=[])
        assert md["brokers"][2] == (c.node(2).host, c.node(2).port, None), f"node 2's registration changed: {md}"
    finally:
        impostor_cluster.close()
