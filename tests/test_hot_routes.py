"""The short path of a commit lease's acquire and release (service.hot) answers as the FastAPI
routes do, and hands them every request it has a doubt about before doing anything."""

from __future__ import annotations

from tests.conftest import auth
from tests.helpers import commit, events, release

VOLATILE = {"lease_id", "table", "request_id", "remaining_s", "held_s"}


def _same(a: dict, b: dict) -> dict:
    return {k: v for k, v in a.items() if k not in VOLATILE} == {
        k: v for k, v in b.items() if k not in VOLATILE
    }


def test_the_short_path_answers_as_the_route_does(api):
    short = commit(api, table="lake.db.a", partitions=["dt=1"])
    # a long poll goes to the route (the table is free: it answers at once)
    routed = commit(api, table="lake.db.b", partitions=["dt=1"], wait_s=0.5)
    assert (short.status_code, routed.status_code) == (201, 201)
    assert short.headers["content-type"] == routed.headers["content-type"] == "application/json"
    assert short.json().keys() == routed.json().keys()
    assert _same(short.json(), routed.json())
    ended = release(api, short.json())
    # an operator's release without holder goes to the route
    by_route = api.delete(f"/v1/leases/{routed.json()['lease_id']}", params={"holder": "ingest-1"})
    assert ended.status_code == by_route.status_code == 200
    assert ended.json().keys() == by_route.json().keys()
    assert ended.json()["state"] == by_route.json()["state"] == "released"


def test_the_short_path_answers_problems_through_the_apps_handlers(api):
    lease = commit(api).json()
    other = api.delete(f"/v1/leases/{lease['lease_id']}", params={"holder": "someone-else"})
    assert other.status_code == 409
    assert other.headers["content-type"] == "application/problem+json"
    assert other.json()["type"] == "urn:lakelock:not-owner"
    assert other.json()["instance"] == f"/v1/leases/{lease['lease_id']}"
    too_long = commit(api, ttl_s=10**6)
    assert too_long.status_code == 422 and too_long.json()["field"] == "ttl_s"
    as_reader = api.post(
        "/v1/tables/lake.db.events/commit-leases",
        json={"holder": "h", "ttl_s": 30},
        headers=auth("reader"),
    )
    assert as_reader.status_code == 403 and as_reader.json()["type"] == "urn:lakelock:forbidden"
    anonymous = api.post(
        "/v1/tables/lake.db.events/commit-leases",
        json={"holder": "h", "ttl_s": 30},
        headers={"Authorization": ""},
    )
    assert anonymous.status_code == 401


def test_requests_it_doubts_get_the_routes_own_answers(api):
    refused = api.post(
        "/v1/tables/lake.db.events/commit-leases", json={"holder": "h", "ttl_s": "30"}
    )
    assert refused.status_code == 422
    assert refused.json()["errors"][0]["field"] == "ttl_s"
    lease = commit(api).json()
    odd = api.delete(
        f"/v1/leases/{lease['lease_id'].upper()}", params={"holder": "ingest-1", "x": "1"}
    )
    assert odd.status_code == 200 and odd.json()["lease"]["lease_id"] == lease["lease_id"]
    trail = [e["event"] for e in events(api)]
    assert trail.count("lease.acquired") == 1 and trail.count("lease.released") == 1


def test_the_short_path_is_measured_under_its_route(api):
    release(api, commit(api).json())
    text = api.get("/metrics").text
    for route in ("/v1/tables/{table}/commit-leases", "/v1/leases/{lease_id}"):
        assert f'route="{route}"' in text
