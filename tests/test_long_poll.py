import threading
import time

from tests.helpers import commit, maintenance, release, state, switch


def _in_thread(fn):
    box = {}

    def run():
        box["response"] = fn()
        box["at"] = time.monotonic()

    thread = threading.Thread(target=run)
    thread.start()
    return thread, box


def test_waiting_commit_request_is_answered_when_maintenance_is_released(api):
    lease = maintenance(api).json()
    thread, box = _in_thread(lambda: commit(api, wait_s=20))
    time.sleep(0.5)
    assert thread.is_alive(), "the commit request should be waiting"
    release(api, lease)
    released_at = time.monotonic()
    thread.join(25)
    assert box["response"].status_code == 201
    # generous bound; benchmarks/long_poll.py measures the typical figure
    assert box["at"] - released_at < 2.0


def test_waiting_commit_request_times_out_with_423(api):
    maintenance(api)
    started = time.monotonic()
    response = commit(api, wait_s=0.5)
    assert response.status_code == 423
    assert time.monotonic() - started >= 0.45


def test_waiting_maintenance_request_is_granted_when_commits_drain(api):
    lease = commit(api).json()
    thread, box = _in_thread(lambda: maintenance(api, wait_s=20))
    time.sleep(0.5)
    assert state(api)["intent"]["holder"] == "compactor-1"
    release(api, lease)
    thread.join(25)
    assert box["response"].status_code == 201
    assert box["response"].json()["token"] == 1


def test_state_long_poll_returns_when_the_version_moves(api):
    switch(api, maintenance="enabled")  # the table is known, nothing held
    version = state(api)["version"]
    thread, box = _in_thread(
        lambda: api.get("/v1/tables/lake.db.events", params={"wait": 20, "since": version})
    )
    time.sleep(0.3)
    assert thread.is_alive()
    commit(api)
    thread.join(25)
    assert box["response"].json()["version"] > version
    assert len(box["response"].json()["commit_leases"]) == 1


def test_state_long_poll_answers_at_the_deadline_with_the_current_state(api):
    commit(api)
    version = state(api)["version"]
    response = api.get("/v1/tables/lake.db.events", params={"wait": 0.3, "since": version})
    assert response.status_code == 200 and response.json()["version"] == version


def test_state_with_an_old_since_answers_at_once(api):
    commit(api)
    started = time.monotonic()
    response = api.get("/v1/tables/lake.db.events", params={"wait": 20, "since": 0})
    assert response.json()["version"] >= 1
    assert time.monotonic() - started < 5
