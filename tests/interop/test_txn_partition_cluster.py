"""The partition side of transactions on a 3-node cluster (issue 12 on issue 10's replication): followers replicate
transactional batches and markers and build the same `.txnindex` as the leader; after a kill -9 of the leader the new
leader still pins the last stable offset at a transaction left open, still reports the aborted one, and takes the
marker that ends the open one.

Annal-only, like test_txn_partition.py: the test plays the transaction coordinator itself.
"""

import time

import pytest

import kwire
from cluster import SESSION_TIMEOUT_MS, running
from test_replication import create_topic, partition_view, wait_for_isr
from test_txn_partition import new_producer

pytestmark = [pytest.mark.cluster, pytest.mark.annal_only]

ALL_IDS = {1, 2, 3}
FAILOVER_BOUND_S = SESSION_TIMEOUT_MS / 1000 + 15


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    # The tests write markers themselves, for transactions no coordinator knows: KIP-890 verification is off.
    yield from running(tmp_path_factory.mktemp("txn-partition"), size=3,
                       overrides={"transaction.partition.verification.enable": "false"})


def produce(node, txn_id, topic, values, producer_id, epoch, sequence):
    batch = kwire.producer_batch(values, producer_id, epoch, sequence, base_timestamp=int(time.time() * 1000))
    error, base = kwire.txn_produce(node, txn_id, topic, 0, batch)
    assert error == 0, f"transactional produce: error {error}"
    return base


def txnindex_bytes(node, topic):
    dirs = [p for p in node.data_dir.rglob(f"{topic}-0") if p.is_dir()]
    assert len(dirs) == 1, dirs
    return b"".join(p.read_bytes() for p in sorted(dirs[0].glob("*.txnindex")))


def test_followers_replicate_markers_and_a_new_leader_keeps_the_lso(cluster, topic_name):
    c = cluster
    c.heal()
    create_topic(c.node(1), topic_name, config={"min.insync.replicas": "2"})
    leader = c.node(wait_for_isr(c, topic_name, ALL_IDS)["leader"])
    pa, ea = new_producer(leader)
    pb, eb = new_producer(leader)
    assert produce(leader, "txn-a", topic_name, [b"a0", b"a1"], pa, ea, 0) == 0
    assert kwire.write_txn_markers(leader, [(pa, ea, False, 0, {topic_name: [0]})]) == {(pa, topic_name, 0): 0}
    assert produce(leader, "txn-b", topic_name, [b"b0"], pb, eb, 0) == 3  # left open
    assert kwire.list_offset(leader, topic_name, 0, isolation=1) == (0, 3)
    assert kwire.list_offset(leader, topic_name, 0, isolation=0) == (0, 4)

    # Followers build the same aborted-transaction index from the replicated marker.
    expected = txnindex_bytes(leader, topic_name)
    assert len(expected) == 34
    followers = c.other_nodes(leader)
    c.wait_until(f"{topic_name}: followers' .txnindex equal to the leader's",
                 lambda: all(txnindex_bytes(f, topic_name) == expected for f in followers), 30)

    leader.kill()

    def new_leader():
        v = partition_view(followers[0], topic_name)
        return v if v is not None and v["leader"] in {n.node_id for n in followers} else None

    view = c.wait_until(f"{topic_name}: a new leader after kill -9", new_leader, FAILOVER_BOUND_S)
    successor = c.node(view["leader"])

    def lso_pinned():
        # The new leader's high watermark may trail at first; the LSO must reach B's start and never pass it.
        error, offset = kwire.list_offset(successor, topic_name, 0, isolation=1)
        assert error != 0 or offset <= 3, f"the LSO passed B's open transaction on the new leader: {offset}"
        return offset if error == 0 and offset == 3 else None

    c.wait_until("the new leader's LSO at B's start", lso_pinned, 30)
    assert kwire.fetch_isolated(successor, topic_name, 0, 0, isolation=1)["aborted"] == [(pa, 0)]
    assert kwire.write_txn_markers(successor, [(pb, eb, True, 0, {topic_name: [0]})]) == {(pb, topic_name, 0): 0}
    assert kwire.list_offset(successor, topic_name, 0, isolation=1) == (0, 5)
    done = kwire.fetch_isolated(successor, topic_name, 0, 0, isolation=1)
    assert done["last_stable_offset"] == 5
    c.heal()
