"""Smoke test with kcat (Debian's package; librdkafka inside): metadata listing, produce, consume."""

import shutil
import subprocess

import pytest

from clients import create_topic

KCAT = shutil.which("kcat") or shutil.which("kafkacat")
pytestmark = pytest.mark.skipif(KCAT is None, reason="kcat is not installed (apt-get install kcat failed or was "
                                                     "not run); run.sh installs it when apt works")


def kcat(broker, *args, stdin=None):
    proc = subprocess.run([KCAT, "-b", broker.bootstrap, *args], input=stdin, capture_output=True, timeout=60)
    assert proc.returncode == 0, f"kcat {args} failed: {proc.stderr.decode(errors='replace')}"
    return proc.stdout.decode()


def test_kcat_produce_and_consume(broker, topic_name):
    create_topic(broker, topic_name, partitions=1)
    lines = [f"key{i}:value {i}" for i in range(50)]
    kcat(broker, "-t", topic_name, "-P", "-K:", "-z", "snappy", "-H", "origin=kcat",
         stdin=("\n".join(lines) + "\n").encode())
    out = kcat(broker, "-t", topic_name, "-C", "-o", "beginning", "-e", "-q", "-f", "%o|%k|%s|%h\n")
    got = out.splitlines()
    assert got == [f"{i}|key{i}|value {i}|origin=kcat" for i in range(50)]

    # Consume from an offset in the middle; metadata lists the topic.
    out = kcat(broker, "-t", topic_name, "-C", "-o", "45", "-e", "-q", "-f", "%o %s\n")
    assert out.splitlines() == [f"{i} value {i}" for i in range(45, 50)]
    meta = kcat(broker, "-L", "-t", topic_name)
    assert f'topic "{topic_name}" with 1 partitions' in meta
