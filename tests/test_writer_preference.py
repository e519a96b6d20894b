import threading
import time

from tests.helpers import commit, maintenance, release

COMMIT_TTL_S = 3.0


def test_maintenance_is_granted_within_the_longest_commit_ttl_under_a_tight_commit_loop(api):
    """Without writer preference a steady stream of overlapping commit leases starves the
    compactor forever; with it, commits drain and the grant comes within one commit TTL."""
    stop = threading.Event()
    granted_commits = []

    def ingest(number: int) -> None:
        while not stop.is_set():
            response = commit(api, holder=f"ingest-{number}", ttl_s=COMMIT_TTL_S)
            if response.status_code == 201:
                granted_commits.append(time.monotonic())
                time.sleep(0.05)  # the micro-batch's MERGE
                release(api, response.json())

    writers = [threading.Thread(target=ingest, args=(n,)) for n in range(6)]
    for thread in writers:
        thread.start()
    try:
        time.sleep(0.5)
        assert granted_commits, "the commit loop should be running"
        asked = time.monotonic()
        response = maintenance(api, request_id="compaction", wait_s=COMMIT_TTL_S * 2)
        while response.status_code == 202 and time.monotonic() - asked < 20:
            response = maintenance(api, request_id="compaction", wait_s=COMMIT_TTL_S)
        waited = time.monotonic() - asked
        assert response.status_code == 201, response.text
        assert waited < COMMIT_TTL_S, f"granted after {waited:.2f}s"
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
