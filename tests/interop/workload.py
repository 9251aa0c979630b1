"""The workload of the fault-injection scenarios: unchanged idempotent acks=all producers and consumers that write
what they observe into a checker.History.

- CkProducer: librdkafka (confluent-kafka), enable.idempotence=true, acks=all, a steady rate over the partitions.
- JavaProducer: Kafka's own VerifiableProducer (kafka-tools, as Kafka's system tests run it), idempotent, acks=all;
  its JSON events (producer_send_success / producer_send_error) are the history.
- CkConsumer: librdkafka, assign() of every partition from the beginning; one session for its whole life.
- CkGroupConsumer: librdkafka in a consumer group, committing synchronously after every batch; a session per
  assignment of a partition.
- JavaConsumer: Kafka's VerifiableConsumer --verbose in a consumer group (record_data, partitions_assigned/revoked,
  offsets_committed events).
- read_final / read_committed: the final log of every partition and a group's committed offsets, after healing.
"""

import json
import os
import signal
import subprocess
import threading
import time

import confluent_kafka as ck

RUNNING_BOUND_S = 60  # a producer's first acknowledgement (a JVM starts slowly on a loaded 2-core machine)
DELIVERY_TIMEOUT_MS = 90000  # longer than any fault here lasts: retries ride a failover out


class _Acks:
    """Acknowledgement times, so that a scenario can ask what was acknowledged while a fault lasted."""

    def __init__(self):
        self.times = []  # (monotonic time, value, partition, offset)
        self.fatal = []  # fatal or non-retriable errors the client reported
        self.errors = []  # every error event (for the failure message)

    def acked(self, value, partition, offset):
        self.times.append((time.monotonic(), value, partition, offset))

    def count_since(self, t):
        return sum(1 for at, *_ in self.times if at >= t)

    def between(self, t0, t1):
        return [(v, p, o) for at, v, p, o in self.times if t0 <= at <= t1]


class CkProducer(_Acks):
    def __init__(self, history, bootstrap, topic, partitions, name="ck", rate=150, **conf):
        super().__init__()
        self.history, self.topic, self.partitions, self.name, self.rate = history, topic, partitions, name, rate
        c = {"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all", "linger.ms": 5,
             "message.timeout.ms": DELIVERY_TIMEOUT_MS, "socket.timeout.ms": 10000,
             "error_cb": self._error}
        c.update(conf)
        self.producer = ck.Producer(c)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"producer-{name}", daemon=True)
        self.sent = 0

    def _error(self, err):
        self.errors.append(str(err))
        if err.fatal():
            self.fatal.append(str(err))

    def _delivered(self, err, msg):
        value = msg.value().decode()
        if err is not None:
            self.history.fail(value, err)
            self.errors.append(f"{value}: {err}")
            if err.fatal() or not err.retriable():
                self.fatal.append(f"{value}: {err}")
        else:
            self.history.ack(value, msg.partition(), msg.offset(), self.name)
            self.acked(value, msg.partition(), msg.offset())

    def start(self):
        self._thread.start()
        return self

    def _run(self):
        interval = 1.0 / self.rate
        next_at = time.monotonic()
        while not self._stop.is_set():
            value = f"{self.name}-{self.sent}"
            self.history.attempt(value, self.name)
            try:
                self.producer.produce(self.topic, value=value.encode(), partition=self.sent % self.partitions,
                                      on_delivery=self._delivered)
            except BufferError:
                self.producer.poll(0.1)
                continue
            self.sent += 1
            self.producer.poll(0)
            next_at += interval
            delay = next_at - time.monotonic()
            if delay > 0:
                self._stop.wait(delay)
            else:
                next_at = time.monotonic()

    def stop(self, timeout=60):
        """Stops sending and waits for every outstanding delivery report (bounded); returns how many remain."""
        self._stop.set()
        self._thread.join(10)
        return self.producer.flush(timeout)


def java_tool_command(main, *args):
    from test_dump_log_segments import kafka_classpath

    return ["java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp", kafka_classpath(), main,
            *args]


class _JavaTool:
    """A Kafka tool printing JSON events on stdout; each line also goes to workdir/name.log."""

    def __init__(self, name, workdir, command):
        self.name = name
        self.log_path = os.path.join(workdir, f"{name}.log")
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, text=True, start_new_session=True)
        self._thread = threading.Thread(target=self._read, name=f"reader-{name}", daemon=True)
        self._thread.start()

    def _read(self):
        for line in self.proc.stdout:
            self._log.write(line)
            self._log.flush()
            if not line.startswith("{"):
                continue
            try:
                event = json.loads(line)
            except ValueError:
                continue
            self.on_event(event)

    def on_event(self, event):
        raise NotImplementedError

    def stop(self, timeout=60):
        """SIGTERM: the tools' shutdown hooks close the client (a producer flushes) and print their last events."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self._thread.join(10)
        self._log.close()

    def log_tail(self, lines=20):
        try:
            with open(self.log_path) as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return "(no log)"


class JavaProducer(_JavaTool, _Acks):
    """VerifiableProducer: values "PREFIX.N" (N = 0, 1, ...), idempotent, acks=all (-1), retrying."""

    def __init__(self, history, bootstrap, topic, workdir, prefix=7, throughput=100, name="java-producer"):
        _Acks.__init__(self)
        self.history = history
        self.prefix = prefix
        history.attempt_prefix(f"{prefix}.", name)
        config = os.path.join(workdir, f"{name}.properties")
        with open(config, "w") as f:
            f.write("enable.idempotence=true\nacks=all\nretries=2147483647\n"
                    f"delivery.timeout.ms={DELIVERY_TIMEOUT_MS}\nrequest.timeout.ms=10000\nlinger.ms=5\n"
                    "max.in.flight.requests.per.connection=5\nmetadata.max.age.ms=5000\n")
        _JavaTool.__init__(self, name, workdir, java_tool_command(
            "org.apache.kafka.tools.VerifiableProducer", "--topic", topic, "--bootstrap-server", bootstrap,
            "--throughput", str(throughput), "--value-prefix", str(prefix), "--acks", "-1",
            "--producer.config", config))

    def on_event(self, e):
        name = e.get("name")
        if name == "producer_send_success":
            self.history.ack(e["value"], e["partition"], e["offset"], self.name)
            self.acked(e["value"], e["partition"], e["offset"])
        elif name == "producer_send_error":
            self.history.fail(e.get("value"), f"{e.get('exception')}: {e.get('message')}")
            self.errors.append(f"{e.get('value')}: {e.get('exception')}: {e.get('message')}")
            if "OutOfOrderSequence" in str(e.get("exception")):
                self.fatal.append(self.errors[-1])


class CkConsumer:
    """assign() of every partition from the beginning; every delivered record goes into one session."""

    def __init__(self, history, bootstrap, topic, partitions, name="ck-reader"):
        self.history, self.topic, self.name = history, topic, name
        self.consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"{name}-assign-only",
                                     "enable.auto.commit": False, "enable.auto.offset.store": False,
                                     "auto.offset.reset": "earliest", "fetch.wait.max.ms": 200})
        self.consumer.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in range(partitions)])
        self.errors = []
        self.delivered = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"consumer-{name}", daemon=True)

    def start(self):
        self._thread.start()
        return self

    def _run(self):
        while not self._stop.is_set():
            for msg in self.consumer.consume(100, 0.3):
                if msg.error():
                    if msg.error().code() != ck.KafkaError._PARTITION_EOF:
                        self.errors.append(str(msg.error()))
                    continue
                self.history.read(self.name, msg.partition(), msg.offset(), msg.value().decode())
                self.delivered += 1
        self.consumer.close()

    def stop(self):
        self._stop.set()
        self._thread.join(30)


class CkGroupConsumer:
    """A member of `group`, committing the next offsets synchronously after every batch; a new session per
    assignment of a partition (at-least-once: a new owner restarts from the committed offset)."""

    def __init__(self, history, bootstrap, topic, group, name="ck-member"):
        self.history, self.topic, self.group, self.name = history, topic, group, name
        self.consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                     "enable.auto.commit": False, "auto.offset.reset": "earliest",
                                     "session.timeout.ms": 10000, "heartbeat.interval.ms": 1000,
                                     "partition.assignment.strategy": "roundrobin", "fetch.wait.max.ms": 200})
        self.sessions = {}
        self.generation = 0
        self.errors = []
        self.commit_failures = []
        self.delivered = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"consumer-{name}", daemon=True)

    def _assigned(self, consumer, partitions):
        self.generation += 1
        for tp in partitions:
            self.sessions[tp.partition] = f"{self.name}/assignment{self.generation}"

    def _revoked(self, consumer, partitions):
        for tp in partitions:
            self.sessions.pop(tp.partition, None)

    def start(self):
        self.consumer.subscribe([self.topic], on_assign=self._assigned, on_revoke=self._revoked,
                                on_lost=self._revoked)
        self._thread.start()
        return self

    def _run(self):
        while not self._stop.is_set():
            nexts = {}
            for msg in self.consumer.consume(100, 0.3):
                if msg.error():
                    if msg.error().code() != ck.KafkaError._PARTITION_EOF:
                        self.errors.append(str(msg.error()))
                    continue
                session = self.sessions.get(msg.partition(), f"{self.name}/unassigned")
                self.history.read(session, msg.partition(), msg.offset(), msg.value().decode())
                nexts[msg.partition()] = msg.offset() + 1
                self.delivered += 1
            if nexts:
                self._commit(nexts)
        self.consumer.close()

    def _commit(self, nexts):
        offsets = [ck.TopicPartition(self.topic, p, o) for p, o in sorted(nexts.items())]
        try:
            result = self.consumer.commit(offsets=offsets, asynchronous=False)
        except ck.KafkaException as e:
            self.commit_failures.append(str(e))
            return
        for tp in result:
            if tp.error is None:
                self.history.commit(self.group, tp.partition, tp.offset, self.name)
            else:
                self.commit_failures.append(str(tp.error))

    def stop(self):
        self._stop.set()
        self._thread.join(30)


class JavaConsumer(_JavaTool):
    """VerifiableConsumer --verbose in `group`, committing synchronously after every poll (its default)."""

    def __init__(self, history, bootstrap, topic, group, workdir, name="java-member"):
        self.history, self.group = history, group
        self.sessions = {}
        self.generation = 0
        self.delivered = 0
        self.commit_failures = []
        _JavaTool.__init__(self, name, workdir, java_tool_command(
            "org.apache.kafka.tools.VerifiableConsumer", "--topic", topic, "--bootstrap-server", bootstrap,
            "--group-id", group, "--verbose", "--reset-policy", "earliest", "--session-timeout", "10000",
            "--assignment-strategy", "org.apache.kafka.clients.consumer.RoundRobinAssignor"))

    def on_event(self, e):
        name = e.get("name")
        if name == "partitions_assigned":
            self.generation += 1
            for tp in e["partitions"]:
                self.sessions[tp["partition"]] = f"{self.name}/assignment{self.generation}"
        elif name == "partitions_revoked":
            for tp in e["partitions"]:
                self.sessions.pop(tp["partition"], None)
        elif name == "record_data":
            p = e["partition"]
            self.history.read(self.sessions.get(p, f"{self.name}/unassigned"), p, e["offset"], e["value"])
            self.delivered += 1
        elif name == "offsets_committed":
            if e.get("success"):
                for o in e["offsets"]:
                    self.history.commit(self.group, o["partition"], o["offset"], self.name)
            else:
                self.commit_failures.append(e.get("error"))


def read_final(history, bootstrap, topic, partitions, timeout=60):
    """Reads every partition from its start to its high watermark into history.final."""
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "final-read", "enable.auto.commit": False,
                            "auto.offset.reset": "error"})
    try:
        highs = {}
        for p in range(partitions):
            low, high = consumer.get_watermark_offsets(ck.TopicPartition(topic, p), timeout=15)
            assert low == 0, f"{topic}-{p} starts at {low}: something deleted records"
            highs[p] = high
            history.final[p] = []
        consumer.assign([ck.TopicPartition(topic, p, 0) for p in range(partitions) if highs[p] > 0])
        deadline = time.monotonic() + timeout
        remaining = {p for p in range(partitions) if highs[p] > 0}
        while remaining and time.monotonic() < deadline:
            for msg in consumer.consume(500, 0.5):
                if msg.error():
                    assert msg.error().code() == ck.KafkaError._PARTITION_EOF, f"final read: {msg.error()}"
                    continue
                p = msg.partition()
                if msg.offset() < highs[p]:
                    history.final[p].append((msg.offset(), msg.value().decode()))
                if msg.offset() >= highs[p] - 1:
                    remaining.discard(p)
        assert not remaining, (f"final read of {topic}: partitions {sorted(remaining)} not read to their high "
                               f"watermarks {highs} within {timeout} s")
        return highs
    finally:
        consumer.close()


def read_committed(history, bootstrap, topic, partitions, group):
    """The group's committed offsets, read back into history.committed_final."""
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        for tp in consumer.committed([ck.TopicPartition(topic, p) for p in range(partitions)], timeout=30):
            if tp.offset >= 0:
                history.committed_final[(group, tp.partition)] = tp.offset
    finally:
        consumer.close()
