"""Upgrade in place: a data directory written by single-node Annal before it was a cluster (no metadata log;
topics in topics.json, producer ids in producer-id-block) starts as a one-voter cluster with nothing lost.

The directory is tests/interop/fixtures/single-node-v0.tar.gz, made by fixtures/make_single_node_dir.py with a
binary from before the change; expected.json in it lists every acknowledged record, the group's committed
offsets, the topic ids and the producer-id floor.
"""

import json
import os
import tarfile
import tempfile
from pathlib import Path

import confluent_kafka as ck
import pytest

from brokers import AnnalBroker
from clients import ck_admin, ck_consume, ck_produce_all, ck_producer, wait_for_leaders
from test_admin import ck_topic_configs
import kwire

pytestmark = [pytest.mark.annal_only, pytest.mark.restart]

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "single-node-v0.tar.gz"


@pytest.fixture
def upgraded():
    annal_bin = os.environ.get("ANNAL_BIN")
    if os.environ.get("INTEROP_BOOTSTRAP") or os.environ.get("INTEROP_BROKER") == "kafka" or not annal_bin:
        pytest.skip("upgrades an Annal data directory: needs ANNAL_BIN and a broker process of its own")
    workdir = Path(tempfile.mkdtemp(prefix="annal-upgrade-"))
    with tarfile.open(FIXTURE) as tar:
        tar.extractall(workdir, filter="data")
    expected = json.loads((workdir / "expected.json").read_text())
    assert not (workdir / "data" / "__cluster_metadata-0").exists(), "the fixture predates the metadata log"
    b = AnnalBroker(annal_bin, workdir)
    b.start()
    yield b, expected
    b.close()


def check_everything_is_there(b, expected):
    for topic, partitions in (("upgrade-orders", 3), ("upgrade-audit", 1)):
        wait_for_leaders(b, topic, partitions)
        for p in range(partitions):
            want = [(o, k, v) for t, pp, o, k, v in expected["acked"] if t == topic and pp == p]
            got = ck_consume(b, topic, [p], len(want))
            assert [(m.offset(), m.key().decode(), m.value().decode()) for m in got] == want, f"{topic}-{p}"
    # The topic ids are the ones the single node gave (clients that cached them see no new topic).
    md = kwire.metadata(b, ["upgrade-orders", "upgrade-audit"])
    for name, t in md["topics"].items():
        assert t["topic_id"] == expected["topic_ids"][name].replace("-", ""), (name, t)
    configs = ck_topic_configs(ck_admin(b), "upgrade-orders")
    assert configs["retention.ms"].value == "604800000"
    assert configs["max.message.bytes"].value == "600000"
    c = ck.Consumer({"bootstrap.servers": b.bootstrap, "group.id": "upgrade-group"})
    try:
        want = expected["committed"]["upgrade-group"]["upgrade-orders"]
        got = c.committed([ck.TopicPartition("upgrade-orders", int(p)) for p in want], timeout=30)
        assert {str(tp.partition): tp.offset for tp in got} == want
    finally:
        c.close()


def test_a_single_node_directory_is_upgraded_in_place(upgraded):
    b, expected = upgraded
    check_everything_is_there(b, expected)
    assert (b.data_dir / "__cluster_metadata-0").is_dir(), "the node now keeps a metadata log"

    # New producer ids come from the metadata log, above every id the single node handed out.
    error, producer_id, _ = kwire.init_producer_id(b)
    assert error == 0 and producer_id >= expected["producer_id_floor"], (error, producer_id)

    # It is a one-voter cluster led by itself.
    quorum = kwire.describe_quorum(b)
    assert quorum["error"] == 0 and len(quorum["voters"]) == 1, quorum
    assert quorum["leader_id"] == quorum["voters"][0], quorum
    assert len(kwire.describe_cluster(b)["brokers"]) == 1

    # Writes go on where the single node stopped, and a restart (kill -9 included) imports nothing twice.
    producer = ck_producer(b, **{"enable.idempotence": True, "acks": "all"})
    reports = ck_produce_all(producer, "upgrade-audit", [(b"a", b"after-upgrade", None, None)], partition=0)
    assert reports[0].offset() == 10
    expected["acked"].append(["upgrade-audit", 0, 10, "a", "after-upgrade"])
    for kill in (False, True):
        b.restart(kill=kill)
        check_everything_is_there(b, expected)
    names = set(ck_admin(b).list_topics(timeout=30).topics)
    assert {"upgrade-orders", "upgrade-audit"} <= names
