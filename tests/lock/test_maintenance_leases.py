import pytest

from tests.support.helpers import (
    backdate_intent,
    commit,
    events,
    maintenance,
    release,
    state,
    switch,
)

pytestmark = pytest.mark.dialect  # on SQLite and MariaDB (tests/conftest.py)


def test_maintenance_is_granted_on_a_free_table_with_a_token(api):
    response = maintenance(api)
    assert response.status_code == 201
    lease = response.json()
    assert lease["kind"] == "maintenance" and lease["token"] == 1
    assert state(api)["maintenance_lease"]["lease_id"] == lease["lease_id"]


def test_maintenance_waits_for_commit_leases_to_drain(api):
    first = commit(api).json()
    second = commit(api, holder="ingest-2").json()
    asked = maintenance(api, request_id="compaction-1")
    assert asked.status_code == 202
    body = asked.json()
    assert body["status"] == "draining" and body["in_flight_commits"] == 2
    assert body["intent"]["holder"] == "compactor-1"
    assert int(asked.headers["Retry-After"]) >= 1
    release(api, first)
    assert maintenance(api, request_id="compaction-1").json()["in_flight_commits"] == 1
    release(api, second)
    granted = maintenance(api, request_id="compaction-1")
    assert granted.status_code == 201
    assert state(api)["intent"] is None


def test_open_intent_blocks_new_commit_leases(api):
    commit(api)
    maintenance(api)
    refused = commit(api, holder="ingest-2")
    assert refused.status_code == 423
    problem = refused.json()
    assert problem["reason"] == "intent" and problem["blocking_holder"] == "compactor-1"
    assert refused.headers["content-type"] == "application/problem+json"
    assert int(refused.headers["Retry-After"]) >= 1


def test_live_maintenance_lease_blocks_commit_leases(api):
    maintenance(api)
    refused = commit(api)
    assert refused.status_code == 423
    assert refused.json()["reason"] == "maintenance"
    assert refused.json()["blocking_holder"] == "compactor-1"


def test_second_maintenance_lease_is_refused_with_409(api):
    maintenance(api)
    other = maintenance(api, holder="compactor-2")
    assert other.status_code == 409
    assert other.json()["type"] == "urn:lakelock:maintenance-held"
    assert other.json()["blocking_holder"] == "compactor-1"


def test_two_compactors_drain_together_and_the_first_to_ask_after_the_drain_wins(api):
    # an intent blocks commits only (docs/design.md §4): a second maintenance request drains too,
    # and the lease goes to whichever asks first once the commits are gone; the other then gets 409
    in_flight = commit(api).json()
    first = maintenance(api, request_id="run-1")
    second = maintenance(api, holder="compactor-2", request_id="run-2")
    assert (first.status_code, second.status_code) == (202, 202)
    assert {i["holder"] for i in state(api)["intents"]} == {"compactor-1", "compactor-2"}
    release(api, in_flight)
    granted = maintenance(api, holder="compactor-2", request_id="run-2")
    assert granted.status_code == 201
    late = maintenance(api, request_id="run-1")
    assert late.status_code == 409
    assert late.json()["blocking_holder"] == "compactor-2"


def test_disabled_maintenance_is_refused_with_423(api):
    switch(api, maintenance="disabled", reason="quarter close")
    refused = maintenance(api)
    assert refused.status_code == 423
    assert refused.json()["type"] == "urn:lakelock:maintenance-off"
    assert "quarter close" in refused.json()["detail"]


def test_repeated_maintenance_request_id_returns_the_same_lease(api):
    first = maintenance(api, request_id="run-42").json()
    again = maintenance(api, request_id="run-42")
    assert again.status_code == 201
    assert again.json()["lease_id"] == first["lease_id"]
    assert again.json()["token"] == first["token"]


def test_intent_expires_when_its_holder_stops_asking(api, db_url):
    commit(api)
    maintenance(api)
    backdate_intent(db_url, "lake.db.events")
    granted = commit(api, holder="ingest-2")
    assert granted.status_code == 201
    assert "intent.expired" in [e["event"] for e in events(api)]


@pytest.mark.parametrize("wait_s", [0.0, 0.3])
def test_drain_answer_at_the_deadline_is_202(api, wait_s):
    commit(api)
    asked = maintenance(api, wait_s=wait_s)
    assert asked.status_code == 202
