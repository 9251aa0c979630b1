import os
import re
import uuid

import pytest

from brokers import new_broker


def pytest_configure(config):
    config.addinivalue_line("markers", "restart: stops/kills and restarts the broker process (needs an owned process)")
    config.addinivalue_line("markers", "ondisk: reads the broker's files (needs an owned process)")
    config.addinivalue_line("markers", "groups: consumer-group tests (issue 4); run only with INTEROP_GROUPS=1")
    config.addinivalue_line("markers", "idempotence: idempotent-producer tests (issue 6); skipped with "
                                       "INTEROP_IDEMPOTENCE=0")
    config.addinivalue_line("markers", "cluster: starts its own 3-node cluster (issue 9); run only with "
                                       "INTEROP_CLUSTER=1")
    config.addinivalue_line("markers", "annal_only: a check Kafka does not make (skipped with INTEROP_BROKER=kafka)")
    config.addinivalue_line("markers", "faults: fault-injection scenarios with the queue-anomaly checker (issue 10, "
                                       "test_faults.py); cluster tests, so they run with INTEROP_CLUSTER=1")
    config.addinivalue_line("markers", "transactions: transactional producers, read_committed, the transaction "
                                       "coordinator (issue 12)")
    config.addinivalue_line("markers", "security: TLS, mutual TLS, SASL PLAIN and SCRAM listeners (issue 17, "
                                       "test_security.py)")


def pytest_collection_modifyitems(config, items):
    skips = {}
    if os.environ.get("INTEROP_GROUPS") != "1":
        skips["groups"] = pytest.mark.skip(reason="consumer-group test (issue 4): enable with INTEROP_GROUPS=1 once "
                                                  "the group coordinator lands")
    if os.environ.get("INTEROP_CLUSTER") != "1":
        skips["cluster"] = pytest.mark.skip(reason="cluster test (issue 9): enable with INTEROP_CLUSTER=1 once "
                                                   "Annal's cluster mode lands (passes against INTEROP_BROKER=kafka)")
    elif os.environ.get("INTEROP_BOOTSTRAP"):
        skips["cluster"] = pytest.mark.skip(reason="cluster test starts its own nodes; INTEROP_BOOTSTRAP is set")
    if os.environ.get("INTEROP_BROKER") == "kafka":
        skips["annal_only"] = pytest.mark.skip(reason="Annal-only check: Kafka does not refuse this")
    if os.environ.get("INTEROP_IDEMPOTENCE") == "0":
        skips["idempotence"] = pytest.mark.skip(reason="idempotent-producer test (issue 6) disabled by "
                                                       "INTEROP_IDEMPOTENCE=0")
    config.addinivalue_line("markers", "cluster: starts its own 3-node cluster (issue 9); run only with "
                                       "INTEROP_CLUSTER=1")
    config.addinivalue_line("markers", "annal_only: a check Kafka does not make (skipped with INTEROP_BROKER=kafka)")
    for item in items:
        for marker, skip in skips.items():
            if marker in item.keywords:
                item.add_marker(skip)


@pytest.fixture(scope="session")
def broker():
    """One broker shared by the tests that neither restart it nor look at its files."""
    b = new_broker()
    yield b
    b.close()


@pytest.fixture
def own_broker():
    """A broker process of this test's own, which it may stop, kill and restart."""
    if os.environ.get("INTEROP_BOOTSTRAP"):
        pytest.skip("needs a broker process of its own; INTEROP_BOOTSTRAP points at an external broker")
    b = new_broker()
    yield b
    b.close()


@pytest.fixture
def topic_name(request):
    """A topic name unique to this test run (tests share one broker)."""
    base = re.sub(r"[^a-zA-Z0-9._-]+", "-", request.node.name)[:120]
    return f"it-{base}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(autouse=True)
def _broker_survived(request):
    """Attributes a crash of the shared broker to the test during which it happened. (A test's own broker is checked
    when it is stopped: an exit code other than 0 after SIGTERM fails the test.)"""
    yield
    if "broker" in request.fixturenames:
        b = request.getfixturevalue("broker")
        assert b.alive(), f"the broker process died during this test; its log ends with:\n{b.log_tail()}"
