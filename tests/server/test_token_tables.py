"""LAKELOCK_TOKEN_TABLES: a listed token touches only the tables its patterns match, on every
route of the lease API with a {table}; a refusal is a 403 naming the token, the table and the
setting, and changes nothing."""

from __future__ import annotations

import httpx
import pytest

from service.lock import audit
from service.server.app import create_app
from service.server.auth import may_hold, may_touch
from service.server.settings import ApiToken, SettingsError
from tests.conftest import auth, make_settings

RULES = "job-client=lake.db.*;reader-client=lake.db.*,lake.raw.event?"


@pytest.fixture
def settings_overrides() -> dict[str, object]:
    return {"token_tables": RULES}


def _table_routes() -> list[tuple[str, str]]:
    """Every operation of openapi.json with a {table} in its path."""
    app = create_app(make_settings("sqlite://", token_tables=RULES))
    return [
        (method.upper(), path)
        for path, operations in app.openapi()["paths"].items()
        if "{table}" in path
        for method in operations
    ]


TABLE_ROUTES = _table_routes()


def test_the_lease_api_has_its_table_routes_in_openapi() -> None:
    assert len(TABLE_ROUTES) >= 15, TABLE_ROUTES


@pytest.mark.parametrize(("method", "path"), TABLE_ROUTES)
def test_a_listed_token_is_refused_every_table_call_outside_its_patterns(
    api: httpx.Client, method: str, path: str
) -> None:
    url = path.format(table="Other.DB.Events", reader="r1", request_id="r1")
    body = {} if method in ("POST", "PUT") else None
    answer = api.request(method, url, json=body, headers=auth("job"))
    assert answer.status_code == 403, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    problem = answer.json()
    assert problem["type"] == "urn:lakelock:forbidden"
    assert problem["token"] == "job-client"
    assert problem["table"] == "other.db.events"
    assert problem["setting"] == "LAKELOCK_TOKEN_TABLES"
    for named in ("job-client", "other.db.events", "LAKELOCK_TOKEN_TABLES", "lake.db.*"):
        assert named in problem["detail"]
    # nothing was made known
    assert api.get("/v1/tables/other.db.events").status_code == 404
    assert api.get("/v1/tables").json()["tables"] == []


def test_a_listed_token_works_on_the_tables_its_patterns_match(api: httpx.Client) -> None:
    lease = api.post(
        "/v1/tables/Lake.DB.Events/commit-leases",
        json={"holder": "ingest-1", "ttl_s": 30},
        headers=auth("job"),
    )
    assert lease.status_code == 201, lease.text
    assert lease.json()["table"] == "lake.db.events"
    assert api.get("/v1/tables/lake.db.events", headers=auth("job")).status_code == 200


def test_a_reader_listed_sees_and_reads_only_its_tables(api: httpx.Client) -> None:
    for name in ("lake.db.events", "lake.raw.events", "lake.raw.eventsx", "other.db.events"):
        assert (
            api.put(
                f"/v1/tables/{name}/switch", json={"reason": "r", "ingest": "running"}
            ).status_code
            == 200
        )
    listed = api.get("/v1/tables", headers=auth("reader")).json()
    assert [t["table"] for t in listed["tables"]] == ["lake.db.events", "lake.raw.events"]
    assert api.get("/v1/tables/other.db.events", headers=auth("reader")).status_code == 403
    page = api.get("/v1/tables", params={"limit": 1}, headers=auth("reader")).json()
    assert page["next"] == "lake.db.events"
    rest = api.get("/v1/tables", params={"after": page["next"]}, headers=auth("reader")).json()
    assert [t["table"] for t in rest["tables"]] == ["lake.raw.events"]
    assert rest["next"] is None


def test_operators_and_tokens_not_listed_touch_any_table(api: httpx.Client) -> None:
    assert (
        api.put(
            "/v1/tables/other.db.events/switch", json={"reason": "r", "ingest": "running"}
        ).status_code
        == 200
    )
    assert len(api.get("/v1/tables").json()["tables"]) == 1


def _forbidden(answer: httpx.Response, table: str) -> None:
    assert answer.status_code == 403, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    problem = answer.json()
    assert (problem["token"], problem["table"]) == ("job-client", table)
    assert problem["setting"] == "LAKELOCK_TOKEN_TABLES"


def test_a_listed_token_reads_the_events_of_its_tables_only(
    api: httpx.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(audit, "_EVENTS_READ", 2)  # the filter reads on past whole batches
    for name in ("lake.db.events", "other.db.events", "other.db.more", "other.db.most"):
        switched = api.put(f"/v1/tables/{name}/switch", json={"reason": "r", "ingest": "running"})
        assert switched.status_code == 200, switched.text
    job = auth("job")
    _forbidden(
        api.get("/v1/events", params={"table": "Other.DB.Events"}, headers=job), "other.db.events"
    )
    mine = api.get("/v1/events", headers=job).json()["events"]
    assert mine and {e["table"] for e in mine} == {"lake.db.events"}
    newest = api.get("/v1/events", params={"limit": 1}, headers=job).json()["events"]
    assert [e["table"] for e in newest] == ["lake.db.events"]
    one = api.get("/v1/events", params={"table": "lake.db.events"}, headers=job).json()
    assert [e["id"] for e in one["events"]] == [e["id"] for e in mine]
    everything = api.get("/v1/events").json()["events"]  # an operator reads the whole trail
    assert {e["table"] for e in everything} == {
        "lake.db.events",
        "other.db.events",
        "other.db.more",
        "other.db.most",
    }


def test_a_listed_token_reads_the_leases_of_its_tables_only(api: httpx.Client) -> None:
    body = {"holder": "ingest-1", "ttl_s": 30}
    theirs = api.post("/v1/tables/other.db.events/commit-leases", json=body)
    assert theirs.status_code == 201, theirs.text
    mine = api.post("/v1/tables/lake.db.events/commit-leases", json=body, headers=auth("job"))
    assert mine.status_code == 201, mine.text
    job = auth("job")
    _forbidden(api.get(f"/v1/leases/{theirs.json()['lease_id']}", headers=job), "other.db.events")
    read = api.get(f"/v1/leases/{mine.json()['lease_id']}", headers=job)
    assert read.status_code == 200 and read.json()["table"] == "lake.db.events"
    assert api.get(f"/v1/leases/{theirs.json()['lease_id']}").status_code == 200


def test_a_malformed_table_name_is_still_the_routes_422(api: httpx.Client) -> None:
    answer = api.post(
        "/v1/tables/not-a-table/commit-leases",
        json={"holder": "h", "ttl_s": 30},
        headers=auth("job"),
    )
    assert answer.status_code == 422, answer.text


def test_may_touch_matches_the_lower_case_name_with_globs() -> None:
    limited = ApiToken("ingest", "job", "x" * 8, tables=("lake.db.*", "lakelock.ns.t?"))
    assert may_touch(limited, "lake.db.events")
    assert may_touch(limited, "LAKE.DB.Events")
    assert may_touch(limited, "lake.db.x.y"), "* matches dots too"
    assert may_touch(limited, "lakelock.ns.t1")
    assert not may_touch(limited, "lakelock.ns.t12")
    assert not may_touch(limited, "lake.dbx.events")
    assert may_touch(ApiToken("ops", "operator", "x" * 8), "anything.at.all")


@pytest.mark.parametrize(
    ("patterns", "namespace", "held"),
    [
        (("lake.db.*",), "lake.db", True),
        (("lake.db.*",), "LAKE.DB", True),
        (("lake.db.*",), "lake.dbx", False),
        (("lake.db.*",), "other.db", False),
        (("lake.*",), "lake.anything", True),
        (("lake.*s",), "lake.team", True),  # lake.team.events
        (("lake.*.events",), "lake.team", True),
        (("lake.d?.events",), "lake.db", True),
        (("lake.d?.events",), "lake.dbb", False),
        (("lake.*b.*",), "lake.bb", True),
        (("lake.?b.*",), "lake.cbb", False),
        (("lake.*",), "lake." + "x" * 5000, True),  # a long name: no recursion, linear
        (("l*a*k*e*.*d*b*.*",), "lake." + "ab" * 2000, False),
        (("lake.db",), "lake.db", False),  # a table named db in catalog lake, no namespace
        (("lake.db.t", "x.y.*"), "x.y", True),
    ],
)
def test_may_hold_says_whether_a_pattern_can_match_a_table_of_the_namespace(
    patterns: tuple[str, ...], namespace: str, held: bool
) -> None:
    assert may_hold(ApiToken("ingest", "job", "x" * 8, tables=patterns), namespace) is held
    assert may_hold(ApiToken("ops", "operator", "x" * 8), namespace)


def test_tokens_carry_their_patterns_from_the_settings() -> None:
    settings = make_settings("sqlite://", token_tables=" job-client = Lake.DB.* , x.y ; ")
    tokens = {token.name: token for token in settings.api_tokens}
    assert tokens["job-client"].tables == ("lake.db.*", "x.y")
    assert tokens["reader-client"].tables is None
    assert tokens["operator-client"].tables is None


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("nobody=lake.*", "names the token 'nobody', which LAKELOCK_TOKENS does not have"),
        ("operator-client=lake.*", "an operator token: operators touch every table"),
        ("job-client=lake.db.*;job-client=x.*", "entry 2 repeats the token 'job-client'"),
        ("job-client", "entry 1 is not name=pattern"),
        ("job-client=", "entry 1 is not name=pattern"),
        ("job-client=lake/db", "entry 1 (job-client) has the pattern 'lake/db'"),
    ],
)
def test_a_bad_token_tables_value_stops_start_up_with_a_message(value: str, message: str) -> None:
    with pytest.raises(SettingsError) as caught:
        make_settings("sqlite://", token_tables=value)
    assert "LAKELOCK_TOKEN_TABLES" in str(caught.value)
    assert message in str(caught.value)


def test_the_catalog_front_keeps_a_listed_token_to_its_tables(db_url, tmp_path) -> None:
    """The same rule at /iceberg: create, load and commit outside the patterns are 403s that
    write nothing; a namespace's listing shows the token its own tables only."""
    from starlette.testclient import TestClient

    warehouse = tmp_path / "warehouse"
    settings = make_settings(
        db_url,
        token_tables="job-client=lakelock.db.mine*",
        catalog_warehouse=warehouse.as_uri(),
    )
    schema = {
        "type": "struct",
        "schema-id": 0,
        "fields": [{"id": 1, "name": "id", "type": "long", "required": False}],
    }
    with TestClient(create_app(settings), base_url="http://t/iceberg/v1") as c:
        c.post("/namespaces", json={"namespace": ["db"]}, headers=auth("operator"))
        create = {"name": "theirs", "schema": schema}
        c.post("/namespaces/db/tables", json=create, headers=auth("operator")).raise_for_status()
        job = auth("job")
        refused = c.post(
            "/namespaces/db/tables", json={"name": "other", "schema": schema}, headers=job
        )
        assert refused.status_code == 403 and refused.json()["setting"] == "LAKELOCK_TOKEN_TABLES"
        assert refused.json()["error"]["type"] == "ForbiddenException"
        assert not (warehouse / "db" / "other").exists()
        assert c.get("/namespaces/db/tables/theirs", headers=job).status_code == 403
        change = {
            "requirements": [],
            "updates": [{"action": "set-properties", "updates": {"a": "b"}}],
        }
        assert c.post("/namespaces/db/tables/theirs", json=change, headers=job).status_code == 403
        assert (
            "a"
            not in c.get("/namespaces/db/tables/theirs", headers=auth("operator")).json()[
                "metadata"
            ]["properties"]
        )
        mine = c.post(
            "/namespaces/db/tables", json={"name": "mine_1", "schema": schema}, headers=job
        )
        assert mine.status_code == 200, mine.text
        listed = c.get("/namespaces/db/tables", headers=job).json()["identifiers"]
        assert listed == [{"namespace": ["db"], "name": "mine_1"}]


def test_a_listed_token_creates_reads_and_lists_namespaces_within_its_patterns(
    db_url, tmp_path
) -> None:
    """A narrowed job token cannot create a namespace (with properties only an operator can
    change later) where it may touch no table, nor read one; its listing shows its own."""
    from starlette.testclient import TestClient

    settings = make_settings(
        db_url,
        token_tables="job-client=lakelock.db.*;reader-client=lakelock.d?.events",
        catalog_warehouse=(tmp_path / "warehouse").as_uri(),
    )
    with TestClient(create_app(settings), base_url="http://t/iceberg/v1") as c:
        job, reader, operator = auth("job"), auth("reader"), auth("operator")
        made = {"namespace": ["elsewhere"], "properties": {"owner": "mallory"}}
        refused = c.post("/namespaces", json=made, headers=job)
        assert refused.status_code == 403, refused.text
        problem = refused.json()
        assert problem["namespace"] == "lakelock.elsewhere"
        assert problem["setting"] == "LAKELOCK_TOKEN_TABLES"
        assert problem["error"]["type"] == "ForbiddenException"
        assert c.get("/namespaces/elsewhere", headers=operator).status_code == 404  # not made
        assert c.post("/namespaces", json={"namespace": ["db"]}, headers=job).status_code == 200
        made = {"namespace": ["other"], "properties": {"owner": "ops"}}
        assert c.post("/namespaces", json=made, headers=operator).status_code == 200
        assert c.get("/namespaces/other", headers=job).status_code == 403
        assert c.head("/namespaces/other", headers=reader).status_code == 403
        assert c.head("/namespaces/db", headers=reader).status_code == 204
        assert c.get("/namespaces/other/tables", headers=job).status_code == 403
        assert c.get("/namespaces", params={"parent": "other"}, headers=job).status_code == 403
        assert c.get("/namespaces", headers=job).json()["namespaces"] == [["db"]]
        assert c.get("/namespaces", headers=reader).json()["namespaces"] == [["db"]]
        everything = c.get("/namespaces", headers=operator).json()["namespaces"]
        assert sorted(everything) == [["db"], ["other"]]
