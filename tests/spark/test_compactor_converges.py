"""A run leaves the table healthy: the next plan says skip, and later ticks take no lease.

On the real Iceberg 1.9.2 runtime and a real lakelock service: dangling position deletes,
equality deletes (written as Flink's upsert mode writes them, through Iceberg's Java API) and
a run whose steps change nothing.
"""

from __future__ import annotations

import json
import threading
from dataclasses import replace
from datetime import UTC, datetime

import pytest
from typer.testing import CliRunner

from compactor.config import PlanConfig
from compactor.job import run_scheduled
from compactor.plan import Step, plan
from compactor.procedure import run_step
from compactor.procedure_config import RewriteDataFilesConfig
from compactor.report import EXIT_CODES, Outcome, publish
from compactor.run import run_table
from compactor.stats import collect_stats
from ingest_gate.job.snapshots import batch_properties, with_commit_properties
from service.client import LeaseClient
from service.ops import cli
from service.ops.iceberg_audit import metadata_file, read_snapshots
from tests.spark.test_compactor_run import make_table, rows, table_config

pytestmark = pytest.mark.spark


def maintenance_leases(operator: LeaseClient, table: str) -> int:
    """Maintenance leases granted on `table`, from the service's audit trail."""
    return sum(
        1
        for e in operator.events(table=table, limit=500)
        if e["kind"] == "maintenance" and e["event"] == "lease.acquired"
    )


def stats_of(spark, config):
    return collect_stats(spark, table=config.name, small_file_bytes=config.small_file_bytes)


def now() -> datetime:
    return datetime.now(UTC)


def tick(spark, job_client, config, *, ticks: int) -> int:
    """`ticks` scheduled ticks of the compactor over the table; the ticks run."""
    return run_scheduled(
        spark,
        client=job_client,
        tables=[config],
        every_s=0.2,
        stop=threading.Event(),
        ticks=ticks,
    )


def test_one_run_drops_the_position_deletes_and_later_ticks_take_no_lease(
    spark, job_client, operator
):
    # 6 partitions with 4 delete files each: fewer than rewrite_position_delete_files's
    # min-input-files, as on the demo's table
    table = make_table(spark, "converges", days=6, commits=1)
    config = table_config(table)
    before_rows = rows(spark, table)
    assert stats_of(spark, config).totals().position_delete_files == 24

    report = run_table(spark, client=job_client, config=config)
    publish(report, client=job_client)

    assert report.outcome == Outcome.COMPACTED, report.error
    assert report.after["delete_files"] == 0
    assert report.after["dangling_delete_files"] == 0
    assert rows(spark, table) == before_rows
    after = plan(stats_of(spark, config), config, now())
    assert not after.run, after.describe()

    assert tick(spark, job_client, config, ticks=3) == 3

    # its summary shows no debt: no plan, no run, no lease at any tick
    outcomes = [r["outcome"] for r in job_client.runs(table, limit=100)]
    assert outcomes == ["compacted"]
    assert maintenance_leases(operator, table) == 1


def test_dangling_deletes_are_counted_apart_and_one_run_drops_them(spark, job_client, operator):
    table = make_table(spark, "dangling", days=6, commits=1)
    config = table_config(table)
    # a data rewrite alone applies the deletes and leaves every delete file behind
    run_step(
        spark,
        table=table,
        step=Step(
            "rewrite_data_files",
            "test",
            options={"delete-file-threshold": "1", "min-input-files": "2"},
        ),
        properties={},
    )
    left = stats_of(spark, config).totals()
    assert (left.position_delete_files, left.dangling_position_delete_files) == (0, 24)

    report = run_table(spark, client=job_client, config=config)

    assert report.outcome == Outcome.COMPACTED, report.error
    assert any("24 dangling delete files" in r for r in report.plan_reasons)
    assert report.totals()["rewritten_delete_files"] == 24
    assert report.after["dangling_delete_files"] == 0
    assert not plan(stats_of(spark, config), config, now()).run


def test_a_run_whose_steps_change_nothing_reports_no_change(spark, job_client):
    table = make_table(spark, "nothing", days=1, commits=1, deletes=False)
    config = table_config(table)
    # thresholds that plan a run on any small file: after the first run (4 files -> 1) binpack
    # has nothing left to combine
    eager = replace(
        config,
        plan=PlanConfig(min_small_files=1),
        rewrite_data_files=RewriteDataFilesConfig(
            options={**config.rewrite_data_files.options, "min-input-files": "1"}
        ),
    )
    assert run_table(spark, client=job_client, config=eager).outcome == Outcome.COMPACTED
    snapshot = stats_of(spark, config).current_snapshot_id

    report = run_table(spark, client=job_client, config=eager)
    publish(report, client=job_client)

    assert report.outcome == Outcome.NO_CHANGE, report.as_dict()
    assert EXIT_CODES[report.outcome] == 0
    assert report.snapshot_after == snapshot
    assert job_client.runs(table)[0]["outcome"] == "no_change"


# -- equality deletes ------------------------------------------------------------------------


def write_equality_deletes(
    spark, table: str, *, part: int, keys: list[int], properties: dict[str, str] | None = None
) -> None:
    """Commit one equality-delete file on `event_id` into partition `part = <part>`, as Flink's
    upsert mode does, through Iceberg's Java API in the driver; `properties` go into the
    snapshot summary."""
    jvm = spark._jvm
    iceberg = jvm.org.apache.iceberg
    jtable = iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, table)
    schema, spec = jtable.schema(), jtable.spec()
    field_ids = spark.sparkContext._gateway.new_array(jvm.int, 1)
    field_ids[0] = schema.findField("event_id").fieldId()
    key_schema = schema.select(["event_id"])
    factory = iceberg.data.GenericAppenderFactory(schema, spec, field_ids, key_schema, None)
    partition = iceberg.data.GenericRecord.create(spec.partitionType())
    partition.set(0, part)
    files = iceberg.io.OutputFileFactory.builderFor(jtable, 1, 1).format(iceberg.FileFormat.PARQUET)
    out = files.build().newOutputFile(spec, partition)
    writer = factory.newEqDeleteWriter(out, iceberg.FileFormat.PARQUET, partition)
    for key in keys:
        record = iceberg.data.GenericRecord.create(key_schema)
        record.setField("event_id", key)
        writer.write(record)
    writer.close()
    delta = jtable.newRowDelta().addDeletes(writer.toDeleteFile())
    for key, value in (properties or {}).items():
        delta = delta.set(key, value)
    delta.commit()


def read_with_pyiceberg(spark, table: str) -> list[tuple]:
    """The table's rows as pyiceberg reads them from the current metadata file."""
    from pyiceberg.table import StaticTable

    metadata = spark.sql(
        f"SELECT file FROM {table}.metadata_log_entries ORDER BY timestamp DESC LIMIT 1"
    ).first()[0]
    arrow = StaticTable.from_metadata(metadata).scan().to_arrow()
    return sorted(tuple(r.values()) for r in arrow.to_pylist())


def test_equality_deletes_are_applied_dropped_and_the_table_then_planned_healthy(spark, job_client):
    table = "local.db.upserted"
    spark.sql(
        f"""
        CREATE TABLE {table} (event_id INT, part INT, payload STRING)
        USING iceberg PARTITIONED BY (part)
        TBLPROPERTIES ('format-version' = '2', 'write.upsert.enabled' = 'true',
                       'write.distribution-mode' = 'none')
        """
    )
    for i in range(3):
        spark.sql(
            f"""
            INSERT INTO {table} SELECT CAST(id AS INT), CAST(id % 2 AS INT), concat('v', id)
            FROM range({i * 100}, {(i + 1) * 100}, 1, 2)
            """
        )
    deleted = {0, 2, 4, 101, 103}
    write_equality_deletes(spark, table, part=0, keys=[0, 2, 4])
    write_equality_deletes(spark, table, part=1, keys=[101, 103])
    expected = sorted((i, i % 2, f"v{i}") for i in range(300) if i not in deleted)
    assert rows(spark, table) == expected  # Spark applies them on read
    # 12 small data files are below min_small_files: only the deletes make the run pay off
    config = table_config(table, plan=PlanConfig(min_small_files=100, min_delete_files=2))
    before = plan(stats_of(spark, config), config, now())
    assert before.run and before.scope.equality_delete_files == 2, before.describe()

    report = run_table(spark, client=job_client, config=config)

    assert report.outcome == Outcome.COMPACTED, report.error
    # Iceberg 1.9.2 counts both in the steps' outputs; 1.11's rewrite commit drops the older
    # one (older than every live data file) without counting it, the step the other
    assert report.totals()["removed_delete_files"] in (1, 2)
    assert report.before["equality_delete_files"] == 2
    assert report.after["equality_delete_files"] == 0
    assert report.after["dangling_delete_files"] == 0
    assert read_with_pyiceberg(spark, table) == expected
    assert not plan(stats_of(spark, config), config, now()).run


def test_dangling_deletes_are_removed_in_the_steps_partitions_only(spark):
    """The follower's step: Iceberg's action reads the whole table, and would remove delete
    files of partitions its lease does not cover; limited to partitions, it removes theirs."""
    table = "local.db.dangling_scoped"
    spark.sql(
        f"""
        CREATE TABLE {table} (event_id INT, part INT, payload STRING)
        USING iceberg PARTITIONED BY (part)
        TBLPROPERTIES ('format-version' = '2', 'write.distribution-mode' = 'none')
        """
    )
    # a partition no step touches, written first: its data file, the oldest live, keeps the
    # table's delete files from being dropped by the rewrite's commit (Iceberg 1.11 drops those
    # older than every live data file with any commit)
    spark.sql(f"INSERT INTO {table} VALUES (-1, 2, 'old')")
    spark.sql(
        f"INSERT INTO {table} SELECT CAST(id AS INT), CAST(id % 2 AS INT), 'v' FROM range(40)"
    )
    write_equality_deletes(spark, table, part=0, keys=[0, 2])
    write_equality_deletes(spark, table, part=1, keys=[1, 3])
    spark.sql(f"INSERT INTO {table} VALUES (100, 0, 'late'), (101, 1, 'late')")
    expected = rows(spark, table)
    both = ({"part": 0}, {"part": 1})
    # the rewrite applies both partitions' deletes; its files keep its starting sequence number,
    # which is the deletes' or later: they apply to nothing now, and stay
    options = {"delete-file-threshold": "1", "min-input-files": "1", "rewrite-all": "true"}
    rewrite = Step("rewrite_data_files", "test", options=options, partition_values=both)
    run_step(spark, table=table, step=rewrite, properties={})

    def deletes_by_part() -> dict[int, int]:
        counted = spark.sql(
            f"SELECT partition.part AS part, count(*) AS n FROM {table}.delete_files GROUP BY 1"
        ).collect()
        return {r["part"]: r["n"] for r in counted}

    assert deletes_by_part() == {0: 1, 1: 1}
    drop = Step(
        "remove_dangling_deletes", "test", partitions=("part=1",), partition_values=both[1:]
    )
    out = run_step(spark, table=table, step=drop, properties={"lakelock.run-uid": "scoped"})

    assert out == {"removed_delete_files": 1}
    assert deletes_by_part() == {0: 1}
    # Spark's reading only: pyiceberg reads no table that holds an equality delete file
    assert rows(spark, table) == expected
    summary = spark.sql(
        f"SELECT summary FROM {table}.snapshots ORDER BY committed_at DESC LIMIT 1"
    ).first()["summary"]
    assert summary["lakelock.run-uid"] == "scoped"


# -- every compactor commit carries its lease --------------------------------------------------


def test_every_commit_of_a_run_that_leaves_dangling_deletes_carries_its_lease(
    spark, spark_warehouse, job_client, lakelock_server
):
    """The regression: Iceberg's `remove-dangling-deletes` commit carried no lakelock property,
    so `lakelock audit` flagged the compactor's own run (the demo's check failed)."""
    table = "local.db.labelled"
    spark.sql(
        f"""
        CREATE TABLE {table} (event_id INT, part INT, payload STRING)
        USING iceberg PARTITIONED BY (part)
        TBLPROPERTIES ('format-version' = '2', 'write.distribution-mode' = 'none',
                       'write.merge.mode' = 'merge-on-read',
                       'write.delete.mode' = 'merge-on-read',
                       'write.delete.granularity' = 'file')
        """
    )
    # the writes a gated ingest job would make, each under a commit lease of its own
    statements = [
        *(
            f"INSERT INTO {table} SELECT CAST(id AS INT), CAST(id % 3 AS INT), concat('v', id) "
            f"FROM range({i * 90}, {(i + 1) * 90}, 1, 2)"
            for i in range(3)
        ),
        # position deletes (fewer than 5 per partition), then a commit after them: the rewrite
        # starts from a later snapshot, so the deletes it applies are left dangling
        f"DELETE FROM {table} WHERE event_id % 10 = 0",
        f"INSERT INTO {table} VALUES (1000, 0, 'late'), (1001, 1, 'late')",
        None,  # equality deletes, as Flink's upsert mode writes them
    ]
    for batch_id, statement in enumerate(statements):
        lease = job_client.acquire_commit(table, holder="ingest-test", ttl_s=60)
        props = batch_properties(query_id="q-labelled", batch_id=batch_id, lease_id=lease.lease_id)
        if statement is None:
            write_equality_deletes(spark, table, part=2, keys=[2, 5], properties=props)
        else:
            with_commit_properties(spark, props, lambda s=statement: spark.sql(s))
        job_client.release(lease)
    config = table_config(table)
    before = stats_of(spark, config).totals()
    assert before.position_delete_files and before.equality_delete_files == 1
    expected = rows(spark, table)

    report = run_table(spark, client=job_client, config=config)
    publish(report, client=job_client)

    assert report.outcome == Outcome.COMPACTED, report.error
    ran = [s["procedure"] for s in report.steps]
    assert "remove_dangling_deletes" in ran, ran
    assert report.after["delete_files"] == report.after["dangling_delete_files"] == 0
    assert read_with_pyiceberg(spark, table) == expected

    audit = CliRunner().invoke(
        cli.app,
        [
            "--url",
            lakelock_server.url,
            "--token",
            lakelock_server.token("reader"),
            "audit",
            table,
            "--warehouse",
            str(spark_warehouse),
            "--json",
        ],
    )
    assert audit.exit_code == 0, audit.output
    assert json.loads(audit.stdout)["verdict"] == "clean"
    replaced = [
        s for s in read_snapshots(metadata_file(spark_warehouse, table)) if s.operation == "replace"
    ]
    assert len(replaced) >= 2  # the rewrite, and the dangling deletes' own commit
    leases = {g["lease_id"]: g["token"] for g in report.groups if "lease_id" in g}
    for snap in replaced:
        assert snap.summary["lakelock.lease-id"] in leases, snap
        assert snap.summary["lakelock.token"] == str(leases[snap.summary["lakelock.lease-id"]])
        assert snap.summary["lakelock.run-uid"] == report.run_uid
