"""The status page at GET /, in a real headless browser (Debian's chromium, driven by playwright).

Needs /usr/bin/chromium (`apt-get install chromium`; .ci/run installs it). Playwright's own
browser download is never used.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import httpx
import pytest

from service.client import Lease, LeaseClient

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TABLE = "lake.db.page_events"
SEEN_WITHIN_MS = 30_000  # guards against a hang only: the long-poll answers in milliseconds


def launch(playwright):
    return playwright.chromium.launch(
        executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
    )


@pytest.fixture(scope="module")
def browser():
    if not CHROMIUM.exists():
        if os.environ.get("CI"):
            pytest.fail("/usr/bin/chromium is missing: .ci/run installs it with apt-get")
        pytest.skip("/usr/bin/chromium is not installed (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = launch(playwright)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    yield page
    context.close()


def sign_in(page, server, role: str = "reader") -> None:
    page.goto(server.url + "/")
    page.fill("#token", server.token(role))
    page.click("#login-form button")


def test_the_page_is_one_self_contained_file_served_without_a_token(lakelock_server):
    answer = httpx.get(lakelock_server.url + "/")
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/html")
    assert "connect-src 'self'" in answer.headers["content-security-policy"]
    # nothing loaded from elsewhere: no external script, style, font or image
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", answer.text)
    # the data is not: it needs a token
    assert httpx.get(lakelock_server.url + "/v1/tables").status_code == 401


def test_a_lease_appears_and_goes_when_revoked(page, lakelock_server, operator):
    from playwright.sync_api import expect

    operator.set_switch(TABLE, ingest="running", reason="page test")
    sign_in(page, lakelock_server)
    section = page.locator(f'section[data-table="{TABLE}"]')
    expect(section).to_be_visible(timeout=SEEN_WITHIN_MS)
    expect(section).to_contain_text("page test")

    lease = operator.acquire_commit(TABLE, holder="ingest-page-test", ttl_s=120)
    assert isinstance(lease, Lease)
    row = section.locator(f'tr[data-lease-id="{lease.lease_id}"]')
    expect(row).to_be_visible(timeout=SEEN_WITHIN_MS)
    expect(row).to_contain_text("ingest-page-test")
    expect(row).to_contain_text("whole table")
    expect(row.locator("td.countdown")).to_have_text(re.compile(r"^\d+ s$"))
    # the page kept its document: it was updated in place, not reloaded
    page.evaluate("window.__stayed = true")

    operator.revoke(lease.lease_id, reason="page test revoke")
    expect(row).to_have_count(0, timeout=SEEN_WITHIN_MS)
    expect(page.locator("#events")).to_contain_text("lease.revoked")
    assert page.evaluate("window.__stayed") is True


def test_the_token_stays_in_session_storage_never_in_the_url(page, lakelock_server, operator):
    from playwright.sync_api import expect

    operator.set_switch(TABLE, maintenance="enabled", reason="page test")
    sign_in(page, lakelock_server)
    expect(page.locator(f'section[data-table="{TABLE}"]')).to_be_visible(timeout=SEEN_WITHIN_MS)
    token = lakelock_server.token("reader")
    assert token not in page.url
    assert page.evaluate("sessionStorage.getItem('lakelock.token')") == token
    assert page.evaluate("localStorage.length") == 0
    page.reload()  # typed once: a reload in the same tab needs no token
    expect(page.locator(f'section[data-table="{TABLE}"]')).to_be_visible(timeout=SEEN_WITHIN_MS)
    expect(page.locator("#login")).to_be_hidden()


def test_a_wrong_token_asks_again_with_the_services_reason(page, lakelock_server):
    from playwright.sync_api import expect

    page.goto(lakelock_server.url + "/")
    page.fill("#token", "not-a-configured-token")
    page.click("#login-form button")
    expect(page.locator("#error")).to_contain_text("unknown token", timeout=SEEN_WITHIN_MS)
    expect(page.locator("#login")).to_be_visible()
    assert page.evaluate("sessionStorage.getItem('lakelock.token')") is None


def _debt(small: int, deletes: int) -> dict:
    return {
        "snapshot_id": 3051729675574597004,
        "data_files": small + 10,
        "small_files": small,
        "delete_files": deletes,
        "partitions_over_target": 1,
        "records": 1000,
    }


def test_tables_are_listed_by_debt_and_a_claim_shows_with_the_leases(page, lakelock_server):
    from playwright.sync_api import expect

    heavy, light = "lake.db.page_heavy", "lake.db.page_light"
    with LeaseClient(lakelock_server.url, token=lakelock_server.token("job")) as job:
        job.report_debt(light, _debt(2, 0))
        job.report_debt(heavy, _debt(50, 7))
        claim = job.claim(heavy, holder="compactor-page-test", ttl_s=120)
    sign_in(page, lakelock_server)
    ranked = page.locator("#debt tr[data-debt-table]")
    expect(ranked.filter(has_text=light)).to_have_count(1, timeout=SEEN_WITHIN_MS)
    order = [row.get_attribute("data-debt-table") for row in ranked.all()]
    assert order.index(heavy) < order.index(light)
    expect(page.locator(f'tr[data-debt-table="{heavy}"]')).to_contain_text("60")  # data files
    sections = [s.get_attribute("data-table") for s in page.locator("section[data-table]").all()]
    assert sections.index(heavy) < sections.index(light)
    section = page.locator(f'section[data-table="{heavy}"]')
    expect(section).to_contain_text("50 small files")
    row = section.locator(f'tr[data-lease-id="{claim.lease_id}"]')
    expect(row).to_be_visible(timeout=SEEN_WITHIN_MS)
    expect(row).to_contain_text("claim")
    expect(row).to_contain_text("compactor-page-test")


def test_a_tables_ingest_lag_and_readers_show_with_it(page, lakelock_server):
    from playwright.sync_api import expect

    table = "lake.db.page_streams"
    with LeaseClient(lakelock_server.url, token=lakelock_server.token("job")) as job:
        job.report_ingest_lag(table, query_id="q", batch_id=9, partitions={"t:0": 30})
        job.hold_reader(table, "summary@h1", snapshot_id=42, ttl_s=600)
    sign_in(page, lakelock_server)
    section = page.locator(f'section[data-table="{table}"]')
    expect(section).to_contain_text(
        "ingest lag: 30 records behind (t:0 30)", timeout=SEEN_WITHIN_MS
    )
    expect(section).to_contain_text("reader summary@h1 at snapshot 42")


def test_backpressure_and_the_debt_of_the_last_hour_show_with_the_table(page, lakelock_server):
    from datetime import UTC, datetime, timedelta

    from playwright.sync_api import expect

    table = "lake.db.page_pressed"
    now = datetime.now(UTC)
    with LeaseClient(lakelock_server.url, token=lakelock_server.token("job")) as job:
        for minutes, before, after in ((40, (30, 20), (2, 0)), (10, (26, 24), (3, 1))):
            job.report_run(
                table,
                {
                    "run_uid": f"r{minutes}",
                    "holder": "compactor-page",
                    "outcome": "compacted",
                    "started_at": (now - timedelta(minutes=minutes)).isoformat(),
                    "before": {"small_files": before[0], "delete_files": before[1]},
                    "after": {"small_files": after[0], "delete_files": after[1]},
                },
            )
        job.report_debt(table, {**_debt(26, 24), "partitions_over_bound": 1, "worst_partition": 31})
        claim = job.claim(table, holder="compactor-page", ttl_s=120)
        job.hold_back(
            table,
            claim_id=claim.lease_id,
            holder="compactor-page/r1",
            partitions=["dt=2024-06-20"],
            reason="26 delete files (bound 24)",
        )
    sign_in(page, lakelock_server)
    section = page.locator(f'section[data-table="{table}"]')
    expect(section).to_contain_text(
        "backpressure: commits to dt=2024-06-20 held until compactor-page/r1 compacts them",
        timeout=SEEN_WITHIN_MS,
    )
    expect(section).to_contain_text("1 past the hard bound")
    # four points: each run's debt before and after it, within the hour
    expect(section.locator("div[data-debt-history]")).to_have_attribute("data-debt-history", "4")
    expect(section).to_contain_text("debt over the last hour (small + delete files, peak 50)")


def test_due_partitions_and_due_to_compacted_show_with_the_table(page, lakelock_server):
    from playwright.sync_api import expect

    table = "lake.db.page_due"
    hot, cold = "dt=2024-06-20/hr=13", "dt=2024-06-20/hr=12"
    with LeaseClient(lakelock_server.url, token=lakelock_server.token("job")) as job:
        lease = job.acquire_commit(table, holder="ingest-page", ttl_s=30, partitions=[hot, cold])
        job.release(lease, written={hot: (4, 1), cold: (1, 0)})
        assert [d.partition for d in job.due([table], holder="compactor-page", wait_s=0)] == [hot]
        held = job.acquire_maintenance(table, holder="compactor-page", ttl_s=60, partitions=[hot])
        assert isinstance(held, Lease)
        job.release(held, compacted=[hot])
    sign_in(page, lakelock_server)
    section = page.locator(f'section[data-table="{table}"]')
    expect(section).to_contain_text(
        "due: 0 partitions due · 1 data and 0 delete files counted in 1 partitions",
        timeout=SEEN_WITHIN_MS,
    )
    expect(section).to_contain_text("over the last hour (1 compacted)")
    expect(section).to_contain_text("1 followers (0 waiting)")
