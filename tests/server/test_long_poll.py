import threading
import time

import pytest

from tests.support.helpers import (
    commit,
    maintenance,
    release,
    state,
    switch,
    wait_parked,
    wait_until,
)

pytestmark = pytest.mark.dialect  # on SQLite and MariaDB (tests/conftest.py)


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
    thread, box = _in_thread(lambda: commit(api, wait_s=60))
    wait_parked(api, 1)
    release(api, lease)
    thread.join(90)
    # granted, not refused at its deadline: the release woke it (benchmarks/long_poll.py
    # measures how soon)
    assert box["response"].status_code == 201


def test_waiting_commit_request_times_out_with_423(api):
    maintenance(api)
    started = time.monotonic()
    response = commit(api, wait_s=0.5)
    assert response.status_code == 423
    assert time.monotonic() - started >= 0.45


def test_waiting_maintenance_request_is_granted_when_commits_drain(api):
    lease = commit(api).json()
    thread, box = _in_thread(lambda: maintenance(api, wait_s=60))
    intent = wait_until(lambda: state(api)["intent"], "the intent opened")
    assert intent["holder"] == "compactor-1"
    release(api, lease)
    thread.join(90)
    assert box["response"].status_code == 201
    assert box["response"].json()["token"] == 1


def test_state_long_poll_returns_when_the_version_moves(api):
    switch(api, maintenance="enabled")  # the table is known, nothing held
    version = state(api)["version"]
    thread, box = _in_thread(
        lambda: api.get("/v1/tables/lake.db.events", params={"wait": 60, "since": version})
    )
    wait_parked(api, 1)
    assert thread.is_alive()
    commit(api)
    thread.join(90)
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
    response = api.get("/v1/tables/lake.db.events", params={"wait": 60, "since": 0})
    assert response.json()["version"] >= 1
    assert time.monotonic() - started < 30  # at once, not at its 60 s deadline
