"""Regenerate docs/status-page.png: a local service with a few leases, the page in chromium.

.venv/bin/python docs/screenshot_status_page.py
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from playwright.sync_api import expect, sync_playwright  # noqa: E402

from service.client import LeaseClient  # noqa: E402
from testkit import LocalService  # noqa: E402
from tests.server.test_status_page import launch  # noqa: E402


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "lakelock.db"
        with LocalService.start(db_url=f"sqlite:///{db}", log_path=Path(tmp) / "s.log") as svc:
            ops = LeaseClient(svc.url, token=svc.token("operator"))
            events, clicks = "lake.db.events", "lake.db.clicks"
            ops.acquire_commit(events, holder="ingest:events-stream/batch-412", ttl_s=30)
            ops.acquire_commit(events, holder="ingest:events-stream/batch-413", ttl_s=30)
            ops.acquire_maintenance(events, holder="compactor:run-88", ttl_s=300)  # an intent
            ops.report_run(
                events,
                {
                    "outcome": "compacted",
                    "holder": "compactor:run-87",
                    "before": {"data_files": 64, "delete_files": 21},
                    "after": {"data_files": 4, "delete_files": 0},
                },
            )
            ops.set_switch(clicks, ingest="paused", reason="backfill, INC-123")
            ops.acquire_maintenance(clicks, holder="compactor:run-12", ttl_s=600)
            with sync_playwright() as playwright:
                browser = launch(playwright)
                page = browser.new_page(viewport={"width": 1280, "height": 1100})
                page.goto(svc.url + "/")
                page.fill("#token", svc.token("reader"))
                page.click("#login-form button")
                expect(page.locator("section.table")).to_have_count(2, timeout=30_000)
                page.wait_for_timeout(1500)
                page.screenshot(path=str(ROOT / "docs" / "status-page.png"), full_page=True)
                browser.close()


if __name__ == "__main__":
    main()
