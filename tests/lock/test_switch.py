import pytest

from tests.support.helpers import commit, events, maintenance, release, state, switch, unknown

pytestmark = pytest.mark.dialect  # on SQLite and MariaDB (tests/conftest.py)


def test_paused_ingest_refuses_commit_leases(api):
    response = switch(api, ingest="paused", reason="backfill running")
    assert response.status_code == 200
    refused = commit(api)
    assert refused.status_code == 423
    assert refused.json()["reason"] == "paused"
    assert refused.json()["blocking_holder"] == "operator-client"
    assert "backfill running" in refused.json()["detail"]


def test_resume_grants_commit_leases_again(api):
    switch(api, ingest="paused")
    switch(api, ingest="running", reason="backfill done")
    assert commit(api).status_code == 201


def test_pause_does_not_cut_live_commit_leases_short(api):
    lease = commit(api).json()
    switch(api, ingest="paused")
    assert [x["lease_id"] for x in state(api)["commit_leases"]] == [lease["lease_id"]]
    assert release(api, lease).status_code == 200


def test_switch_fields_are_independent(api):
    switch(api, maintenance="disabled")
    switch(api, ingest="paused")
    got = state(api)["switch"]
    assert got["ingest"] == "paused" and got["maintenance"] == "disabled"
    assert got["by"] == "operator-client" and got["reason"] == "test"


def test_paused_ingest_does_not_block_maintenance(api):
    switch(api, ingest="paused")
    assert maintenance(api).status_code == 201


def test_switch_needs_a_reason(api):
    response = api.put("/v1/tables/lake.db.events/switch", json={"ingest": "paused"})
    assert response.status_code == 422
    assert response.json()["errors"][0]["field"] == "reason"
    assert unknown(api)


def test_switch_needs_a_field_to_change(api):
    response = api.put("/v1/tables/lake.db.events/switch", json={"reason": "nothing"})
    assert response.status_code == 422
    assert unknown(api)


def test_switch_rejects_unknown_values(api):
    response = switch(api, ingest="stopped")
    assert response.status_code == 422
    assert "ingest" in response.json()["detail"]


def test_switch_changes_are_audited_with_reason_and_actor(api):
    switch(api, ingest="paused", reason="incident 123")
    event = events(api)[0]
    assert event["event"] == "switch.set" and event["actor"] == "operator-client"
    assert event["detail"]["reason"] == "incident 123"
    assert event["detail"]["before"]["ingest"] == "running"
    assert event["detail"]["after"]["ingest"] == "paused"
