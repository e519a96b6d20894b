import pytest

from tests.support.helpers import commit, unknown

BAD_TABLES = ["events", "a.b.c.d", "db.-events", "1db.events", "db.ev ents", "db." + "x" * 65]


@pytest.mark.parametrize("table", BAD_TABLES)
def test_table_names_outside_iceberg_identifiers_are_refused(api, table):
    response = commit(api, table=table)
    assert response.status_code in (404, 422)
    if response.status_code == 422:
        assert "table" in response.json()["detail"]
    assert api.get("/v1/tables").json()["tables"] == []


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"ttl_s": 0}, "ttl_s"),
        ({"ttl_s": 100000}, "ttl_s"),
        ({"ttl_s": -1}, "ttl_s"),
        ({"wait_s": 3600}, "wait_s"),
        ({"wait_s": -1}, "wait_s"),
        ({"holder": ""}, "holder"),
        ({"request_id": "has spaces"}, "request_id"),
        ({"ttl": 30}, "ttl"),
    ],
)
def test_out_of_bounds_fields_are_named_and_change_nothing(api, body, field):
    response = commit(api, **body)
    assert response.status_code == 422
    problem = response.json()
    assert response.headers["content-type"] == "application/problem+json"
    assert problem["type"] == "urn:lakelock:invalid-request"
    assert field in problem["detail"]
    assert unknown(api)


def test_non_json_body_is_refused(api):
    response = api.post(
        "/v1/tables/lake.db.events/commit-leases",
        content=b"holder=me&ttl_s=30",
        headers={"content-type": "application/x-www-form-urlencoded"},
    )
    assert response.status_code == 415
    assert "content-type: application/json" in response.json()["detail"]
    assert unknown(api)


def test_malformed_json_is_refused(api):
    response = api.post(
        "/v1/tables/lake.db.events/commit-leases",
        content=b'{"holder": "me", ',
        headers={"content-type": "application/json"},
    )
    assert response.status_code == 422
    assert response.json()["type"] == "urn:lakelock:invalid-request"


def test_oversized_body_is_refused(api):
    response = commit(api, holder="h" * 100, padding="x" * 100_000)
    assert response.status_code == 413
    assert "bytes" in response.json()["detail"]
    assert unknown(api)


def test_lease_ids_that_are_not_ids_are_refused(api):
    response = api.post("/v1/leases/not-a-lease/renew", json={"holder": "x"})
    assert response.status_code == 422
    assert "lease_id" in response.json()["detail"]


def test_unknown_route_is_a_problem(api):
    response = api.get("/v1/nothing-here")
    assert response.status_code == 404
    assert response.headers["content-type"] == "application/problem+json"


def test_request_id_is_returned_and_generated(api):
    assert api.get("/healthz", headers={"X-Request-ID": "abc-123"}).headers["x-request-id"] == (
        "abc-123"
    )
    assert len(api.get("/healthz").headers["x-request-id"]) == 32
