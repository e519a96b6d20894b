"""Fixed cases of the Iceberg REST catalog: each request the catalog fuzzer
(tests/catalog/test_fuzz.py) once found answered with a 5xx, sent as it was.

A body pyiceberg's models cannot read is the client's mistake: a 400 whose message says what to
send, with Iceberg's `error` object, and no change to the table.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import auth

TABLE_URL = "/iceberg/v1/namespaces/fuzz/tables/t"
SCHEMA = {
    "type": "struct",
    "schema-id": 0,
    "fields": [{"id": 1, "name": "id", "type": "long", "required": False}],
}
# a field whose `initial-default` its type (a map) cannot hold
MAP_WITH_A_DEFAULT = {
    "type": "struct",
    "fields": [
        {
            "initial-default": True,
            "write-default": True,
            "id": 0,
            "name": "",
            "type": {
                "key": {"type": "struct", "fields": []},
                "key-id": 0,
                "type": "map",
                "value": {"fields": [], "type": "struct"},
                "value-id": 0,
                "value-required": False,
            },
            "required": False,
            "doc": "",
        }
    ],
    "identifier-field-ids": [],
}


@pytest.fixture
def settings_overrides(tmp_path: Path) -> dict[str, object]:
    return {"catalog_warehouse": (tmp_path / "warehouse").as_uri()}


@pytest.fixture
def table(api: httpx.Client) -> dict[str, Any]:
    """fuzz.t, as the fuzzer's runs have it; its LoadTableResult."""
    made = api.post("/iceberg/v1/namespaces", json={"namespace": ["fuzz"]}, headers=auth("job"))
    assert made.status_code == 200, made.text
    made = api.post(
        "/iceberg/v1/namespaces/fuzz/tables",
        json={"name": "t", "schema": SCHEMA},
        headers=auth("job"),
    )
    assert made.status_code == 200, made.text
    return made.json()


def refused(answer: httpx.Response, *words: str) -> None:
    assert answer.status_code == 400, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    problem = answer.json()
    assert problem["type"] == "urn:lakelock:invalid-request"
    assert problem["error"]["type"] == "BadRequestException" and problem["error"]["code"] == 400
    for word in words:
        assert word in problem["detail"], problem["detail"]


def unchanged(api: httpx.Client, table: dict[str, Any], tmp_path: Path) -> None:
    loaded = api.get(TABLE_URL, headers=auth("reader"))
    assert loaded.json()["metadata-location"] == table["metadata-location"]
    written = sorted((tmp_path / "warehouse").rglob("*.metadata.json"))
    assert [p.as_uri() for p in written] == [table["metadata-location"]]


@pytest.mark.parametrize(
    "body, words",
    [
        pytest.param(
            {
                "name": "",
                "location": "",
                "schema": MAP_WITH_A_DEFAULT,
                "partition-spec": {"fields": []},
                "write-order": {"fields": []},
                "stage-create": False,
                "properties": {},
            },
            ["create table", "wrong JSON type", "REST specification"],
            id="a-default-its-type-cannot-hold",
        ),
        pytest.param(
            {
                "name": "",
                "location": "",
                "schema": {"type": "struct", "fields": [], "identifier-field-ids": []},
                "partition-spec": {"fields": []},
                "write-order": {"fields": []},
                "stage-create": False,
                "properties": [None, None],
            },
            ["create table", "wrong JSON type"],
            id="properties-a-list",
        ),
    ],
)
def test_a_create_pyiceberg_cannot_read_is_refused(
    api: httpx.Client, table: dict[str, Any], tmp_path: Path, body: Any, words: list[str]
) -> None:
    answer = api.post(
        "/iceberg/v1/namespaces/fuzz/tables",
        json=body,
        headers={**auth("job"), "X-Iceberg-Access-Delegation": "vended-credentials"},
    )
    refused(answer, *words)
    unchanged(api, table, tmp_path)
    listed = api.get("/iceberg/v1/namespaces/fuzz/tables", headers=auth("reader")).json()
    assert listed["identifiers"] == [{"namespace": ["fuzz"], "name": "t"}]


@pytest.mark.parametrize(
    "update, words",
    [
        pytest.param(
            {"schema": MAP_WITH_A_DEFAULT, "action": "add-schema", "last-column-id": 0},
            ["updates", "wrong JSON type"],
            id="a-default-its-type-cannot-hold",
        ),
        pytest.param(
            {"action": "set-statistics", "snapshot-id": 1},
            ["updates", "statistics", "is missing"],
            id="set-statistics-without-statistics",
        ),
        pytest.param(
            {"action": "set-properties", "updates": [None, None]},
            ["updates", "wrong JSON type"],
            id="set-properties-a-list",
        ),
    ],
)
def test_a_commit_pyiceberg_cannot_read_is_refused(
    api: httpx.Client, table: dict[str, Any], tmp_path: Path, update: Any, words: list[str]
) -> None:
    body = {
        "identifier": {"namespace": ["accounting", "tax"], "name": ""},
        "requirements": [],
        "updates": [update],
    }
    refused(api.post(TABLE_URL, json=body, headers=auth("job")), *words)
    unchanged(api, table, tmp_path)


def test_removing_a_property_the_table_lacks_changes_no_property(
    api: httpx.Client, table: dict[str, Any]
) -> None:
    """As Iceberg's own catalogs do (TableMetadata.Builder.removeProperties): a key the table
    does not have is no error, also after a set and a remove of it in the same commit."""
    body = {
        "identifier": {"namespace": ["accounting", "tax"], "name": ""},
        "requirements": [],
        "updates": [
            {"action": "remove-properties", "removals": [""]},
            {"action": "set-properties", "updates": {"owner": "etl", "kept": "yes"}},
            {"action": "remove-properties", "removals": ["owner", "absent"]},
            {"action": "remove-properties", "removals": ["owner"]},
        ],
    }
    answer = api.post(TABLE_URL, json=body, headers=auth("job"))
    assert answer.status_code == 200, answer.text
    properties = answer.json()["metadata"]["properties"]
    assert properties.get("kept") == "yes" and "owner" not in properties
    assert api.get(TABLE_URL, headers=auth("reader")).json()["metadata"]["properties"] == (
        properties
    )
