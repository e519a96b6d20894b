import pytest

from tests.conftest import auth

TABLE = "/v1/tables/lake.db.events"
CALLS = {
    "read state": ("get", TABLE, None),
    "list tables": ("get", "/v1/tables", None),
    "read events": ("get", "/v1/events", None),
    "read metrics": ("get", "/metrics", None),
    "read runs": ("get", TABLE + "/runs", None),
    "take commit lease": ("post", TABLE + "/commit-leases", {"holder": "h", "ttl_s": 30}),
    "take maintenance lease": (
        "post",
        TABLE + "/maintenance-lease",
        {"holder": "h", "ttl_s": 30, "request_id": "m1"},
    ),
    "report run": ("post", TABLE + "/runs", {"outcome": "skipped"}),
    "set switch": ("put", TABLE + "/switch", {"ingest": "paused", "reason": "r"}),
}
ALLOWED = {
    "reader": {"read state", "list tables", "read events", "read metrics", "read runs"},
    "job": {
        "read state",
        "list tables",
        "read events",
        "read metrics",
        "read runs",
        "take commit lease",
        "take maintenance lease",
        "report run",
    },
    "operator": set(CALLS),
}


@pytest.mark.parametrize("role", ["reader", "job", "operator"])
@pytest.mark.parametrize("call", sorted(CALLS))
def test_each_role_can_do_exactly_what_it_may(api, role, call):
    method, path, body = CALLS[call]
    if call == "read state":
        # a table is known once it had a lease (the client sends the operator token)
        assert api.post(TABLE + "/commit-leases", json={"holder": "h", "ttl_s": 30}).is_success
    response = api.request(method, path, json=body, headers=auth(role))
    if call in ALLOWED[role]:
        assert response.status_code < 400, response.text
    else:
        assert response.status_code == 403
        assert response.json()["type"] == "urn:lakelock:forbidden"


@pytest.mark.parametrize("role", ["reader", "job"])
def test_only_operators_revoke(api, role):
    lease = api.post(TABLE + "/commit-leases", json={"holder": "h", "ttl_s": 30}).json()
    response = api.post(
        f"/v1/leases/{lease['lease_id']}/revoke", json={"reason": "x"}, headers=auth(role)
    )
    assert response.status_code == 403
    assert api.get(f"/v1/leases/{lease['lease_id']}").json()["state"] == "live"


@pytest.mark.parametrize(
    "header", [None, "Bearer wrong-secret-xyz", "Basic b3BlcmF0b3I=", "Bearer "]
)
def test_missing_or_unknown_token_is_401(api, header):
    headers = {"Authorization": header} if header else {"Authorization": ""}
    response = api.get("/v1/tables", headers=headers)
    assert response.status_code == 401
    assert response.json()["type"] == "urn:lakelock:unauthorized"


def test_health_endpoints_need_no_token(api):
    assert api.get("/healthz", headers={"Authorization": ""}).status_code == 200
    assert api.get("/readyz", headers={"Authorization": ""}).status_code == 200


def test_secrets_never_reach_the_logs(api, caplog):
    import logging

    with caplog.at_level(logging.DEBUG):
        api.get("/v1/tables", headers=auth("reader"))
        api.get("/v1/tables", headers={"Authorization": "Bearer wrong-secret-xyz"})
    text = caplog.text
    assert "reader-secret" not in text and "wrong-secret" not in text
