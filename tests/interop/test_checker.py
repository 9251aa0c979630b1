"""The queue-anomaly checker (checker.py) on hand-made histories: a valid one passes, and each anomaly fails it.
No broker: these run in every mode in well under a second."""

import pytest

from checker import History, assert_valid, check


def valid_history():
    """Two producers, one partition of four records and one of two, two consumer sessions and a group's commits."""
    h = History()
    for v in ("a", "b", "c", "d", "x", "y", "unacked"):
        h.attempt(v, "p1" if v != "x" else "p2")
    for v, o in (("a", 0), ("b", 1), ("c", 2), ("d", 3)):
        h.ack(v, 0, o, "p1")
    h.ack("x", 1, 0, "p2")
    h.fail("unacked", "timed out")  # a failed write may still be in the log: not an anomaly either way
    h.final = {0: [(0, "a"), (1, "b"), (2, "c"), (3, "d"), (4, "unacked")], 1: [(0, "x"), (1, "y")]}
    for o, v in ((0, "a"), (1, "b"), (2, "c")):
        h.read("s1", 0, o, v)
    # a second session restarts from the committed offset (at-least-once): a re-read is not "backwards"
    for o, v in ((2, "c"), (3, "d"), (4, "unacked")):
        h.read("s2", 0, o, v)
    h.read("s2", 1, 0, None)  # offsets-only reader
    h.commit("g", 0, 2, "s1")
    h.commit("g", 0, 5, "s2")
    h.committed_final[("g", 0)] = 5
    return h


def kinds(h):
    return sorted({a.kind for a in check(h)})


def test_a_valid_history_passes():
    h = valid_history()
    assert check(h) == []
    assert_valid(h)


def test_lost_acknowledged_record_missing():
    h = valid_history()
    h.final[0] = h.final[0][:3]  # offsets 3 and 4 truncated, 3 ("d") was acknowledged
    h.reads = [r for r in h.reads if r.offset < 3 or r.partition != 0]
    assert kinds(h) == ["lost"]


def test_lost_acknowledged_offset_holds_another_value():
    h = valid_history()
    h.ack("y", 1, 2, "p1")  # acknowledged at offset 2, but the log has it at 1 and nothing at 2
    assert "lost" in kinds(h)


def test_changed_offset_two_values():
    h = valid_history()
    h.read("s3", 1, 1, "z")  # the final log says 1@1 is "y"
    assert "changed" in kinds(h)


def test_vanished_read_not_in_final_log():
    h = valid_history()
    h.read("s2", 0, 5, "late")  # delivered, then truncated away
    assert "vanished" in kinds(h)


def test_duplicate_value_twice_in_log():
    h = valid_history()
    h.final[1].append((2, "x"))  # "x" is also at 1@0
    assert kinds(h) == ["duplicate"]


def test_phantom_value_nobody_sent():
    h = valid_history()
    h.final[1].append((2, "never-sent"))
    assert kinds(h) == ["phantom"]


def test_backwards_within_a_session():
    h = valid_history()
    h.read("s1", 0, 1, "b")  # s1 read 0, 1, 2 and now 1 again
    assert kinds(h) == ["backwards"]


def test_skip_within_a_session():
    h = valid_history()
    h.reads = [r for r in h.reads if not (r.session == "s1" and r.offset == 1)]  # s1 reads 0 then 2
    assert kinds(h) == ["skip"]


def test_commit_moves_backwards():
    h = valid_history()
    h.commit("g", 0, 3, "s3")  # after 5 was acknowledged
    assert kinds(h) == ["commit_backwards"]


def test_committed_offset_read_back_lower_than_acknowledged():
    h = valid_history()
    h.committed_final[("g", 0)] = 2  # the coordinator lost the commit of 5
    assert kinds(h) == ["commit_backwards"]


def test_assert_valid_lists_the_anomalies_and_the_schedule():
    from faults import FaultSchedule

    h = valid_history()
    h.final[0] = []
    h.reads = []
    schedule = FaultSchedule("checker-selftest", seed=7)
    schedule.step("kill -9 node 2")
    with pytest.raises(AssertionError) as e:
        assert_valid(h, schedule)
    text = str(e.value)
    assert "lost" in text and "0@3" in text and "kill -9 node 2" in text and "FAULT_SEED=7" in text


def test_prefix_producers_count_as_sent():
    h = valid_history()
    h.attempt_prefix("7.", "java")
    h.final[1].append((2, "7.0"))
    assert check(h) == []
    h.final[1].append((3, "8.0"))
    assert kinds(h) == ["phantom"]


def test_fault_schedule_is_seeded():
    """The same FAULT_SEED makes the same choices (what a replay relies on)."""
    from faults import FaultSchedule

    a, b = FaultSchedule("a", 1234), FaultSchedule("b", 1234)
    assert [a.choice("x", range(10)) for _ in range(5)] == [b.choice("x", range(10)) for _ in range(5)]
    assert "FAULT_SEED=1234" in a.report()


def test_an_acknowledgement_without_offset_needs_the_value_somewhere_in_its_partition():
    h = valid_history()
    h.ack("y", 1, None, "p2")  # librdkafka: DUPLICATE_SEQUENCE_NUMBER is "delivered", offset unknown
    assert check(h) == []
    h.ack("unacked-2", 1, None, "p2")
    h.attempt("unacked-2", "p2")
    assert kinds(h) == ["lost"]
