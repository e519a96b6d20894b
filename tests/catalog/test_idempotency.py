"""Iceberg's Idempotency-Key at the catalog front (REST specification 1.11), on a real service
process over SQLite and MariaDB: a mutation sent again with its key is answered as the first
time and applied once, even when both copies arrive at once; a key is its token's own; a key
sent with another request is a 400; a held commit (429) is not kept, so its resend may pass;
the table is checked with pyiceberg's SqlCatalog, straight from the database."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import date, timedelta
from functools import partial
from typing import Any

import httpx
import pyarrow as pa
import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import DateType, LongType, NestedField
from sqlalchemy import create_engine, select

from service.lock import idempotency, retention
from service.lock.db import idempotency_t
from testkit.commits import rest_body
from tests.catalog.test_parked_commits import delete_body
from tests.conftest import BOTH_DATABASES, SECRETS, TWO_JOBS_ENV, front_fixture

pytestmark = pytest.mark.dialect  # on SQLite and MariaDB (tests/conftest.py)

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "dt", DateType(), required=False),
)
SPEC = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "dt"))
DAY = date(2024, 6, 20)


front = front_fixture("idempotency", BOTH_DATABASES, LAKELOCK_TOKENS=TWO_JOBS_ENV)


def iceberg(front: Any, who: str = "a") -> httpx.Client:
    return httpx.Client(
        base_url=f"{front.url}/iceberg/v1",
        headers={"Authorization": f"Bearer {SECRETS[who]}"},
        timeout=60,
    )


def new_table(front: Any, name: str) -> Any:
    catalog = RestCatalog("lakelock", uri=f"{front.url}/iceberg", token=SECRETS["a"])
    catalog.create_namespace(name)
    return catalog.create_table(f"{name}.t", SCHEMA, partition_spec=SPEC)


def append_body(table: Any, ids: list[int]) -> dict[str, Any]:
    """The REST body of an append, as pyiceberg sends it (its data file written already)."""
    tx = table.transaction()
    tx.append(pa.table({"id": pa.array(ids, pa.int64()), "dt": pa.array([DAY] * len(ids))}))
    return rest_body(tx)


def commit(
    front: Any, table: Any, body: dict[str, Any], key: str | None, who: str = "a"
) -> httpx.Response:
    namespace, name = table.name()
    headers = {} if key is None else {"Idempotency-Key": key}
    with iceberg(front, who) as c:
        return c.post(f"/namespaces/{namespace}/tables/{name}", json=body, headers=headers)


def at_once(copies: int, send: Callable[[], httpx.Response]) -> list[httpx.Response]:
    """`copies` calls of `send`, released together."""
    start = threading.Barrier(copies)

    def one() -> httpx.Response:
        start.wait()
        return send()

    with ThreadPoolExecutor(copies) as pool:
        return [f.result(60) for f in [pool.submit(one) for _ in range(copies)]]


def key() -> str:
    return str(uuid.uuid4())  # any UUID is taken; Iceberg's clients send UUIDv7


def rows_and_snapshots(front: Any, table: Any) -> tuple[list[int], int]:
    """The table as pyiceberg's SqlCatalog reads it from the database: not through the front."""
    catalog = SqlCatalog("lakelock", uri=front.db_url, warehouse=front.store.uri)
    read = catalog.load_table(table.name())
    ids = sorted(read.scan().to_arrow()["id"].to_pylist())
    return ids, len(read.metadata.snapshots)


def test_the_config_advertises_the_key_lifetime(front):
    with iceberg(front) as c:
        config = c.get("/config").json()
    assert config["idempotency-key-lifetime"] == "PT1800S"
    assert "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}" in config["endpoints"]


def test_a_commit_sent_again_with_its_key_is_answered_as_the_first_and_applied_once(front):
    table = new_table(front, "resent")
    body, sent = append_body(table, [1, 2]), key()
    first = commit(front, table, body, sent)
    assert first.status_code == 200, first.text
    again = commit(front, table, body, sent)  # the client lost the first answer
    assert again.status_code == 200, again.text
    assert again.json()["metadata-location"] == first.json()["metadata-location"]
    assert rows_and_snapshots(front, table) == ([1, 2], 1)


def test_two_copies_at_once_apply_once_and_both_get_the_answer(front):
    table = new_table(front, "twice")
    body, sent = append_body(table, [7]), key()
    answers = at_once(2, partial(commit, front, table, body, sent))
    assert sorted(a.status_code for a in answers) == [200, 200], [a.text for a in answers]
    assert len({a.json()["metadata-location"] for a in answers}) == 1
    assert rows_and_snapshots(front, table) == ([7], 1)


def test_copies_of_a_property_change_at_once_apply_once_and_leave_the_table_readable(front):
    """A change whose requirements a second copy still meets after the first landed (only the
    table's uuid): the second copy's swap, meeting the key the first kept, is rolled back, and
    the file the pointer names is never deleted."""
    table = new_table(front, "props")
    for round_ in range(5):
        body = {
            "requirements": [{"type": "assert-table-uuid", "uuid": str(table.metadata.table_uuid)}],
            "updates": [{"action": "set-properties", "updates": {"round": str(round_)}}],
        }
        sent = key()
        answers = at_once(3, partial(commit, front, table, body, sent))
        assert [a.status_code for a in answers] == [200] * 3, [a.text for a in answers]
        assert len({a.json()["metadata-location"] for a in answers}) == 1
    catalog = SqlCatalog("lakelock", uri=front.db_url, warehouse=front.store.uri)
    read = catalog.load_table(table.name())  # the file its pointer names is there
    assert read.properties["round"] == "4"
    assert len(read.metadata.metadata_log) == 5  # one change per round


def test_a_key_sent_with_another_request_is_a_400_that_changes_nothing(front):
    table = new_table(front, "reused")
    sent = key()
    assert commit(front, table, append_body(table, [1]), sent).status_code == 200
    table = table.refresh()
    other = commit(front, table, append_body(table, [2]), sent)
    assert other.status_code == 400, other.text
    assert "Idempotency-Key" in other.json()["error"]["message"]
    assert rows_and_snapshots(front, table) == ([1], 1)
    malformed = commit(front, table, append_body(table, [3]), "not-a-uuid")
    assert malformed.status_code == 400 and "UUID" in malformed.json()["detail"]


def test_a_key_is_its_tokens_own(front):
    """Another token sending the same key is another request: applied on its own, never
    answered with the first token's answer."""
    table = new_table(front, "owned")
    sent = key()
    assert commit(front, table, append_body(table, [1]), sent).status_code == 200
    table = table.refresh()
    theirs = commit(front, table, append_body(table, [2]), sent, who="b")
    assert theirs.status_code == 200, theirs.text
    assert rows_and_snapshots(front, table) == ([1, 2], 2)


def test_a_refusal_is_kept_and_a_held_commit_is_not(front):
    """A 409 is final: its resend meets it again. A 429 (held by a maintenance lease) is not:
    once the hold ends, the resend with the same key is applied."""
    table = new_table(front, "refused")
    stale = append_body(table, [1])
    assert commit(front, table, append_body(table, [0]), None).status_code == 200
    sent = key()
    conflict = commit(front, table, stale | {"requirements": _stale(table)}, sent)
    assert conflict.status_code == 409, conflict.text
    assert commit(front, table, stale | {"requirements": _stale(table)}, sent).status_code == 409

    table = table.refresh()
    name = ".".join(("lakelock", *table.name()))
    with httpx.Client(base_url=front.url, headers={"Authorization": f"Bearer {SECRETS['a']}"}) as c:
        lease = c.post(
            f"/v1/tables/{name}/maintenance-lease",
            json={"holder": "compactor-1", "ttl_s": 60, "partitions": [f"dt={DAY}"]},
        ).json()
        delete = delete_body(table)
        sent = key()
        assert commit(front, table, delete, sent).status_code == 429
        c.delete(
            f"/v1/leases/{lease['lease_id']}",
            params={"holder": "compactor-1", "token": lease["token"]},
        ).raise_for_status()
    assert commit(front, table, delete, sent).status_code == 200
    assert rows_and_snapshots(front, table)[0] == []


def _stale(table: Any) -> list[dict[str, Any]]:
    """A requirement the table no longer meets: its main branch at no snapshot."""
    return [{"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": None}]


def test_namespace_and_table_creation_sent_again_are_not_already_exists(front):
    sent = key()
    with iceberg(front) as c:
        made = [
            c.post("/namespaces", json={"namespace": ["again"]}, headers={"Idempotency-Key": sent})
            for _ in range(2)
        ]
        assert [m.status_code for m in made] == [200, 200], made[1].text
        schema = json.loads(SCHEMA.model_dump_json())
        sent = key()
        create = {"name": "t", "schema": schema}
        tables = [
            c.post("/namespaces/again/tables", json=create, headers={"Idempotency-Key": sent})
            for _ in range(2)
        ]
        assert [t.status_code for t in tables] == [200, 200], tables[1].text
        assert tables[0].json()["metadata-location"] == tables[1].json()["metadata-location"]
        # without a key, the second is what it always was
        assert c.post("/namespaces", json={"namespace": ["again"]}).status_code == 409


def test_kept_answers_expire_and_are_pruned(front):
    engine = create_engine(front.db_url)
    gone = idempotency.Key("a", key(), "f" * 64, timedelta(seconds=-1))
    live = idempotency.Key("a", key(), "f" * 64, timedelta(minutes=5))
    try:
        with engine.begin() as conn:
            idempotency.remember(conn, gone, status=204)
            idempotency.remember(conn, live, status=204)
        with engine.begin() as conn:
            assert idempotency.find(conn, gone) is None  # expired: a resend runs again
        pruned = retention.prune(engine, retention=timedelta(days=30), batch_rows=1000)
        assert pruned.idempotency_keys >= 1
        with engine.begin() as conn:
            assert idempotency.find(conn, live) is not None
            keys = conn.execute(select(idempotency_t.c.idempotency_key)).scalars().all()
        assert gone.key not in keys and live.key in keys
    finally:
        engine.dispose()
