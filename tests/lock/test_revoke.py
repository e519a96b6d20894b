import pytest

from tests.support.helpers import commit, events, maintenance, renew, state

pytestmark = pytest.mark.dialect  # on SQLite and MariaDB (tests/conftest.py)


def test_revoked_commit_lease_learns_it_at_next_renew(api):
    lease = commit(api).json()
    revoked = api.post(f"/v1/leases/{lease['lease_id']}/revoke", json={"reason": "stuck job"})
    assert revoked.status_code == 200 and revoked.json()["state"] == "revoked"
    response = renew(api, lease)
    assert response.status_code == 409
    assert response.json()["outcome"] == "not_owner"
    assert state(api)["commit_leases"] == []


def test_revoked_maintenance_lease_frees_the_table(api):
    lease = maintenance(api).json()
    api.post(f"/v1/leases/{lease['lease_id']}/revoke", json={"reason": "runaway compaction"})
    assert commit(api).status_code == 201
    assert renew(api, lease).json()["outcome"] == "not_owner"
    event = next(e for e in events(api) if e["event"] == "lease.revoked")
    assert event["actor"] == "operator-client"
    assert event["detail"]["reason"] == "runaway compaction"


def test_revoke_needs_a_reason(api):
    lease = commit(api).json()
    response = api.post(f"/v1/leases/{lease['lease_id']}/revoke", json={})
    assert response.status_code == 422
    assert state(api)["commit_leases"][0]["lease_id"] == lease["lease_id"]


def test_revoke_twice_is_not_an_error(api):
    lease = commit(api).json()
    for _ in range(2):
        response = api.post(f"/v1/leases/{lease['lease_id']}/revoke", json={"reason": "x"})
        assert response.status_code == 200
    assert [e["event"] for e in events(api)].count("lease.revoked") == 1
