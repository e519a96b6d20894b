"""GET /v1/tables answers a page at a time, by name; the client and the status page follow
`next` to the last page."""

from __future__ import annotations

import httpx
import pytest
from sqlalchemy.engine import Engine

from service.client import LeaseClient
from service.lock import store
from service.lock.db import run_transaction

pytestmark = pytest.mark.dialect  # on SQLite and MariaDB (tests/conftest.py)


def _make_known(api: httpx.Client, names: list[str]) -> None:
    for name in names:
        answer = api.put(
            f"/v1/tables/{name}/switch", json={"reason": "paging", "ingest": "running"}
        )
        assert answer.status_code == 200, answer.text


NAMES = [f"lake.db.t{index:03d}" for index in range(7)]


def test_pages_follow_each_other_by_name_to_a_last_page_without_next(api: httpx.Client) -> None:
    _make_known(api, list(reversed(NAMES)))
    seen: list[str] = []
    pages = 0
    params: dict[str, object] = {"limit": 3}
    while True:
        answer = api.get("/v1/tables", params=params)
        assert answer.status_code == 200, answer.text
        page = answer.json()
        pages += 1
        assert len(page["tables"]) <= 3
        seen.extend(t["table"] for t in page["tables"])
        if page["next"] is None:
            break
        assert page["next"] == page["tables"][-1]["table"]
        params["after"] = page["next"]
    assert seen == NAMES
    assert pages == 3


def test_a_page_that_ends_the_list_exactly_has_no_next(api: httpx.Client) -> None:
    _make_known(api, NAMES[:3])
    page = api.get("/v1/tables", params={"limit": 3}).json()
    assert [t["table"] for t in page["tables"]] == NAMES[:3]
    assert page["next"] is None


def test_without_parameters_the_first_hundred_tables_are_answered(api: httpx.Client) -> None:
    names = [f"lake.db.t{index:03d}" for index in range(101)]
    _make_known(api, names)
    page = api.get("/v1/tables").json()
    assert [t["table"] for t in page["tables"]] == names[:100]
    assert page["next"] == names[99]
    rest = api.get("/v1/tables", params={"after": page["next"]}).json()
    assert [t["table"] for t in rest["tables"]] == names[100:]
    assert rest["next"] is None


def test_after_is_a_table_name_in_any_case(api: httpx.Client) -> None:
    _make_known(api, NAMES)
    page = api.get("/v1/tables", params={"after": "LAKE.DB.T004"}).json()
    assert [t["table"] for t in page["tables"]] == NAMES[5:]


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"limit": 0}, "limit"),
        ({"limit": 1001}, "limit"),
        ({"limit": "many"}, "limit"),
        ({"after": "no table"}, "after"),
    ],
)
def test_a_bad_page_parameter_is_a_422_naming_it(
    api: httpx.Client, params: dict[str, object], field: str
) -> None:
    answer = api.get("/v1/tables", params=params)
    assert answer.status_code == 422, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    assert field in answer.json()["detail"]


def test_the_client_follows_every_page(api: httpx.Client, engine: Engine) -> None:
    names = [f"lake.db.t{index:04d}" for index in range(1003)]
    # the tables' rows in one transaction, as a first use makes each: a thousand calls to the
    # switch took a hundred seconds on MariaDB, and the paging is what this test is about
    run_transaction(engine, lambda conn: [store.lock_table(conn, n) for n in names])
    asked: list[str] = []
    api.event_hooks["request"].append(lambda request: asked.append(str(request.url)))
    tables = LeaseClient(http=api).tables()
    assert [t["table"] for t in tables] == names
    assert len(asked) == 2, asked


def test_the_client_takes_an_answer_without_next_from_a_service_before_paging() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"tables": [{"table": "lake.db.a"}]})

    http = httpx.Client(transport=httpx.MockTransport(answer), base_url="http://lakelock")
    assert LeaseClient(http=http, retries=0).tables() == [{"table": "lake.db.a"}]
