"""A real Prometheus server scrapes a real Annal (issue 14's proof).

Debian's `prometheus` package (installed with apt-get when missing, as run.sh does up front) runs with a
generated config: one job scraping the broker's HTTP listener every second, its own free port and a temporary
storage directory. After a produce run and a group that consumes part of it, Prometheus's HTTP API
(`/api/v1/query`) must answer the produced-record count and the group's lag with the exact values: proof that the
exposition is one Prometheus ingests (content type, OpenMetrics syntax, names), not only one our parser accepts.

Annal only (Kafka has no such listener; its metrics are JMX).
"""

import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

import confluent_kafka as ck
import pytest

from brokers import AnnalBroker, free_port, remove_workdir
from clients import ck_produce_all, ck_producer, create_topic

pytestmark = pytest.mark.annal_only

TIMEOUT_S = 60


def prometheus_binary():
    """The prometheus binary, installing Debian's package (quietly, non-interactively) when it is missing; skips
    the test, saying why, when that is not possible."""
    found = shutil.which("prometheus")
    if found:
        return found
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        pytest.skip("prometheus is not installed and apt-get cannot install it here (needs root and apt-get): "
                    "apt-get install prometheus")
    log = os.path.join(tempfile.gettempdir(), "annal-interop-apt-prometheus.log")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    with open(log, "w") as out:
        installed = subprocess.run(
            ["sh", "-c", "apt-get install -y -qq --no-install-recommends prometheus || "
                         "{ apt-get update -qq && apt-get install -y -qq --no-install-recommends prometheus; }"],
            stdout=out, stderr=subprocess.STDOUT, env=env, timeout=900).returncode == 0
    found = shutil.which("prometheus")
    if not installed or not found:
        pytest.skip(f"could not install Debian's prometheus package with apt-get (see {log})")
    return found


@pytest.fixture
def annal_with_http():
    if os.environ.get("INTEROP_BOOTSTRAP") or os.environ.get("INTEROP_BROKER") == "kafka":
        pytest.skip("needs Annal's own process (its HTTP listener)")
    http_port = free_port()
    workdir = tempfile.mkdtemp(prefix="annal-interop-prom-")
    b = AnnalBroker(os.environ["ANNAL_BIN"], workdir, overrides=[
        f"http.listen=127.0.0.1:{http_port}",
        "group.initial.rebalance.delay.ms=0",
    ])
    b.http = f"127.0.0.1:{http_port}"
    try:
        b.start()
    except BaseException:
        remove_workdir(workdir)
        raise
    yield b
    b.close()


@pytest.fixture
def prometheus(annal_with_http):
    """A Prometheus server scraping the broker every second; yields its base URL."""
    binary = prometheus_binary()
    workdir = tempfile.mkdtemp(prefix="annal-interop-prometheus-")
    port = free_port()
    config = os.path.join(workdir, "prometheus.yml")
    with open(config, "w") as f:
        f.write(f"""global:
  scrape_interval: 2s
  scrape_timeout: 2s
  evaluation_interval: 1s
scrape_configs:
  - job_name: annal
    static_configs:
      - targets: ["{annal_with_http.http}"]
""")
    log_path = os.path.join(workdir, "prometheus.log")
    log = open(log_path, "w")
    proc = subprocess.Popen([binary, f"--config.file={config}", f"--storage.tsdb.path={workdir}/data",
                             f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"prometheus exited with {proc.returncode}:\n{open(log_path).read()}")
            try:
                with urllib.request.urlopen(f"{url}/-/ready", timeout=5) as r:
                    if r.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError):
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"prometheus not ready in {TIMEOUT_S} s:\n{open(log_path).read()}")
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        shutil.rmtree(workdir, ignore_errors=True)


def query(url, promql):
    """The instant vector Prometheus answers for `promql`: [(labels, value as float)]."""
    q = urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(f"{url}/api/v1/query?{q}", timeout=10) as r:
        body = json.loads(r.read())
    assert body["status"] == "success", body
    return [(s["metric"], float(s["value"][1])) for s in body["data"]["result"]]


def wait_for_value(url, promql, expected):
    """Polls Prometheus until `promql` answers exactly one series with `expected`."""
    deadline = time.monotonic() + TIMEOUT_S
    last = None
    while time.monotonic() < deadline:
        last = query(url, promql)
        if len(last) == 1 and last[0][1] == expected:
            return last[0][0]
        time.sleep(0.5)
    raise AssertionError(f"Prometheus never answered {promql} = {expected}; last answer {last}")


def wait_for_answer(url, promql, check):
    """Polls Prometheus until `check` holds for what `promql` answers (a late scrape marks series stale for a
    moment); returns that answer."""
    deadline = time.monotonic() + TIMEOUT_S
    last = None
    while time.monotonic() < deadline:
        last = query(url, promql)
        if check(last):
            return last
        time.sleep(0.5)
    raise AssertionError(f"Prometheus never gave the answer wanted for {promql}; last answer {last}")


def test_prometheus_scrapes_produced_records_and_group_lag(annal_with_http, prometheus):
    b = annal_with_http
    topic = "prom-traffic"
    create_topic(b, topic, partitions=1)
    producer = ck_producer(b, **{"linger.ms": 5, "enable.idempotence": False})
    ck_produce_all(producer, topic, [(None, f"record-{i}".encode(), None, None) for i in range(300)], partition=0)

    # A subscribed group (JoinGroup, SyncGroup, Fetch) reads 180 of the 300 records and commits.
    consumer = ck.Consumer({"bootstrap.servers": b.bootstrap, "group.id": "prom-reader",
                            "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    read = 0
    deadline = time.monotonic() + TIMEOUT_S
    while read < 180 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            read += 1
            if read == 180:
                consumer.commit(message=msg, asynchronous=False)
    assert read == 180
    consumer.close()

    # The scrape itself is healthy (Prometheus parsed the exposition).
    wait_for_value(prometheus, 'up{job="annal"}', 1.0)
    labels = wait_for_value(prometheus, f'annal_topic_records_produced_total{{topic="{topic}"}}', 300.0)
    assert labels["job"] == "annal" and labels["instance"] == b.http, labels
    wait_for_value(prometheus, f'annal_partition_high_watermark{{topic="{topic}",partition="0"}}', 300.0)
    wait_for_value(prometheus, 'annal_group_lag_records_sum{group="prom-reader"}', 120.0)
    wait_for_value(prometheus, 'annal_group_lag_records_max{group="prom-reader"}', 120.0)
    # PromQL over the series: bytes were fetched by the consumer, and the request histogram has Fetch buckets.
    wait_for_answer(prometheus, f'annal_topic_bytes_fetched_total{{topic="{topic}"}}',
                    lambda a: a and a[0][1] > 0)
    wait_for_answer(prometheus, 'sum(annal_request_duration_seconds_count{api="Fetch"}) > 0', bool)
