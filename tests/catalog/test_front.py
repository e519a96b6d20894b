"""The catalog front (docs/catalog-front.md) with pyiceberg's RestCatalog and raw REST commits,
against a real service process on SQLite and on MariaDB.

What a user of the front would notice: tables made and written through it are the JdbcCatalog's
rows (read back with pyiceberg's SqlCatalog straight from the database); a maintenance commit
without a live lease and its token is refused with 403 and leaves the table and its folder as
they were; one under a lease passes; a foreign data commit that meets a held maintenance lease
gets 429 with Retry-After, while the protocol's own writer (naming its commit lease) passes;
every commit is on the audit trail with its principal; roles hold.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Iterator
from datetime import date
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pytest
import sqlalchemy
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import ForbiddenError, RESTError
from pyiceberg.expressions import EqualTo
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import DateType, LongType, NestedField, StringType

from testkit.commits import rest_body
from tests.conftest import FRONTS, TOKENS, auth, front_fixture, start_front
from tests.support.helpers import HANG_GUARD_S, metric, wait_until
from tests.support.iceberg_commits import rewrite_body

pytestmark = pytest.mark.dialect  # on SQLite and MariaDB (tests/conftest.py)
BUDGET_S = 60  # tests/support/budget.py: a front on each database and on S3

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "dt", DateType(), required=False),
    NestedField(3, "v", StringType(), required=False),
)
SPEC = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "dt"))
CATALOG = "lakelock"


front = front_fixture("front", FRONTS)


def rest(front: Any, role: str = "job") -> RestCatalog:
    return RestCatalog(CATALOG, uri=f"{front.url}/iceberg", token=TOKENS[role])


def service(front: Any, role: str = "operator") -> httpx.Client:
    return httpx.Client(base_url=front.url, headers=auth(role), timeout=30)


def rows(n: int, day: date, start: int = 0) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(start, start + n), pa.int64()),
            "dt": pa.array([day] * n),
            "v": [f"v{i}" for i in range(n)],
        }
    )


def new_table(front: Any, name: str) -> Any:
    catalog = rest(front)
    namespace = f"ns_{name}"
    catalog.create_namespace(namespace)
    table = catalog.create_table(f"{namespace}.t", SCHEMA, partition_spec=SPEC)
    table.append(rows(3, date(2024, 6, 20)))
    table.append(rows(3, date(2024, 6, 21), start=10))
    return catalog.load_table(f"{namespace}.t")


def lakelock_name(table: Any) -> str:
    return ".".join((CATALOG, *table.name()))


def events(front: Any, table: Any) -> list[dict[str, Any]]:
    with service(front) as api:
        found = api.get("/v1/events", params={"table": lakelock_name(table), "limit": 1000})
    return found.json()["events"]


def replace_commit(
    front: Any,
    table: Any,
    *,
    summary: dict[str, str] | None = None,
    headers: dict[str, str] | None = None,
) -> httpx.Response:
    """A `replace` commit as a rewrite makes one: a new snapshot of the same rows (the
    current manifest list: it adds and deletes nothing), sent as Spark sends it."""
    meta = table.metadata
    current = meta.current_snapshot()
    snapshot_id = random.randrange(1, 2**62)
    body = {
        "requirements": [
            {"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": current.snapshot_id}
        ],
        "updates": [
            {
                "action": "add-snapshot",
                "snapshot": {
                    "snapshot-id": snapshot_id,
                    "parent-snapshot-id": current.snapshot_id,
                    "sequence-number": meta.last_sequence_number + 1,
                    "timestamp-ms": int(time.time() * 1000),
                    "manifest-list": current.manifest_list,
                    "summary": {"operation": "replace", **(summary or {})},
                    "schema-id": current.schema_id,
                },
            },
            {
                "action": "set-snapshot-ref",
                "ref-name": "main",
                "type": "branch",
                "snapshot-id": snapshot_id,
            },
        ],
    }
    namespace, name = table.name()
    with httpx.Client(
        base_url=f"{front.url}/iceberg", headers={**auth("job"), **(headers or {})}
    ) as c:
        return c.post(f"/v1/namespaces/{namespace}/tables/{name}", json=body)


def maintenance_lease(front: Any, table: Any, **body: Any) -> dict[str, Any]:
    with service(front, "job") as api:
        granted = api.post(
            f"/v1/tables/{lakelock_name(table)}/maintenance-lease",
            json={"holder": "compactor-1", "ttl_s": 60, **body},
        )
    assert granted.status_code == 201, granted.text
    return granted.json()


def metadata_files(front: Any, table: Any) -> set[str]:
    namespace, name = table.name()
    found = front.store.objects(f"{namespace}/{name}/metadata")
    return {uri.rsplit("/", 1)[1] for uri in found if uri.endswith(".metadata.json")}


def test_tables_written_through_the_front_are_the_jdbc_catalogs_rows(front):
    table = new_table(front, "rows")
    table.overwrite(rows(2, date(2024, 6, 20), start=100), snapshot_properties={"app": "backfill"})
    # an independent reader: pyiceberg's SQL catalog over the same database, no service
    direct = SqlCatalog(
        CATALOG, uri=front.db_url, warehouse=front.store.uri, **front.store.client_properties()
    )
    read = direct.load_table(table.name())
    assert (
        read.metadata_location == rest(front, "reader").load_table(table.name()).metadata_location
    )
    assert sorted(read.scan().to_arrow()["id"].to_pylist()) == [100, 101]
    assert read.current_snapshot().summary["app"] == "backfill"
    committed = [e for e in events(front, table) if e["event"] == "catalog.commit"]
    assert len(committed) == 3  # two appends, one overwrite (its delete and append together)
    last = committed[0]
    assert last["actor"] == "job-client" and last["kind"] == "data"
    assert last["detail"]["foreign"] is True
    assert last["detail"]["operations"] == ["delete", "append"]
    # read from the manifests the commit wrote, whether or not anything held the table
    assert last["detail"]["partitions"] == ["dt=2024-06-20", "dt=2024-06-21"]
    assert last["detail"]["partition_count"] == 2


def test_a_maintenance_commit_without_a_lease_is_refused_and_changes_nothing(front):
    table = new_table(front, "nolease")
    files = metadata_files(front, table)
    refused = replace_commit(front, table)
    assert refused.status_code == 403
    body = refused.json()
    assert body["type"] == "urn:lakelock:fenced" and body["reason"] == "no-lease"
    assert body["error"]["type"] == "ForbiddenException" and body["error"]["code"] == 403
    assert "Take a maintenance lease" in body["detail"]
    after = rest(front).load_table(table.name())
    assert after.metadata_location == table.metadata_location
    assert metadata_files(front, table) == files  # the refused commit's metadata file is gone
    assert events(front, table)[0]["event"] == "catalog.refused"


def test_a_maintenance_commit_under_a_live_lease_passes_and_names_it(front):
    table = new_table(front, "leased")
    lease = maintenance_lease(front, table)
    props = {"lakelock.lease-id": lease["lease_id"], "lakelock.token": str(lease["token"])}
    passed = replace_commit(front, table, summary=props)
    assert passed.status_code == 200, passed.text
    after = rest(front).load_table(table.name())
    assert after.metadata_location == passed.json()["metadata-location"]
    assert after.current_snapshot().summary.operation.value == "replace"
    event = events(front, table)[0]
    assert (event["event"], event["lease_id"], event["token"]) == (
        "catalog.commit",
        lease["lease_id"],
        lease["token"],
    )
    assert event["detail"]["foreign"] is False


@pytest.mark.parametrize(
    "case", ["revoked", "released", "stale-token", "other-table", "maintenance-off"]
)
def test_a_maintenance_commit_under_a_lease_that_no_longer_holds_is_refused(front, case):
    table = new_table(front, case.replace("-", "_"))
    lease = maintenance_lease(front, table)
    token = lease["token"]
    with service(front) as api:
        if case == "revoked":
            api.post(
                f"/v1/leases/{lease['lease_id']}/revoke", json={"reason": "test"}
            ).raise_for_status()
        elif case == "released":
            api.delete(
                f"/v1/leases/{lease['lease_id']}", params={"holder": "compactor-1", "token": token}
            ).raise_for_status()
        elif case == "stale-token":
            token += 1
        elif case == "other-table":
            other = new_table(front, "other_of_" + case.replace("-", "_"))
            lease = maintenance_lease(front, other)
            token = lease["token"]
        else:
            api.put(
                f"/v1/tables/{lakelock_name(table)}/switch",
                json={"maintenance": "disabled", "reason": "incident 42"},
            ).raise_for_status()
    headers = {"X-Lakelock-Lease-Id": lease["lease_id"], "X-Lakelock-Token": str(token)}
    refused = replace_commit(front, table, headers=headers)
    assert refused.status_code == 403, refused.text
    assert refused.json()["reason"] == case
    assert rest(front).load_table(table.name()).metadata_location == table.metadata_location


def test_snapshot_removal_needs_a_lease_or_the_claim_named_in_the_headers(front):
    table = new_table(front, "expire")
    first, second = (s.snapshot_id for s in table.metadata.snapshots)
    namespace, name = table.name()
    path = f"/iceberg/v1/namespaces/{namespace}/tables/{name}"

    def remove(snapshot_id: int) -> dict[str, Any]:
        return {
            "requirements": [],
            "updates": [{"action": "remove-snapshots", "snapshot-ids": [snapshot_id]}],
        }

    def named(lease: dict[str, Any]) -> dict[str, str]:
        return {"X-Lakelock-Lease-Id": lease["lease_id"], "X-Lakelock-Token": str(lease["token"])}

    with service(front, "job") as api:
        assert api.post(path, json=remove(first)).json()["reason"] == "no-lease"
        lease = maintenance_lease(front, table, partitions=["dt=2024-06-20"])
        assert api.post(path, json=remove(first), headers=named(lease)).status_code == 200
        # the table's claim is enough to remove snapshots, and for nothing else
        claim = api.post(
            f"/v1/tables/{lakelock_name(table)}/claim", json={"holder": "compactor-2", "ttl_s": 60}
        ).json()
        header = {"X-Lakelock-Lease-Id": claim["lease_id"]}
        assert replace_commit(front, table, headers=header).json()["reason"] == "unknown-lease"
        table = rest(front).load_table(table.name())
        table.append(rows(1, date(2024, 6, 22), start=40))
        newest = table.current_snapshot().snapshot_id
        assert api.post(path, json=remove(second), headers=header).status_code == 200
    kept = [s.snapshot_id for s in rest(front).load_table(table.name()).metadata.snapshots]
    assert kept == [newest]


def test_a_foreign_commit_that_can_conflict_is_held_by_a_lease_and_an_append_passes_it(front):
    """Held only what can conflict with the rewrite (docs/catalog-front.md §3): a delete that
    removes the held partition's files waits; an append into it passes, and the leased writer
    passes."""
    table = new_table(front, "held")
    maintenance_lease(front, table, partitions=["dt=2024-06-20"])
    with pytest.raises(RESTError, match="TooManyRequestsException"):
        table.delete(EqualTo("dt", "2024-06-20"))
    refused = events(front, table)[0]
    assert (refused["event"], refused["detail"]["reason"]) == ("catalog.refused", "held")
    assert refused["detail"]["deleted-data-files"] >= 1
    with service(front, "reader") as api:
        assert metric(api, "lakelock_catalog_refusals_total", reason="held") >= 1
    table = rest(front).load_table(table.name())
    table.append(rows(1, date(2024, 6, 20), start=50))
    passed = events(front, table)[0]
    assert passed["event"] == "catalog.commit"
    assert passed["detail"]["partitions"] == ["dt=2024-06-20"]
    assert (passed["detail"]["foreign"], passed["detail"]["can_conflict"]) == (True, False)
    with service(front, "reader") as api:
        assert metric(api, "lakelock_catalog_commits_total", kind="data", writer="foreign") >= 2
    # another partition is not held; with a lease live, the commit's partitions are read
    table.append(rows(1, date(2024, 6, 22), start=60))
    passed = events(front, table)[0]
    assert (passed["event"], passed["detail"]["partitions"]) == (
        "catalog.commit",
        ["dt=2024-06-22"],
    )
    # the raw answer: 429 with a short Retry-After, which Iceberg's HTTP client retries itself
    _namespace, _name = table.name()
    loaded = rest(front).load_table(table.name())
    with service(front, "job") as api:
        ingest = api.post(
            f"/v1/tables/{lakelock_name(table)}/commit-leases",
            json={"holder": "ingest-1", "ttl_s": 30, "partitions": ["dt=2024-06-23"]},
        ).json()
    loaded.append(
        rows(1, date(2024, 6, 23), start=70),
        snapshot_properties={"lakelock.lease-id": ingest["lease_id"]},
    )
    assert events(front, table)[0]["lease_id"] == ingest["lease_id"]


def _parking(request: Any, tmp_path_factory: Any, wait_s: str) -> Iterator[Any]:
    """A front that parks a held commit for up to `wait_s`."""
    name = f"park-{wait_s}"
    server = start_front(request, tmp_path_factory, name, LAKELOCK_CATALOG_HOLD_WAIT_S=wait_s)
    yield server
    server.stop()


@pytest.fixture(scope="module", params=["sqlite"])
def parking_front(request: Any, tmp_path_factory: Any) -> Iterator[Any]:
    yield from _parking(request, tmp_path_factory, "60")  # 60 s: a bound against a hang here


def test_a_held_commit_is_parked_and_applied_when_the_hold_ends(parking_front):
    """Held, not failed (docs/catalog-front.md §4): the delete waits at the front while the
    maintenance lease lives, and commits once it is released, with nothing for the client to
    retry."""
    front = parking_front
    table = new_table(front, "parked")
    lease = maintenance_lease(front, table, partitions=["dt=2024-06-20"])
    done: dict[str, Any] = {}

    def delete() -> None:
        try:
            table.delete(EqualTo("dt", "2024-06-20"))
            done["ok"] = True
        except Exception as exc:  # reported by the assertion below
            done["error"] = exc

    writer = threading.Thread(target=delete, daemon=True)
    writer.start()
    with service(front, "reader") as api:
        wait_until(lambda: metric(api, "lakelock_parked_long_polls") >= 1, "the delete parked")
    assert writer.is_alive(), done
    with service(front, "job") as api:
        api.delete(
            f"/v1/leases/{lease['lease_id']}",
            params={"holder": lease["holder"], "token": lease["token"]},
        ).raise_for_status()
    writer.join(HANG_GUARD_S)
    assert done == {"ok": True}
    trail = events(front, table)
    committed = trail[0]
    assert (committed["event"], committed["detail"]["foreign"]) == ("catalog.commit", True)
    assert committed["detail"]["deleted-data-files"] >= 1
    # one event for the commit, however often it was tried while parked: how long it waited
    assert committed["detail"]["held_s"] > 0
    assert [e for e in trail if e["event"] == "catalog.refused"] == []


def test_a_parked_commit_whose_client_left_is_refused_once(parking_front):
    """Never applied for a client that is gone, and on the trail once, as a refusal."""
    front = parking_front
    table = new_table(front, "gone")
    maintenance_lease(front, table, partitions=["dt=2024-06-20"])
    tx = table.transaction()
    tx.delete(EqualTo("dt", "2024-06-20"))
    body = rest_body(tx)
    namespace, name = table.name()
    client = httpx.Client(base_url=f"{front.url}/iceberg", headers=auth("job"), timeout=1)
    with client, pytest.raises(httpx.ReadTimeout):  # the client gives up while it is parked
        client.post(f"/v1/namespaces/{namespace}/tables/{name}", json=body)
    refused = wait_until(
        lambda: [e for e in events(front, table) if e["event"] == "catalog.refused"],
        "the refusal of the commit whose client left",
    )
    assert [(e["detail"]["reason"], e["actor"]) for e in refused] == [("held", "job-client")]
    assert refused[0]["detail"]["held_s"] > 0
    assert rest(front).load_table(table.name()).metadata_location == table.metadata_location


@pytest.fixture(scope="module", params=["sqlite"])
def short_park_front(request: Any, tmp_path_factory: Any) -> Iterator[Any]:
    yield from _parking(request, tmp_path_factory, "0.5")


def test_a_hold_that_outlasts_the_park_is_a_429(short_park_front):
    front = short_park_front
    table = new_table(front, "outlasts")
    maintenance_lease(front, table, partitions=["dt=2024-06-20"])
    with service(front, "reader") as api:
        before = metric(api, "lakelock_catalog_refusals_total", reason="held")
    with pytest.raises(RESTError, match="TooManyRequestsException"):
        table.delete(EqualTo("dt", "2024-06-20"))
    trail = events(front, table)
    refused = trail[0]
    assert (refused["event"], refused["detail"]["reason"]) == ("catalog.refused", "held")
    assert refused["detail"]["held_s"] > 0  # parked first
    # tried again at each change of the table while parked, refused once
    assert [e["event"] for e in trail].count("catalog.refused") == 1
    with service(front, "reader") as api:
        assert metric(api, "lakelock_catalog_refusals_total", reason="held") == before + 1


def test_a_foreign_data_commit_into_a_partition_held_by_backpressure_waits_like_a_gated_one(
    front,
):
    """The fence asks what the commit decision asks (rules.holding): held while the table's
    backpressure and maintenance switches are on, let through when either is off."""
    table = new_table(front, "pressed")
    name = lakelock_name(table)
    with service(front, "job") as api:
        claim = api.post(
            f"/v1/tables/{name}/claim", json={"holder": "compactor-1", "ttl_s": 60}
        ).json()
        held = api.post(
            f"/v1/tables/{name}/backpressure",
            json={
                "claim_id": claim["lease_id"],
                "holder": "compactor-1",
                "partitions": ["dt=2024-06-20"],
                "reason": "30 small files, hard bound 24",
            },
        )
        assert held.json()["partitions"] == ["dt=2024-06-20"], held.text
    with pytest.raises(RESTError, match="TooManyRequestsException"):
        table.append(rows(1, date(2024, 6, 20), start=80))
    refused = events(front, table)[0]
    assert (refused["event"], refused["detail"]["reason"]) == ("catalog.refused", "backpressure")
    for off in ({"backpressure": "disabled"}, {"maintenance": "disabled"}):
        with service(front, "operator") as api:
            on = {"backpressure": "enabled", "maintenance": "enabled", "reason": "on"}
            api.put(f"/v1/tables/{name}/switch", json=on).raise_for_status()
            api.put(f"/v1/tables/{name}/switch", json={**off, "reason": "ingest first"})
        table = rest(front).load_table(table.name())
        table.append(rows(1, date(2024, 6, 20), start=90 + len(off)))
        assert events(front, table)[0]["event"] == "catalog.commit", off


def test_the_catalog_answers_in_icebergs_error_shape_and_by_role(front):
    table = new_table(front, "roles")
    namespace, name = table.name()
    with httpx.Client(base_url=f"{front.url}/iceberg", timeout=30) as c:
        missing = c.get(f"/v1/namespaces/{namespace}/tables/nope", headers=auth("reader"))
        assert (
            missing.status_code == 404 and missing.json()["error"]["type"] == "NoSuchTableException"
        )
        no_ns = c.get("/v1/namespaces/nope/tables", headers=auth("reader"))
        assert no_ns.json()["error"]["type"] == "NoSuchNamespaceException"
        assert c.get("/v1/config").status_code == 401
        assert (
            c.head(f"/v1/namespaces/{namespace}/tables/{name}", headers=auth("reader")).status_code
            == 204
        )
        again = c.post("/v1/namespaces", json={"namespace": [namespace]}, headers=auth("job"))
        assert (
            again.status_code == 409 and again.json()["error"]["type"] == "AlreadyExistsException"
        )
        assert (
            c.delete(f"/v1/namespaces/{namespace}/tables/{name}", headers=auth("job")).status_code
            == 403
        )
    with pytest.raises(ForbiddenError):
        rest(front, "reader").load_table(table.name()).append(rows(1, date(2024, 6, 20)))
    rest(front, "operator").drop_table(table.name())
    assert table.name() not in rest(front, "reader").list_tables(namespace)


def test_the_openapi_document_lists_the_catalog_routes_only_where_the_catalog_is_served(
    db_url, tmp_path
):
    from starlette.testclient import TestClient

    from service.server.app import create_app
    from tests.conftest import make_settings

    served = make_settings(db_url, catalog_warehouse=(tmp_path / "wh").as_uri())
    with TestClient(create_app(served), headers=auth("reader")) as client:
        paths = client.get("/openapi.json").json()["paths"]
        assert "/iceberg/v1/namespaces/{namespace}/tables/{table}" in paths
        assert set(paths["/iceberg/v1/namespaces/{namespace}/tables/{table}"]) >= {
            "get",
            "post",
            "delete",
            "head",
        }
        assert client.get("/iceberg/v1/config").json()["endpoints"]
    with TestClient(create_app(make_settings(db_url)), headers=auth("reader")) as client:
        assert not [
            p for p in client.get("/openapi.json").json()["paths"] if p.startswith("/iceberg")
        ]
        assert client.get("/iceberg/v1/config").status_code == 404


def test_a_warehouse_without_a_scheme_stops_start_up_with_what_to_write():
    from service.server.settings import SettingsError, load_settings

    with pytest.raises(SettingsError, match="LAKELOCK_CATALOG_WAREHOUSE: must be a URI"):
        load_settings(auth="off", catalog_warehouse="/data/warehouse")
    with pytest.raises(SettingsError, match="LAKELOCK_CATALOG_NAME"):
        load_settings(auth="off", catalog_warehouse="file:///w", catalog_name="lake-house")


def test_a_foreign_writers_files_move_the_reported_debt_without_a_table_scan(front):
    table = new_table(front, "debt")
    name = lakelock_name(table)
    with service(front, "job") as api:
        reported = {"data_files": 2, "small_files": 2, "delete_files": 0}
        api.put(
            f"/v1/tables/{name}/debt", json={**reported, "partitions_over_target": 0}
        ).raise_for_status()
        table.append(rows(2, date(2024, 6, 20), start=200))  # no lakelock client: foreign
        table.append(rows(2, date(2024, 6, 24), start=300))
        debt = api.get(f"/v1/tables/{name}").json()["debt"]
        assert (debt["data_files"], debt["small_files"], debt["delete_files"]) == (4, 4, 0)
        # copy-on-write: the partition's one file replaced by one, no file more
        replace = rows(2, date(2024, 6, 24), start=400)
        table.overwrite(replace, overwrite_filter=EqualTo("dt", "2024-06-24"))
        debt = api.get(f"/v1/tables/{name}").json()["debt"]
    current = rest(front).load_table(table.name()).current_snapshot().snapshot_id
    assert (debt["data_files"], debt["small_files"], debt["delete_files"]) == (4, 4, 0)
    assert debt["snapshot_id"] == current


def _post_commit(front: Any, table: Any, body: dict[str, Any]) -> httpx.Response:
    namespace, name = table.name()
    with service(front, "job") as api:
        return api.post(f"/iceberg/v1/namespaces/{namespace}/tables/{name}", json=body)


def test_a_rewrite_outside_its_leases_partitions_is_refused_and_one_inside_passes(front):
    table = new_table(front, "scoped")
    table.append(rows(2, date(2024, 6, 20), start=20))  # two files in each partition
    table.append(rows(2, date(2024, 6, 21), start=30))
    table = rest(front).load_table(table.name())
    lease = maintenance_lease(front, table, partitions=["dt=2024-06-20"])
    named = {"lakelock.lease-id": lease["lease_id"], "lakelock.token": str(lease["token"])}
    outside = _post_commit(front, table, rewrite_body(table, date(2024, 6, 21), named))
    assert outside.status_code == 403 and outside.json()["reason"] == "out-of-scope"
    assert "dt=2024-06-21" in outside.json()["detail"]
    inside = _post_commit(front, table, rewrite_body(table, date(2024, 6, 20), named))
    assert inside.status_code == 200, inside.text
    event = events(front, table)[0]
    assert (event["event"], event["detail"]["partitions"]) == ("catalog.commit", ["dt=2024-06-20"])


def test_a_commit_lease_lets_its_writer_through_only_where_it_covers(front):
    table = new_table(front, "ingest_scope")
    maintenance_lease(front, table, partitions=["dt=2024-06-21"])
    with service(front, "job") as api:
        ingest = api.post(
            f"/v1/tables/{lakelock_name(table)}/commit-leases",
            json={"holder": "ingest-1", "ttl_s": 30, "partitions": ["dt=2024-06-20"]},
        ).json()
    named = {"lakelock.lease-id": ingest["lease_id"]}
    table.append(rows(1, date(2024, 6, 20), start=90), snapshot_properties=named)
    assert events(front, table)[0]["detail"]["foreign"] is False
    # outside what its lease covers the writer is a foreign one: a delete in the held
    # partition is held, an append there cannot conflict with the rewrite and passes
    table = rest(front).load_table(table.name())
    with pytest.raises(RESTError, match="TooManyRequestsException"):
        table.delete(EqualTo("dt", "2024-06-21"), snapshot_properties=named)
    table = rest(front).load_table(table.name())
    table.append(rows(1, date(2024, 6, 21), start=80), snapshot_properties=named)
    passed = events(front, table)[0]["detail"]
    assert (passed["foreign"], passed["can_conflict"]) == (True, False)


def test_client_mistakes_are_400s_and_404s_that_say_what_to_fix_and_change_nothing(front):
    table = new_table(front, "mistakes")
    before = metadata_files(front, table)
    bad = replace_commit(front, table, headers={"X-Lakelock-Lease-Id": "not-a-lease"})
    assert bad.status_code == 400 and bad.json()["error"]["type"] == "BadRequestException"
    assert "a UUID" in bad.json()["detail"]
    assert metadata_files(front, table) == before
    with httpx.Client(base_url=f"{front.url}/iceberg", headers=auth("job"), timeout=30) as c:
        dotted = c.post("/v1/namespaces", json={"namespace": ["a.b"]})
        assert dotted.status_code == 400 and "without dots" in dotted.json()["detail"]
        assert c.get("/v1/namespaces", params={"parent": "nope"}).status_code == 404
        namespace, name = table.name()
        staged = c.post(
            f"/v1/namespaces/{namespace}/tables",
            json={
                "name": name,
                "schema": json.loads(SCHEMA.model_dump_json()),
                "stage-create": True,
            },
        )
        assert (
            staged.status_code == 409 and staged.json()["error"]["type"] == "AlreadyExistsException"
        )


def test_a_format_version_the_front_cannot_make_is_refused_with_what_to_do_and_nothing_is_written(
    front,
):
    """The front writes versions 1 to 3, makes version 3 by a create only (pyiceberg, which
    applies a commit's updates, upgrades to version 2 at most, and a staged create's commit is
    an upgrade from the empty table): anything else is the client's to change."""
    table = new_table(front, "v4")
    before = metadata_files(front, table)
    namespace, name = table.name()
    with httpx.Client(base_url=f"{front.url}/iceberg", headers=auth("job"), timeout=30) as c:
        for version, staged, said in (
            ("4", False, "would be version 4"),
            ("3", True, "by a create only"),
            ("two", False, "send 1, 2 or 3"),
        ):
            created = c.post(
                f"/v1/namespaces/{namespace}/tables",
                json={
                    "name": "dv",
                    "schema": json.loads(SCHEMA.model_dump_json()),
                    "properties": {"format-version": version},
                    "stage-create": staged,
                },
            )
            assert created.status_code == 400, created.text
            assert created.json()["error"]["type"] == "BadRequestException"
            assert said in created.json()["detail"], (version, created.text)
        for update, said in (
            ({"action": "upgrade-format-version", "format-version": 3}, "version 2 at most"),
            ({"action": "upgrade-format-version", "format-version": 4}, "would be version 4"),
            (
                {"action": "set-properties", "updates": {"format-version": "3"}},
                "upgrade-format-version",
            ),
        ):
            refused = c.post(
                f"/v1/namespaces/{namespace}/tables/{name}", json={"updates": [update]}
            )
            assert refused.status_code == 400, refused.text
            assert said in refused.json()["detail"], refused.text
    catalog = rest(front)
    assert not catalog.table_exists(f"{namespace}.dv")
    assert not front.store.objects(f"{namespace}/dv")
    assert metadata_files(front, table) == before
    loaded = catalog.load_table(f"{namespace}.{name}")
    assert loaded.metadata.format_version == 2 and "format-version" not in loaded.properties


def test_a_table_of_format_version_3_is_created_and_committed_to_with_its_row_lineage(front):
    """Version 3 (deletion vectors): created through the front with its first row id, which
    Iceberg reads every version 3 table with, and committed to; a snapshot without its row
    count would lose the table's next row id, and is refused."""
    catalog = rest(front)
    catalog.create_namespace_if_not_exists("lake")
    with httpx.Client(base_url=f"{front.url}/iceberg", headers=auth("job"), timeout=30) as c:
        created = c.post(
            "/v1/namespaces/lake/tables",
            json={
                "name": "vectors",
                "schema": json.loads(SCHEMA.model_dump_json()),
                "properties": {"format-version": "3"},
            },
        )
        assert created.status_code == 200, created.text
        assert created.json()["metadata"]["format-version"] == 3
        assert created.json()["metadata"]["next-row-id"] == 0
        table = catalog.load_table("lake.vectors")
        files = metadata_files(front, table)
        path = "/v1/namespaces/lake/tables/vectors"
        snapshot = {
            "snapshot-id": 7,
            "timestamp-ms": 1_700_000_000_000,
            "sequence-number": 1,
            "summary": {"operation": "append"},
            "manifest-list": f"{table.location()}/metadata/snap-7.avro",
            "schema-id": 0,
            "first-row-id": 0,
        }
        refused = c.post(path, json={"updates": [{"action": "add-snapshot", "snapshot": snapshot}]})
        assert refused.status_code == 400, refused.text
        assert "added-rows" in refused.json()["detail"]
        assert metadata_files(front, table) == files
        passed = c.post(
            path,
            json={"updates": [{"action": "set-properties", "updates": {"owner": "lake"}}]},
        )
        assert passed.status_code == 200, passed.text
    written = json.loads(table.io.new_input(passed.json()["metadata-location"]).open().read())
    assert (written["format-version"], written["next-row-id"]) == (3, 0)
    assert written["properties"]["owner"] == "lake"


def test_a_table_of_format_version_3_from_another_catalog_is_read_and_committed_to(front):
    """A JDBC catalog moved behind the front may hold a table of version 3: it is loaded (a
    property only its own clients may see left out, as for any table) and committed to."""
    table = new_table(front, "other_v3")
    namespace, name = table.name()
    document = json.loads(table.io.new_input(table.metadata_location).open().read())
    document["format-version"] = 3
    document["next-row-id"] = 0
    document["properties"]["s3.endpoint"] = "http://127.0.0.1:9"  # never shown to a client
    moved = table.metadata_location.replace(".metadata.json", "-v3.metadata.json")
    with table.io.new_output(moved).create() as out:
        out.write(json.dumps(document).encode())
    engine = sqlalchemy.create_engine(front.db_url)
    with engine.begin() as conn:
        conn.execute(
            sqlalchemy.text(
                "UPDATE iceberg_tables SET metadata_location = :moved "
                "WHERE table_namespace = :ns AND table_name = :name"
            ),
            {"moved": moved, "ns": namespace, "name": name},
        )
    engine.dispose()
    with httpx.Client(base_url=f"{front.url}/iceberg", headers=auth("job"), timeout=30) as c:
        loaded = c.get(f"/v1/namespaces/{namespace}/tables/{name}")
        assert loaded.status_code == 200, loaded.text
        metadata = loaded.json()["metadata"]
        assert metadata["format-version"] == 3 and "s3.endpoint" not in metadata["properties"]
        removed = c.post(
            f"/v1/namespaces/{namespace}/tables/{name}",
            json={"updates": [{"action": "remove-properties", "removals": ["s3.endpoint"]}]},
        )
        assert removed.status_code == 200, removed.text
    written = json.loads(table.io.new_input(removed.json()["metadata-location"]).open().read())
    assert written["format-version"] == 3 and "s3.endpoint" not in written["properties"]


def test_nested_namespaces_are_served_but_lakelock_leases_only_tables_it_can_name(front):
    catalog = rest(front)
    catalog.create_namespace(("lake", "raw"))
    assert ("lake", "raw") in catalog.list_namespaces(("lake",))
    with httpx.Client(base_url=f"{front.url}/iceberg", headers=auth("job"), timeout=30) as c:
        assert c.head("/v1/namespaces/lake%1Fraw").status_code == 204
        assert c.head("/v1/namespaces/lake%1Fnope").status_code == 404
        assert c.head("/v1/namespaces/lake%1Fraw/tables/nope").status_code == 404
        nested = c.post(
            "/v1/namespaces/lake%1Fraw/tables",
            json={"name": "clicks", "schema": json.loads(SCHEMA.model_dump_json())},
        )
    assert nested.status_code == 400
    assert "one namespace level" in nested.json()["detail"]


def test_a_table_named_in_capitals_is_leased_by_its_lower_case_name(front):
    catalog = rest(front)
    catalog.create_namespace("Caps")
    table = catalog.create_table(("Caps", "Events"), SCHEMA, partition_spec=SPEC)
    table.append(rows(2, date(2024, 6, 20)))
    table = catalog.load_table(("Caps", "Events"))
    lease = maintenance_lease(front, table)  # the lease API answers in lower case
    assert lease["table"] == "lakelock.caps.events"
    named = {"lakelock.lease-id": lease["lease_id"], "lakelock.token": str(lease["token"])}
    assert replace_commit(front, table, summary=named).status_code == 200


def test_a_commit_whose_outcome_is_unknown_keeps_its_metadata_file(tmp_path):
    from sqlalchemy.exc import OperationalError

    from service.catalog.front import Front
    from service.catalog.pointers import Pointers
    from service.lock import migrate
    from service.lock.db import make_engine, run_transaction

    url = f"sqlite:///{tmp_path / 'l.db'}"
    migrate.upgrade(url)
    engine = make_engine(url)
    pointers = Pointers(CATALOG, engine, warehouse=(tmp_path / "wh").as_uri())
    lost = {"now": False}

    def transact(fn):
        result = run_transaction(engine, fn)
        if lost["now"]:  # committed, and then the connection went: the client cannot know
            raise OperationalError("COMMIT", {}, Exception("lost connection during commit"))
        return result

    front = Front(pointers, transact=transact, read=lambda fn: run_transaction(engine, fn))
    pointers.create_namespace("db")
    table = pointers.create_table("db.t", SCHEMA, partition_spec=SPEC)
    tx = table.transaction()
    tx.set_properties({"k": "v"})
    lost["now"] = True
    with pytest.raises(OperationalError):
        front.commit(("db", "t"), tx._requirements, tx._updates, principal="p", headers={})
    moved = pointers.load_table("db.t")
    assert moved.metadata_location != table.metadata_location
    assert Path(moved.metadata_location.removeprefix("file://")).exists()
    engine.dispose()


def _due(front: Any, table: Any) -> list[tuple[str, int, int]]:
    with service(front, "job") as api:
        answer = api.get(
            "/v1/due",
            params={"table": lakelock_name(table), "holder": "compactor-1", "wait_s": 0},
        )
    assert answer.status_code == 200, answer.text
    return [(d["partition"], d["data_files"], d["delete_files"]) for d in answer.json()["due"]]


def _counted(front: Any, table: Any) -> dict[str, Any]:
    with service(front, "reader") as api:
        counted: dict[str, Any] = api.get(f"/v1/tables/{lakelock_name(table)}").json()["due"]
    return counted


def test_data_commits_count_their_files_per_partition_and_a_rewrite_compacts_them(front):
    table = new_table(front, "due")  # one data file in each of two partitions
    for start in (20, 30, 40):
        table.append(rows(2, date(2024, 6, 20), start=start))
    assert _due(front, table) == [("dt=2024-06-20", 4, 0)]  # LAKELOCK_DUE_DATA_FILES
    counted = _counted(front, table)
    assert (counted["partitions_counted"], counted["data_files"]) == (2, 5)
    lease = maintenance_lease(front, table, partitions=["dt=2024-06-20"])
    named = {"lakelock.lease-id": lease["lease_id"], "lakelock.token": str(lease["token"])}
    table = rest(front).load_table(table.name())
    rewrite = _post_commit(front, table, rewrite_body(table, date(2024, 6, 20), named))
    assert rewrite.status_code == 200, rewrite.text
    assert _due(front, table) == []
    counted = _counted(front, table)
    assert (counted["partitions_counted"], counted["data_files"]) == (1, 1)
    assert counted["compacted_last_hour"] == 1
    # the compactor's release naming the partition again stores no second sample
    with service(front, "job") as api:
        released = api.post(
            f"/v1/leases/{lease['lease_id']}/release",
            json={"holder": "compactor-1", "token": lease["token"], "compacted": ["dt=2024-06-20"]},
        )
    assert released.status_code == 200, released.text
    assert _counted(front, table)["compacted_last_hour"] == 1


def test_a_commit_that_replaces_a_partitions_data_file_adds_no_file_to_count(front):
    """A copy-on-write commit (here pyiceberg's overwrite of one partition: its data file
    deleted, one written) leaves the partition's file count as it was: counted net, it never
    comes due however often it lands, as the gate's counts have it (docs/design.md §5.1)."""
    table = new_table(front, "due_replaced")  # one data file in each of two partitions
    for start in (20, 30, 40, 50):
        table.overwrite(
            rows(2, date(2024, 6, 20), start=start),
            overwrite_filter=EqualTo("dt", "2024-06-20"),
        )
    assert len(table.inspect.files()) == 2
    assert _due(front, table) == []
    counted = _counted(front, table)
    assert (counted["partitions_counted"], counted["data_files"]) == (2, 2)


def test_a_release_counts_nothing_again_of_a_commit_the_front_counted(front):
    table = new_table(front, "due_gated")
    with service(front, "job") as api:
        ingest = api.post(
            f"/v1/tables/{lakelock_name(table)}/commit-leases",
            json={"holder": "ingest-1", "ttl_s": 30, "partitions": ["dt=2024-06-20"]},
        ).json()
        named = {"lakelock.lease-id": ingest["lease_id"]}
        table.append(rows(1, date(2024, 6, 20), start=90), snapshot_properties=named)
        api.post(
            f"/v1/leases/{ingest['lease_id']}/release",
            json={
                "holder": "ingest-1",
                "written": {"dt=2024-06-20": {"data_files": 1, "delete_files": 0}},
            },
        ).raise_for_status()
    counted = _counted(front, table)
    assert (counted["partitions_counted"], counted["data_files"]) == (2, 3)  # not 4
