import pytest

from tests.support.helpers import backdate, events, maintenance, release, renew, state

pytestmark = pytest.mark.dialect  # on SQLite and MariaDB (tests/conftest.py)


def test_tokens_increase_with_every_maintenance_grant(api):
    tokens = []
    for run in range(3):
        lease = maintenance(api, request_id=f"run-{run}").json()
        tokens.append(lease["token"])
        assert release(api, lease).status_code == 200
    assert tokens == [1, 2, 3]
    assert state(api)["next_token"] == 4


def test_tokens_are_per_table(api):
    assert maintenance(api, table="db.a").json()["token"] == 1
    assert maintenance(api, table="db.b").json()["token"] == 1


def test_renew_with_stale_token_is_refused(api):
    lease = maintenance(api).json()
    response = renew(api, lease, token=lease["token"] + 1)
    assert response.status_code == 412
    assert response.json()["type"] == "urn:lakelock:stale-token"
    assert response.json()["outcome"] == "token_mismatch"


def test_renew_of_maintenance_lease_needs_its_token_and_changes_nothing(api):
    lease = maintenance(api).json()
    before = events(api)
    response = api.post(f"/v1/leases/{lease['lease_id']}/renew", json={"holder": lease["holder"]})
    assert response.status_code == 422
    assert response.headers["content-type"] == "application/problem+json"
    assert "token" in response.json()["detail"]
    assert events(api) == before  # no lease.renew_failed: the holder sent a malformed renew
    assert renew(api, lease).status_code == 200


def test_release_with_stale_token_is_refused(api):
    lease = maintenance(api).json()
    response = release(api, lease, token=99)
    assert response.status_code == 412
    assert state(api)["maintenance_lease"]["lease_id"] == lease["lease_id"]


def test_release_of_maintenance_lease_needs_its_token(api):
    lease = maintenance(api).json()
    response = api.delete(f"/v1/leases/{lease['lease_id']}", params={"holder": lease["holder"]})
    assert response.status_code == 422
    assert "token" in response.json()["detail"]


def test_old_holder_is_fenced_after_its_lease_expired_and_was_regranted(api, db_url):
    old = maintenance(api, holder="compactor-old").json()
    backdate(db_url, old)
    new = maintenance(api, holder="compactor-new").json()
    assert new["token"] > old["token"]
    stale = renew(api, old)
    assert stale.status_code == 410 and stale.json()["outcome"] == "expired"
    # releasing the replaced lease is still answered, and does not touch the new one
    assert release(api, old).status_code == 200
    assert state(api)["maintenance_lease"]["lease_id"] == new["lease_id"]
