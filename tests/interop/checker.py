"""A checker of Jepsen's queue anomalies (as in Jepsen's Kafka tests) over the history of a fault-injection run.

The history is what the clients observed, nothing the brokers say about themselves:
- writes: every value a producer tried to send, and for each either an acknowledgement (partition, offset), a
  definite failure, or nothing (indeterminate: it may or may not be in the log);
- reads: what consumers delivered, in delivery order, grouped in sessions (one consumer instance's uninterrupted
  ownership of a partition: from assign() or a group assignment to close() or revocation);
- commits: offset commits the coordinator acknowledged, in the order of the acknowledgements, and the committed
  offsets read back at the end;
- the final log: every partition read from its start to its high watermark after the cluster was healed.

The anomalies (`check()` returns them; `assert_valid()` fails listing them):
- lost: an acknowledged record is not in the final log at its acknowledged offset (missing, or another value);
- changed: a (partition, offset) seen with two different values (acknowledgements, reads, final log);
- vanished: a record a consumer delivered is not in the final log at that offset (a read of a truncated record);
- duplicate: a value at more than one (partition, offset) (idempotent producers must never write one twice);
- phantom: a value in the log that no producer sent;
- backwards / skip: within one session, a partition's delivered offsets are not each the previous one plus one
  (logs here have no transactions and no compaction, so offsets are dense);
- commit_backwards: an acknowledged commit of a (group, partition) is lower than an earlier acknowledged one, or
  the committed offset read back at the end is lower than the last acknowledged commit.
"""

from collections import defaultdict
from dataclasses import dataclass, field


@dataclass
class Read:
    session: str
    partition: int
    offset: int
    value: object  # None when the reader reports offsets only (VerifiableConsumer without --verbose)


@dataclass
class History:
    attempted: dict = field(default_factory=dict)  # value -> producer name
    acked: list = field(default_factory=list)  # (value, partition, offset or None if not reported, producer)
    failed: list = field(default_factory=list)  # (value, error text)
    reads: list = field(default_factory=list)  # Read, in delivery order
    commits: list = field(default_factory=list)  # (group, partition, offset, source) in acknowledgement order
    committed_final: dict = field(default_factory=dict)  # (group, partition) -> offset read back at the end
    final: dict = field(default_factory=dict)  # partition -> [(offset, value)] from the start to the end
    # Producers that do not report what they send (VerifiableProducer prints only outcomes) register the prefix of
    # their values: any value with it counts as sent.
    prefixes: dict = field(default_factory=dict)  # value prefix -> producer name

    def attempt(self, value, producer):
        self.attempted[value] = producer

    def attempt_prefix(self, prefix, producer):
        self.prefixes[prefix] = producer

    def sent(self, value):
        return value in self.attempted or any(str(value).startswith(p) for p in self.prefixes)

    def ack(self, value, partition, offset, producer):
        self.acked.append((value, partition, offset, producer))

    def fail(self, value, error):
        self.failed.append((value, str(error)))

    def read(self, session, partition, offset, value):
        self.reads.append(Read(session, partition, offset, value))

    def commit(self, group, partition, offset, source):
        self.commits.append((group, partition, offset, source))

    def summary(self):
        final = sum(len(v) for v in self.final.values())
        sessions = len({r.session for r in self.reads})
        return (f"{len(self.attempted)} sent, {len(self.acked)} acknowledged, {len(self.failed)} failed, "
                f"{len(self.reads)} delivered in {sessions} consumer sessions, {len(self.commits)} commits "
                f"acknowledged, {final} records in the final log")


@dataclass
class Anomaly:
    kind: str
    detail: str

    def __str__(self):
        return f"{self.kind}: {self.detail}"


KINDS = ("lost", "changed", "vanished", "duplicate", "phantom", "backwards", "skip", "commit_backwards")


def check(h):
    """Every anomaly in history h, as Anomaly objects (empty when the history is valid)."""
    out = []
    final_at = {}  # (partition, offset) -> value
    for partition, records in h.final.items():
        for offset, value in records:
            final_at[(partition, offset)] = value

    # lost: acknowledged but not where it was acknowledged. An acknowledgement may come without an offset
    # (librdkafka reports a batch the broker answered DUPLICATE_SEQUENCE_NUMBER as delivered, offset unknown):
    # then the value must be somewhere in the partition.
    final_values = {(p, v) for (p, _), v in final_at.items()}
    for value, partition, offset, producer in h.acked:
        if offset is None or offset < 0:
            if (partition, value) not in final_values:
                out.append(Anomaly("lost", f"{producer} had {value!r} acknowledged in partition {partition} (offset "
                                           f"not reported); the final log does not have it"))
            continue
        got = final_at.get((partition, offset), _MISSING)
        if got != value:
            where = "nothing" if got is _MISSING else repr(got)
            out.append(Anomaly("lost", f"{producer} had {value!r} acknowledged at {partition}@{offset}; the final "
                                       f"log has {where} there"))

    # changed: one (partition, offset), two values.
    seen = {}
    observations = [(p, o, v, f"ack to {prod}") for v, p, o, prod in h.acked if o is not None and o >= 0]
    observations += [(r.partition, r.offset, r.value, f"read in {r.session}") for r in h.reads if r.value is not None]
    observations += [(p, o, v, "final log") for (p, o), v in final_at.items()]
    for partition, offset, value, source in observations:
        first = seen.setdefault((partition, offset), (value, source))
        if first[0] != value:
            out.append(Anomaly("changed", f"{partition}@{offset} was {first[0]!r} ({first[1]}) and {value!r} "
                                          f"({source})"))
            seen[(partition, offset)] = (value, source)

    # vanished: delivered to a consumer, then not in the log.
    for r in h.reads:
        if (r.partition, r.offset) not in final_at:
            out.append(Anomaly("vanished", f"{r.session} read {r.value!r} at {r.partition}@{r.offset}, which the "
                                           f"final log does not have"))

    # duplicate: a value in two places (final log, acknowledgements, reads).
    places = defaultdict(set)
    for (partition, offset), value in final_at.items():
        places[value].add((partition, offset))
    for value, partition, offset, _ in h.acked:
        if offset is not None and offset >= 0:
            places[value].add((partition, offset))
    for r in h.reads:
        if r.value is not None:
            places[r.value].add((r.partition, r.offset))
    for value, where in places.items():
        if len(where) > 1:
            out.append(Anomaly("duplicate", f"{value!r} is at {', '.join(f'{p}@{o}' for p, o in sorted(where))}"))

    # phantom: nobody sent it.
    if h.attempted or h.prefixes:
        for (partition, offset), value in sorted(final_at.items()):
            if not h.sent(value):
                out.append(Anomaly("phantom", f"{partition}@{offset} holds {value!r}, which no producer sent"))

    # backwards / skip within a session.
    last = {}
    for r in h.reads:
        key = (r.session, r.partition)
        prev = last.get(key)
        last[key] = r.offset
        if prev is None or r.offset == prev + 1:
            continue
        kind = "backwards" if r.offset <= prev else "skip"
        out.append(Anomaly(kind, f"{r.session} read partition {r.partition} at {prev} then {r.offset}"))

    # commits never move backwards.
    highest = {}
    for group, partition, offset, source in h.commits:
        key = (group, partition)
        if key in highest and offset < highest[key][0]:
            out.append(Anomaly("commit_backwards", f"group {group} partition {partition}: {source} committed "
                                                   f"{offset} after {highest[key][1]} committed {highest[key][0]}"))
        if key not in highest or offset >= highest[key][0]:
            highest[key] = (offset, source)
    for key, offset in sorted(h.committed_final.items()):
        if key in highest and offset < highest[key][0]:
            out.append(Anomaly("commit_backwards", f"group {key[0]} partition {key[1]}: the committed offset read "
                                                   f"back at the end is {offset}, but {highest[key][1]} had "
                                                   f"{highest[key][0]} acknowledged"))
    return out


def assert_valid(h, schedule=None, limit=40):
    """Fails with every anomaly (the first `limit`), the history's summary and the fault schedule."""
    anomalies = check(h)
    if not anomalies:
        return
    by_kind = defaultdict(int)
    for a in anomalies:
        by_kind[a.kind] += 1
    lines = [f"{len(anomalies)} anomalies ({dict(by_kind)}) in: {h.summary()}"]
    lines += [f"  {a}" for a in anomalies[:limit]]
    if len(anomalies) > limit:
        lines.append(f"  ... and {len(anomalies) - limit} more")
    if schedule is not None:
        lines.append("fault schedule:\n" + schedule.report())
    raise AssertionError("\n".join(lines))


class _Missing:
    def __repr__(self):
        return "nothing"


_MISSING = _Missing()
