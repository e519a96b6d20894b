"""Spark 3.5 with Iceberg's RESTCatalog against lakelock's catalog front, and the jobs run
against it (`type = "rest"`): writes pass, a compaction under its lease passes, one without a
live lease gets 403 and leaves the table as it was (docs/catalog-front.md).

The warehouse is on the project's S3 server (Iceberg's S3FileIO from the AWS bundle; the ingest
job's checkpoints through Hadoop's s3a). What Iceberg wrote is read back with pyiceberg's SQL
catalog straight from the service's database, not through the front.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.catalog.sql import SqlCatalog

from compactor.config import LeaseConfig, PlanConfig, TableConfig
from compactor.plan import Step
from compactor.procedure import ProcedureFailed, run_step
from compactor.procedure_config import (
    DEFAULT_REWRITE_OPTIONS,
    ExpireSnapshotsConfig,
    RemoveOrphanFilesConfig,
    RewriteDataFilesConfig,
)
from compactor.report import Outcome
from compactor.run import run_table, utcnow
from demo.generate import EventGenerator
from ingest_gate.job.config import IngestConfig
from jobkit.spark import CatalogConfig
from tests.conftest import Warehouse, start_server
from tests.spark.conftest import compactions_under_ingest, ingest_config, local_session

pytestmark = pytest.mark.spark

CATALOG = "lakelock"
WAIT_S = 120


def sqlite_front(folder: Path, store: Warehouse | None = None) -> Any:
    """A service with the catalog front on a new SQLite file in `folder`, its warehouse
    `store` (default: `folder/wh`); it carries `db_url`, `store` and `folder` for the test's
    own reads."""
    db_url = f"sqlite:///{folder / 'lakelock.db'}"
    store = store or Warehouse((folder / "wh").as_uri())
    env = store.s3.settings if store.s3 is not None else {}
    server = start_server(db_url, folder, LAKELOCK_CATALOG_WAREHOUSE=store.uri, **env)
    server.db_url = db_url  # type: ignore[attr-defined]
    server.store = store  # type: ignore[attr-defined]
    server.warehouse = store.path  # type: ignore[attr-defined]
    server.folder = folder  # type: ignore[attr-defined]
    return server


@pytest.fixture(scope="module")
def front(tmp_path_factory: pytest.TempPathFactory, s3_server: Any) -> Iterator[Any]:
    """The front on the project's S3 server, where its users' lakes are. The front's part is the
    same on local files, where the Flink modules' fronts are (tests/spark/test_flink_kafka.py,
    test_flink_cdc.py) and tests/catalog/ commit with pyiceberg."""
    folder = tmp_path_factory.mktemp("front")
    server = sqlite_front(folder, Warehouse(s3_server.warehouse(folder.name), s3_server))
    yield server
    server.stop()


def rest_catalog(front: Any) -> CatalogConfig:
    """The jobs' catalog: the front, with S3's endpoint for what Spark writes itself (the
    checkpoints); the tables' S3 settings come from the front's /v1/config."""
    return CatalogConfig(
        name=CATALOG,
        type="rest",
        warehouse=front.store.uri,
        properties={
            "uri": f"{front.url}/iceberg",
            "token": front.token("job"),
            **front.store.client_properties(),
        },
    )


def front_session(front: Any, app_name: str, **extra_conf: str) -> Any:
    """A local[2] session (local_session) whose catalog is `front` (rest_catalog)."""
    return local_session(rest_catalog(front), app_name=app_name, **extra_conf)


@pytest.fixture(scope="module")
def spark(front: Any) -> Iterator[Any]:
    session = front_session(front, "lakelock-catalog-front")
    session.sql(f"CREATE NAMESPACE IF NOT EXISTS {CATALOG}.db")
    yield session
    session.stop()


@pytest.fixture(scope="module")
def lakelock_server(front: Any) -> Any:
    """The front is the module's service: conftest's job_client and operator talk to it."""
    return front


def direct(front: Any, table: str) -> Any:
    """The table as pyiceberg's SQL catalog reads it from the database, without the front."""
    catalog = SqlCatalog(
        CATALOG, uri=front.db_url, warehouse=front.store.uri, **front.store.client_properties()
    )
    return catalog.load_table(table.removeprefix(f"{CATALOG}."))


def ids(table: Any) -> list[tuple[int, str]]:
    return sorted(
        zip(*table.scan().to_arrow().select(["id", "v"]).to_pydict().values(), strict=True)
    )


def small_files_table(spark: Any, name: str, commits: int = 6) -> str:
    table = f"{CATALOG}.db.{name}"
    spark.sql(
        f"""CREATE TABLE {table} (id BIGINT, dt DATE, v STRING) USING iceberg
        PARTITIONED BY (dt)
        TBLPROPERTIES ('format-version' = '2', 'write.merge.mode' = 'merge-on-read',
                       'write.update.mode' = 'merge-on-read', 'write.delete.mode' = 'merge-on-read',
                       'write.distribution-mode' = 'none')"""
    )
    for i in range(commits):
        spark.sql(
            f"""INSERT INTO {table} SELECT id, date_add(DATE '2024-06-20', CAST(id % 2 AS INT)),
            'v' || id FROM range({i * 40}, {(i + 1) * 40}, 1, 2)"""
        )
    return table


def s3a(uri: str, path: str) -> str:
    """`path` in the folder `uri` names, as Hadoop's S3 file system names it."""
    return f"s3a://{uri.split('://', 1)[1]}/{path}"


def front_ingest_config(
    spark: Any, tmp_path: Path, front: Any, name: str, **overrides: Any
) -> IngestConfig:
    """tests.spark.conftest.ingest_config for the table `lakelock.db.<name>` through `front`
    (rest_catalog); on S3, the query's checkpoints there too (Hadoop's s3a)."""
    checkpoints = (
        {"checkpoint_path": s3a(front.store.uri, f"checkpoints/{name}")} if front.store.s3 else {}
    )
    catalog = {
        "name": CATALOG,
        "type": "rest",
        "warehouse": front.store.uri,
        "properties": rest_catalog(front).properties,
    }
    return ingest_config(
        spark,
        tmp_path,
        front,
        name,
        **{"table": f"{CATALOG}.db.{name}", "catalog": catalog, **checkpoints, **overrides},
    )


def data_files(front: Any, table: str) -> set[str]:
    found = front.store.objects("/".join([*table.split(".")[1:], "data"]))
    return {uri for uri in found if uri.endswith(".parquet")}


def events(operator: Any, table: str) -> list[dict[str, Any]]:
    return [e for e in operator.events(table=table, limit=500) if e["event"].startswith("catalog.")]


def test_spark_creates_writes_merges_and_ctas_through_the_front(spark, front, operator):
    table = small_files_table(spark, "writes", commits=2)
    spark.sql(
        f"""MERGE INTO {table} t USING (SELECT * FROM VALUES (1L, DATE '2024-06-21', 'new'),
        (2L, DATE '2024-06-20', 'gone'), (999L, DATE '2024-06-20', 'ins') AS x(id, dt, v)) s
        ON t.id = s.id
        WHEN MATCHED AND s.v = 'gone' THEN DELETE
        WHEN MATCHED THEN UPDATE SET v = s.v
        WHEN NOT MATCHED THEN INSERT *"""
    )
    spark.sql(f"CREATE TABLE {CATALOG}.db.copied USING iceberg AS SELECT * FROM {table}")
    expected = sorted((r.id, r.v) for r in spark.table(table).select("id", "v").collect())
    assert len(expected) == 80 and (1, "new") in expected and (999, "ins") in expected
    assert ids(direct(front, table)) == expected
    assert ids(direct(front, f"{CATALOG}.db.copied")) == expected  # staged create, then commit
    seen = events(operator, table)
    assert [e["detail"]["operations"] for e in reversed(seen)] == [
        ["append"],
        ["append"],
        ["overwrite"],
    ]
    assert all(e["kind"] == "data" and e["actor"] == "job-client" for e in seen)


def test_the_compactor_runs_through_the_front_its_lease_and_claim_named(
    spark, front, operator, job_client
):
    table = small_files_table(spark, "compacted")
    # merge-on-read deletes: position delete files for the run to rewrite away too
    spark.sql(f"DELETE FROM {table} WHERE id % 7 = 0")
    assert spark.sql(f"SELECT count(*) FROM {table}.delete_files").first()[0] >= 1
    before = ids(direct(front, table))
    config = replace(
        TableConfig(table, lease=LeaseConfig(ttl=timedelta(seconds=30))),
        expire_snapshots=ExpireSnapshotsConfig(retain_last=5),
        remove_orphan_files=RemoveOrphanFilesConfig(enabled=True),
    )
    # a file no snapshot names, as a failed write leaves one (listed by Hadoop's file system:
    # s3a on S3)
    orphan = f"{direct(front, table).location()}/data/orphan-of-a-failed-write.parquet"
    with direct(front, table).io.new_output(orphan).create() as out:
        out.write(b"PAR1")
    # six days on: every snapshot is past the 24 h floor, so the run expires all but five,
    # and every file no snapshot names is older than the three days orphans are given
    report = run_table(
        spark, client=job_client, config=config, now=lambda: utcnow() + timedelta(days=6)
    )
    assert report.outcome == Outcome.COMPACTED, report.error
    procedures = {s["procedure"]: s for s in report.steps}
    assert procedures["expire_snapshots"]["output"]["expired_snapshots"] >= 1
    assert procedures["rewrite_position_delete_files"]["output"]["rewritten_delete_files"] >= 1
    assert procedures["remove_orphan_files"]["output"]["orphan_files"] >= 1
    assert orphan not in front.store.objects(direct(front, table).location())
    assert spark.sql(f"SELECT count(*) FROM {table}.delete_files").first()[0] == 0
    after = direct(front, table)
    assert ids(after) == before
    assert after.current_snapshot().summary.operation.value == "replace"
    seen = events(operator, table)
    replaced = [e for e in seen if "replace" in e["detail"]["operations"]]
    assert replaced and all(e["lease_id"] == report.lease_id for e in replaced)
    assert all(e["token"] == report.token for e in replaced)
    removed = [e for e in seen if e["detail"]["operations"] == ["remove-snapshots"]]
    assert len(removed) == 1 and removed[0]["event"] == "catalog.commit"
    claims = [e for e in operator.events(table=table, limit=500) if e["kind"] == "claim"]
    assert removed[0]["lease_id"] in {e["lease_id"] for e in claims}  # the run's own claim


def _rewrite(spark: Any, table: str, properties: dict[str, str]) -> None:
    step = Step("rewrite_data_files", "small files", options={"min-input-files": "2"})
    run_step(spark, table=table, step=step, properties=properties)


def test_a_rewrite_without_a_live_lease_is_refused_and_the_table_is_unchanged(
    spark, front, job_client, operator
):
    table = small_files_table(spark, "fenced")
    snapshot = direct(front, table).current_snapshot().snapshot_id
    files = data_files(front, table)

    def unchanged() -> None:
        assert direct(front, table).current_snapshot().snapshot_id == snapshot
        assert data_files(front, table) == files  # Spark deleted what it had written

    with pytest.raises(Exception, match=r"ForbiddenException.*no-lease"):
        spark.sql(f"CALL {CATALOG}.system.rewrite_data_files(table => 'db.fenced')").collect()
    unchanged()

    lease = job_client.acquire_maintenance(table, holder="paused-compactor", ttl_s=60)
    named = {"lakelock.lease-id": lease.lease_id, "lakelock.token": str(lease.token)}
    operator.revoke(lease.lease_id, reason="the compactor stopped renewing")
    with pytest.raises(ProcedureFailed, match="revoked"):
        _rewrite(spark, table, named)
    unchanged()

    lease = job_client.acquire_maintenance(table, holder="compactor", ttl_s=60)
    named = {"lakelock.lease-id": lease.lease_id, "lakelock.token": str(lease.token)}
    operator.set_switch(table, maintenance="disabled", reason="incident 7")
    with pytest.raises(ProcedureFailed, match="maintenance-off"):
        _rewrite(spark, table, named)
    unchanged()
    operator.set_switch(table, maintenance="enabled", reason="incident 7 over")
    _rewrite(spark, table, named)
    assert direct(front, table).current_snapshot().summary.operation.value == "replace"
    refused = [
        e["detail"]["reason"] for e in events(operator, table) if e["event"] == "catalog.refused"
    ]
    assert refused == ["maintenance-off", "revoked", "no-lease"]


def test_a_version_3_table_takes_the_stream_and_its_compactions_through_the_front(
    spark, front, operator, job_client, tmp_path
):
    """Deletion vectors through the front: the ingest job upserts into a table of format
    version 3 (a vector per data file, replaced by each MERGE that deletes from it) while the
    compactor rewrites it under its lease; no batch fails, no commit is refused, and an
    independent reader sees every key's last row. (The ingest job on a version 2 table through
    the front is the S3 demo's, tests/spark/test_demo.py; straight to a Hadoop table, beside the
    compactor, the binlog test's, tests/spark/test_binlog_cdc.py.)"""
    ingest = front_ingest_config(
        spark,
        tmp_path,
        front,
        "vectors",
        format_version=3,
        trigger_interval_s=0.5,
        poll_s=0.5,
        max_hold_s=120.0,
        policy="fail",
    )
    compaction = TableConfig(
        ingest.table,
        lease=LeaseConfig(ttl=timedelta(seconds=10), max_wait=timedelta(seconds=60)),
        plan=PlanConfig(min_small_files=2, min_delete_files=1),
        rewrite_data_files=RewriteDataFilesConfig(
            options={**DEFAULT_REWRITE_OPTIONS, "min-input-files": "2"}
        ),
    )
    gen = EventGenerator(seed=13, update_ratio=0.4, duplicate_ratio=0.1, late_update_ratio=0.1)
    records, reports = compactions_under_ingest(
        spark, job_client, ingest, compaction, gen, compactions=2, wait_s=WAIT_S * 4
    )

    assert {r.outcome for r in records} == {"committed"}, [r.as_dict() for r in records]
    assert len(records) == len(gen.files)
    compacted = [r for r in reports if r.outcome == Outcome.COMPACTED]
    assert sum(r.totals().get("rewritten_data_files", 0) for r in compacted) > 0
    tokens = [r.token for r in compacted]  # each run fenced by a newer token
    assert tokens == sorted(tokens) and len(set(tokens)) == len(compacted) == 2
    seen = events(operator, ingest.table)
    assert not [e for e in seen if e["event"] == "catalog.refused"]
    # each MERGE went through the front under the job's commit lease, not as a foreign commit
    merges = [e for e in seen if e["event"] == "catalog.commit" and e["kind"] == "data"]
    assert len(merges) == len(records)
    assert all(e["lease_id"] and e["detail"]["foreign"] is False for e in merges)
    vectors = spark.sql(
        f"SELECT count(*) FROM {ingest.table}.all_delete_files WHERE file_format = 'PUFFIN'"
    ).first()[0]
    assert vectors > 0  # the MERGEs wrote deletion vectors, not position delete files
    read = direct(front, ingest.table)
    assert read.metadata.format_version == 3
    key = ("event_id", "dt", "hr", "amount")
    rows = sorted(tuple(str(row[k]) for k in key) for row in read.scan().to_arrow().to_pylist())
    assert rows == sorted(tuple(str(row[k]) for k in key) for row in gen.expected_rows())


def test_deletion_vectors_sharing_a_file_are_counted_one_by_one(spark, front, job_client):
    """Iceberg writes the deletion vectors of one task into one Puffin file, each a manifest
    entry of its own (the same path, another offset). A commit that replaces one of them keeps
    the others as carried entries: a delete that replaces one is an ingest commit still (a
    foreign one here, which passes), and a rewrite of one partition under a lease scoped to
    it stays in scope."""
    table = f"{CATALOG}.db.shared_vectors"
    spark.sql(
        f"""CREATE TABLE {table} (id BIGINT, dt DATE, v STRING) USING iceberg
        PARTITIONED BY (dt)
        TBLPROPERTIES ('format-version' = '3', 'write.delete.mode' = 'merge-on-read',
                       'write.distribution-mode' = 'none',
                       'write.delete.distribution-mode' = 'none')"""
    )
    for _ in range(2):  # two data files in each of two days
        spark.sql(
            f"""INSERT INTO {table} SELECT id, date_add(DATE '2024-06-20', CAST(id % 2 AS INT)),
            'v' || id FROM range(0, 40, 1, 1)"""
        )
    spark.sql(f"DELETE FROM {table} WHERE id IN (2, 3)")  # a vector a data file, one task
    shared = spark.sql(
        f"""SELECT file_path, count(DISTINCT partition.dt) AS days
        FROM {table}.delete_files GROUP BY file_path"""
    ).collect()
    assert max(row.days for row in shared) == 2, shared  # both days' vectors in one file
    spark.sql(f"DELETE FROM {table} WHERE id = 4")  # the first day's vector replaced only
    day = "dt=2024-06-20"
    lease = job_client.acquire_maintenance(table, holder="compactor", ttl_s=60, partitions=[day])
    step = Step(
        "rewrite_data_files",
        "small files",
        options={"min-input-files": "2"},
        where="dt = DATE '2024-06-20'",
    )
    run_step(
        spark,
        table=table,
        step=step,
        properties={"lakelock.lease-id": lease.lease_id, "lakelock.token": str(lease.token)},
    )
    job_client.release(lease)
    read = direct(front, table)
    assert read.current_snapshot().summary.operation.value == "replace"
    rows = ids(read)
    assert len(rows) == 80 - 6 and not {2, 3, 4} & {i for i, _ in rows}
