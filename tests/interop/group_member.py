"""A consumer-group member in its own process, so a test can kill it with SIGKILL (no LeaveGroup, no commit).

usage: group_member.py BOOTSTRAP TOPIC GROUP STRATEGY SESSION_TIMEOUT_MS
Prints one JSON line per event on stdout: {"event": "assign"|"revoke"|"record", ...}.
"""

import json
import sys

import confluent_kafka as ck


def emit(**kw):
    print(json.dumps(kw), flush=True)


def main():
    bootstrap, topic, group, strategy, session_ms = sys.argv[1:6]
    consumer = ck.Consumer({
        "bootstrap.servers": bootstrap, "group.id": group, "partition.assignment.strategy": strategy,
        "session.timeout.ms": int(session_ms), "heartbeat.interval.ms": 500, "enable.auto.commit": False,
        "auto.offset.reset": "earliest"})
    consumer.subscribe(
        [topic],
        on_assign=lambda c, ps: emit(event="assign", partitions=sorted(p.partition for p in ps)),
        on_revoke=lambda c, ps: emit(event="revoke", partitions=sorted(p.partition for p in ps)))
    emit(event="started")
    while True:
        msg = consumer.poll(0.2)
        if msg is not None and not msg.error():
            emit(event="record", partition=msg.partition(), offset=msg.offset())


if __name__ == "__main__":
    main()
