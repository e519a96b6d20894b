"""Claims (docs/design.md §5): one compactor process per table, granted or refused at once, holding
no writer; on SQLite and MariaDB through the HTTP API and the client."""

from __future__ import annotations

import time

import pytest

from service.client import ClaimHeld, LeaseClient, Renewer
from tests.conftest import auth
from tests.support.helpers import (
    backdate,
    claim,
    commit,
    events,
    maintenance,
    metric,
    release,
    renew,
    state,
    switch,
    wait_until,
)

pytestmark = pytest.mark.dialect  # on SQLite and MariaDB (tests/conftest.py)

TABLE = "lake.db.events"


@pytest.fixture
def settings_overrides() -> dict[str, object]:
    # short TTLs for the expiry tests, and a sweeper that sees them at once
    return {"min_ttl_s": 0.1, "sweep_interval_s": 0.05}


def test_a_claim_is_a_lease_of_kind_claim_on_the_whole_table(api):
    response = claim(api, holder="compactor-1", ttl_s=60, request_id="tick-1")
    assert response.status_code == 201, response.text
    granted = response.json()
    assert (granted["kind"], granted["token"], granted["partitions"]) == ("claim", None, None)
    assert (granted["holder"], granted["request_id"], granted["state"]) == (
        "compactor-1",
        "tick-1",
        "live",
    )
    claims = state(api)["claims"]
    assert [c["lease_id"] for c in claims] == [granted["lease_id"]]
    # the table's lease lists of the other kinds stay empty
    assert state(api)["commit_leases"] == [] and state(api)["maintenance_leases"] == []


def test_a_held_claim_is_refused_at_once_naming_holder_and_time_left(api):
    first = claim(api, holder="compactor-1", ttl_s=60).json()
    started = time.monotonic()
    refused = claim(api, holder="compactor-2", wait_s=30)  # a claim never waits
    assert time.monotonic() - started < 30, "the refusal waited for wait_s"
    assert refused.status_code == 409
    assert refused.headers["content-type"] == "application/problem+json"
    body = refused.json()
    assert body["type"] == "urn:lakelock:claim-held"
    assert body["holder"] == "compactor-1" and "compactor-1" in body["detail"]
    assert 0 < body["remaining_s"] <= 60
    assert "Retry-After" in refused.headers
    # nothing changed: the first claim is the only one, and no event was written for it
    assert [c["lease_id"] for c in state(api)["claims"]] == [first["lease_id"]]
    assert [e["event"] for e in events(api)] == ["lease.acquired"]


def test_its_own_holder_cannot_claim_twice_under_a_new_request_id(api):
    claim(api, holder="compactor-1", request_id="tick-1")
    again = claim(api, holder="compactor-1", request_id="tick-2")
    assert again.status_code == 409 and again.json()["type"] == "urn:lakelock:claim-held"


def test_a_repeated_request_id_answers_the_same_claim(api):
    first = claim(api, holder="compactor-1", request_id="tick-7").json()
    again = claim(api, holder="compactor-1", request_id="tick-7")
    assert again.status_code == 201
    assert again.json()["lease_id"] == first["lease_id"]
    assert len(state(api)["claims"]) == 1
    taken = claim(api, holder="compactor-2", request_id="tick-7")
    assert taken.status_code == 409 and taken.json()["type"] == "urn:lakelock:not-owner"
    release(api, first)
    ended = claim(api, holder="compactor-1", request_id="tick-7")
    assert ended.status_code == 410


def test_a_claim_on_partitions_is_refused_and_changes_nothing(api):
    refused = claim(api, partitions=["dt=2024-06-20"])
    assert refused.status_code == 422
    assert refused.json()["errors"][0]["field"] == "partitions"
    assert "whole table" in refused.json()["detail"]
    assert api.get(f"/v1/tables/{TABLE}").status_code == 404  # not even made known


def test_a_claim_outside_the_ttl_bounds_is_refused(api):
    refused = claim(api, ttl_s=7200)
    assert refused.status_code == 422 and refused.json()["field"] == "ttl_s"


def test_the_switch_does_not_refuse_a_claim(api):
    switch(api, ingest="paused", maintenance="disabled")
    assert claim(api).status_code == 201
    # the maintenance lease taken under it is still refused by the switch
    assert maintenance(api).json()["type"] == "urn:lakelock:maintenance-off"


def test_a_claim_holds_no_commit_or_maintenance_lease(api):
    claim(api, holder="compactor-1")
    assert commit(api).status_code == 201  # ingest goes on under a claim
    assert maintenance(api, holder="compactor-1").status_code == 202  # drains the commit only
    assert maintenance(api, table="lake.db.other", holder="compactor-2").status_code == 201
    # a maintenance lease needs no claim: another holder's one-off run is granted too
    for lease in state(api)["commit_leases"]:
        release(api, lease)
    granted = maintenance(api, holder="compactor-9", request_id="once")
    assert granted.status_code == 201, granted.text


def test_commit_and_maintenance_leases_hold_no_claim(api):
    commit(api, holder="ingest-1")
    maintenance(api, holder="compactor-1")  # drains: its intent is open
    assert claim(api, holder="compactor-1").status_code == 201
    other = "lake.db.compacted"
    assert maintenance(api, table=other, holder="compactor-x").status_code == 201
    assert claim(api, table=other, holder="compactor-2").status_code == 201


def test_renew_release_and_revoke_work_on_a_claim(api):
    granted = claim(api, holder="compactor-1", ttl_s=60).json()
    renewed = renew(api, granted, ttl_s=120)
    assert renewed.status_code == 200 and renewed.json()["lease"]["ttl_s"] == 120
    assert renew(api, {**granted, "holder": "compactor-2"}).status_code == 409
    assert release(api, granted).json()["state"] == "released"
    assert release(api, granted).status_code == 200  # idempotent
    assert state(api)["claims"] == []
    second = claim(api, holder="compactor-2").json()
    revoked = api.post(f"/v1/leases/{second['lease_id']}/revoke", json={"reason": "host lost"})
    assert revoked.json()["state"] == "revoked"
    assert renew(api, second).json()["outcome"] == "not_owner"
    assert claim(api, holder="compactor-3").status_code == 201
    trail = [(e["event"], e["kind"], e["holder"]) for e in reversed(events(api))]
    assert trail == [
        ("lease.acquired", "claim", "compactor-1"),
        ("lease.renew_failed", "claim", "compactor-2"),  # not its claim
        ("lease.released", "claim", "compactor-1"),
        ("lease.acquired", "claim", "compactor-2"),
        ("lease.revoked", "claim", "compactor-2"),
        ("lease.renew_failed", "claim", "compactor-2"),
        ("lease.acquired", "claim", "compactor-3"),
    ]


def test_a_crashed_holders_claim_expires_and_another_holder_gets_it(api):
    crashed = claim(api, holder="compactor-1", ttl_s=0.3).json()
    # compactor-1 never renews; compactor-2 asks at each of its ticks until it gets the table
    got = wait_until(
        lambda: (r := claim(api, holder="compactor-2", ttl_s=60)).status_code == 201 and r.json(),
        "the claim free after its holder's TTL",
    )
    assert got["holder"] == "compactor-2"
    assert renew(api, crashed).status_code == 410  # never revived
    trail = [(e["event"], e["lease_id"]) for e in reversed(events(api))]
    assert trail.index(("lease.expired", crashed["lease_id"])) < trail.index(
        ("lease.acquired", got["lease_id"])
    )
    expired = next(e for e in events(api) if e["event"] == "lease.expired")
    assert expired["kind"] == "claim" and expired["detail"]["request_id"] == crashed["request_id"]


def test_the_sweeper_ends_an_expired_claim_nobody_asks_about(api):
    lease = claim(api, holder="compactor-1").json()
    backdate(api.app.state.settings.database_url, lease)
    wait_until(lambda: any(e["event"] == "lease.expired" for e in events(api)), "the claim swept")
    assert state(api)["claims"] == []
    assert api.get(f"/v1/leases/{lease['lease_id']}").json()["state"] == "expired"


def test_claims_are_counted_in_the_metrics(api):
    granted = claim(api, holder="compactor-1").json()
    claim(api, holder="compactor-2")
    reader = auth("reader")
    api.headers.update(reader)
    assert metric(api, "lakelock_grants_total", kind="claim", scope="table") == 1
    assert (
        metric(api, "lakelock_denials_total", kind="claim", reason="claim-held", scope="table") == 1
    )
    assert metric(api, "lakelock_live_leases", kind="claim") == 1
    api.headers.update(auth("operator"))
    release(api, granted)
    assert metric(api, "lakelock_live_leases", kind="claim") == 0
    assert metric(api, "lakelock_lease_ends_total", kind="claim", end="released") == 1


def test_the_client_claims_renews_and_releases(api):
    client = LeaseClient(http=api, retries=0)
    # a TTL of 2 s (renewed every 0.67 s): a renew a busy machine delays is still in time
    lease = client.claim(TABLE, holder="compactor-1", ttl_s=2.0, request_id="tick-1")
    assert lease.kind == "claim"
    again = client.claim(TABLE, holder="compactor-1", ttl_s=2.0, request_id="tick-1")
    assert again.lease_id == lease.lease_id
    with pytest.raises(ClaimHeld) as held:
        client.claim(TABLE, holder="compactor-2", ttl_s=60)
    assert held.value.extra["holder"] == "compactor-1"
    renewer = Renewer(client, lease)
    try:
        # renewed past its first TTL twice over: the claim stays with its holder
        wait_until(lambda: renewer.renewals >= 6, "six renews of the claim")
        assert not renewer.lost.is_set()
        assert [c["lease_id"] for c in client.state(TABLE)["claims"]] == [lease.lease_id]
    finally:
        renewer.stop()
    client.release(renewer.lease)
    assert client.state(TABLE)["claims"] == []
    with pytest.raises(ValueError, match="never waited"):
        client.acquire_until("claim", TABLE, holder="compactor-1", ttl_s=60, within_s=1)
