"""Backpressure (docs/jobs.md §3): a compactor under its live claim holds the commits that
touch a partition over its debt bound until its maintenance grant covers that partition; never
without a live claim, never with the table's switch off."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from tests.support.helpers import (
    backdate,
    claim,
    commit,
    events,
    maintenance,
    metric,
    release,
    state,
    switch,
    unknown,
)
from tests.support.invariants import (
    History,
    backpressure_outside_claims,
    check,
    load_history,
    replay,
)

pytestmark = pytest.mark.dialect  # on SQLite and MariaDB (tests/conftest.py)

TABLE = "lake.db.events"
HOT, OTHER = "dt=2024-06-20/hr=13", "dt=2024-06-20/hr=14"
RUN = "compactor-1/run-1"


def hold_back(api, lease, partitions=(HOT,), holder=RUN, **body):
    return api.post(
        f"/v1/tables/{TABLE}/backpressure",
        json={
            "claim_id": lease["lease_id"],
            "holder": holder,
            "partitions": list(partitions),
            "reason": "14 small files, hard bound 24",
            **body,
        },
    )


def test_backpressure_holds_the_partitions_writers_until_the_compactor_takes_it(api, db_url):
    held = claim(api).json()
    answer = hold_back(api, held)
    assert answer.status_code == 200, answer.text
    assert answer.json()["partitions"] == [HOT] and answer.json()["switch"] == "enabled"
    refused = commit(api, partitions=[HOT])
    assert refused.status_code == 423
    assert refused.json()["reason"] == "backpressure"
    assert refused.json()["blocking_holder"] == RUN
    assert "debt bound" in refused.json()["detail"]
    # other partitions are not held
    other = commit(api, partitions=[OTHER])
    assert other.status_code == 201
    release(api, other.json())
    (intent,) = state(api)["intents"]
    assert intent["cause"] == "backpressure" and intent["partitions"] == [HOT]
    assert metric(api, "lakelock_backpressure_partitions", table=TABLE) == 1
    # the run's maintenance lease on a group that covers it ends the backpressure
    lease = maintenance(api, holder=RUN, partitions=[HOT, OTHER])
    assert lease.status_code == 201
    assert state(api)["intents"] == []
    fulfilled = [e for e in events(api) if e["event"] == "intent.fulfilled"]
    assert fulfilled[-1]["detail"]["cause"] == "backpressure"
    release(api, lease.json())
    assert commit(api, partitions=[HOT]).status_code == 201
    on = [e for e in events(api) if e["event"] == "backpressure.on"]
    assert on[0]["detail"]["partitions"] == [HOT] and on[0]["lease_id"] == held["lease_id"]
    assert replay(load_history(db_url, [])) == []


def _event(n, name, kind=None, lease_id=None, **detail):
    return {
        "id": n,
        "table_name": TABLE,
        "event": name,
        "kind": kind,
        "lease_id": lease_id,
        "token": None,
        "detail": detail,
    }


def test_the_checker_flags_a_commit_under_backpressure_and_one_without_a_claim():
    event = _event
    on = {"partitions": [HOT], "request_ids": ["bp-1"]}
    history = History(
        [
            event(1, "lease.acquired", "claim", "c1"),
            event(2, "backpressure.on", "intent", "c1", **on),
            event(3, "lease.acquired", "commit", "k1", partitions=[OTHER]),
            event(4, "lease.acquired", "commit", "k2", partitions=[HOT]),
            event(5, "lease.released", "claim", "c1"),
            event(6, "backpressure.on", "intent", "c1", **on),
        ],
        [],
        [],
    )
    found = replay(history)
    assert len(found) == 2
    assert found[0].startswith("inv8: commit granted under backpressure") and "k2" in found[0]
    assert found[1].startswith("inv8: backpressure without a live claim")


def test_the_checker_lets_a_commit_through_backpressure_while_maintenance_is_off():
    on = {"partitions": [HOT], "request_ids": ["bp-1"]}
    off = {"after": {"ingest": "running", "maintenance": "disabled"}}
    history = History(
        [
            _event(1, "lease.acquired", "claim", "c1"),
            _event(2, "backpressure.on", "intent", "c1", **on),
            _event(3, "switch.set", **off),
            _event(4, "lease.acquired", "commit", "k1", partitions=[HOT]),
        ],
        [],
        [],
    )
    assert replay(history) == []


def test_the_checker_flags_backpressure_that_outlives_or_precedes_its_claim():
    t0 = datetime(2024, 6, 20, 12, 0)

    def at(event, seconds):
        return {**event, "at": t0 + timedelta(seconds=seconds)}

    def history(*events):
        return History(list(events), [], [])

    claimed = at(_event(1, "lease.acquired", "claim", "c1"), 0)
    on = at(_event(2, "backpressure.on", "intent", "c1", partitions=[HOT], request_ids=["b"]), 1)
    released = at(_event(3, "lease.released", "claim", "c1"), 10)
    ended = {"request_id": "b", "partitions": [HOT], "cause": "backpressure"}
    withdrawn = at(_event(4, "intent.withdrawn", "intent", **ended), 10)
    assert backpressure_outside_claims(history(claimed, on, released, withdrawn)) == []
    # the service forgot to end it with the claim: it expired later, or is still open
    late = at(_event(4, "intent.expired", **ended, expired_at=f"{t0 + timedelta(seconds=60)}"), 70)
    assert len(backpressure_outside_claims(history(claimed, on, released, late))) == 1
    assert len(backpressure_outside_claims(history(claimed, on, released))) == 1
    # a claim that expired at 30 s (its event written later by a sweep) ends it then too
    expired = at(_event(3, "lease.expired", "claim", "c1", held_s=30.0), 300)
    after = at(
        _event(2, "backpressure.on", "intent", "c1", partitions=[HOT], request_ids=["b"]), 40
    )
    assert len(backpressure_outside_claims(history(claimed, expired, after))) == 1


def test_another_holders_grant_does_not_end_it(api):
    held = claim(api).json()
    hold_back(api, held)
    other = maintenance(api, holder="compactor-2", partitions=[HOT])
    assert other.status_code == 201
    release(api, other.json())
    assert commit(api, partitions=[HOT]).json()["reason"] == "backpressure"


def test_no_backpressure_without_a_live_claim(api, db_url):
    held = claim(api).json()
    backdate(db_url, held)
    answer = hold_back(api, held)
    assert answer.status_code == 410, answer.text
    assert commit(api, partitions=[HOT]).status_code == 201
    missing = hold_back(api, {"lease_id": "00000000-0000-0000-0000-000000000000"})
    assert missing.status_code == 404
    assert "claim the table" in missing.json()["detail"]


def test_backpressure_ends_with_the_claim(api, db_url):
    """A compactor that dies holds no writer past its claim's expiry."""
    held = claim(api).json()
    answer = hold_back(api, held).json()
    # as long as the claim (60 s), not the intent TTL (5 s): a rewrite of minutes keeps it
    assert 50 < answer["remaining_s"] <= 60
    assert commit(api, partitions=[HOT]).status_code == 423
    # the claim's TTL passes unrenewed: the backpressure, which never outlives it, too
    backdate(db_url, held, intents_of=TABLE)
    assert commit(api, partitions=[HOT]).status_code == 201
    assert [e["event"] for e in events(api)].count("intent.expired") == 1
    assert check(load_history(db_url, [])) == []


def test_an_expired_claim_ends_its_backpressure_in_the_same_transaction(api, db_url):
    """Whichever call finds the claim expired (a new claim, a late renew) ends its backpressure
    too, so the trail never shows a hold outliving its claim."""
    for finder in ("claim", "renew"):
        held = claim(api).json()
        hold_back(api, held)
        backdate(db_url, held, intents_of=TABLE)
        if finder == "claim":
            other = claim(api, holder="compactor-2")
            assert other.status_code == 201, other.text
            release(api, other.json())
        else:
            renewed = api.post(
                f"/v1/leases/{held['lease_id']}/renew", json={"holder": held["holder"]}
            )
            assert renewed.status_code == 410, renewed.text
        assert "intent.expired" in [e["event"] for e in events(api)], finder
        history = load_history(db_url, [])
        assert backpressure_outside_claims(history) == [], finder
        assert check(history) == [], finder


def test_switching_maintenance_off_lets_the_held_writers_through(api, db_url):
    """No maintenance grant could end the backpressure then: it must not hold anyone."""
    held = claim(api).json()
    hold_back(api, held)
    assert commit(api, partitions=[HOT]).status_code == 423
    switch(api, maintenance="disabled", reason="incident: no rewrites")
    granted = commit(api, partitions=[HOT])
    assert granted.status_code == 201, granted.text
    assert metric(api, "lakelock_backpressure_partitions", table=TABLE) == 0
    release(api, granted.json())
    # on again, under the same live claim: held again until the run compacts the partition
    switch(api, maintenance="enabled")
    assert commit(api, partitions=[HOT]).json()["reason"] == "backpressure"
    assert metric(api, "lakelock_backpressure_partitions", table=TABLE) == 1
    assert check(load_history(db_url, [])) == []


def test_a_renew_of_the_claim_keeps_the_backpressure(api):
    held = claim(api).json()
    hold_back(api, held)
    renewed = api.post(
        f"/v1/leases/{held['lease_id']}/renew", json={"holder": held["holder"], "ttl_s": 600}
    )
    assert renewed.status_code == 200, renewed.text
    (intent,) = state(api)["intents"]
    assert intent["remaining_s"] > 500


def test_only_the_claims_holder_or_a_run_under_it_may_hold_writers(api):
    held = claim(api).json()
    answer = hold_back(api, held, holder="compactor-2/run-9")
    assert answer.status_code == 409, answer.text
    assert "compactor-1/<run>" in answer.json()["detail"]
    assert hold_back(api, held, holder="compactor-1").status_code == 200
    assert state(api)["intents"][0]["holder"] == "compactor-1"


def test_the_gauge_counts_a_partition_held_twice_once(api):
    held = claim(api).json()
    hold_back(api, held, holder="compactor-1")
    hold_back(api, held, partitions=(HOT, OTHER))
    assert len(state(api)["intents"]) == 3
    assert metric(api, "lakelock_backpressure_partitions", table=TABLE) == 2


def test_an_unknown_table_is_not_made_known_by_a_backpressure_request(api):
    answer = api.post(
        "/v1/tables/lake.db.nothing/backpressure",
        json={"claim_id": "x", "holder": RUN, "partitions": [HOT], "reason": "r"},
    )
    assert answer.status_code == 404
    assert unknown(api, "lake.db.nothing")


def test_nothing_is_held_while_maintenance_is_off(api):
    """No maintenance grant could end it: it would hold writers for nothing."""
    held = claim(api).json()
    switch(api, maintenance="disabled")
    answer = hold_back(api, held).json()
    assert answer["partitions"] == [] and answer["off"] == "maintenance"
    assert commit(api, partitions=[HOT]).status_code == 201


def test_backpressure_ends_when_the_claim_is_released_or_revoked(api):
    for end in ("release", "revoke"):
        held = claim(api).json()
        hold_back(api, held)
        assert commit(api, partitions=[HOT]).status_code == 423
        if end == "release":
            release(api, held)
        else:
            api.post(f"/v1/leases/{held['lease_id']}/revoke", json={"reason": "stuck"})
        granted = commit(api, partitions=[HOT])
        assert granted.status_code == 201, end
        release(api, granted.json())


def test_a_claim_that_ended_says_how_it_ended(api):
    """A compactor whose claim was released or revoked learns that, not "no such claim"."""
    for end in ("release", "revoke"):
        held = claim(api).json()
        if end == "release":
            release(api, held)
        else:
            api.post(f"/v1/leases/{held['lease_id']}/revoke", json={"reason": "stuck"})
        answer = hold_back(api, held)
        assert answer.status_code == 410, (end, answer.text)
        assert answer.json()["state"] == {"release": "released", "revoke": "revoked"}[end]
        assert state(api)["intents"] == []


def test_the_switch_turns_it_off(api):
    held = claim(api).json()
    hold_back(api, held)
    switch(api, backpressure="disabled", reason="ingest first during the sale")
    assert state(api)["switch"]["backpressure"] == "disabled"
    assert commit(api, partitions=[HOT]).status_code == 201
    answer = hold_back(api, held, partitions=(OTHER,))
    assert answer.json() == {
        "table": TABLE,
        "partitions": [],
        "switch": "disabled",
        "remaining_s": 0.0,
        "off": "backpressure",
    }
    switch(api, backpressure="enabled")
    assert commit(api, partitions=[HOT]).status_code == 423
    assert commit(api, partitions=[OTHER]).status_code == 201


def test_let_go_ends_the_holders_backpressure(api):
    held = claim(api).json()
    hold_back(api, held, partitions=(HOT, OTHER))
    answer = api.delete(f"/v1/tables/{TABLE}/backpressure", params={"holder": RUN})
    assert answer.status_code == 200
    assert sorted(answer.json()["partitions"]) == sorted([HOT, OTHER])
    assert commit(api, partitions=[HOT, OTHER]).status_code == 201
    withdrawn = [e for e in events(api) if e["event"] == "intent.withdrawn"]
    assert len(withdrawn) == 2 and {e["detail"]["cause"] for e in withdrawn} == {"backpressure"}


def test_let_go_of_some_partitions_keeps_the_others_held(api):
    # a run whose group was skipped lets its partitions go at once; the others stay held
    held = claim(api).json()
    hold_back(api, held, partitions=(HOT, OTHER))
    answer = api.delete(
        f"/v1/tables/{TABLE}/backpressure", params={"holder": RUN, "partition": [HOT]}
    )
    assert answer.status_code == 200 and answer.json()["partitions"] == [HOT]
    assert commit(api, partitions=[HOT]).status_code == 201
    assert commit(api, partitions=[OTHER]).status_code == 423
    assert [tuple(x["partitions"]) for x in state(api)["intents"]] == [(OTHER,)]


def test_asking_again_keeps_one_intent_per_partition(api):
    held = claim(api).json()
    hold_back(api, held)
    hold_back(api, held, partitions=(HOT, OTHER))
    assert sorted(tuple(x["partitions"]) for x in state(api)["intents"]) == [(HOT,), (OTHER,)]
    assert [e["event"] for e in events(api)].count("backpressure.on") == 2


def test_a_bad_request_changes_nothing(api):
    held = claim(api).json()
    for bad in ({"partitions": []}, {"partitions": [HOT, HOT]}, {"partitions": ["not a name"]}):
        answer = hold_back(api, held, **bad)
        assert answer.status_code == 422, (bad, answer.text)
    assert state(api)["intents"] == []
