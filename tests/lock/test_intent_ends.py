"""No intent outlives what it waited for: a maintenance grant ends its holder's intents that it
covers (`intent.fulfilled`), whatever their request id, so ingest resumes as soon as the lease
is released, not an intent TTL later. Each path that ends a maintenance lease is checked."""

from __future__ import annotations

import pytest

from tests.support.helpers import backdate, commit, events, maintenance, release, state
from tests.support.invariants import History, replay

pytestmark = pytest.mark.dialect  # on SQLite and MariaDB (tests/conftest.py)


@pytest.fixture
def settings_overrides() -> dict[str, object]:
    # long enough that a commit granted at once cannot be the intent having expired
    return {"intent_ttl_s": 600}


def _intents(api) -> list[str]:
    return [i["request_id"] for i in state(api)["intents"]]


def test_a_grant_under_a_new_request_id_ends_the_earlier_intent_of_its_holder(api):
    in_flight = commit(api).json()
    assert maintenance(api, request_id="run-1").status_code == 202  # intent opened
    release(api, in_flight)
    # the compactor retries under a new request id (a timeout, a restart, a script)
    granted = maintenance(api, request_id="run-2")
    assert granted.status_code == 201
    assert _intents(api) == []
    fulfilled = [e for e in events(api) if e["event"] == "intent.fulfilled"]
    assert [(e["detail"]["request_id"], e["lease_id"]) for e in fulfilled] == [
        ("run-1", granted.json()["lease_id"])
    ]
    release(api, granted.json())
    assert commit(api, holder="ingest-2").status_code == 201


def test_the_own_intent_of_a_granted_request_is_fulfilled_too(api):
    in_flight = commit(api).json()
    maintenance(api, request_id="run-1")
    release(api, in_flight)
    granted = maintenance(api, request_id="run-1").json()
    trail = [(e["event"], e["detail"].get("request_id")) for e in reversed(events(api))]
    assert trail[-2:] == [("lease.acquired", "run-1"), ("intent.fulfilled", "run-1")]
    release(api, granted)
    assert commit(api, holder="ingest-2").status_code == 201


def test_an_intent_the_grant_does_not_cover_stays(api):
    hot = commit(api, partitions=["dt=1"]).json()
    commit(api, holder="ingest-2", partitions=["dt=2"])
    assert maintenance(api, request_id="run-1", partitions=["dt=1", "dt=2"]).status_code == 202
    release(api, hot)
    granted = maintenance(api, request_id="run-2", partitions=["dt=1"])
    assert granted.status_code == 201
    # run-1 still stands for dt=1 and dt=2 and may ask again: it holds until its holder gets
    # it, withdraws it (giving up) or stops asking (its TTL)
    assert _intents(api) == ["run-1"]
    release(api, granted.json())
    refused = commit(api, holder="ingest-3", partitions=["dt=2"])
    assert refused.status_code == 423 and refused.json()["reason"] == "intent"
    api.delete("/v1/tables/lake.db.events/intents/run-1", params={"holder": "compactor-1"})
    assert commit(api, holder="ingest-3", partitions=["dt=1", "dt=2"]).status_code == 201


def test_another_holders_grant_leaves_the_intent_to_its_holder(api):
    in_flight = commit(api).json()
    maintenance(api, request_id="run-1")
    release(api, in_flight)
    granted = maintenance(api, holder="compactor-2", request_id="run-2")
    assert granted.status_code == 201
    assert _intents(api) == ["run-1"]  # compactor-1 may still ask; it withdraws when it gives up


@pytest.mark.parametrize("ends", ["released", "revoked", "expired"])
def test_no_intent_is_left_behind_when_a_drained_lease_ends(api, db_url, ends):
    in_flight = commit(api).json()
    maintenance(api, request_id="run-1")
    release(api, in_flight)
    lease = maintenance(api, request_id="run-1").json()
    if ends == "released":
        release(api, lease)
    elif ends == "revoked":
        api.post(f"/v1/leases/{lease['lease_id']}/revoke", json={"reason": "test"})
    else:
        backdate(db_url, lease)
    assert commit(api, holder="ingest-2").status_code == 201
    assert _intents(api) == []


def test_the_invariant_checker_reads_a_fulfilled_intent_as_ended():
    def event(n: int, name: str, kind: str, request_id: str, lease_id: str | None = None):
        return {
            "id": n,
            "table_name": "t",
            "event": name,
            "kind": kind,
            "lease_id": lease_id,
            "token": 1,
            "detail": {"request_id": request_id, "partitions": None},
        }

    history = History(
        events=[
            event(1, "intent.opened", "maintenance", "run-1"),
            event(2, "lease.acquired", "maintenance", "run-2", "m"),
            event(3, "intent.fulfilled", "maintenance", "run-1", "m"),
            event(4, "lease.released", "maintenance", "run-2", "m"),
            event(5, "lease.acquired", "commit", "b-1", "c"),
        ],
        commit_leases=[],
    )
    assert replay(history) == []
    unfulfilled = History([e for e in history.events if e["id"] != 3], [])
    assert replay(unfulfilled) == [
        "inv5: commit granted while intent open: t event 5 (lease.acquired c)"
    ]
