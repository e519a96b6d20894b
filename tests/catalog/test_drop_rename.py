"""A table dropped or renamed through the catalog front takes its lock state along
(docs/catalog-front.md, "Drop and rename"; service.lock.drops), against a real service on
SQLite and MariaDB, its warehouse on local files.

A dropped table owes nothing: a follower of a glob that matched it is told of no due partition
of it, its debt, reader holds and lag are gone, and a new table of its name starts clean with
fencing tokens that go on from the old ones. A renamed table's due partitions and debt are the
new name's. A table that a lease or intent holds is neither dropped nor renamed (409, nothing
changed) until that ends.
"""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pyarrow as pa
import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import LongType, NestedField, StringType

from tests.conftest import BOTH_DATABASES, TOKENS, auth, front_fixture

pytestmark = pytest.mark.dialect  # on SQLite and MariaDB (tests/conftest.py): row locks

CATALOG = "lakelock"
SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "p", StringType(), required=False),
)
SPEC = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "p"))
DEBT = {
    "snapshot_id": 1,
    "data_files": 9,
    "small_files": 8,
    "delete_files": 0,
    "partitions_over_target": 3,
}

WHAT_WENT = ("due_partitions", "debt", "reader_holds", "ingest_lag")

# every partition an append touches is due at once
front = front_fixture("drop-rename", BOTH_DATABASES, LAKELOCK_DUE_DATA_FILES="1")


def catalog(front: Any, role: str = "job") -> RestCatalog:
    return RestCatalog(CATALOG, uri=f"{front.url}/iceberg", token=TOKENS[role])


def api(front: Any, role: str = "job") -> httpx.Client:
    return httpx.Client(base_url=front.url, headers=auth(role), timeout=30)


def busy_table(front: Any, namespace: str, name: str = "t") -> str:
    """A table with partitions p=1, p=2, p=3 due, a debt report, a reader hold and a lag
    report; its name in lakelock's leases."""
    rest = catalog(front)
    rest.create_namespace_if_not_exists(namespace)
    table = rest.create_table(f"{namespace}.{name}", SCHEMA, partition_spec=SPEC)
    table.append(pa.table({"id": pa.array([1, 2, 3], pa.int64()), "p": ["1", "2", "3"]}))
    leased = f"{CATALOG}.{namespace}.{name}"
    snapshot = table.refresh().current_snapshot().snapshot_id
    with api(front) as c:
        for path, body in (
            ("debt", DEBT),
            ("readers/summary", {"snapshot_id": snapshot, "ttl_s": 300}),
            ("ingest-lag", {"query_id": "q", "batch_id": 1, "partitions": {"events:0": 5}}),
        ):
            answer = c.put(f"/v1/tables/{leased}/{path}", json=body)
            assert answer.is_success, answer.text
    assert sorted(due_partitions(front, leased)) == ["p=1", "p=2", "p=3"]
    return leased


def state(front: Any, table: str) -> dict[str, Any]:
    with api(front, "reader") as c:
        answer = c.get(f"/v1/tables/{table}")
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def counted(front: Any, table: str) -> int:
    """The partitions the table's state counts files of since their last compaction."""
    due = state(front, table)["due"]
    return 0 if due is None else int(due["partitions_counted"])


def due_partitions(front: Any, table: str) -> list[str]:
    """What a follower of the table's namespace (a glob) is told is due on `table` now."""
    glob = table.rsplit(".", 1)[0] + ".*"
    with api(front) as c:
        answer = c.get("/v1/due", params={"table": glob, "holder": "follower-1", "wait_s": 0})
    assert answer.status_code == 200, answer.text
    return [d["partition"] for d in answer.json()["due"] if d["table"] == table]


def events(front: Any, table: str, name: str) -> list[dict[str, Any]]:
    with api(front, "reader") as c:
        answer = c.get("/v1/events", params={"table": table, "limit": 1000})
    assert answer.status_code == 200, answer.text
    return [e for e in answer.json()["events"] if e["event"] == name]


def rename(front: Any, source: str, destination: str) -> httpx.Response:
    """An operator's rename, namespace.table to namespace.table."""
    (sn, st), (dn, dt) = source.split("."), destination.split(".")
    body = {
        "source": {"namespace": [sn], "name": st},
        "destination": {"namespace": [dn], "name": dt},
    }
    with httpx.Client(base_url=f"{front.url}/iceberg", headers=auth("operator")) as c:
        return c.post("/v1/tables/rename", json=body)


def drop(front: Any, name: str, **headers: str) -> httpx.Response:
    namespace, table = name.split(".")
    with httpx.Client(base_url=f"{front.url}/iceberg", headers=auth("operator")) as c:
        return c.delete(f"/v1/namespaces/{namespace}/tables/{table}", headers=headers)


def maintenance_token(front: Any, table: str) -> int:
    """Take and release a maintenance lease of `table`: its fencing token."""
    with api(front) as c:
        lease = c.post(
            f"/v1/tables/{table}/maintenance-lease", json={"holder": "compactor-1", "ttl_s": 60}
        )
        assert lease.status_code == 201, lease.text
    release(front, lease.json())
    token: int = lease.json()["token"]
    return token


def release(front: Any, lease: dict[str, Any]) -> None:
    params = {k: lease[k] for k in ("holder", "token") if lease.get(k) is not None}
    with api(front) as c:
        answer = c.delete(f"/v1/leases/{lease['lease_id']}", params=params)
    assert answer.is_success, answer.text


def test_a_dropped_table_is_no_ones_due_and_a_new_one_of_its_name_starts_clean(front):
    table = busy_table(front, "dropped")
    before = maintenance_token(front, table)
    assert state(front, table)["debt"] is not None

    catalog(front, "operator").drop_table("dropped.t")

    assert due_partitions(front, table) == []
    after = state(front, table)
    assert counted(front, table) == 0
    assert (after["debt"], after["readers"], after["ingest_lag"]) == (None, [], None)
    (event,) = events(front, table, "catalog.dropped")
    assert event["actor"] == "operator-client"
    assert {k: event["detail"][k] for k in WHAT_WENT} == {
        "due_partitions": 3,
        "debt": True,
        "reader_holds": 1,
        "ingest_lag": True,
    }
    # a new table of the name: nothing due until it is written, tokens never repeat
    catalog(front).create_table("dropped.t", SCHEMA, partition_spec=SPEC)
    assert due_partitions(front, table) == []
    assert maintenance_token(front, table) > before


def test_a_renamed_table_takes_its_due_partitions_and_debt_along(front):
    table = busy_table(front, "renamed")

    answer = rename(front, "renamed.t", "renamed.u")
    assert answer.status_code == 204, answer.text

    moved = f"{CATALOG}.renamed.u"
    assert due_partitions(front, table) == [] and counted(front, table) == 0
    assert sorted(due_partitions(front, moved)) == ["p=1", "p=2", "p=3"]
    assert state(front, moved)["debt"]["small_files"] == DEBT["small_files"]
    # the jobs' holds and lag named the old table: on neither name now
    for name in (table, moved):
        left = state(front, name)
        assert (left["readers"], left["ingest_lag"]) == ([], None)
    assert state(front, table)["debt"] is None
    (event,) = events(front, table, "catalog.renamed")
    assert {k: event["detail"][k] for k in ("destination", *WHAT_WENT)} == {
        "destination": moved,
        "due_partitions": 3,
        "debt": True,
        "reader_holds": 1,
        "ingest_lag": True,
    }
    # and the table is there under its new name, its rows unchanged
    assert catalog(front).load_table("renamed.u").scan().to_arrow().num_rows == 3


@pytest.mark.parametrize("lease", ["commit-leases", "maintenance-lease", "claim"])
def test_a_table_a_lease_holds_is_neither_dropped_nor_renamed(front, lease):
    namespace = f"held_{lease.replace('-', '_')}"
    table = busy_table(front, namespace)
    with api(front) as c:
        taken = c.post(f"/v1/tables/{table}/{lease}", json={"holder": "job-1", "ttl_s": 120})
    assert taken.status_code == 201, taken.text

    for refused in (
        drop(front, f"{namespace}.t"),
        rename(front, f"{namespace}.t", f"{namespace}.u"),
    ):
        assert refused.status_code == 409, refused.text
        problem = refused.json()
        assert problem["type"] == "urn:lakelock:in-use"
        lease_id = taken.json()["lease_id"]
        assert f"lease {lease_id} of job-1" in problem["detail"], problem["detail"]
        assert "lakelock revoke" in problem["detail"]
        assert problem["live"] == [
            {"kind": lease.split("-")[0], "holder": "job-1", "lease_id": lease_id}
        ]
    # nothing changed: the table loads under its name, its partitions counted, no event
    catalog(front).load_table(f"{namespace}.t")
    assert counted(front, table) == 3
    assert events(front, table, "catalog.dropped") == []

    release(front, taken.json())
    assert drop(front, f"{namespace}.t").status_code == 204
    assert due_partitions(front, table) == []


def test_a_lease_on_the_new_name_holds_a_rename_too(front):
    table = busy_table(front, "onto")
    with api(front) as c:
        taken = c.post(
            "/v1/tables/lakelock.onto.u/commit-leases", json={"holder": "job-2", "ttl_s": 120}
        )
    assert taken.status_code == 201, taken.text
    refused = rename(front, "onto.t", "onto.u")
    assert refused.status_code == 409, refused.text
    assert "table lakelock.onto.u is in use" in refused.json()["detail"]
    assert sorted(due_partitions(front, table)) == ["p=1", "p=2", "p=3"]


def test_a_rename_refused_for_its_new_name_moves_nothing(front):
    """A namesake (another table's name in other letter case) refuses the rename before any
    of the table's lock state moves."""
    table = busy_table(front, "namesake")
    catalog(front).create_table("namesake.U", SCHEMA, partition_spec=SPEC)
    refused = rename(front, "namesake.t", "namesake.u")
    assert refused.status_code == 409, refused.text
    assert refused.json()["type"] == "urn:lakelock:already-exists"
    assert sorted(due_partitions(front, table)) == ["p=1", "p=2", "p=3"]
    assert state(front, table)["debt"] is not None
    assert events(front, table, "catalog.renamed") == []


def test_a_drop_of_no_table_is_a_404_even_where_a_lease_is_live(front):
    with api(front) as c:
        taken = c.post(
            "/v1/tables/lakelock.nowhere.t/commit-leases", json={"holder": "job-3", "ttl_s": 120}
        )
    assert taken.status_code == 201, taken.text
    catalog(front).create_namespace_if_not_exists("nowhere")
    answer = drop(front, "nowhere.t")
    assert answer.status_code == 404, answer.text


def test_a_drop_refused_in_use_passes_when_sent_again_with_its_key_once_the_lease_ended(front):
    """The 409 in-use is not kept for the request's Idempotency-Key: the resend passes."""
    table = busy_table(front, "keyed")
    with api(front) as c:
        taken = c.post(f"/v1/tables/{table}/commit-leases", json={"holder": "job-4", "ttl_s": 120})
    assert taken.status_code == 201, taken.text
    key = {"Idempotency-Key": str(uuid.uuid4())}
    assert drop(front, "keyed.t", **key).status_code == 409
    release(front, taken.json())
    assert drop(front, "keyed.t", **key).status_code == 204
    assert due_partitions(front, table) == []
