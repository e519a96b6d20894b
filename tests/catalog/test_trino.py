"""Trino on lakelock's front (demo.trino; docs/catalogs.md, Trino): the seeds' query engine, its
Iceberg connector on the REST catalog with a job token, on a warehouse of local files and on S3.

What a user of Trino would notice: it reads what the jobs wrote (checked against pyiceberg, an
independent reader); its INSERT is a data commit like any writer's; its `optimize` is a rewrite
that names no lease, refused by the front like any foreign rewrite, the table left as it was;
and its DELETE, position deletes against files a compactor is rewriting, is held while the
maintenance lease lives and lands once it ends.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import date
from typing import Any

import pytest
from trino.exceptions import TrinoQueryError

from demo.trino import TrinoServer, front_catalog
from tests.catalog.test_front import (
    events,
    maintenance_lease,
    new_table,
    rest,
    service,
)
from tests.conftest import TOKENS, front_fixture
from tests.support.helpers import metric, wait_until

pytestmark = pytest.mark.slow

# a held commit parks up to 30 s on the front, as in production (not answered 429 at once)
front = front_fixture("trino", ["sqlite", "sqlite-s3"], LAKELOCK_CATALOG_HOLD_WAIT_S="30")


@pytest.fixture(scope="module")
def trino() -> Iterator[TrinoServer]:
    """One Trino for the module: each front's catalog is added to it (`lake`)."""
    with TrinoServer({}, heap="1G") as server:
        yield server


@pytest.fixture(scope="module")
def lake(front: Any, trino: TrinoServer) -> Iterator[str]:
    """The Trino catalog of this module's front (a job token; the S3 server's keys on S3),
    named after its storage, dropped with the front."""
    s3 = None
    if front.store.s3 is not None:
        from demo.s3 import ACCESS_KEY, REGION, SECRET_KEY

        s3 = {
            "endpoint": front.store.s3.endpoint,
            "region": REGION,
            "access-key": ACCESS_KEY,
            "secret-key": SECRET_KEY,
        }
    name = "lake_s3" if s3 else "lake_local"
    trino.create_catalog(name, front_catalog(f"{front.url}/iceberg", TOKENS["job"], s3=s3))
    yield name
    trino.drop_catalog(name)


def _name(lake: str, table: Any) -> str:
    namespace, name = table.name()
    return f"{lake}.{namespace}.{name}"


def _pyiceberg_rows(front: Any, table: Any) -> list[tuple[Any, ...]]:
    read = rest(front, "reader").load_table(table.name()).scan().to_arrow()
    return sorted(zip(*(read.column(c).to_pylist() for c in ("id", "dt", "v")), strict=True))


def test_trino_reads_what_the_jobs_wrote(front, trino, lake):
    table = new_table(front, "trino_read")

    rows = trino.query(f"SELECT id, dt, v FROM {_name(lake, table)} ORDER BY id")

    assert sorted(map(tuple, rows)) == _pyiceberg_rows(front, table)
    assert trino.query(f"SELECT count(*) FROM {_name(lake, table)}") == [[6]]
    assert trino.query(f"SELECT v FROM {_name(lake, table)} WHERE id = 11") == [["v1"]]
    one_day = trino.query(f"SELECT count(*) FROM {_name(lake, table)} WHERE dt = DATE '2024-06-21'")
    assert one_day == [[3]]


def test_an_insert_from_trino_is_a_data_commit_through_the_front(front, trino, lake):
    table = new_table(front, "trino_insert")

    trino.query(f"INSERT INTO {_name(lake, table)} VALUES (100, DATE '2024-06-20', 'from trino')")

    assert (100, date(2024, 6, 20), "from trino") in _pyiceberg_rows(front, table)
    # events come newest first
    newest = next(e for e in events(front, table) if e["event"] == "catalog.commit")
    assert newest["kind"] == "data" and newest["actor"] == "job-client"


def test_optimize_from_trino_is_a_foreign_rewrite_and_refused(front, trino, lake):
    table = new_table(front, "trino_optimize")
    trino.query(f"INSERT INTO {_name(lake, table)} VALUES (100, DATE '2024-06-20', 'x')")
    before = rest(front).load_table(table.name()).metadata.current_snapshot_id

    with pytest.raises(TrinoQueryError, match=r"Forbidden: .*Take a maintenance lease"):
        trino.query(f"ALTER TABLE {_name(lake, table)} EXECUTE optimize")

    assert rest(front).load_table(table.name()).metadata.current_snapshot_id == before
    refusal = events(front, table)[0]
    assert (refusal["event"], refusal["kind"]) == ("catalog.refused", "maintenance")
    assert refusal["detail"]["reason"] == "no-lease"


def test_a_delete_from_trino_is_held_by_a_maintenance_lease_and_lands_once_it_ends(
    front, trino, lake
):
    table = new_table(front, "trino_delete")
    lease = maintenance_lease(front, table, partitions=["dt=2024-06-20"])
    done: dict[str, Any] = {}

    def delete() -> None:
        try:
            trino.query(f"DELETE FROM {_name(lake, table)} WHERE id = 1")
            done["ok"] = True
        except Exception as exc:  # the test asserts on it below
            done["error"] = exc

    deleting = threading.Thread(target=delete)
    deleting.start()
    # counts, not time: the front holds the commit (a parked commit shows in the metric)
    with service(front, "reader") as api:
        wait_until(
            lambda: metric(api, "lakelock_catalog_parked_commits") >= 1, "Trino's DELETE held"
        )
    assert not done
    with service(front, "job") as api:
        ended = api.post(
            f"/v1/leases/{lease['lease_id']}/release",
            json={"holder": "compactor-1", "token": lease["token"]},
        )
    assert ended.status_code == 200, ended.text
    deleting.join(timeout=120)
    assert done == {"ok": True}, done
    # Trino's own read: pyarrow cannot decode the delete file Trino writes (its paths
    # DELTA_LENGTH_BYTE_ARRAY encoded), so pyiceberg cannot be the reader here
    assert trino.query(f"SELECT id FROM {_name(lake, table)} ORDER BY id") == [
        [0],
        [2],
        [10],
        [11],
        [12],
    ]
    newest = next(e for e in events(front, table) if e["event"] == "catalog.commit")
    assert newest["kind"] == "data" and newest["detail"]["held_s"] > 0
