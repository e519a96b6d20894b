import pytest

from tests.support.helpers import backdate, commit, events, maintenance, renew, state

pytestmark = pytest.mark.dialect  # on SQLite and MariaDB (tests/conftest.py)


def test_expired_commit_lease_is_never_live_again(api, db_url):
    lease = commit(api).json()
    backdate(db_url, lease, seconds=0.001 + 30)
    assert state(api)["commit_leases"] == []
    response = renew(api, lease)
    assert response.status_code == 410
    assert response.json()["outcome"] == "expired"
    assert state(api)["commit_leases"] == []
    assert api.get(f"/v1/leases/{lease['lease_id']}").json()["state"] == "expired"


def test_expired_maintenance_lease_frees_the_table(api, db_url):
    lease = maintenance(api).json()
    backdate(db_url, lease)
    assert state(api)["maintenance_lease"] is None
    assert commit(api).status_code == 201
    expired = [e for e in events(api) if e["event"] == "lease.expired"]
    assert [e["lease_id"] for e in expired] == [lease["lease_id"]]


def test_renew_extends_a_live_lease(api):
    lease = commit(api, ttl_s=5).json()
    response = renew(api, lease, ttl_s=120)
    assert response.status_code == 200
    body = response.json()
    assert body["outcome"] == "ok"
    assert 110 < body["lease"]["remaining_s"] <= 120


def test_renew_by_another_holder_is_not_owner(api):
    lease = commit(api).json()
    response = api.post(f"/v1/leases/{lease['lease_id']}/renew", json={"holder": "intruder"})
    assert response.status_code == 409
    assert response.json()["outcome"] == "not_owner"


def test_renew_of_unknown_lease_is_not_found(api):
    response = api.post(
        "/v1/leases/8d3f1c9e-2b7a-4c55-9f0e-0c1d2e3f4a5b/renew", json={"holder": "x"}
    )
    assert response.status_code == 404
    assert response.json()["type"] == "urn:lakelock:not-found"


def test_renew_failures_are_audited(api, db_url):
    lease = commit(api).json()
    backdate(db_url, lease)
    renew(api, lease)
    failed = [e for e in events(api) if e["event"] == "lease.renew_failed"]
    assert failed and failed[0]["detail"]["outcome"] == "expired"


def test_sweeper_ends_expired_leases_nobody_asks_about(api, db_url):
    import time

    lease = commit(api).json()
    backdate(db_url, lease)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if any(e["event"] == "lease.expired" for e in events(api)):
            break
        time.sleep(0.1)
    assert [e["lease_id"] for e in events(api) if e["event"] == "lease.expired"] == [
        lease["lease_id"]
    ]
