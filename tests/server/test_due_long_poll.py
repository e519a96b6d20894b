"""The long-poll for due partitions (GET /v1/due, docs/design.md §5.1): parked until a
partition of the tables it follows becomes due, through this replica or another, or until a
claim that hid one ends; never answered for another table's."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import httpx
import pytest
from starlette.testclient import TestClient

from service.server.app import create_app
from tests.conftest import auth, make_settings
from tests.lock.due_rows import TABLE, due, forget_counts, write
from tests.support.helpers import claim, metric, release, state, wait_parked

pytestmark = pytest.mark.dialect  # on SQLite and MariaDB (tests/conftest.py)

P1, P2 = "dt=2024-06-20/hr=13", "dt=2024-06-20/hr=14"
WAIT_S = 60  # the longest long-poll: an answer before it was woken, not timed out


@pytest.fixture(autouse=True)
def _counts_of_this_test_only(db_url):
    forget_counts(db_url)
    yield
    forget_counts(db_url)


def _polling(api: httpx.Client, *tables: str, holder: str = "compactor-1"):
    box: dict[str, httpx.Response] = {}
    thread = threading.Thread(
        target=lambda: box.update(response=due(api, *tables, holder=holder, wait_s=WAIT_S))
    )
    thread.start()
    return thread, box


def _answered(thread: threading.Thread, box: dict[str, httpx.Response]) -> dict:
    thread.join(WAIT_S + 30)
    assert not thread.is_alive(), "the long-poll never answered"
    answer = box["response"]
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_it_answers_at_once_when_a_partition_is_due(api):
    write(api, {P1: (4, 0)})
    answer = due(api, wait_s=WAIT_S).json()
    assert [d["partition"] for d in answer["due"]] == [P1]
    assert answer["waited_s"] < WAIT_S


def test_a_parked_poll_wakes_when_a_release_makes_a_partition_due(api):
    write(api, {P1: (3, 0)})  # counted, not due
    thread, box = _polling(api)
    wait_parked(api, 1)
    assert metric(api, "lakelock_due_followers_waiting") == 1
    assert state(api)["due"]["followers_waiting"] == 1
    write(api, {P1: (1, 0)})
    answer = _answered(thread, box)
    assert [(d["partition"], d["data_files"]) for d in answer["due"]] == [(P1, 4)]
    assert answer["waited_s"] < WAIT_S  # woken, not answered at its deadline
    assert metric(api, "lakelock_due_followers_waiting") == 0
    assert state(api)["due"]["followers_waiting"] == 0


def test_another_tables_partition_leaves_it_parked(api):
    thread, box = _polling(api, "lake.db.clicks")
    wait_parked(api, 1)
    write(api, {P1: (4, 0)})  # due on lake.db.events: not followed
    assert thread.is_alive()
    write(api, {P2: (0, 4)}, table="lake.db.clicks")
    answer = _answered(thread, box)
    assert [(d["table"], d["partition"]) for d in answer["due"]] == [("lake.db.clicks", P2)]


def test_the_end_of_another_compactors_claim_wakes_it(api):
    write(api, {P1: (4, 0)})
    held = claim(api, holder="compactor-2").json()
    thread, box = _polling(api)
    wait_parked(api, 1)
    release(api, held).raise_for_status()
    answer = _answered(thread, box)
    assert [d["partition"] for d in answer["due"]] == [P1]
    assert answer["waited_s"] < WAIT_S


@pytest.fixture
def other_replica(db_url: str) -> Iterator[httpx.Client]:
    """A second service over the same database: its long-polls learn of changes through it
    by their poller only."""
    app = create_app(make_settings(db_url))
    with TestClient(app, headers=auth("operator"), raise_server_exceptions=False) as client:
        yield client


def test_a_partition_made_due_through_another_replica_wakes_it(api, other_replica):
    thread, box = _polling(api)
    wait_parked(api, 1)
    write(other_replica, {P1: (0, 4)})
    answer = _answered(thread, box)
    assert [d["partition"] for d in answer["due"]] == [P1]
    assert answer["waited_s"] < WAIT_S


def test_many_parked_followers_are_all_answered(api):
    write(api, {P1: (1, 0)})
    polls = [_polling(api, holder=f"compactor-{n}") for n in range(4)]
    wait_parked(api, 4)
    assert _waiting(api) == 4
    write(api, {P1: (3, 0)})
    for thread, box in polls:
        assert [d["partition"] for d in _answered(thread, box)["due"]] == [P1]


def _waiting(api: httpx.Client) -> int:
    return int(state(api, TABLE)["due"]["followers_waiting"])
