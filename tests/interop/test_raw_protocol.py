"""Robustness and protocol details, with plain sockets: malformed input must never take the broker down.

For every bad input the broker either answers or closes that one connection; other connections keep being served
and the broker's memory stays small (no allocation of a declared-but-absent 2 GiB frame or 2^31-element array).
"""

import os
import random
import socket
import struct
import threading
import time

import psutil
import pytest

import kwire
from kwire import API_FETCH, API_METADATA, API_PRODUCE, API_VERSIONS
from clients import ck_consume, create_topic

RSS_LIMIT_BYTES = int(os.environ.get("INTEROP_RSS_LIMIT_MB", "200")) << 20


def outcome(sock, timeout=10.0):
    """'closed' if the broker closes the connection, 'answered' if it sends bytes, 'silent' if neither in time."""
    sock.settimeout(timeout)
    try:
        data = sock.recv(65536)
    except (ConnectionResetError, BrokenPipeError):
        return "closed"
    except socket.timeout:
        return "silent"
    return "answered" if data else "closed"


def send_quietly(sock, data):
    """Sends, tolerating the broker closing the connection part-way (a valid reaction to bad input)."""
    try:
        sock.sendall(data)
    except (ConnectionResetError, BrokenPipeError):
        pass


def assert_still_serving(broker):
    """A fresh connection gets a correct ApiVersions answer."""
    ranges = kwire.api_versions(broker)
    assert API_VERSIONS in ranges


def broker_rss(broker):
    pid = broker.pid()
    if pid is None:
        return None
    proc = psutil.Process(pid)
    return proc.memory_info().rss + sum(c.memory_info().rss for c in proc.children(recursive=True))


@pytest.fixture
def stays_lean(broker):
    """After the test: the broker still serves, and (for Annal) its RSS is below the limit."""
    yield
    assert broker.alive(), f"the broker process died:\n{broker.log_tail()}"
    assert_still_serving(broker)
    if broker.kind == "annal":
        rss = broker_rss(broker)
        assert rss is not None and rss < RSS_LIMIT_BYTES, f"broker RSS {rss >> 20} MiB after malformed input"


@pytest.fixture(scope="module")
def ranges(broker):
    return kwire.api_versions(broker)


# ---------------------------------------------------------------- ApiVersions


def test_api_versions_v0_lists_the_apis_clients_need(ranges):
    needed = {0: "Produce", 1: "Fetch", 2: "ListOffsets", 3: "Metadata", 18: "ApiVersions", 19: "CreateTopics",
              20: "DeleteTopics", 21: "DeleteRecords", 32: "DescribeConfigs", 33: "AlterConfigs",
              37: "CreatePartitions", 44: "IncrementalAlterConfigs", 60: "DescribeCluster"}
    missing = [name for key, name in needed.items() if key not in ranges]
    assert not missing, f"ApiVersions does not advertise {missing}"
    for key, (lo, hi) in ranges.items():
        assert 0 <= lo <= hi, f"api {key}: bad range {lo}..{hi}"
    assert ranges[API_VERSIONS][1] >= 3, "Kafka 4.x clients send ApiVersions v3 or later"


def test_api_versions_v3_flexible_request(broker, ranges):
    with kwire.connect(broker) as s:
        r = kwire.roundtrip(s, API_VERSIONS, 3, 7, kwire.api_versions_body(3))
        error, v3_ranges = kwire.parse_api_versions(r, 3)
    assert error == 0
    assert v3_ranges == ranges


def test_api_versions_unsupported_version_answers_unsupported_version(broker, ranges):
    """KIP-511: a too-new ApiVersions gets UNSUPPORTED_VERSION in a v0 response carrying the supported range."""
    with kwire.connect(broker) as s:
        s.sendall(kwire.request(API_VERSIONS, 127, 99, b"\x00\x00\x00"))
        frame = kwire.recv_frame(s)
    assert frame is not None, "broker closed the connection instead of answering ApiVersions v127"
    r = kwire.Reader(frame)
    assert r.i32() == 99
    error, v0_ranges = kwire.parse_api_versions(r, 0)
    assert error == kwire.UNSUPPORTED_VERSION
    assert v0_ranges.get(API_VERSIONS) == ranges[API_VERSIONS]


def test_pipelined_requests_answered_in_order(broker, ranges):
    mv = kwire.pick_version(ranges, API_METADATA, 4, 12)
    reqs = []
    for i in range(30):
        if i % 2:
            reqs.append((API_VERSIONS, 0, 1000 + i, b""))
        else:
            reqs.append((API_METADATA, mv, 1000 + i, kwire.metadata_body(mv, [])))
    with kwire.connect(broker) as s:
        s.sendall(b"".join(kwire.request(*q) for q in reqs))
        for key, version, cid, _ in reqs:
            frame = kwire.recv_frame(s)
            assert frame is not None
            kwire.response_body(frame, key, version, cid)  # asserts the correlation id, i.e. the order


def test_many_concurrent_connections(broker):
    errors = []

    def one():
        try:
            with kwire.connect(broker) as s:
                for i in range(5):
                    kwire.parse_api_versions(kwire.roundtrip(s, API_VERSIONS, 0, i, b""), 0)
        except Exception as e:  # noqa: BLE001 - collected and reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=one) for _ in range(64)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors[:5]


# ---------------------------------------------------------------- malformed frames


def test_http_request_on_kafka_port(broker, stays_lean):
    # "GET " read as a size is 1.19 GB, over socket.request.max.bytes (100 MiB): refused without allocating it.
    with kwire.connect(broker) as s:
        send_quietly(s, b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
        assert outcome(s) == "closed"


@pytest.mark.parametrize("size", [0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 100 * 1024 * 1024 + 1],
                         ids=["2GiB", "negative-min", "minus-one", "just-over-100MiB"])
def test_declared_frame_size_too_large_or_negative(broker, stays_lean, size):
    with kwire.connect(broker) as s:
        send_quietly(s, struct.pack(">I", size) + b"\x00\x12\x00\x00" + b"\x00" * 64)
        assert outcome(s) == "closed"


def test_random_garbage_frames(broker, stays_lean):
    rng = random.Random(20261130)
    for i in range(40):
        payload = bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 600)))
        with kwire.connect(broker) as s:
            if i % 2:
                send_quietly(s, struct.pack(">i", len(payload)) + payload)  # well-framed garbage
            else:
                send_quietly(s, payload)  # garbage, size prefix included
                try:
                    s.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
            assert outcome(s) in ("closed", "answered"), f"garbage #{i}: broker neither answered nor closed"


def test_truncated_frame_then_eof(broker, stays_lean):
    full = kwire.request(API_VERSIONS, 0, 1, b"")
    for cut in (1, 3, 4, 7, len(full) - 1):
        with kwire.connect(broker) as s:
            s.sendall(full[:cut])
            s.shutdown(socket.SHUT_WR)
            assert outcome(s) == "closed", f"cut at {cut}"


def test_truncated_body_inside_valid_frame(broker, ranges, stays_lean):
    """The frame is complete but the request inside is cut short: Metadata topic list missing its entries."""
    mv = kwire.pick_version(ranges, API_METADATA, 4, 12)
    body = kwire.metadata_body(mv, ["a-topic", "b-topic"])[:-6]
    with kwire.connect(broker) as s:
        s.sendall(kwire.request(API_METADATA, mv, 5, body))
        assert outcome(s) in ("closed", "answered")


def test_half_sent_frame_does_not_block_others(broker, stays_lean):
    """A client that sends half a frame and stalls must not hold up anyone else."""
    stalled = kwire.connect(broker)
    try:
        stalled.sendall(struct.pack(">i", 1000) + b"\x00\x12\x00\x00" + b"\x00" * 100)
        t0 = time.monotonic()
        assert_still_serving(broker)
        assert time.monotonic() - t0 < 5
    finally:
        stalled.close()


# ---------------------------------------------------------------- unknown APIs and versions


def test_unknown_api_key(broker, ranges, stays_lean):
    key = 32000
    assert key not in ranges
    with kwire.connect(broker) as s:
        s.sendall(kwire.request(key, 0, 42, b"\x00" * 16))
        frame = kwire.recv_frame(s) if outcome_peek(s) == "answered" else None
        if frame is not None:
            r = kwire.Reader(frame)
            assert r.i32() == 42


def outcome_peek(sock, timeout=10.0):
    sock.settimeout(timeout)
    try:
        data = sock.recv(1, socket.MSG_PEEK)
    except (ConnectionResetError, BrokenPipeError):
        return "closed"
    except socket.timeout:
        raise AssertionError("broker neither answered nor closed the connection")
    return "answered" if data else "closed"


@pytest.mark.parametrize("api", [API_METADATA, API_PRODUCE, API_FETCH])
def test_unsupported_version_of_known_api(broker, ranges, stays_lean, api):
    version = ranges[api][1] + 1
    with kwire.connect(broker) as s:
        s.sendall(kwire.request(api, version, 43, b"\x00" * 32))
        if outcome_peek(s) == "answered":
            frame = kwire.recv_frame(s)
            r = kwire.Reader(frame)
            assert r.i32() == 43
            # Some error must be in there: UNSUPPORTED_VERSION (35) encoded as an int16.
            assert struct.pack(">h", kwire.UNSUPPORTED_VERSION) in frame[4:]


# ---------------------------------------------------------------- huge counts inside valid frames


def test_metadata_topic_array_count_2_pow_31(broker, ranges, stays_lean):
    mv = kwire.pick_version(ranges, API_METADATA, 4, 12)
    flexible = mv >= 9
    body = (kwire.uvarint(0x7FFFFFFF) if flexible else struct.pack(">i", 0x7FFFFFFF)) + b"\x00" * 8
    with kwire.connect(broker) as s:
        s.sendall(kwire.request(API_METADATA, mv, 6, body))
        assert outcome(s) in ("closed", "answered")


def produce_version(ranges):
    v = kwire.pick_version(ranges, API_PRODUCE, 3, 12)
    if v is None:
        pytest.skip(f"broker supports no Produce version in 3..12 (advertises {ranges.get(API_PRODUCE)})")
    return v


@pytest.mark.parametrize("what", ["topics", "partitions"])
def test_produce_array_count_2_pow_31(broker, ranges, stays_lean, topic_name, what):
    create_topic(broker, topic_name)
    pv = produce_version(ranges)
    batch = kwire.record_batch([b"x"])
    body = kwire.produce_body(pv, topic_name, 0, batch, **{f"{what[:-1]}_count": 0x7FFFFFFF})
    with kwire.connect(broker) as s:
        s.sendall(kwire.request(API_PRODUCE, pv, 8, body))
        assert outcome(s) in ("closed", "answered")


def produce_one(broker, ranges, topic, records):
    pv = produce_version(ranges)
    with kwire.connect(broker) as s:
        s.sendall(kwire.request(API_PRODUCE, pv, 9, kwire.produce_body(pv, topic, 0, records)))
        frame = kwire.recv_frame(s)
        if frame is None:
            return "closed"
        _, partition, error, _ = kwire.parse_produce(kwire.response_body(frame, API_PRODUCE, pv, 9), pv)
        assert partition == 0
        return error


@pytest.mark.parametrize("case", ["records-count-2^31", "records-count-too-small", "header-count-2^31",
                                  "bad-crc", "record-length-beyond-batch"])
def test_produce_malformed_batch_rejected(broker, ranges, stays_lean, topic_name, case):
    """A batch whose counts or lengths lie is refused (CORRUPT_MESSAGE or INVALID_RECORD), never stored."""
    create_topic(broker, topic_name)
    if case == "records-count-2^31":
        batch = kwire.record_batch([b"a", b"b"], records_count=0x7FFFFFFF)
    elif case == "records-count-too-small":
        batch = kwire.record_batch([b"a", b"b", b"c"], records_count=1)
    elif case == "header-count-2^31":
        batch = kwire.record_batch([b"a"], raw_records=kwire.record(0, None, b"a", header_count=0x7FFFFFFF))
    elif case == "bad-crc":
        good = bytearray(kwire.record_batch([b"a"]))
        good[-1] ^= 0xFF  # inside the record: the CRC no longer matches
        batch = bytes(good)
    else:
        rec = bytearray(kwire.record(0, None, b"abc"))
        rec[0] = 0x7E  # varint 63: the record claims more bytes than the batch holds
        batch = kwire.record_batch([b"abc"], raw_records=bytes(rec))
    result = produce_one(broker, ranges, topic_name, batch)
    CORRUPT_MESSAGE, INVALID_RECORD = 2, 87
    assert result in ("closed", CORRUPT_MESSAGE, INVALID_RECORD), f"{case}: produce answered error {result}"
    # Nothing was stored: a valid record now gets offset 0.
    assert produce_one(broker, ranges, topic_name, kwire.record_batch([b"ok"])) == 0
    got = ck_consume(broker, topic_name, [0], 1)
    assert (got[0].offset(), got[0].value()) == (0, b"ok")


# ---------------------------------------------------------------- fetch semantics


def test_raw_fetch_inside_batch_returns_whole_containing_batch(broker, ranges, topic_name):
    """Fetching offset 5 of a 10-record batch returns that batch from its start (base offset 0), not the next one."""
    fv = kwire.pick_version(ranges, API_FETCH, 4, 12)
    if fv is None:
        pytest.skip(f"broker supports no Fetch version in 4..12 (advertises {ranges.get(API_FETCH)})")
    create_topic(broker, topic_name)
    assert produce_one(broker, ranges, topic_name, kwire.record_batch([b"v%d" % i for i in range(10)])) == 0
    assert produce_one(broker, ranges, topic_name, kwire.record_batch([b"w%d" % i for i in range(3)])) == 0
    with kwire.connect(broker) as s:
        for offset, first in ((5, (0, 9, 10)), (9, (0, 9, 10)), (10, (10, 12, 3)), (0, (0, 9, 10))):
            error, hw, records = kwire.parse_fetch(
                kwire.roundtrip(s, API_FETCH, fv, 20 + offset, kwire.fetch_body(fv, topic_name, 0, offset)), fv)
            assert (error, hw) == (0, 13)
            batches = kwire.parse_batches(records)
            assert batches and batches[0] == first, f"fetch at {offset}: {batches}"
        # At the log end: no records; beyond it: OFFSET_OUT_OF_RANGE (1).
        error, hw, records = kwire.parse_fetch(
            kwire.roundtrip(s, API_FETCH, fv, 40, kwire.fetch_body(fv, topic_name, 0, 13)), fv)
        assert (error, records) == (0, b"")
        error, _, _ = kwire.parse_fetch(
            kwire.roundtrip(s, API_FETCH, fv, 41, kwire.fetch_body(fv, topic_name, 0, 14)), fv)
        assert error == 1
