"""The turn of the head (docs/catalog-front.md §4): a rewrite that lost the table's head to a
foreign commit commits next, against a real service process on SQLite and on MariaDB.

Appends pass a maintenance lease (they cannot conflict with a rewrite), but each one moves the
head: a writer appending in a tight loop made every retry of a rewrite's commit a 409. Now the
first 409 of the lease holder's commit gives its lease the next turn: foreign data commits to
the table are parked until the lease's next commit lands (or the lease ends, or
LAKELOCK_CATALOG_HEAD_TURN_S passes), and applied after it, or answered 409 and retried by the
writer on the new head. The runs are driven by counts and events, with time limits only
against a hang.
"""

from __future__ import annotations

import threading
import time
from datetime import date
from typing import Any

import httpx
import pytest
from pyiceberg.exceptions import CommitFailedException

from tests.catalog.test_front import (
    events,
    lakelock_name,
    maintenance_lease,
    new_table,
    rest,
    rows,
    service,
)
from tests.conftest import FRONTS, auth, front_fixture
from tests.support.helpers import HANG_GUARD_S, metric, wait_until
from tests.support.iceberg_commits import Rewritten, rewrite_body, rewrite_files
from tests.support.invariants import check, load_history

pytestmark = pytest.mark.dialect  # on SQLite and MariaDB (tests/conftest.py)

DAY = date(2024, 6, 20)  # the partition the maintenance lease holds and the rewrite compacts
OTHER = date(2024, 6, 21)
# Iceberg's commit retries (commit.retry.num-retries 4, from 100 ms doubling): a client's own
# pacing, never a measure
BACKOFF_S = (0.1, 0.2, 0.4, 0.8)


# a park and a turn far longer than any step here: a bound against a hang, so the turn ends by
# the lease's commit or its end in every test of this front, never by its bound
front = front_fixture(
    "turn", FRONTS, LAKELOCK_CATALOG_HOLD_WAIT_S="100", LAKELOCK_CATALOG_HEAD_TURN_S="100"
)
lapsing_front = front_fixture(
    "lapse", ["sqlite"], LAKELOCK_CATALOG_HOLD_WAIT_S="100", LAKELOCK_CATALOG_HEAD_TURN_S="0.2"
)


def named(lease: dict[str, Any]) -> dict[str, str]:
    return {"lakelock.lease-id": lease["lease_id"], "lakelock.token": str(lease["token"])}


def commit(front: Any, table: Any, body: dict[str, Any] | None) -> httpx.Response:
    assert body is not None
    namespace, name = table.name()
    with httpx.Client(base_url=f"{front.url}/iceberg", headers=auth("job"), timeout=60) as c:
        return c.post(f"/v1/namespaces/{namespace}/tables/{name}", json=body)


def rewrite(front: Any, table: Any, lease: dict[str, Any], rewritten: Rewritten) -> int:
    """The rewrite `rewritten` committed on the table's head as it is now: a retry of the
    compactor's commit, re-built on fresh metadata as Iceberg's clients re-build it."""
    fresh = rest(front).load_table(table.name())
    body = rewrite_body(fresh, DAY, named(lease), rewritten=rewritten)
    return commit(front, fresh, body).status_code


def turns(front: Any, table: Any) -> list[dict[str, Any]]:
    with service(front, "reader") as api:
        state = api.get(f"/v1/tables/{lakelock_name(table)}").json()
    return [x for x in state["intents"] if x["cause"] == "turn"]


def lose_the_head(front: Any, table: Any, lease: dict[str, Any]) -> Rewritten:
    """The compactor's first commit, built on a head a foreign append then moved: a 409 that
    gives its lease the next turn. Returns the rewrite, to commit again."""
    stale = rest(front).load_table(table.name())
    rewritten = rewrite_files(stale, DAY)
    assert rewritten is not None
    body = rewrite_body(stale, DAY, named(lease), rewritten=rewritten)
    rest(front).load_table(table.name()).append(rows(1, DAY, start=500))  # passes the lease
    lost = commit(front, stale, body)
    assert lost.status_code == 409, lost.text
    assert lost.json()["error"]["type"] == "CommitFailedException"
    return rewritten


class Appender:
    """A foreign writer appending in a thread, retrying a 409 on a reloaded table as Iceberg's
    clients do; `done` holds what became of each append ("ok" or the error)."""

    def __init__(self, front: Any, table: Any, day: date, *, loop: bool = False) -> None:
        self.front, self.identifier, self.day, self.loop = front, table.name(), day, loop
        self.done: list[Any] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Appender:
        self.thread.start()
        return self

    def join(self) -> list[Any]:
        self.stop.set()
        self.thread.join(HANG_GUARD_S)
        assert not self.thread.is_alive(), "an append hung"
        return self.done

    def _run(self) -> None:
        table = rest(self.front).load_table(self.identifier)
        n = 0
        while True:
            n += 1
            self.done.append(self._append(table, n))
            if not self.loop or self.stop.is_set():
                return

    def _append(self, table: Any, n: int) -> Any:
        for wait in (*BACKOFF_S, None):
            try:
                table.append(rows(1, self.day, start=10_000 + n))
                return "ok"
            except CommitFailedException as exc:
                if wait is None:
                    return exc
                time.sleep(wait)
                table.refresh()
            except Exception as exc:  # a 429 or worse: the assertions report it
                return exc
        raise AssertionError("unreachable")


def parked(front: Any) -> bool:
    with service(front, "reader") as api:
        return metric(api, "lakelock_parked_long_polls") >= 1


def test_a_rewrite_that_lost_the_head_commits_next_and_the_parked_append_follows(front):
    table = new_table(front, "turn")
    lease = maintenance_lease(front, table, partitions=[f"dt={DAY}"])
    rewritten = lose_the_head(front, table, lease)
    # the lease wants the head: a turn of the whole table, the operators see it
    (turn,) = turns(front, table)
    assert (turn["holder"], turn["request_id"]) == ("compactor-1", f"turn-{lease['lease_id']}")
    assert turn["partitions"] is None
    opened = events(front, table)[0]
    assert (opened["event"], opened["detail"]["cause"], opened["lease_id"]) == (
        "intent.opened",
        "turn",
        lease["lease_id"],
    )
    # the protocol's own writer keeps its rules: naming its commit lease it passes at once
    with service(front, "job") as api:
        ingest = api.post(
            f"/v1/tables/{lakelock_name(table)}/commit-leases",
            json={"holder": "ingest-1", "ttl_s": 60, "partitions": [f"dt={OTHER}"]},
        ).json()
    rest(front).load_table(table.name()).append(
        rows(1, OTHER, start=600), snapshot_properties={"lakelock.lease-id": ingest["lease_id"]}
    )
    gated = events(front, table)[0]
    assert (gated["event"], gated["detail"]["foreign"]) == ("catalog.commit", False)
    assert "held_s" not in gated["detail"]
    # a foreign append, into any partition, waits for the rewrite
    before = rest(front).load_table(table.name()).metadata_location
    appender = Appender(front, table, OTHER).start()
    wait_until(lambda: parked(front), "the append parked")
    assert appender.thread.is_alive() and appender.done == []
    assert rest(front).load_table(table.name()).metadata_location == before
    # the compactor's retry, on fresh metadata, commits; then the append, on the new head
    assert rewrite(front, table, lease, rewritten) == 200
    assert appender.join() == ["ok"]
    trail = events(front, table)[::-1]  # oldest first
    commits = [e for e in trail if e["event"] == "catalog.commit"]
    assert [(e["kind"], e["detail"]["foreign"]) for e in commits[-2:]] == [
        ("maintenance", False),
        ("data", True),
    ]
    assert commits[-2]["lease_id"] == lease["lease_id"]
    ended = [e for e in trail if e["event"] == "intent.fulfilled"]
    assert [(e["lease_id"], e["detail"]["cause"]) for e in ended] == [(lease["lease_id"], "turn")]
    assert [e for e in trail if e["event"] == "catalog.refused"] == []
    assert turns(front, table) == []
    # the turn is over: a foreign append passes at once, never parked
    rest(front).load_table(table.name()).append(rows(1, DAY, start=700))
    passed = events(front, table)[0]
    assert (passed["event"], passed["detail"]["foreign"]) == ("catalog.commit", True)
    assert "held_s" not in passed["detail"]


def test_a_turn_ends_with_its_lease_and_the_parked_append_is_applied(front):
    """A parked commit whose base did not move is applied when the turn ends: one
    `catalog.commit` saying how long it was held, and no refusal for its tries."""
    table = new_table(front, "turn_released")
    lease = maintenance_lease(front, table, partitions=[f"dt={DAY}"])
    lose_the_head(front, table, lease)
    appender = Appender(front, table, OTHER).start()
    wait_until(lambda: parked(front), "the append parked")
    with service(front, "job") as api:
        api.delete(
            f"/v1/leases/{lease['lease_id']}",
            params={"holder": lease["holder"], "token": lease["token"]},
        ).raise_for_status()
    assert appender.join() == ["ok"]
    trail = events(front, table)
    applied = trail[0]
    assert (applied["event"], applied["detail"]["foreign"]) == ("catalog.commit", True)
    assert applied["detail"]["held_s"] > 0
    assert [e for e in trail if e["event"] == "catalog.refused"] == []
    withdrawn = next(e for e in trail if e["event"] == "intent.withdrawn")
    assert (withdrawn["detail"]["cause"], withdrawn["actor"]) == ("turn", "job-client")
    assert turns(front, table) == []


def test_a_turn_lapses_after_its_bound(lapsing_front):
    front = lapsing_front
    table = new_table(front, "lapse")
    lease = maintenance_lease(front, table, partitions=[f"dt={DAY}"])
    lose_the_head(front, table, lease)
    opened = [e for e in events(front, table) if e["event"] == "intent.opened"]
    assert [e["detail"]["cause"] for e in opened] == ["turn"]
    wait_until(lambda: turns(front, table) == [], "the turn lapsed")
    rest(front).load_table(table.name()).append(rows(1, OTHER, start=800))
    passed = events(front, table)[0]
    assert (passed["event"], passed["detail"]["foreign"]) == ("catalog.commit", True)
    assert "held_s" not in passed["detail"]
    assert any(
        e["event"] == "intent.expired" and e["detail"].get("cause") == "turn"
        for e in events(front, table)
    )


def test_only_the_holders_commit_gets_a_turn(front):
    """A 409 of a commit naming the lease with another token, or none, opens no turn."""
    table = new_table(front, "no_turn")
    lease = maintenance_lease(front, table, partitions=[f"dt={DAY}"])
    for token in (lease["token"] + 1, None):
        stale = rest(front).load_table(table.name())
        props = {"lakelock.lease-id": lease["lease_id"]}
        if token is not None:
            props["lakelock.token"] = str(token)
        body = rewrite_body(stale, DAY, props)
        rest(front).load_table(table.name()).append(rows(1, OTHER, start=900))
        assert commit(front, stale, body).status_code == 409
        assert turns(front, table) == []
    rest(front).load_table(table.name()).append(rows(1, OTHER, start=950))
    assert "held_s" not in events(front, table)[0]["detail"]


def test_a_rewrite_wins_against_a_writer_appending_in_a_tight_loop(front):
    """The measured problem: a writer appending one row per commit while the lease holder
    commits rewrites with Iceberg's retries (4, from 100 ms). Each rewrite commits within its
    retries, every append commits (after a 409 on the new head at worst), and the invariants
    of docs/design.md §3.1 hold over the trail."""
    table = new_table(front, "race")
    name = lakelock_name(table)
    appender = Appender(front, table, DAY, loop=True).start()
    for _ in range(3):
        lease = maintenance_lease(front, table, partitions=[f"dt={DAY}"])
        base = rest(front).load_table(table.name())
        rewritten = rewrite_files(base, DAY)
        assert rewritten is not None
        body = rewrite_body(base, DAY, named(lease), rewritten=rewritten)
        status = commit(front, base, body).status_code
        tried = 1
        for wait in BACKOFF_S:
            if status != 409:
                break
            time.sleep(wait)
            status = rewrite(front, table, lease, rewritten)
            tried += 1
        assert status == 200, f"the rewrite lost the head {tried} times"
        with service(front, "job") as api:
            api.delete(
                f"/v1/leases/{lease['lease_id']}",
                params={"holder": lease["holder"], "token": lease["token"]},
            ).raise_for_status()
    done = appender.join()
    assert done and set(done) == {"ok"}, [x for x in done if x != "ok"]
    # every row appended is in the table: none lost, none twice
    read = rest(front, "reader").load_table(table.name())
    assert read.scan().to_arrow().num_rows == 6 + len(done)  # new_table's, the loop's
    trail = events(front, table)[::-1]
    appended = [
        e
        for e in trail
        if e["event"] == "catalog.commit" and e["kind"] == "data" and e["detail"]["foreign"]
    ]
    assert len(appended) == 2 + len(done)  # new_table's two, the loop's
    assert [e for e in trail if e["event"] == "catalog.refused"] == []
    assert _through_turns(trail) == []
    history = load_history(front.db_url, [])
    assert check(history) == []
    assert any(e["table_name"] == name for e in history.events)


def _through_turns(trail: list[dict[str, Any]]) -> list[int]:
    """The ids of the foreign data commits that landed while a turn of the head was open, by
    the trail of one table in commit order."""
    open_turns: set[str] = set()
    through = []
    for e in trail:
        detail = e["detail"]
        if detail.get("cause") == "turn" and e["event"] == "intent.opened":
            open_turns.add(detail["request_id"])
        elif detail.get("cause") == "turn" and e["event"].startswith("intent."):
            open_turns.discard(detail["request_id"])
        elif e["event"] == "catalog.commit" and e["kind"] == "data" and detail["foreign"]:
            through += [e["id"]] if open_turns else []
    return through
