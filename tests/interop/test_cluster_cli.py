"""`annal cluster describe` and `annal cluster health` against the interop broker (annal serve, or real Apache Kafka
4.x with INTEROP_BROKER=kafka): the CLI reads Metadata, DescribeCluster and, where the broker offers it,
DescribeQuorum. Kafka 4 brokers answer DescribeQuorum, so against Kafka the quorum must be decoded.

Needs the `annal` binary: ANNAL_BIN, else target/release/annal or target/debug/annal in the repository.
"""

import json
import os
import subprocess
from pathlib import Path

import pytest

from brokers import REPO

TIMEOUT_S = 60


def annal_bin():
    candidates = [os.environ.get("ANNAL_BIN"), REPO / "target" / "release" / "annal",
                  REPO / "target" / "debug" / "annal"]
    for c in candidates:
        if c and os.access(c, os.X_OK):
            return str(c)
    pytest.skip("no annal binary: set ANNAL_BIN or build it (cargo build -p annal)")


def annal(broker, *args, check=True):
    out = subprocess.run([annal_bin(), *args, "-b", broker.bootstrap], capture_output=True, text=True,
                         timeout=TIMEOUT_S)
    if check:
        assert out.returncode == 0, f"annal {' '.join(args)} failed ({out.returncode}): {out.stderr}"
    return out


def test_describe_lists_the_broker_the_topic_and_the_quorum(broker, topic_name):
    annal(broker, "topic", "create", topic_name, "-p", "3")
    d = json.loads(annal(broker, "cluster", "describe", "--format", "json").stdout)
    assert any(f"{b['host']}:{b['port']}" == broker.bootstrap for b in d["brokers"]), d
    assert d["cluster_id"], d
    topic = next(t for t in d["topics"] if t["name"] == topic_name)
    assert (topic["partitions"], topic["under_replicated_partitions"], topic["offline_partitions"]) == (3, 0, 0)
    quorum = d["quorum"]
    if os.environ.get("INTEROP_BROKER") == "kafka":
        assert quorum is not None, "Kafka 4 brokers answer DescribeQuorum"
    if quorum is not None:
        assert quorum["leader_id"] >= 0 and quorum["leader_epoch"] >= 0, quorum
        assert quorum["high_watermark"] > 0, quorum
        leader = next(v for v in quorum["voters"] if v["node_id"] == quorum["leader_id"])
        assert leader["lag"] == 0 and leader["log_end_offset"] >= quorum["high_watermark"], quorum
    text = annal(broker, "cluster", "describe").stdout
    assert ("quorum: leader " in text) == (quorum is not None), text


def test_health_is_zero_exit_and_true_on_a_healthy_broker(broker):
    out = annal(broker, "cluster", "health", "--exit-when-healthy", "--timeout", "30")
    assert "healthy:                     true" in out.stdout, out.stdout
    h = json.loads(annal(broker, "cluster", "health", "--format", "json").stdout)
    assert h["healthy"] is True and h["unhealthy_reasons"] == [], h
    assert h["nodes_down"] == [] and h["leaderless_partitions"] == [], h
    if os.environ.get("INTEROP_BROKER") == "kafka":
        assert h["quorum_reported"] is True and h["quorum_leader_id"] >= 0, h
