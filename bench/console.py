#!/usr/bin/env python3
"""Console bench (issue 18): time to first render of the topics and groups pages with 10,000 of each.

    ANNAL_BIN=target/release/annal .cache/interop-venv/bin/python bench/console.py [--topics 10000] [--groups 10000]
                                                                                   [--runs 7] [--baseline 10]

(the interop venv has Playwright; chromium is Debian's, /usr/bin/chromium, or CHROMIUM_BIN.)

Two brokers, one after the other: a baseline with --baseline topics and groups, then the big one. Topics are made
with CreateTopics (1 partition each, batches of 500); groups with one standalone OffsetCommit each (a simple group,
no member, as `kafka-consumer-groups --reset-offsets` leaves one) on one topic. For each page, --runs fresh page
loads in chromium (a new browser context each: no cache), each timed from navigation start to the mark the page
sets when its list's first page is on screen (performance.mark "annal:topics" / "annal:groups", web/dom.js
markRendered), and the same for one GET of the list's first page from Python (the server's share). Printed: the
median of each, and big / baseline. Target (issue 18): the page's first render under 300 ms. Not a test: nothing
here asserts a figure.
"""

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "interop"))

from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

import kwire  # noqa: E402
from brokers import AnnalBroker, free_port  # noqa: E402

CREATE_BATCH = 500
OFFSETS_TOPIC = "bench-console-offsets"


def start_broker(annal_bin):
    http_port = free_port()
    workdir = tempfile.mkdtemp(prefix="annal-bench-console-")
    b = AnnalBroker(annal_bin, workdir, overrides=[f"http.listen=127.0.0.1:{http_port}"])
    b.http = f"127.0.0.1:{http_port}"
    b.start()
    return b


def create_topics(b, count):
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    names = [f"bench-topic-{i:05d}" for i in range(count)] + [OFFSETS_TOPIC]
    for start in range(0, len(names), CREATE_BATCH):
        batch = [NewTopic(n, num_partitions=1, replication_factor=1) for n in names[start:start + CREATE_BATCH]]
        for name, f in admin.create_topics(batch, operation_timeout=600).items():
            f.result(timeout=900)
    # Every topic listed with a leader before anything is timed.
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        md = admin.list_topics(timeout=60)
        if sum(1 for n in names if n in md.topics and all(p.leader >= 0 for p in md.topics[n].partitions.values())) \
                == len(names):
            return
        time.sleep(1)
    raise RuntimeError(f"not every one of {len(names)} topics had a leader within 300 s")


def create_groups(b, count):
    for i in range(count):
        err = kwire.offset_commit(b, f"bench-group-{i:05d}", OFFSETS_TOPIC, 0, 0)
        if err != 0:
            raise RuntimeError(f"OffsetCommit of bench-group-{i:05d} answered error {err}")


def api_ms(b, path):
    t0 = time.perf_counter()
    with urllib.request.urlopen(f"http://{b.http}{path}", timeout=60) as r:
        r.read()
    return (time.perf_counter() - t0) * 1000


def page_ms(browser, b, route, row_testid, mark):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        page = context.new_page()
        page.goto(f"http://{b.http}/#/{route}")
        page.wait_for_selector(f'[data-testid="{row_testid}"]', timeout=60_000)
        return page.evaluate(f"performance.getEntriesByName('annal:{mark}')[0].startTime")
    finally:
        context.close()


def measure(browser, b, runs):
    out = {}
    for name, route, row, api in (("topics", "topics", "topic-row", "/v1/topics?page=1&page_size=50&sort=name"),
                                  ("groups", "groups", "group-row", "/v1/groups?page=1&page_size=50&sort=name")):
        page_ms(browser, b, route, row, name)  # warm-up (first start of the renderer)
        out[name] = {
            "page_ms": statistics.median(page_ms(browser, b, route, row, name) for _ in range(runs)),
            "api_ms": statistics.median(api_ms(b, api) for _ in range(runs)),
        }
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--topics", type=int, default=10_000)
    ap.add_argument("--groups", type=int, default=10_000)
    ap.add_argument("--baseline", type=int, default=10, help="topics and groups of the baseline broker")
    ap.add_argument("--runs", type=int, default=7)
    args = ap.parse_args()
    annal_bin = os.environ.get("ANNAL_BIN", str(REPO / "target" / "release" / "annal"))
    chromium = os.environ.get("CHROMIUM_BIN", "/usr/bin/chromium")
    if not shutil.which(chromium):
        sys.exit(f"no chromium at {chromium}: apt-get install -y chromium")

    from playwright.sync_api import sync_playwright
    results = {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        for label, topics, groups in (("baseline", args.baseline, args.baseline), ("big", args.topics, args.groups)):
            b = start_broker(annal_bin)
            try:
                t0 = time.monotonic()
                create_topics(b, topics)
                create_groups(b, groups)
                print(f"{label}: {topics} topics and {groups} groups made in {time.monotonic() - t0:.0f} s",
                      flush=True)
                results[label] = measure(browser, b, args.runs)
            finally:
                b.close()
        browser.close()

    print(f"\nmedian of {args.runs} runs; page = navigation start to the list's first row on screen (chromium)")
    print(f"{'page':8} {'baseline page':>14} {'big page':>10} {'big/base':>9} {'baseline API':>13} {'big API':>9}")
    for name in ("topics", "groups"):
        base, big = results["baseline"][name], results["big"][name]
        print(f"{name:8} {base['page_ms']:12.1f}ms {big['page_ms']:8.1f}ms {big['page_ms'] / base['page_ms']:8.2f}x "
              f"{base['api_ms']:11.1f}ms {big['api_ms']:7.1f}ms")
    print(f"(big: {args.topics} topics, {args.groups} groups; baseline: {args.baseline} of each; target < 300 ms)")


if __name__ == "__main__":
    main()
