"""Requests that must stay fast at 100,000 partitions (issue 19), sent raw to a running broker and checked.

Each probe is one request covering every partition (or every topic) of the layout, timed from send to the last
byte of the answer, and its answer is checked: a probe that returns quickly with errors is a failure, not a figure.
Used by ready.py on every restart; old, non-flexible versions keep the encoding short.
"""

import struct
import time

import scale


class Reader:
    def __init__(self, data, pos=4):  # after the correlation id
        self.data, self.pos = data, pos

    def take(self, fmt):
        v = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return v[0] if len(v) == 1 else v

    def string(self):
        n = self.take(">h")
        if n < 0:
            return None
        v = self.data[self.pos:self.pos + n].decode()
        self.pos += n
        return v


def metadata(port, topics):
    conn = scale.Conn(port)
    try:
        took, seen = scale.metadata_all(conn)
    finally:
        conn.close()
    ok = all(len(seen.get(t, [])) == p and all(l >= 0 for l in seen[t]) for t, p in topics)
    return took, ok


def describe_configs(port, topics):
    """DescribeConfigs v1, every topic's every config in one request."""
    body = struct.pack(">i", len(topics))
    for name, _ in topics:
        body += struct.pack(">b", 2) + scale._str(name) + struct.pack(">i", -1)
    body += struct.pack(">b", 0)  # include_synonyms
    conn = scale.Conn(port)
    try:
        took, data = conn.request(32, 1, body)
    finally:
        conn.close()
    r = Reader(data)
    r.take(">i")  # throttle
    names, errors, configs = set(), 0, 0
    for _ in range(r.take(">i")):
        errors += r.take(">h") != 0
        r.string()
        r.take(">b")
        names.add(r.string())
        for _ in range(r.take(">i")):
            r.string(), r.string()
            r.take(">bbb")  # read_only, source, sensitive
            for _ in range(r.take(">i")):
                r.string(), r.string(), r.take(">b")
            configs += 1
    ok = errors == 0 and names == {t for t, _ in topics} and configs >= len(topics)
    return took, ok


def list_offsets(port, topics):
    """ListOffsets v1, the latest offset of every partition in one request: every partition must answer without
    error. Returns (seconds, ok, partitions whose latest offset is 0: a record the bench produced is missing)."""
    body = struct.pack(">ii", -1, len(topics))
    for name, partitions in topics:
        body += scale._str(name) + struct.pack(">i", partitions)
        body += b"".join(struct.pack(">iq", p, -1) for p in range(partitions))
    conn = scale.Conn(port)
    try:
        took, data = conn.request(2, 1, body)
    finally:
        conn.close()
    r = Reader(data)
    answered, errors, empty = 0, 0, 0
    for _ in range(r.take(">i")):
        r.string()
        for _ in range(r.take(">i")):
            _, error, _, offset = r.take(">ihqq")
            answered += 1
            errors += error != 0
            empty += error == 0 and offset < 1
    return took, answered == sum(p for _, p in topics) and errors == 0, empty


def offset_commit_and_fetch(port, topics, group="scale-probe"):
    """FindCoordinator, then OffsetCommit v2 of every partition (a simple, memberless commit, as an admin tool's),
    then OffsetFetch v1 of every partition: the fetched offsets must be the committed ones.
    Returns (commit seconds, fetch seconds, ok)."""
    conn = scale.Conn(port)
    try:
        # The first FindCoordinator of a broker may create the offsets topic and answer COORDINATOR_NOT_AVAILABLE
        # (Kafka does); clients retry.
        deadline = time.monotonic() + 60
        while True:
            _, data = conn.request(10, 0, scale._str(group))
            if struct.unpack_from(">h", data, 4)[0] == 0:
                break
            if time.monotonic() > deadline:
                return 0.0, 0.0, False
            time.sleep(0.2)
        want = {}
        body = scale._str(group) + struct.pack(">i", -1) + scale._str("") + struct.pack(">q", -1)
        body += struct.pack(">i", len(topics))
        for t, (name, partitions) in enumerate(topics):
            body += scale._str(name) + struct.pack(">i", partitions)
            for p in range(partitions):
                want[(name, p)] = 1_000 + t * 7 + p
                body += struct.pack(">iq", p, want[(name, p)]) + struct.pack(">h", -1)
        commit_s, data = conn.request(8, 2, body)
        r = Reader(data)
        committed = 0
        for _ in range(r.take(">i")):
            r.string()
            for _ in range(r.take(">i")):
                _, error = r.take(">ih")
                committed += error == 0
        body = scale._str(group) + struct.pack(">i", len(topics))
        for name, partitions in topics:
            body += scale._str(name) + struct.pack(">i", partitions)
            body += b"".join(struct.pack(">i", p) for p in range(partitions))
        fetch_s, data = conn.request(9, 1, body)
    finally:
        conn.close()
    r = Reader(data)
    matched = 0
    for _ in range(r.take(">i")):
        name = r.string()
        for _ in range(r.take(">i")):
            p, offset = r.take(">iq")
            r.string()
            error = r.take(">h")
            matched += error == 0 and want.get((name, p)) == offset
    return commit_s, fetch_s, committed == len(want) and matched == len(want)


def wait_serving(port, topics, timeout_s=180):
    """Until every partition answers ListOffsets without error (Kafka lists a leader in Metadata before that
    broker has taken the leadership up: at 1,000 new partitions it answered NOT_LEADER_OR_FOLLOWER for most of
    them right after). Returns the seconds waited."""
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        if list_offsets(port, topics)[1]:
            break
        time.sleep(0.5)
    return time.monotonic() - start


def run_all(port, topics):
    """Every probe once; a dict of seconds (rounded) and one `probes_ok` over all their checks."""
    metadata_s, metadata_ok = metadata(port, topics)
    configs_s, configs_ok = describe_configs(port, topics)
    offsets_s, offsets_ok, empty = list_offsets(port, topics)
    # A coordinator still loading answers the commit or fetch per partition with an error; a client retries.
    for _ in range(30):
        commit_s, fetch_s, group_ok = offset_commit_and_fetch(port, topics)
        if group_ok:
            break
        time.sleep(1)
    return dict(
        metadata_s=round(metadata_s, 3),
        describe_configs_s=round(configs_s, 3),
        list_offsets_s=round(offsets_s, 3),
        offset_commit_s=round(commit_s, 3),
        offset_fetch_s=round(fetch_s, 3),
        partitions_without_records=empty,
        probes_ok=dict(metadata=metadata_ok, describe_configs=configs_ok, list_offsets=offsets_ok,
                       group=group_ok),
    )
