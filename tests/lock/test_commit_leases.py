import pytest

from tests.support.helpers import commit, events, release, state

pytestmark = pytest.mark.dialect  # on SQLite and MariaDB (tests/conftest.py)


def test_two_commit_leases_coexist(api):
    first = commit(api, holder="ingest-1")
    second = commit(api, holder="ingest-2")
    assert first.status_code == 201 and second.status_code == 201
    live = {lease["holder"] for lease in state(api)["commit_leases"]}
    assert live == {"ingest-1", "ingest-2"}
    assert first.json()["kind"] == "commit" and first.json()["token"] is None


def test_repeated_request_id_returns_the_same_lease(api):
    first = commit(api, request_id="batch-7-attempt")
    again = commit(api, request_id="batch-7-attempt")
    assert again.status_code == 201
    assert again.json()["lease_id"] == first.json()["lease_id"]
    assert len(state(api)["commit_leases"]) == 1
    assert [e["event"] for e in events(api)].count("lease.acquired") == 1


def test_request_id_of_a_released_lease_is_refused(api):
    lease = commit(api, request_id="r-1").json()
    release(api, lease)
    again = commit(api, request_id="r-1")
    assert again.status_code == 410
    assert again.json()["type"] == "urn:lakelock:expired"


def test_request_id_of_another_holder_is_refused(api):
    commit(api, holder="a", request_id="shared-id")
    other = commit(api, holder="b", request_id="shared-id")
    assert other.status_code == 409
    assert "request_id" in other.json()["detail"]


def test_release_is_idempotent(api):
    lease = commit(api).json()
    first = release(api, lease)
    second = release(api, lease)
    assert first.status_code == second.status_code == 200
    assert first.json()["state"] == second.json()["state"] == "released"
    assert [e["event"] for e in events(api)].count("lease.released") == 1
    assert state(api)["commit_leases"] == []


def test_release_of_unknown_lease_is_404(api):
    response = api.delete("/v1/leases/8d3f1c9e-2b7a-4c55-9f0e-0c1d2e3f4a5b")
    assert response.status_code == 404
    assert response.json()["type"] == "urn:lakelock:not-found"


def test_lease_state_is_readable_by_id(api):
    lease = commit(api).json()
    got = api.get(f"/v1/leases/{lease['lease_id']}").json()
    assert got["state"] == "live" and got["holder"] == "ingest-1"
    release(api, lease)
    assert api.get(f"/v1/leases/{lease['lease_id']}").json()["state"] == "released"


def test_tables_are_listed_after_first_use(api):
    commit(api, table="lake.db.a")
    commit(api, table="db.b")
    names = [t["table"] for t in api.get("/v1/tables").json()["tables"]]
    assert names == ["db.b", "lake.db.a"]


def test_a_table_never_used_is_404_until_its_first_lease(api):
    response = api.get("/v1/tables/lake.db.never_used")
    assert response.status_code == 404
    assert response.headers["content-type"] == "application/problem+json"
    assert "never had a lease" in response.json()["detail"]
    assert api.get("/v1/tables").json()["tables"] == []
    assert commit(api, table="lake.db.never_used").status_code == 201
    got = state(api, "lake.db.never_used")
    assert got["switch"]["ingest"] == "running" and got["switch"]["maintenance"] == "enabled"
