"""Just enough of Kafka's wire protocol, by hand, to send well-formed and deliberately malformed requests.

Only what the raw-protocol tests need: request/response framing, ApiVersions, Metadata, Produce and Fetch for the
versions a Kafka 4.x broker (and Annal) advertise, and v2 record batches. Written from the protocol's JSON specs
(clients/src/main/resources/common/message/*.json in Apache Kafka).
"""

import socket
import struct

API_PRODUCE, API_FETCH, API_LIST_OFFSETS, API_METADATA = 0, 1, 2, 3
API_VERSIONS = 18
API_DESCRIBE_QUORUM, API_DESCRIBE_CLUSTER = 55, 60
API_INIT_PRODUCER_ID = 22
API_END_TXN = 26
UNSUPPORTED_VERSION = 35

# First flexible (compact encoding + tagged fields) version per API.
FLEXIBLE_FROM = {API_PRODUCE: 9, API_FETCH: 12, API_LIST_OFFSETS: 6, API_METADATA: 9, API_VERSIONS: 3,
                 API_DESCRIBE_QUORUM: 0, API_DESCRIBE_CLUSTER: 0, API_INIT_PRODUCER_ID: 2, API_END_TXN: 3}


# ---------------------------------------------------------------- primitive encoders


def uvarint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def varint(n):
    return uvarint((n << 1) ^ (n >> 63))  # zigzag


def string(s, flexible=False):
    if s is None:
        return uvarint(0) if flexible else struct.pack(">h", -1)
    b = s.encode() if isinstance(s, str) else s
    return (uvarint(len(b) + 1) if flexible else struct.pack(">h", len(b))) + b


def nbytes(b, flexible=False):
    if b is None:
        return uvarint(0) if flexible else struct.pack(">i", -1)
    return (uvarint(len(b) + 1) if flexible else struct.pack(">i", len(b))) + b


def array_len(n, flexible=False):
    return uvarint(n + 1) if flexible else struct.pack(">i", n)


TAGS_NONE = b"\x00"  # an empty tagged-fields section


class Reader:
    def __init__(self, data):
        self.data = data
        self.pos = 0

    def take(self, n):
        if self.pos + n > len(self.data):
            raise ValueError(f"response truncated: need {n} bytes at {self.pos}, have {len(self.data) - self.pos}")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def i8(self):
        return struct.unpack(">b", self.take(1))[0]

    def i16(self):
        return struct.unpack(">h", self.take(2))[0]

    def i32(self):
        return struct.unpack(">i", self.take(4))[0]

    def i64(self):
        return struct.unpack(">q", self.take(8))[0]

    def uvarint(self):
        shift = result = 0
        while True:
            b = self.take(1)[0]
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7

    def string(self, flexible=False):
        n = self.uvarint() - 1 if flexible else self.i16()
        return None if n < 0 else self.take(n).decode()

    def nbytes(self, flexible=False):
        n = self.uvarint() - 1 if flexible else self.i32()
        return None if n < 0 else self.take(n)

    def array_len(self, flexible=False):
        return self.uvarint() - 1 if flexible else self.i32()

    def skip_tags(self):
        for _ in range(self.uvarint()):
            self.uvarint()
            self.take(self.uvarint())


# ---------------------------------------------------------------- framing


def request(api_key, version, correlation_id, body, client_id="interop-raw"):
    """A whole frame: size, request header (v1, or v2 for flexible versions), body."""
    flexible = version >= FLEXIBLE_FROM.get(api_key, 1 << 30)
    header = struct.pack(">hhi", api_key, version, correlation_id) + string(client_id)
    if flexible:
        header += TAGS_NONE
    payload = header + body
    return struct.pack(">i", len(payload)) + payload


def recv_exact(sock, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def recv_frame(sock, max_size=64 << 20):
    """Reads one response frame; None if the peer closed the connection."""
    head = recv_exact(sock, 4)
    if head is None:
        return None
    (size,) = struct.unpack(">i", head)
    if not 4 <= size <= max_size:
        raise AssertionError(f"broker sent a frame of implausible size {size}")
    return recv_exact(sock, size)


def response_body(frame, api_key, version, correlation_id):
    """Checks the correlation id and returns a Reader positioned at the response body."""
    r = Reader(frame)
    got = r.i32()
    assert got == correlation_id, f"correlation id {got}, expected {correlation_id}"
    # ApiVersions responses always use header v0, so old clients can read them (KIP-511).
    if api_key != API_VERSIONS and version >= FLEXIBLE_FROM.get(api_key, 1 << 30):
        r.skip_tags()
    return r


def connect(broker, timeout=10.0):
    s = socket.create_connection((broker.host, broker.port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def roundtrip(sock, api_key, version, correlation_id, body):
    sock.sendall(request(api_key, version, correlation_id, body))
    frame = recv_frame(sock)
    assert frame is not None, f"broker closed the connection instead of answering api {api_key} v{version}"
    return response_body(frame, api_key, version, correlation_id)


# ---------------------------------------------------------------- ApiVersions


def api_versions_body(version):
    if version >= 3:
        return string("interop-raw", True) + string("1.0", True) + TAGS_NONE
    return b""


def parse_api_versions(r, version):
    """Returns (error_code, {api_key: (min, max)})."""
    flexible = version >= 3
    error = r.i16()
    ranges = {}
    for _ in range(r.array_len(flexible)):
        key, lo, hi = r.i16(), r.i16(), r.i16()
        if flexible:
            r.skip_tags()
        ranges[key] = (lo, hi)
    return error, ranges


def api_versions(broker):
    with connect(broker) as s:
        error, ranges = parse_api_versions(roundtrip(s, API_VERSIONS, 0, 1, b""), 0)
        assert error == 0
        return ranges


def pick_version(ranges, api_key, lo, hi):
    """The highest version in [lo, hi] the broker supports, or None."""
    if api_key not in ranges:
        return None
    blo, bhi = ranges[api_key]
    v = min(hi, bhi)
    return v if v >= max(lo, blo) else None


# ---------------------------------------------------------------- Metadata


def metadata_body(version, topics):
    """topics: None = all topics (the array is null), else a list of names."""
    flexible = version >= 9
    if topics is None:
        out = uvarint(0) if flexible else struct.pack(">i", -1)
    else:
        out = array_len(len(topics), flexible)
        for t in topics:
            if version >= 10:
                out += bytes(16)  # topic_id: zero uuid = "by name"
            out += string(t, flexible)
            if flexible:
                out += TAGS_NONE
    out += b"\x00"  # allow_auto_topic_creation = false (v4+)
    if 8 <= version <= 10:
        out += b"\x00"  # include_cluster_authorized_operations
    out += b"\x00"  # include_topic_authorized_operations (v8+)
    if flexible:
        out += TAGS_NONE
    return out


METADATA_CLUSTER_VERSION = 12  # the newest version both Kafka 4.x and Annal answer; carries leader epochs


def parse_metadata_v12(r):
    """A Metadata v12 response as a dict: brokers {id: (host, port, rack)}, cluster_id, controller_id, and
    topics {name: {"error": code, "topic_id": hex, "partitions": {index: {leader, leader_epoch, replicas, isr, offline, error}}}}."""
    r.i32()  # throttle_time_ms
    brokers = {}
    for _ in range(r.array_len(True)):
        node_id, host, port, rack = r.i32(), r.string(True), r.i32(), r.string(True)
        r.skip_tags()
        brokers[node_id] = (host, port, rack)
    cluster_id = r.string(True)
    controller_id = r.i32()
    topics = {}
    for _ in range(r.array_len(True)):
        error, name = r.i16(), r.string(True)
        topic_id = bytes(r.take(16)).hex()
        r.i8()  # is_internal
        partitions = {}
        for _ in range(r.array_len(True)):
            p_error, index, leader, epoch = r.i16(), r.i32(), r.i32(), r.i32()
            replicas = [r.i32() for _ in range(r.array_len(True))]
            isr = [r.i32() for _ in range(r.array_len(True))]
            offline = [r.i32() for _ in range(r.array_len(True))]
            r.skip_tags()
            partitions[index] = {"error": p_error, "leader": leader, "leader_epoch": epoch, "replicas": replicas,
                                 "isr": isr, "offline": offline}
        r.i32()  # topic_authorized_operations
        r.skip_tags()
        topics[name] = {"error": error, "topic_id": topic_id, "partitions": partitions}
    r.skip_tags()
    return {"brokers": brokers, "cluster_id": cluster_id, "controller_id": controller_id, "topics": topics}


def metadata(node, topics=None, timeout=5.0):
    """Metadata v12 asked of this one node (not of whichever broker a client library happens to pick)."""
    with connect(node, timeout=timeout) as s:
        v = METADATA_CLUSTER_VERSION
        return parse_metadata_v12(roundtrip(s, API_METADATA, v, 1, metadata_body(v, topics)))


def describe_cluster(node, timeout=5.0):
    """DescribeCluster v0 asked of this node: {error, error_message, cluster_id, controller_id, brokers {id: ...}}."""
    with connect(node, timeout=timeout) as s:
        r = roundtrip(s, API_DESCRIBE_CLUSTER, 0, 1, b"\x00" + TAGS_NONE)  # include_cluster_authorized_operations
        r.i32()  # throttle_time_ms
        error, message, cluster_id, controller_id = r.i16(), r.string(True), r.string(True), r.i32()
        brokers = {}
        for _ in range(r.array_len(True)):
            node_id, host, port, rack = r.i32(), r.string(True), r.i32(), r.string(True)
            r.skip_tags()
            brokers[node_id] = (host, port, rack)
        return {"error": error, "error_message": message, "cluster_id": cluster_id, "controller_id": controller_id,
                "brokers": brokers}


def init_producer_id(node, timeout=10.0):
    """InitProducerId v4 (idempotent, no transactional id) asked of this node: (error, producer_id, epoch)."""
    body = b"\x00" + struct.pack(">iqh", 60000, -1, -1) + TAGS_NONE  # null transactional id (compact)
    with connect(node, timeout=timeout) as s:
        r = roundtrip(s, API_INIT_PRODUCER_ID, 4, 1, body)
        r.i32()  # throttle_time_ms
        return r.i16(), r.i64(), r.i16()


def describe_quorum(node, timeout=5.0):
    """DescribeQuorum v1 for __cluster_metadata-0 asked of this node (a broker forwards it to the active controller):
    {error, leader_id, leader_epoch, high_watermark, voters [ids], observers [ids]}."""
    body = (array_len(1, True) + string("__cluster_metadata", True) + array_len(1, True) + struct.pack(">i", 0)
            + TAGS_NONE + TAGS_NONE + TAGS_NONE)
    with connect(node, timeout=timeout) as s:
        r = roundtrip(s, API_DESCRIBE_QUORUM, 1, 1, body)
        error = r.i16()
        out = {"error": error, "leader_id": -1, "leader_epoch": -1, "high_watermark": -1, "voters": [],
               "observers": []}
        for _ in range(r.array_len(True)):
            r.string(True)  # topic name
            for _ in range(r.array_len(True)):
                r.i32()  # partition index
                p_error, leader, epoch, hw = r.i16(), r.i32(), r.i32(), r.i64()
                groups = []
                for _ in range(2):  # current voters, then observers
                    ids = []
                    for _ in range(r.array_len(True)):
                        ids.append(r.i32())
                        r.i64(), r.i64(), r.i64()  # log end offset, last fetch, last caught up (v1)
                        r.skip_tags()
                    groups.append(ids)
                r.skip_tags()
                out.update(error=error or p_error, leader_id=leader, leader_epoch=epoch, high_watermark=hw,
                           voters=groups[0], observers=groups[1])
            r.skip_tags()
        r.skip_tags()
        return out


# ---------------------------------------------------------------- record batches


def record(offset_delta, key, value, headers=(), timestamp_delta=0, header_count=None):
    body = b"\x00" + varint(timestamp_delta) + varint(offset_delta)
    body += varint(-1) if key is None else varint(len(key)) + key
    body += varint(-1) if value is None else varint(len(value)) + value
    body += varint(len(headers) if header_count is None else header_count)
    for hk, hv in headers:
        body += varint(len(hk)) + hk + (varint(-1) if hv is None else varint(len(hv)) + hv)
    return varint(len(body)) + body


def record_batch(values, base_timestamp=1_700_000_000_000, records_count=None, raw_records=None, attributes=0):
    """An uncompressed v2 batch holding `values` (or `raw_records`), base offset 0, with a correct CRC.

    records_count overrides the count field (to lie about it); raw_records replaces the encoded records."""
    recs = raw_records if raw_records is not None else b"".join(
        record(i, None, v, timestamp_delta=i) for i, v in enumerate(values))
    n = len(values) if records_count is None else records_count
    last_delta = max(len(values) - 1, 0)
    after_crc = struct.pack(">hiqqqhii", attributes, last_delta, base_timestamp, base_timestamp + last_delta,
                            -1, -1, -1, n) + recs
    # Imported here so that the cluster harness (cluster.py, stdlib only) can use this module without the venv.
    from kafka.record.util import calc_crc32c
    crc = calc_crc32c(after_crc)
    # partitionLeaderEpoch, magic, crc
    after_length = struct.pack(">ibI", -1, 2, crc) + after_crc
    return struct.pack(">qi", 0, len(after_length)) + after_length


def parse_batches(data):
    """Splits Fetch response records into batch headers: [(base_offset, last_offset, count, records_bytes)]."""
    out = []
    pos = 0
    while pos + 61 <= len(data):
        base_offset, length = struct.unpack_from(">qi", data, pos)
        if pos + 12 + length > len(data):
            break  # a partial batch at the end of a fetch response is allowed
        last_delta = struct.unpack_from(">i", data, pos + 23)[0]
        count = struct.unpack_from(">i", data, pos + 57)[0]
        out.append((base_offset, base_offset + last_delta, count))
        pos += 12 + length
    return out


# ---------------------------------------------------------------- Produce


def produce_body(version, topic, partition, records, acks=-1, timeout_ms=10000, topic_count=None,
                 partition_count=None):
    flexible = version >= 9
    out = string(None, flexible) + struct.pack(">hi", acks, timeout_ms)
    out += array_len(1 if topic_count is None else topic_count, flexible)
    out += string(topic, flexible)
    out += array_len(1 if partition_count is None else partition_count, flexible)
    out += struct.pack(">i", partition) + nbytes(records, flexible)
    if flexible:
        out += TAGS_NONE + TAGS_NONE + TAGS_NONE  # partition, topic, request
    return out


def parse_produce(r, version):
    """Returns (topic, partition, error_code, base_offset) of the first partition in the response."""
    flexible = version >= 9
    assert r.array_len(flexible) >= 1
    topic = r.string(flexible)
    assert r.array_len(flexible) >= 1
    partition, error, base_offset = r.i32(), r.i16(), r.i64()
    return topic, partition, error, base_offset


# ---------------------------------------------------------------- Fetch


def fetch_body(version, topic, partition, offset, max_bytes=1 << 20, max_wait_ms=100):
    flexible = version >= 12
    out = struct.pack(">iiiib", -1, max_wait_ms, 1, max_bytes, 0)  # replica, wait, min bytes, max bytes, isolation
    if version >= 7:
        out += struct.pack(">ii", 0, -1)  # no fetch session (full fetch, KIP-227 "sessionless")
    out += array_len(1, flexible) + string(topic, flexible) + array_len(1, flexible)
    out += struct.pack(">i", partition)
    if version >= 9:
        out += struct.pack(">i", -1)  # current_leader_epoch: unknown
    out += struct.pack(">q", offset)
    if version >= 12:
        out += struct.pack(">i", -1)  # last_fetched_epoch
    if version >= 5:
        out += struct.pack(">q", -1)  # log_start_offset (followers only)
    out += struct.pack(">i", max_bytes)
    if flexible:
        out += TAGS_NONE + TAGS_NONE  # partition, topic
    if version >= 7:
        out += array_len(0, flexible)  # forgotten topics
    if version >= 11:
        out += string("", flexible)  # rack id
    if flexible:
        out += TAGS_NONE
    return out


def parse_fetch(r, version):
    """Returns (error_code, high_watermark, records bytes) of the first partition in the response."""
    flexible = version >= 12
    r.i32()  # throttle
    if version >= 7:
        top_error = r.i16()
        r.i32()  # session id
        assert top_error == 0, f"fetch top-level error {top_error}"
    assert r.array_len(flexible) >= 1
    r.string(flexible)
    assert r.array_len(flexible) >= 1
    r.i32()
    error, hw = r.i16(), r.i64()
    r.i64()  # last stable offset
    if version >= 5:
        r.i64()  # log start offset
    aborted = r.array_len(flexible)
    for _ in range(max(aborted, 0)):
        r.i64()
        r.i64()
        if flexible:
            r.skip_tags()
    if version >= 11:
        r.i32()  # preferred read replica
    return error, hw, r.nbytes(flexible) or b""


# ---------------------------------------------------------------- group coordinator

API_OFFSET_COMMIT, API_FIND_COORDINATOR = 8, 10
NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS = 16, 15, 14


def java_string_hash(s):
    """Java's String.hashCode (over UTF-16 code units), as a signed 32-bit int."""
    data = s.encode("utf-16-be")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def group_partition(group, partitions):
    """Kafka's __consumer_offsets partition of a group: Utils.abs(groupId.hashCode()) % partitions."""
    h = java_string_hash(group)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


def find_coordinator(node, group, timeout=5.0):
    """FindCoordinator v2 (group key) asked of this node: (error, node_id, host, port)."""
    body = string(group) + struct.pack(">b", 0)
    with connect(node, timeout=timeout) as s:
        r = roundtrip(s, API_FIND_COORDINATOR, 2, 1, body)
        r.i32()  # throttle_time_ms
        error = r.i16()
        r.string()  # error_message
        return error, r.i32(), r.string(), r.i32()


def offset_commit(node, group, topic, partition, offset, timeout=10.0):
    """A standalone OffsetCommit v2 (generation -1, no member) of one partition asked of this node: its error."""
    body = (string(group) + struct.pack(">i", -1) + string("") + struct.pack(">q", -1)
            + struct.pack(">i", 1) + string(topic) + struct.pack(">i", 1)
            + struct.pack(">iq", partition, offset) + string(None))
    with connect(node, timeout=timeout) as s:
        r = roundtrip(s, API_OFFSET_COMMIT, 2, 1, body)
        errors = []
        for _ in range(r.array_len()):
            r.string()
            for _ in range(r.array_len()):
                r.i32()
                errors.append(r.i16())
        assert len(errors) == 1, f"one partition committed, {len(errors)} answered"
        return errors[0]


def produce_with_hints(node, topic, partition, value=b"hint", version=10, timeout=10.0):
    """Produce v10+ (acks=1) of one record to this node: {error, current_leader: (id, epoch) or None,
    node_endpoints {id: (host, port)}}, the KIP-951 hints a non-leader answers with."""
    body = produce_body(version, topic, partition, record_batch([value]), acks=1)
    with connect(node, timeout=timeout) as s:
        r = roundtrip(s, API_PRODUCE, version, 1, body)
        out = {"error": None, "current_leader": None, "node_endpoints": {}}
        for _ in range(r.array_len(True)):
            r.string(True)
            for _ in range(r.array_len(True)):
                r.i32()  # index
                error = r.i16()
                r.i64(), r.i64(), r.i64()  # base offset, log append time, log start offset
                for _ in range(r.array_len(True)):
                    r.i32()
                    r.string(True)
                    r.skip_tags()
                r.string(True)  # error message
                for _ in range(r.uvarint()):
                    tag, size = r.uvarint(), r.uvarint()
                    if tag == 0:
                        leader, epoch = r.i32(), r.i32()
                        r.skip_tags()
                        out["current_leader"] = (leader, epoch)
                    else:
                        r.take(size)
                if out["error"] is None:
                    out["error"] = error
            r.skip_tags()
        r.i32()  # throttle
        for _ in range(r.uvarint()):
            tag, size = r.uvarint(), r.uvarint()
            if tag == 0:
                for _ in range(r.array_len(True)):
                    node_id, host, port = r.i32(), r.string(True), r.i32()
                    r.string(True)  # rack
                    r.skip_tags()
                    out["node_endpoints"][node_id] = (host, port)
            else:
                r.take(size)
        return out


# ---------------------------------------------------------------- transactions, partition side (issue 12)

API_WRITE_TXN_MARKERS = 27
FLEXIBLE_FROM[API_WRITE_TXN_MARKERS] = 1
ATTR_TRANSACTIONAL = 0x10


def producer_batch(values, producer_id, epoch, base_sequence, attributes=ATTR_TRANSACTIONAL,
                   base_timestamp=1_700_000_000_000):
    """An uncompressed v2 batch of an idempotent (by default transactional) producer, base offset 0."""
    recs = b"".join(record(i, None, v, timestamp_delta=i) for i, v in enumerate(values))
    last_delta = len(values) - 1
    after_crc = struct.pack(">hiqqqhii", attributes, last_delta, base_timestamp, base_timestamp + last_delta,
                            producer_id, epoch, base_sequence, len(values)) + recs
    from kafka.record.util import calc_crc32c
    after_length = struct.pack(">ibI", -1, 2, calc_crc32c(after_crc)) + after_crc
    return struct.pack(">qi", 0, len(after_length)) + after_length


def txn_produce(node, transactional_id, topic, partition, records, version=9, timeout=10.0):
    """Produce (flexible, acks=all) carrying a transactional id: (error_code, base_offset)."""
    body = string(transactional_id, True) + struct.pack(">hi", -1, 10000)
    body += array_len(1, True) + string(topic, True) + array_len(1, True)
    body += struct.pack(">i", partition) + nbytes(records, True) + TAGS_NONE + TAGS_NONE + TAGS_NONE
    with connect(node, timeout=timeout) as s:
        r = roundtrip(s, API_PRODUCE, version, 1, body)
        _, _, error, base_offset = parse_produce(r, version)
        return error, base_offset


def write_txn_markers(node, markers, timeout=35.0):
    """WriteTxnMarkers v1. markers: [(producer_id, epoch, commit, coordinator_epoch, {topic: [partitions]})].
    Returns {(producer_id, topic, partition): error_code}."""
    body = array_len(len(markers), True)
    for producer_id, epoch, commit, coordinator_epoch, topics in markers:
        body += struct.pack(">qhb", producer_id, epoch, 1 if commit else 0) + array_len(len(topics), True)
        for topic, partitions in topics.items():
            body += string(topic, True) + array_len(len(partitions), True)
            body += b"".join(struct.pack(">i", p) for p in partitions) + TAGS_NONE
        body += struct.pack(">i", coordinator_epoch) + TAGS_NONE
    body += TAGS_NONE
    out = {}
    with connect(node, timeout=timeout) as s:
        r = roundtrip(s, API_WRITE_TXN_MARKERS, 1, 1, body)
        for _ in range(r.array_len(True)):
            producer_id = r.i64()
            for _ in range(r.array_len(True)):
                topic = r.string(True)
                for _ in range(r.array_len(True)):
                    partition, error = r.i32(), r.i16()
                    r.skip_tags()
                    out[(producer_id, topic, partition)] = error
                r.skip_tags()
            r.skip_tags()
        r.skip_tags()
    return out


def fetch_isolated(node, topic, partition, offset, isolation, version=12, max_wait_ms=0, timeout=10.0):
    """Fetch v12 with an isolation level (0 read_uncommitted, 1 read_committed): {error, high_watermark,
    last_stable_offset, log_start_offset, aborted (list of (producer_id, first_offset), or None), records}."""
    body = bytearray(fetch_body(version, topic, partition, offset, max_wait_ms=max_wait_ms))
    body[16] = isolation  # replica id, max wait, min bytes, max bytes (4 bytes each), then isolation_level
    with connect(node, timeout=timeout) as s:
        r = roundtrip(s, API_FETCH, version, 1, bytes(body))
        r.i32()  # throttle
        assert r.i16() == 0, "fetch top-level error"
        r.i32()  # session id
        assert r.array_len(True) == 1
        r.string(True)
        assert r.array_len(True) == 1
        r.i32()
        out = {"error": r.i16(), "high_watermark": r.i64(), "last_stable_offset": r.i64(),
               "log_start_offset": r.i64()}
        n = r.array_len(True)
        aborted = None if n < 0 else []
        for _ in range(max(n, 0)):
            aborted.append((r.i64(), r.i64()))
            r.skip_tags()
        out["aborted"] = aborted
        r.i32()  # preferred read replica
        out["records"] = r.nbytes(True) or b""
        return out


def list_offset(node, topic, partition, timestamp=-1, isolation=0, version=7, timeout=10.0):
    """ListOffsets v7 for one partition: (error_code, offset)."""
    body = struct.pack(">ib", -1, isolation) + array_len(1, True) + string(topic, True) + array_len(1, True)
    body += struct.pack(">iiq", partition, -1, timestamp) + TAGS_NONE + TAGS_NONE + TAGS_NONE
    with connect(node, timeout=timeout) as s:
        r = roundtrip(s, API_LIST_OFFSETS, version, 1, body)
        r.i32()  # throttle
        assert r.array_len(True) == 1
        r.string(True)
        assert r.array_len(True) == 1
        r.i32()
        error, _ts, offset = r.i16(), r.i64(), r.i64()
        return error, offset
