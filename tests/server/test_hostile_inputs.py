"""Inputs an attacker or an unlucky operator sends: each answers a 4xx that changes nothing, or
is refused to anyone but the lease's holder (and operators)."""

from __future__ import annotations

import httpx
import pytest

from tests.conftest import auth
from tests.support.helpers import commit, events, maintenance, release, renew, state, unknown

pytestmark = pytest.mark.dialect  # on SQLite and MariaDB (tests/conftest.py)

TABLE = "lake.db.events"


def _nested(depth: int) -> dict:
    report: dict = {"outcome": "compacted"}
    inner = report
    for _ in range(depth):
        inner["more"] = {}
        inner = inner["more"]
    return report


def test_a_token_past_64_bits_is_refused_and_the_lease_stays(api):
    lease = maintenance(api).json()
    response = renew(api, lease, token=2**63)
    assert response.status_code == 422
    assert "token" in response.json()["detail"]
    assert state(api)["maintenance_lease"]["lease_id"] == lease["lease_id"]
    too_big = api.delete(
        f"/v1/leases/{lease['lease_id']}", params={"holder": lease["holder"], "token": 2**63}
    )
    assert too_big.status_code == 422


def test_a_deeply_nested_run_report_is_refused_and_the_history_stays_readable(api):
    assert api.post(f"/v1/tables/{TABLE}/runs", json=_nested(8)).status_code == 201
    response = api.post(f"/v1/tables/{TABLE}/runs", json=_nested(256))
    assert response.status_code == 422
    assert "nested" in response.json()["detail"]
    runs = api.get(f"/v1/tables/{TABLE}/runs")
    assert runs.status_code == 200
    assert len(runs.json()["runs"]) == 1


def test_maintenance_with_another_holders_request_id_gets_no_lease(api):
    mine = maintenance(api, holder="compactor-a", request_id="run-1").json()
    other = maintenance(api, holder="compactor-b", request_id="run-1")
    assert other.status_code == 409
    assert "request_id" in other.json()["detail"]
    assert "token" not in other.json()
    assert state(api)["maintenance_lease"]["holder"] == mine["holder"]


def test_maintenance_with_another_holders_intent_request_id_is_refused(api):
    commit(api)
    assert maintenance(api, holder="compactor-a", request_id="run-1").status_code == 202
    other = maintenance(api, holder="compactor-b", request_id="run-1")
    assert other.status_code == 409


@pytest.mark.parametrize("kind", ["commit", "maintenance"])
def test_a_job_cannot_release_another_holders_lease(api, kind):
    as_job = {"headers": auth("job")}
    lease = (commit if kind == "commit" else maintenance)(api, **as_job).json()
    params = {"holder": "someone-else"}
    if lease["token"]:
        params["token"] = lease["token"]
    for role in ("job", "operator"):  # an operator naming the wrong holder meant another lease
        response = api.delete(f"/v1/leases/{lease['lease_id']}", params=params, headers=auth(role))
        assert response.status_code == 409
        assert response.json()["type"] == "urn:lakelock:not-owner"
    no_holder = api.delete(
        f"/v1/leases/{lease['lease_id']}",
        params={"token": lease["token"]} if lease["token"] else {},
        headers=auth("job"),
    )
    assert no_holder.status_code == 422
    assert "holder" in no_holder.json()["detail"]
    assert renew(api, lease, **as_job).status_code == 200, "the real holder still holds it"


def test_the_holder_releases_its_own_lease_and_the_event_names_the_caller(api):
    lease = maintenance(api).json()
    response = release(api, lease)
    assert response.status_code == 200 and response.json()["state"] == "released"
    released = next(e for e in events(api) if e["event"] == "lease.released")
    assert released["actor"] == "operator-client"
    assert released["holder"] == lease["holder"]


def test_an_operator_ending_a_lease_is_a_revoke_the_holder_hears_with_who_did_it(api):
    lease = commit(api).json()
    response = api.delete(f"/v1/leases/{lease['lease_id']}")  # the operator, without holder
    assert response.status_code == 200 and response.json()["state"] == "revoked"
    revoked = next(e for e in events(api) if e["event"] == "lease.revoked")
    assert revoked["actor"] == "operator-client"
    answer = renew(api, lease)
    assert answer.status_code == 409
    assert answer.json()["outcome"] == "not_owner"
    assert answer.json()["ended_by"] == "operator-client"
    assert "operator-client" in answer.json()["detail"]


def test_table_names_are_one_lock_whatever_their_case(api):
    held = maintenance(api, table="probe.ci.X_EVENTS")
    assert held.status_code == 201
    assert held.json()["table"] == "probe.ci.x_events"
    refused = commit(api, table="probe.ci.x_events")
    assert refused.status_code == 423
    assert refused.json()["reason"] == "maintenance"
    assert state(api, "Probe.CI.x_Events")["table"] == "probe.ci.x_events"
    names = [t["table"] for t in api.get("/v1/tables").json()["tables"]]
    assert names == ["probe.ci.x_events"]


def test_a_withdrawn_intent_lets_ingest_commit_at_once(api):
    first = commit(api).json()
    draining = maintenance(api, request_id="run-7")
    assert draining.status_code == 202
    assert commit(api, holder="ingest-2").json()["reason"] == "intent"
    other = api.delete(f"/v1/tables/{TABLE}/intents/run-7", params={"holder": "someone-else"})
    assert other.status_code == 409
    withdrawn = api.delete(f"/v1/tables/{TABLE}/intents/run-7", params={"holder": "compactor-1"})
    assert withdrawn.status_code == 200 and withdrawn.json()["withdrawn"] is True
    assert commit(api, holder="ingest-2").status_code == 201
    assert state(api)["intent"] is None
    again = api.delete(f"/v1/tables/{TABLE}/intents/run-7", params={"holder": "compactor-1"})
    assert again.json()["withdrawn"] is False, "withdrawing twice is not an error"
    assert [e["event"] for e in events(api)].count("intent.withdrawn") == 1
    assert release(api, first).status_code == 200


@pytest.mark.parametrize(
    "body",
    [{"ttl_s": True}, {"ttl_s": "5"}, {"wait_s": False}, {"holder": 7}, {"request_id": 12}],
)
def test_loose_types_are_refused(api, body):
    response = commit(api, **body)
    assert response.status_code == 422, response.text
    assert unknown(api)


def test_a_chunked_body_over_the_limit_is_413(api):
    def chunks():
        yield b'{"holder": "h", "ttl_s": 30, "pad": "'
        for _ in range(80):
            yield b"x" * 1024
        yield b'"}'

    response = api.post(
        f"/v1/tables/{TABLE}/commit-leases",
        content=chunks(),
        headers={"content-type": "application/json"},
    )
    assert response.status_code == 413
    assert response.headers["content-type"] == "application/problem+json"
    assert unknown(api)


def test_a_body_that_is_not_json_is_415(api):
    response = api.post(
        f"/v1/tables/{TABLE}/commit-leases",
        content=b'{"holder": "h", "ttl_s": 30}',
        headers={"content-type": "text/plain"},
    )
    assert response.status_code == 415
    assert response.json()["type"] == "urn:lakelock:unsupported-media-type"
    assert unknown(api)


def test_a_wrong_method_is_405_with_allow(api):
    response = api.patch(f"/v1/tables/{TABLE}/switch", json={})
    assert response.status_code == 405
    assert response.headers["content-type"] == "application/problem+json"
    assert response.headers["allow"] == "PUT"


def test_openapi_declares_problems_the_bearer_scheme_and_the_bounds(api):
    spec = api.get("/openapi.json").json()
    assert spec["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    commit_op = spec["paths"]["/v1/tables/{table}/commit-leases"]["post"]
    assert {"201", "401", "403", "413", "415", "422", "423", "503"} <= set(commit_op["responses"])
    assert "application/problem+json" in commit_op["responses"]["423"]["content"]
    assert "HTTPValidationError" not in spec["components"]["schemas"]
    body = spec["components"]["schemas"]["AcquireBody"]["properties"]
    assert body["ttl_s"]["minimum"] == 1.0 and body["ttl_s"]["maximum"] == 3600.0
    assert body["wait_s"]["maximum"] == 60.0
    assert body["request_id"]["pattern"].startswith("^[A-Za-z0-9")
    maintenance_op = spec["paths"]["/v1/tables/{table}/maintenance-lease"]["post"]
    assert {"201", "202", "409", "423"} <= set(maintenance_op["responses"])
    metrics_op = spec["paths"]["/metrics"]["get"]
    assert "text/plain" in metrics_op["responses"]["200"]["content"]


def test_long_polls_hold_no_thread_while_they_wait(lakelock_server):
    """Regression: 200 parked long-polls used to take every worker thread, so a commit
    acquire on another table waited for them to time out."""
    import asyncio

    server = lakelock_server
    headers = server.headers("operator")

    async def scenario() -> tuple[int, int]:
        async with httpx.AsyncClient(
            base_url=server.url,
            headers=headers,
            timeout=60,
            limits=httpx.Limits(max_connections=300),
        ) as client:
            held = await client.post(
                "/v1/tables/lake.db.polled/maintenance-lease", json={"holder": "c", "ttl_s": 60}
            )
            assert held.status_code == 201
            waiting = [
                asyncio.create_task(
                    client.post(
                        "/v1/tables/lake.db.polled/commit-leases",
                        json={"holder": f"i-{n}", "ttl_s": 30, "wait_s": 30},
                    )
                )
                for n in range(200)
            ]
            await asyncio.sleep(1.0)
            health = await client.get("/healthz")
            other = await client.post(
                "/v1/tables/lake.db.free/commit-leases", json={"holder": "x", "ttl_s": 30}
            )
            pending = sum(not task.done() for task in waiting)
            released = await client.delete(f"/v1/leases/{held.json()['lease_id']}")
            assert released.status_code == 200
            answers = await asyncio.gather(*waiting)
            assert all(a.status_code == 201 for a in answers)
            return health.status_code * 1000 + other.status_code, pending

    codes, pending = asyncio.run(scenario())
    assert codes == 200 * 1000 + 201
    assert pending == 200, "every long-poll was still waiting while the others were served"


def test_a_compactor_that_dies_while_draining_holds_ingest_only_until_its_intent_expires(
    lakelock_server,
):
    """Regression: the server kept a dead compactor's intent open for the whole long-poll,
    then for a full intent TTL after it."""
    server = lakelock_server
    table = "lake.db.drained"
    job = server.headers("job")
    held = httpx.post(
        f"{server.url}/v1/tables/{table}/commit-leases",
        json={"holder": "ingest-1", "ttl_s": 120},
        headers=job,
        timeout=10,
    )
    assert held.status_code == 201
    with pytest.raises(httpx.ReadTimeout):
        # the compactor waits through the drain, then dies: its connection closes
        httpx.post(
            f"{server.url}/v1/tables/{table}/maintenance-lease",
            json={"holder": "compactor-dead", "ttl_s": 60, "wait_s": 50},
            headers=job,
            # it dies 5 s in (long after its intent opened, even on a busy machine)
            timeout=httpx.Timeout(5.0, connect=30.0),
        )
    later = httpx.post(
        f"{server.url}/v1/tables/{table}/commit-leases",
        json={"holder": "ingest-2", "ttl_s": 30, "wait_s": 40},
        headers=job,
        timeout=60,
    )
    assert later.status_code == 201, later.text
    trail = httpx.get(
        f"{server.url}/v1/events", params={"table": table}, headers=job, timeout=10
    ).json()["events"]
    names = [e["event"] for e in trail]
    assert "intent.opened" in names and "intent.expired" in names
    assert not any(e["event"] == "lease.acquired" and e["kind"] == "maintenance" for e in trail)
