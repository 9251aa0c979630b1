import os
import re
import uuid

import pytest

from brokers import new_broker


def pytest_configure(config):
    config.addinivalue_line("markers", "restart: stops/kills and restarts the broker process (needs an owned process)")
    config.addinivalue_line("markers", "ondisk: reads the broker's files (needs an owned process)")
    config.addinivalue_line("markers", "groups: consumer-group tests (issue 4); run only with INTEROP_GROUPS=1")


def pytest_collection_modifyitems(config, items):
    if os.environ.get("INTEROP_GROUPS") == "1":
        return
    skip = pytest.mark.skip(reason="consumer-group test (issue 4): enable with INTEROP_GROUPS=1 once the group "
                                   "coordinator lands")
    for item in items:
        if "groups" in item.keywords:
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
