"""What the contract fuzz (tests/server/test_contract_fuzz.py) found, each pinned by one fast
case: the answer a client gets is the one openapi.json promises for what it sent."""

from __future__ import annotations

import pytest

from tests.conftest import auth
from tests.support.helpers import commit, maintenance, renew, switch

TABLE = "lake.db.events"


def _operation(api, path: str, method: str) -> dict:
    return api.get("/openapi.json").json()["paths"][path][method]


def test_a_405_allows_every_method_of_the_path(api):
    lease = commit(api).json()
    response = api.patch(f"/v1/leases/{lease['lease_id']}")
    assert response.status_code == 405
    assert response.headers["allow"] == "GET, DELETE"
    assert api.put(f"/v1/tables/{TABLE}/runs", json={}).headers["allow"] == "GET, POST"


def test_a_body_that_is_not_utf8_is_a_declared_400_problem(api):
    response = api.post(
        f"/v1/tables/{TABLE}/commit-leases",
        content=b'{"holder": "\xff"}',
        headers={"content-type": "application/json"},
    )
    assert response.status_code == 400
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["type"] == "urn:lakelock:unparsable-body"
    assert "400" in _operation(api, "/v1/tables/{table}/commit-leases", "post")["responses"]


def test_another_holders_request_id_is_a_declared_409_on_commit_acquire(api):
    assert commit(api, holder="ingest-1", request_id="batch-1").status_code == 201
    other = commit(api, holder="ingest-2", request_id="batch-1")
    assert other.status_code == 409
    assert other.json()["field"] == "request_id"
    assert "409" in _operation(api, "/v1/tables/{table}/commit-leases", "post")["responses"]


def test_a_token_written_as_a_whole_float_is_the_integer(api):
    lease = maintenance(api).json()
    assert renew(api, lease, token=float(lease["token"])).status_code == 200
    assert renew(api, lease, token=lease["token"] + 0.5).status_code == 422


def test_the_token_bounds_are_json_schema_keywords_within_exact_json_integers(api):
    schema = api.get("/openapi.json").json()["components"]["schemas"]["RenewBody"]
    (integer,) = [o for o in schema["properties"]["token"]["anyOf"] if o["type"] == "integer"]
    assert integer["minimum"] == 1 and integer["maximum"] == 2**53 - 1
    lease = maintenance(api).json()
    assert renew(api, lease, token=2**53).status_code == 422


def test_a_snapshot_ids_bounds_are_the_exact_64_bit_ones(api):
    schema = api.get("/openapi.json").json()["components"]["schemas"]["DebtBody"]
    (integer,) = [o for o in schema["properties"]["snapshot_id"]["anyOf"] if o["type"] == "integer"]
    assert (integer["minimum"], integer["maximum"]) == (-(2**63), 2**63 - 1)
    assert all(type(integer[k]) is int for k in ("minimum", "maximum"))
    counts = {"data_files": 0, "small_files": 0, "delete_files": 0, "partitions_over_target": 0}
    for snapshot, status in ((2**63 - 1, 200), (2**63, 422), (-(2**63), 200), (-(2**63) - 1, 422)):
        answer = api.put(
            f"/v1/tables/{TABLE}/debt",
            json={"snapshot_id": snapshot, **counts},
            headers=auth("job"),
        )
        assert answer.status_code == status, (snapshot, answer.text)


@pytest.mark.parametrize(
    "body",
    [
        {"reason": "r"},
        {"ingest": None, "reason": "r"},
        {"maintenance": None, "reason": "r"},
        {"backpressure": None, "reason": "r"},
    ],
)
def test_a_switch_without_a_setting_is_refused_as_the_schema_says(api, body):
    assert switch(api, **body).status_code == 422
    schema = api.get("/openapi.json").json()["components"]["schemas"]["SwitchBody"]
    assert schema["anyOf"] == [
        {"required": ["ingest"]},
        {"required": ["maintenance"]},
        {"required": ["backpressure"]},
    ]
    for field in ("ingest", "maintenance", "backpressure"):
        assert schema["properties"][field]["type"] == "string"  # null is not a setting


def test_a_holder_is_taken_as_sent(api):
    lease = commit(api, holder=" ingest-1 ").json()
    assert lease["holder"] == " ingest-1 "
