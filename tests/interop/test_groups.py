"""Consumer groups with librdkafka (issue 4): assignment, cooperative rebalancing, member death, at-least-once
redelivery, independent groups, static membership, and commits that survive broker restarts.

Skipped unless INTEROP_GROUPS=1 (enable once the group coordinator lands). Validated against Apache Kafka 4.x."""

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import confluent_kafka as ck
from confluent_kafka import ConsumerGroupState, ConsumerGroupTopicPartitions
import pytest

from clients import TIMEOUT_S, ck_admin, ck_produce_all, ck_producer, create_topic, wait_for_leaders

pytestmark = pytest.mark.groups

SESSION_MS = 6000


class Member:
    """An in-process group member; tracks what it owns through the rebalance callbacks."""

    def __init__(self, broker, topic, group, strategy="cooperative-sticky", **conf):
        self.owned = set()
        self.assigned_log = []
        self.revoked_log = []
        self.records = []
        # Eager assignors hand over the full assignment on each rebalance; cooperative ones only the changes.
        self.eager = strategy in ("range", "roundrobin")
        c = {"bootstrap.servers": broker.bootstrap, "group.id": group, "partition.assignment.strategy": strategy,
             "session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": 500, "enable.auto.commit": False,
             "auto.offset.reset": "earliest"}
        c.update(conf)
        self.consumer = ck.Consumer(c)
        self.consumer.subscribe([topic], on_assign=self._on_assign, on_revoke=self._on_revoke,
                                on_lost=self._on_revoke)

    def _on_assign(self, consumer, partitions):
        ps = {p.partition for p in partitions}
        self.assigned_log.append(sorted(ps))
        if self.eager:
            self.owned = set(ps)
        else:
            self.owned |= ps

    def _on_revoke(self, consumer, partitions):
        ps = {p.partition for p in partitions}
        self.revoked_log.append(sorted(ps))
        self.owned -= ps

    def poll(self):
        msg = self.consumer.poll(0.05)
        if msg is not None and not msg.error():
            self.records.append((msg.partition(), msg.offset(), msg.value()))

    def close(self):
        self.consumer.close()


class ChildMember:
    """A group member in a separate process (group_member.py), so it can be SIGKILLed."""

    def __init__(self, broker, topic, group, strategy="cooperative-sticky"):
        self.owned = set()
        self.events = queue.Queue()
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("group_member.py")), broker.bootstrap, topic, group,
             strategy, str(SESSION_MS)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.events.put(json.loads(line))

    def poll(self):
        while True:
            try:
                e = self.events.get_nowait()
            except queue.Empty:
                return
            if e["event"] == "assign":
                self.owned |= set(e["partitions"])
            elif e["event"] == "revoke":
                self.owned -= set(e["partitions"])

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def close(self):
        if self.proc.poll() is None:
            self.kill()


def drive(members, predicate, what, timeout=TIMEOUT_S, settle=1.5):
    """Polls every member until predicate() holds, then keeps polling `settle` seconds and checks it still holds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for m in members:
            m.poll()
        if predicate():
            end = time.monotonic() + settle
            while time.monotonic() < end:
                for m in members:
                    m.poll()
            if predicate():
                return
    raise AssertionError(f"timed out waiting for: {what}; owned: {[sorted(m.owned) for m in members]}")


def partitions_cover(members, n):
    owned = [m.owned for m in members]
    union = set().union(*owned)
    return union == set(range(n)) and sum(len(o) for o in owned) == n


def commit(consumer, offsets, timeout=TIMEOUT_S):
    return retry_coordinator(lambda: consumer.commit(offsets=offsets, asynchronous=False), timeout)


def retry_coordinator(call, timeout=TIMEOUT_S):
    """Retries while the error is transient: a (re)started broker answers NOT_COORDINATOR /
    COORDINATOR_LOAD_IN_PROGRESS until the group coordinator has loaded, and applications retry those."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return call()
        except ck.KafkaException as e:
            err = e.args[0]
            transient = err.retriable() or err.code() in (
                ck.KafkaError.NOT_COORDINATOR, ck.KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                ck.KafkaError.COORDINATOR_NOT_AVAILABLE)
            if not transient or time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def group_name():
    return f"it-group-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def members():
    created = []
    yield created
    for m in created:
        try:
            m.close()
        except Exception:  # noqa: BLE001 - best-effort cleanup
            pass


def test_cooperative_sticky_join_and_member_death(broker, topic_name, members):
    create_topic(broker, topic_name, partitions=6)
    group = group_name()
    m = [Member(broker, topic_name, group) for _ in range(3)]
    members.extend(m)
    drive(m, lambda: partitions_cover(m, 6) and all(len(x.owned) == 2 for x in m), "three members own two each")

    admin = ck_admin(broker)
    desc = admin.describe_consumer_groups([group], request_timeout=TIMEOUT_S)[group].result(timeout=TIMEOUT_S)
    assert desc.state == ConsumerGroupState.STABLE
    assert len(desc.members) == 3
    assert sorted(tp.partition for mem in desc.members for tp in mem.assignment.topic_partitions) == list(range(6))

    before = [set(x.owned) for x in m]
    for x in m:
        x.revoked_log.clear()
    fourth = ChildMember(broker, topic_name, group)
    members.append(fourth)
    everyone = m + [fourth]
    drive(everyone, lambda: partitions_cover(everyone, 6) and sorted(len(x.owned) for x in everyone) == [1, 1, 2, 2],
          "four members share six partitions")
    moved = set(fourth.owned)
    revoked = {p for x in m for batch in x.revoked_log for p in batch}
    assert revoked == moved, f"cooperative-sticky revoked {revoked}, but only {moved} moved to the new member"
    for x, b in zip(m, before):
        assert x.owned <= b, "a member gained partitions it did not have while another joined"

    # The new member dies without leaving; after the session timeout its partitions go back to the others.
    fourth.kill()
    t0 = time.monotonic()
    drive(m, lambda: partitions_cover(m, 6), "the killed member's partitions reassigned",
          timeout=SESSION_MS / 1000 + 30)
    assert time.monotonic() - t0 >= 1, "reassigned before the broker could have noticed the death"


def test_at_least_once_redelivery_after_uncommitted_processing(broker, topic_name, members):
    create_topic(broker, topic_name, partitions=2)
    producer = ck_producer(broker)
    for p in range(2):
        ck_produce_all(producer, topic_name, [(None, b"r-%d-%d" % (p, i), None, None) for i in range(20)],
                       partition=p)
    group = group_name()
    a = Member(broker, topic_name, group)
    members.append(a)
    drive([a], lambda: len(a.records) == 40, "first member reads all 40 records", settle=0)
    # It processed everything but committed only the first 10 of each partition, then died.
    commit(a.consumer, [ck.TopicPartition(topic_name, p, 10) for p in range(2)])
    a.close()
    members.remove(a)

    b = Member(broker, topic_name, group)
    members.append(b)
    drive([b], lambda: len(b.records) == 20, "next owner reads from the committed offsets", settle=1)
    for p in range(2):
        offsets = [o for part, o, _ in b.records if part == p]
        assert offsets == list(range(10, 20)), f"partition {p}: {offsets}"
    committed = b.consumer.committed([ck.TopicPartition(topic_name, p) for p in range(2)], timeout=TIMEOUT_S)
    assert [c.offset for c in committed] == [10, 10]


def test_two_groups_keep_independent_offsets(broker, topic_name, members):
    create_topic(broker, topic_name, partitions=1)
    ck_produce_all(ck_producer(broker), topic_name, [(None, b"v%d" % i, None, None) for i in range(30)],
                   partition=0)
    gx, gy = group_name(), group_name()
    x = Member(broker, topic_name, gx)
    y = Member(broker, topic_name, gy)
    members.extend([x, y])
    drive([x, y], lambda: len(x.records) == 30 and len(y.records) == 30, "both groups read everything", settle=0)
    commit(x.consumer, [ck.TopicPartition(topic_name, 0, 30, metadata="x-done")])
    commit(y.consumer, [ck.TopicPartition(topic_name, 0, 12, metadata="y-partial")])
    x.close()
    y.close()
    members.clear()

    admin = ck_admin(broker)
    for g, want, meta in ((gx, 30, "x-done"), (gy, 12, "y-partial")):
        res = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(g)], request_timeout=TIMEOUT_S)
        tps = res[g].result(timeout=TIMEOUT_S).topic_partitions
        assert [(tp.topic, tp.partition, tp.offset, tp.metadata) for tp in tps] == [(topic_name, 0, want, meta)]

    y2 = Member(broker, topic_name, gy)
    members.append(y2)
    drive([y2], lambda: len(y2.records) == 18, "group y resumes at 12", settle=1)
    assert y2.records[0][1] == 12
    listed = {g.group_id for g in admin.list_consumer_groups(request_timeout=TIMEOUT_S).result().valid}
    assert {gx, gy} <= listed


def test_static_member_restart_causes_no_rebalance(broker, topic_name, members):
    create_topic(broker, topic_name, partitions=4)
    group = group_name()
    conf = {"session.timeout.ms": 30000}
    s1 = Member(broker, topic_name, group, strategy="range", **{"group.instance.id": "static-1"}, **conf)
    s2 = Member(broker, topic_name, group, strategy="range", **{"group.instance.id": "static-2"}, **conf)
    members.extend([s1, s2])
    drive([s1, s2], lambda: partitions_cover([s1, s2], 4) and len(s1.owned) == 2, "two static members, two each")
    s1_before = set(s1.owned)
    s2.assigned_log.clear()
    s2.revoked_log.clear()

    s1.close()  # a static member does not leave the group on close
    members.remove(s1)
    s1b = Member(broker, topic_name, group, strategy="range", **{"group.instance.id": "static-1"}, **conf)
    members.append(s1b)
    drive([s1b, s2], lambda: s1b.owned == s1_before, "restarted static member gets its partitions back",
          settle=3)
    assert s2.revoked_log == [] and s2.assigned_log == [], "the other member went through a rebalance"


@pytest.mark.restart
@pytest.mark.parametrize("kill", [False, True], ids=["sigterm", "kill9"])
def test_commits_survive_broker_restart(own_broker, kill):
    b = own_broker
    create_topic(b, "commits", partitions=3)
    ck_produce_all(ck_producer(b), "commits", [(None, b"x", None, None)] * 30)
    group = group_name()
    consumer = ck.Consumer({"bootstrap.servers": b.bootstrap, "group.id": group, "enable.auto.commit": False})
    want = [ck.TopicPartition("commits", p, 3 + p, metadata=f"m{p}") for p in range(3)]
    commit(consumer, want)
    consumer.close()

    b.restart(kill=kill)
    wait_for_leaders(b, "commits", 3)
    consumer = ck.Consumer({"bootstrap.servers": b.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        got = retry_coordinator(
            lambda: consumer.committed([ck.TopicPartition("commits", p) for p in range(3)], timeout=TIMEOUT_S))
    finally:
        consumer.close()
    assert [(tp.partition, tp.offset, tp.metadata) for tp in got] == [(p, 3 + p, f"m{p}") for p in range(3)]
