"""Wire-level fuzzing of a running broker: mutated real request frames over many connections.

The frames are real encodings: the request-frame fuzz target's seed corpus (fuzz/corpus/request_frame/, every API
key and advertised version as kafka-protocol encodes them, written by fuzz/examples/gen_corpus.rs) plus Produce and
Fetch frames built by kwire. Each frame is mutated (bit flips, interesting integers, truncation, insertion,
duplication, a lying size prefix) and sent on one of many concurrent connections. Afterwards the broker must be
alive, its RSS bounded, and it must still serve a normal produce and fetch.

  WIRE_FUZZ_SEED=<n>     replay a run (the seed is printed at the start of every run)
  WIRE_FUZZ_FRAMES=<n>   how many mutated frames (default 4000; 200000 makes a long run)
  WIRE_FUZZ_THREADS=<n>  concurrent connections (default 16)
"""

import os
import random
import socket
import struct
import threading
import time
from pathlib import Path

import psutil
import pytest

import kwire
from kwire import API_FETCH, API_PRODUCE
from clients import create_topic

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO / "fuzz" / "corpus" / "request_frame"
RSS_LIMIT_BYTES = int(os.environ.get("INTEROP_RSS_LIMIT_MB", "200")) << 20
FRAMES = int(os.environ.get("WIRE_FUZZ_FRAMES", "4000"))
THREADS = int(os.environ.get("WIRE_FUZZ_THREADS", "16"))
# A mutated Fetch or Produce may legitimately wait (max_wait_ms, a long timeout_ms): wait this long, then move on.
ANSWER_WAIT_S = 0.25
INTERESTING_32 = [0, 1, -1, 0x7FFFFFFF, -0x80000000, 0x7FFF, 0x8000, 0xFFFF, 0x10000, 100 * 1024 * 1024]
INTERESTING_8 = [0, 1, 0x7F, 0x80, 0xFF, 0xFE]


def seed_frames(topic):
    """Real request frames (header + body, no size prefix)."""
    frames = [p.read_bytes() for p in sorted(CORPUS.glob("*")) if p.is_file()]
    batch = kwire.record_batch([b"fuzz-%d" % i for i in range(5)])
    for v in (3, 7, 9, 12):
        frames.append(kwire.request(API_PRODUCE, v, 1, kwire.produce_body(v, topic, 0, batch))[4:])
    for v in (4, 11, 12):
        frames.append(kwire.request(API_FETCH, v, 2, kwire.fetch_body(v, topic, 0, 0, max_wait_ms=10))[4:])
    return frames


def mutate(rng, frame):
    data = bytearray(frame)
    for _ in range(rng.choice([1, 1, 1, 2, 3, 6])):
        op = rng.randrange(7)
        if not data:
            data = bytearray(rng.randbytes(rng.randint(1, 16)))
        at = rng.randrange(len(data))
        if op == 0:
            data[at] ^= 1 << rng.randrange(8)
        elif op == 1:
            data[at] = rng.choice(INTERESTING_8)
        elif op == 2 and len(data) >= 4:
            at = rng.randrange(len(data) - 3)
            data[at:at + 4] = struct.pack(">i", rng.choice(INTERESTING_32))
        elif op == 3 and len(data) >= 2:
            at = rng.randrange(len(data) - 1)
            data[at:at + 2] = struct.pack(">h", rng.choice([0, -1, 0x7FFF, -0x8000, 1]))
        elif op == 4:
            del data[rng.randrange(len(data)):]
        elif op == 5:
            data[at:at] = rng.randbytes(rng.randint(1, 32))
        else:
            end = min(len(data), at + rng.randint(1, 64))
            data[at:at] = data[at:end]
    # Keep a real API key and version most of the time, so the body decoders (not the key check) get the input.
    if len(data) >= 4 and rng.random() < 0.8:
        data[0:4] = frame[0:4]
    size = len(data)
    if rng.random() < 0.03:
        size = rng.choice([size + rng.randint(1, 100), max(size - rng.randint(1, 8), 0)])
    return struct.pack(">i", size) + bytes(data)


def drain(sock):
    """Reads whatever answer comes within ANSWER_WAIT_S; False once the broker closed the connection."""
    sock.settimeout(ANSWER_WAIT_S)
    try:
        head = sock.recv(65536)
    except socket.timeout:
        return True
    except OSError:
        return False
    return bool(head)


def fuzz_worker(broker, rng, frames, count, stats, errors):
    sock = None
    try:
        for _ in range(count):
            if sock is None:
                sock = kwire.connect(broker)
                stats["connections"] += 1
            try:
                sock.sendall(mutate(rng, rng.choice(frames)))
                alive = drain(sock)
            except OSError:
                alive = False
            stats["frames"] += 1
            if not alive:
                stats["closed"] += 1
                sock.close()
                sock = None
    except Exception as e:  # noqa: BLE001 - reported by the test
        errors.append(repr(e))
    finally:
        if sock is not None:
            sock.close()


def rss(pid):
    proc = psutil.Process(pid)
    return proc.memory_info().rss + sum(c.memory_info().rss for c in proc.children(recursive=True))


def test_mutated_real_frames_leave_the_broker_alive_bounded_and_serving(own_broker, topic_name):
    broker = own_broker
    seed = int(os.environ.get("WIRE_FUZZ_SEED", str(time.time_ns() % (1 << 32))))
    print(f"wire fuzz: seed {seed} (replay with WIRE_FUZZ_SEED={seed}), {FRAMES} frames, {THREADS} connections")
    create_topic(broker, topic_name)
    frames = seed_frames(topic_name)
    assert len(frames) > 100, f"only {len(frames)} seed frames; is fuzz/corpus/request_frame/ there?"

    stats = {"frames": 0, "connections": 0, "closed": 0}
    errors = []
    peak = [0]
    done = threading.Event()

    def watch_rss():
        while not done.is_set():
            if broker.pid() is not None and broker.alive():
                peak[0] = max(peak[0], rss(broker.pid()))
            time.sleep(0.2)

    watcher = threading.Thread(target=watch_rss, daemon=True)
    watcher.start()
    started = time.monotonic()
    workers = [threading.Thread(target=fuzz_worker,
                                args=(broker, random.Random(seed * 1000 + i), frames, FRAMES // THREADS, stats, errors))
               for i in range(THREADS)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(600)
    done.set()
    watcher.join(5)
    elapsed = time.monotonic() - started
    print(f"wire fuzz: {stats['frames']} frames on {stats['connections']} connections "
          f"({stats['closed']} closed by the broker) in {elapsed:.1f} s; peak RSS {peak[0] >> 20} MiB")

    assert broker.alive(), f"broker died under wire fuzzing (seed {seed}):\n{broker.log_tail()}"
    assert not any(w.is_alive() for w in workers), f"fuzz connections hung (seed {seed})"
    assert not errors, f"seed {seed}: {errors[:5]}"
    if broker.kind == "annal":
        assert peak[0] < RSS_LIMIT_BYTES, f"seed {seed}: peak RSS {peak[0] >> 20} MiB over the limit"

    # Still serving: a normal produce and fetch on a fresh connection.
    ranges = kwire.api_versions(broker)
    pv = kwire.pick_version(ranges, API_PRODUCE, 3, 9)
    fv = kwire.pick_version(ranges, API_FETCH, 4, 12)
    check_topic = topic_name + "-after"
    create_topic(broker, check_topic)
    with kwire.connect(broker) as s:
        body = kwire.produce_body(pv, check_topic, 0, kwire.record_batch([b"after-fuzz"]))
        _, _, error, base = kwire.parse_produce(kwire.roundtrip(s, API_PRODUCE, pv, 900, body), pv)
        assert (error, base) == (0, 0), f"seed {seed}: produce after fuzzing: error {error}, base offset {base}"
        error, hw, records = kwire.parse_fetch(
            kwire.roundtrip(s, API_FETCH, fv, 901, kwire.fetch_body(fv, check_topic, 0, 0)), fv)
        assert (error, hw) == (0, 1) and b"after-fuzz" in records, f"seed {seed}: fetch after fuzzing"
