import threading
import time

import pytest

from tests.support.helpers import commit, events, maintenance, release

pytestmark = pytest.mark.dialect  # on SQLite and MariaDB (tests/conftest.py)

COMMIT_TTL_S = 3.0
GRANTS_BEFORE_ASKING = 12  # the loop is running: every writer was granted about twice
HANG_GUARD_S = 120  # only against a hang; the test is driven by counts


def test_maintenance_is_granted_under_a_tight_commit_loop_and_no_commit_jumps_the_intent(api):
    """Without writer preference a steady stream of overlapping commit leases starves the
    compactor forever; with it, the intent stops new grants, the commits in flight drain, and
    maintenance is granted while the writers keep asking."""
    stop = threading.Event()
    granted = threading.Semaphore(0)

    def ingest(number: int) -> None:
        while not stop.is_set():
            response = commit(api, holder=f"ingest-{number}", ttl_s=COMMIT_TTL_S)
            if response.status_code == 201:
                granted.release()
                time.sleep(0.05)  # the micro-batch's MERGE
                release(api, response.json())

    writers = [threading.Thread(target=ingest, args=(n,)) for n in range(6)]
    for thread in writers:
        thread.start()
    try:
        for _ in range(GRANTS_BEFORE_ASKING):
            assert granted.acquire(timeout=HANG_GUARD_S), "the commit loop is not running"
        asked = time.monotonic()
        response = maintenance(api, request_id="compaction", wait_s=COMMIT_TTL_S * 2)
        while response.status_code == 202 and time.monotonic() - asked < HANG_GUARD_S:
            response = maintenance(api, request_id="compaction", wait_s=COMMIT_TTL_S)
        assert response.status_code == 201, response.text
        lease = response.json()
        blocked = commit(api, holder="late-writer")
        assert blocked.status_code == 423 and blocked.json()["reason"] == "maintenance"
        release(api, lease)
    finally:
        stop.set()
        for thread in writers:
            thread.join(10)
    # and ingest resumes after the release
    assert commit(api, holder="after").status_code == 201

    # the audit trail, in commit order: once the intent opened, no commit lease was granted
    # until maintenance was, and every commit lease live then had ended before the grant
    trail = sorted(events(api), key=lambda e: e["id"])
    opened = next(e["id"] for e in trail if e["event"] == "intent.opened")
    grant = next(e["id"] for e in trail if e["lease_id"] == lease["lease_id"])
    commits = [e for e in trail if e["kind"] == "commit"]
    jumped = [e for e in commits if e["event"] == "lease.acquired" and opened < e["id"] < grant]
    assert not jumped, jumped
    granted_before = {
        e["lease_id"] for e in commits if e["event"] == "lease.acquired" and e["id"] < opened
    }
    ended_before_grant = {
        e["lease_id"]
        for e in commits
        if e["event"] in ("lease.released", "lease.expired") and e["id"] < grant
    }
    assert granted_before <= ended_before_grant
