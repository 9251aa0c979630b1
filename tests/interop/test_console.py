"""The web console (issue 18) in a real browser: Debian's chromium driven by Playwright against a real `annal serve`
with real data written and read by real Kafka clients. Each test does what a person would do on the page and
checks what the page shows, and checks every change it makes through the Kafka protocol.

Screenshots of each screen go to $CONSOLE_SCREENSHOTS (default .cache/console-screenshots); the committed ones in
docs/console/ are refreshed with CONSOLE_SCREENSHOTS=docs/console (docs/console.md).

Skipped (and says why) when chromium is missing (test.sh sets ANNAL_SKIP_CHROMIUM=1 when apt could not install it).
Annal only: Kafka has no console.
"""

import json
import os
import re
import shutil
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import kafka
import pytest
from kafka.admin import KafkaAdminClient
from kafka.structs import OffsetAndMetadata

from brokers import REPO, AnnalBroker, free_port, remove_workdir
from clients import create_topic, ck_admin, kp_consume, kp_producer

pytestmark = pytest.mark.annal_only

CHROMIUM = os.environ.get("CHROMIUM_BIN", "/usr/bin/chromium")
TIMEOUT_MS = 15_000
SCREENSHOTS = Path(os.environ.get("CONSOLE_SCREENSHOTS", REPO / ".cache" / "console-screenshots"))
if not SCREENSHOTS.is_absolute():
    SCREENSHOTS = REPO / SCREENSHOTS


def _skip_reason():
    if os.environ.get("INTEROP_BOOTSTRAP") or os.environ.get("INTEROP_BROKER") == "kafka":
        return "needs Annal's own process (its HTTP listener serves the console)"
    if os.environ.get("ANNAL_SKIP_CHROMIUM") == "1":
        return "chromium could not be installed with apt (ANNAL_SKIP_CHROMIUM=1)"
    if not shutil.which(CHROMIUM):
        return f"no chromium at {CHROMIUM}: apt-get install -y chromium (or set CHROMIUM_BIN)"
    return None


@pytest.fixture(scope="module")
def console():
    """One broker with its HTTP listener for the whole file (each test uses topics and groups of its own)."""
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    http_port = free_port()
    workdir = tempfile.mkdtemp(prefix="annal-interop-console-")
    b = AnnalBroker(os.environ["ANNAL_BIN"], workdir, overrides=[
        f"http.listen=127.0.0.1:{http_port}",
        "lag.window.commits=5",
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


@pytest.fixture(scope="module")
def browser(console):
    # Imported here so that a machine without chromium skips before needing Playwright's driver.
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        # Debian's chromium, never a downloaded browser build. --no-sandbox: the suite runs as root.
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        b.close()


@pytest.fixture
def page(browser, console):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    pg = context.new_page()
    pg.set_default_timeout(TIMEOUT_MS)
    errors = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.base = f"http://{console.http}/"
    yield pg
    context.close()
    assert not errors, f"the page threw: {errors}"


def tid(pg, name):
    return pg.locator(f'[data-testid="{name}"]')


def expect(locator):
    from playwright.sync_api import expect as pw_expect
    # Assertions have their own timeout (5 s unless set), not the page's default: give them the page's.
    pw_expect.set_options(timeout=TIMEOUT_MS)
    return pw_expect(locator)


def shot(pg, name):
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    pg.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


def http_get(b, path):
    try:
        with urllib.request.urlopen(f"http://{b.http}{path}", timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def topic_partitions(b, topic):
    """Partition count of `topic` by Metadata, or None when the topic does not exist."""
    md = ck_admin(b).list_topics(timeout=10)
    t = md.topics.get(topic)
    return None if t is None or t.error is not None else len(t.partitions)


def committed(b, group):
    """{(topic, partition): offset} of `group`, by OffsetFetch (kafka-python's admin client)."""
    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap)
    try:
        return {(tp.topic, tp.partition): om.offset for tp, om in admin.list_group_offsets(group)[group].items()}
    finally:
        admin.close()


def wait_until(predicate, what, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_overview_create_and_delete_a_topic(console, page, topic_name):
    page.goto(page.base + "#/")
    expect(tid(page, "broker-row")).to_have_count(1)
    _, o = http_get(console, "/v1/overview")
    expect(tid(page, "cluster-id")).to_have_text(o["cluster_id"])
    expect(tid(page, "broker-row")).to_contain_text(f"127.0.0.1:{console.port}")
    shot(page, "overview")

    page.goto(page.base + "#/topics")
    tid(page, "create-name").fill(topic_name)
    tid(page, "create-partitions").fill("3")
    tid(page, "create-configs").fill("retention.ms=3600000")
    tid(page, "create-submit").click()
    # The form leads to the new topic's page, which shows what the broker has.
    expect(tid(page, "topic-name")).to_have_text(topic_name)
    expect(tid(page, "partition-row")).to_have_count(3)
    expect(page.locator('[data-testid="config-row"][data-name="retention.ms"]')).to_contain_text("3600000")
    assert topic_partitions(console, topic_name) == 3
    shot(page, "topic")

    # The list is searched on the server: the new topic is found by a piece of its name.
    page.goto(page.base + "#/topics")
    tid(page, "topic-search").fill(topic_name[-12:])
    expect(tid(page, "topic-row")).to_have_count(1)
    expect(tid(page, "topic-row")).to_have_attribute("data-name", topic_name)
    shot(page, "topics")

    # Delete asks for the name typed again; the button stays disabled until it matches.
    tid(page, "topic-link").click()
    expect(tid(page, "delete-submit")).to_be_disabled()
    tid(page, "delete-confirm").fill(topic_name[:-1])
    expect(tid(page, "delete-submit")).to_be_disabled()
    tid(page, "delete-confirm").fill(topic_name)
    tid(page, "delete-submit").click()
    expect(tid(page, "topic-search")).to_be_visible()
    wait_until(lambda: topic_partitions(console, topic_name) is None, f"{topic_name} to be deleted")


def test_produce_with_the_form_and_browse(console, page, topic_name):
    create_topic(console, topic_name, partitions=2)
    order = {"id": 7, "items": [{"sku": "a-1", "qty": 2}], "note": "<b>not markup</b>"}
    page.goto(page.base + f"#/topics/{topic_name}/produce")
    tid(page, "produce-partition").fill("1")
    tid(page, "produce-key").fill("order-7")
    tid(page, "produce-value").fill(json.dumps(order))
    tid(page, "produce-headers").fill("trace-id=abc-123")
    tid(page, "produce-submit").click()
    expect(tid(page, "produced")).to_contain_text("partition 1 at offset 0")
    shot(page, "produce")
    # The record is really there, as a Kafka consumer reads it.
    [r] = kp_consume(console, topic_name, [1], 1)
    assert (r.key, json.loads(r.value), r.headers) == (b"order-7", order, [("trace-id", b"abc-123")])

    # A binary value written by a Kafka client (not UTF-8) is shown as hex.
    producer = kp_producer(console)
    producer.send(topic_name, key=b"bin", value=bytes([0, 255, 16, 128]), partition=1).get(timeout=30)
    producer.close()

    tid(page, "produced-link").click()
    rows = tid(page, "message-row")
    expect(rows).to_have_count(1)
    value = rows.first.locator('[data-testid="msg-value"]')
    expect(value).to_have_attribute("data-encoding", "json")
    text = value.inner_text()
    assert json.loads(text) == order and "\n" in text, f"not pretty-printed JSON: {text!r}"
    expect(rows.first.locator('[data-testid="msg-key"]')).to_have_text("order-7")
    expect(rows.first.locator('[data-testid="msg-headers"]')).to_contain_text("trace-id: abc-123")

    # Oldest first from partition 1: the JSON record, then the binary one.
    page.goto(page.base + f"#/topics/{topic_name}/messages?from=oldest&partition=1")
    expect(rows).to_have_count(2)
    binary = rows.nth(1).locator('[data-testid="msg-value"]')
    expect(binary).to_have_attribute("data-encoding", "hex")
    assert binary.inner_text().strip().lower().replace(" ", "") == "00ff1080"
    # Filter by value on the server: only the JSON record has "sku".
    tid(page, "filter-value").fill("sku")
    tid(page, "browse-submit").click()
    expect(rows).to_have_count(1)
    expect(rows.first.locator('[data-testid="msg-offset"]')).to_have_text("0")
    shot(page, "messages")


def test_find_a_record_by_key(console, page, topic_name):
    create_topic(console, topic_name, partitions=3, config={"key.index.enable": "true"})
    producer = kp_producer(console)  # murmur2 partitioning, as the key index's default partition expects
    for i in range(60):
        producer.send(topic_name, key=f"user-{i % 12}".encode(), value=f"event-{i}".encode())
    producer.flush()
    producer.close()
    scan = sorted((r.partition, r.offset) for r in kp_consume(console, topic_name, [0, 1, 2], 60)
                  if r.key == b"user-5")
    assert len(scan) == 5

    page.goto(page.base + f"#/topics/{topic_name}/messages")
    tid(page, "lookup-key").fill("user-5")
    tid(page, "lookup-submit").click()
    rows = tid(page, "message-row")
    expect(rows).to_have_count(len(scan))
    shown = sorted((int(rows.nth(i).locator("td").first.inner_text()),
                    int(rows.nth(i).locator('[data-testid="msg-offset"]').inner_text())) for i in range(len(scan)))
    assert shown == scan
    for i in range(len(scan)):
        expect(rows.nth(i).locator('[data-testid="msg-key"]')).to_have_text("user-5")
    shot(page, "lookup")


def test_lagging_group_is_flagged_and_its_offsets_reset(console, page, topic_name):
    group = f"{topic_name}-readers"
    create_topic(console, topic_name, partitions=2)
    producer = kp_producer(console)
    for i in range(100):
        producer.send(topic_name, value=f"r-{i}".encode(), partition=i % 2)
    producer.flush()
    producer.close()

    # A real consumer (kafka-python, manual assignment: a simple group with no members) reads part of each
    # partition and commits behind the end, the same offsets again and again: lagging and not advancing.
    consumer = kafka.KafkaConsumer(bootstrap_servers=console.bootstrap, group_id=group, enable_auto_commit=False)
    tps = [kafka.TopicPartition(topic_name, p) for p in (0, 1)]
    consumer.assign(tps)
    for _ in range(3):
        consumer.commit({tps[0]: OffsetAndMetadata(10, "", -1), tps[1]: OffsetAndMetadata(20, "", -1)})
        time.sleep(0.3)
    consumer.close()
    assert committed(console, group) == {(topic_name, 0): 10, (topic_name, 1): 20}
    wait_until(lambda: http_get(console, f"/v1/groups/{group}")[1].get("status") != "OK", f"{group} not OK")

    page.goto(page.base + "#/groups")
    tid(page, "group-search").fill(group)
    row = page.locator(f'[data-testid="group-row"][data-name="{group}"]')
    expect(row).to_have_count(1)
    expect(tid(page, "group-row")).to_have_count(1)
    expect(row.locator('[data-testid="group-flag"]')).to_be_visible()
    expect(row.locator('[data-testid="status"]')).to_have_text("ERR")
    shot(page, "groups")

    row.locator('[data-testid="group-link"]').click()
    expect(tid(page, "group-name")).to_have_text(group)
    expect(tid(page, "group-status")).to_have_text("ERR")
    expect(tid(page, "group-flag")).to_be_visible()
    expect(tid(page, "group-lag")).to_have_text("70")  # (50 - 10) + (50 - 20)
    part0 = page.locator(f'[data-testid="group-partition-row"][data-partition="0"]')
    expect(part0.locator('[data-testid="lag"]')).to_have_text("40")
    expect(part0.locator('[data-testid="partition-status"]')).to_have_text(re.compile("^(STALL|STOP)$"))
    expect(tid(page, "lag-series")).to_have_count(2)

    # Dry run: the page shows the plan and nothing is committed.
    tid(page, "reset-to").select_option("latest")
    expect(tid(page, "reset-apply")).to_be_disabled()
    tid(page, "reset-dry-run").click()
    plan = tid(page, "reset-plan")
    expect(plan.locator('[data-testid="plan-row"]')).to_have_count(2)
    for p, current in ((0, 10), (1, 20)):
        r = plan.locator(f'[data-testid="plan-row"][data-partition="{p}"]')
        expect(r.locator('[data-testid="plan-current"]')).to_have_text(str(current))
        expect(r.locator('[data-testid="plan-new"]')).to_have_text("50")
    shot(page, "group")
    assert committed(console, group) == {(topic_name, 0): 10, (topic_name, 1): 20}

    # Apply: now the offsets are committed, as OffsetFetch sees them, and the reloaded page shows no lag.
    tid(page, "reset-apply").click()
    expect(tid(page, "reset-applied")).to_be_visible()
    assert committed(console, group) == {(topic_name, 0): 50, (topic_name, 1): 50}
    page.reload()
    expect(tid(page, "group-lag")).to_have_text("0")
    expect(tid(page, "group-status")).to_have_text("OK")


def test_api_errors_are_shown_as_the_api_says_them(console, page):
    status, body = http_get(console, "/v1/groups/no-such-group")
    assert status == 404 and body["error"]
    page.goto(page.base + "#/groups/no-such-group")
    expect(tid(page, "error")).to_have_text(body["error"])


@pytest.fixture(scope="module")
def secured():
    """A broker whose client listener requires SASL, with an authorizer: the console asks for a login."""
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    http_port, sasl_port = free_port(), free_port()
    workdir = tempfile.mkdtemp(prefix="annal-interop-console-secured-")
    b = AnnalBroker(os.environ["ANNAL_BIN"], workdir)
    b.overrides = [
        f"http.listen=127.0.0.1:{http_port}",
        f"listeners=PLAINTEXT://127.0.0.1:{b.port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
        "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule "
        'required username="admin" password="admin-secret" user_admin="admin-secret";',
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users=User:admin",
    ]
    b.http = f"127.0.0.1:{http_port}"
    b.sasl_bootstrap = f"127.0.0.1:{sasl_port}"
    try:
        b.start()
    except BaseException:
        remove_workdir(workdir)
        raise
    yield b
    b.close()


def secured_page(browser, b):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    pg = context.new_page()
    pg.set_default_timeout(TIMEOUT_MS)
    pg.base = f"http://{b.http}/"
    return context, pg


def log_in(pg, user, password, mechanism):
    tid(pg, "login-username").fill(user)
    tid(pg, "login-password").fill(password)
    tid(pg, "login-mechanism").select_option(mechanism)
    tid(pg, "login-submit").click()


def sasl_consumer_topics(b, user, password):
    """The topics `user` sees through SCRAM-SHA-512 (librdkafka's Metadata): proves the credential works."""
    import confluent_kafka as ck
    admin = ck.admin.AdminClient({"bootstrap.servers": b.sasl_bootstrap, "security.protocol": "SASL_PLAINTEXT",
                                  "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": user,
                                  "sasl.password": password})
    return set(admin.list_topics(timeout=10).topics)


def test_login_users_and_acls(secured, browser):
    context, pg = secured_page(browser, secured)
    errors = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    try:
        pg.goto(pg.base + "#/topics")
        expect(tid(pg, "login-form")).to_be_visible()
        shot(pg, "login")
        log_in(pg, "admin", "wrong-password", "PLAIN")
        expect(tid(pg, "login-form")).to_contain_text("failed")
        log_in(pg, "admin", "admin-secret", "PLAIN")
        expect(tid(pg, "topic-search")).to_be_visible()

        # A topic for the ACL, created on the topics screen as the super user.
        tid(pg, "create-name").fill("ledger")
        tid(pg, "create-partitions").fill("1")
        tid(pg, "create-submit").click()
        expect(tid(pg, "topic-name")).to_have_text("ledger")

        # A SCRAM user, added on the users screen; the credential is real (librdkafka logs in with it).
        pg.goto(pg.base + "#/users")
        tid(pg, "new-user-name").fill("carol")
        tid(pg, "new-user-password").fill("carol-secret")
        tid(pg, "new-user-mechanism").select_option("SCRAM-SHA-512")
        tid(pg, "user-create").click()
        expect(tid(pg, "user-row")).to_have_count(1)
        expect(tid(pg, "user-row")).to_contain_text("SCRAM-SHA-512")
        shot(pg, "users")
        assert "ledger" not in sasl_consumer_topics(secured, "carol", "carol-secret")

        # An ACL, added on the ACLs screen: carol may now describe (so see) "ledger".
        pg.goto(pg.base + "#/acls")
        tid(pg, "new-acl-principal").fill("User:carol")
        tid(pg, "new-acl-operation").select_option("DESCRIBE")
        tid(pg, "new-acl-name").fill("ledger")
        tid(pg, "acl-create").click()
        expect(tid(pg, "acl-row")).to_have_count(1)
        expect(tid(pg, "acl-row")).to_contain_text("User:carol")
        shot(pg, "acls")
        wait_until(lambda: "ledger" in sasl_consumer_topics(secured, "carol", "carol-secret"),
                   "carol to see 'ledger' once her ACL exists")

        # The topic page shows the ACL that applies to it.
        pg.goto(pg.base + "#/topics/ledger")
        expect(tid(pg, "acl-row")).to_contain_text("DESCRIBE")

        # Carol logs in (a second browser) with the credential made above and sees only "ledger".
        context2, pg2 = secured_page(browser, secured)
        try:
            pg2.goto(pg2.base + "#/topics")
            log_in(pg2, "carol", "carol-secret", "SCRAM-SHA-512")
            expect(tid(pg2, "topic-row")).to_have_count(1)
            expect(tid(pg2, "topic-row")).to_have_attribute("data-name", "ledger")
        finally:
            context2.close()
    finally:
        context.close()
    assert not errors, f"the page threw: {errors}"
