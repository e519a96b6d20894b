"""`lakelock audit` over a real Iceberg table and a real service: a forged commit is caught."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from ingest_gate.job.snapshots import batch_properties, with_commit_properties
from service.client import LeaseClient
from service.ops import cli
from service.ops.iceberg_audit import metadata_file, read_snapshots

pytestmark = pytest.mark.spark

TABLE = "local.db.audited"


def _audit(server, warehouse):
    args = ["--url", server.url, "--token", server.token("reader")]
    args += ["audit", TABLE, "--warehouse", str(warehouse), "--json"]
    return CliRunner().invoke(cli.app, args)


def _insert(spark, lease_id: str | None, batch_id: int, values: str) -> None:
    props = batch_properties(query_id="q-audit", batch_id=batch_id, lease_id=lease_id)
    with_commit_properties(spark, props, lambda: spark.sql(f"INSERT INTO {TABLE} VALUES {values}"))


def test_a_commit_outside_any_lease_is_caught(spark, spark_warehouse, lakelock_server):
    spark.sql(
        f"CREATE TABLE {TABLE} (id BIGINT, dt STRING, hr INT) USING iceberg "
        "PARTITIONED BY (dt, hr) TBLPROPERTIES ('format-version'='2')"
    )
    job = LeaseClient(lakelock_server.url, token=lakelock_server.token("job"))
    lease = job.acquire_commit(TABLE, holder="ingest-audit", ttl_s=60)
    _insert(spark, lease.lease_id, 0, "(1, '2024-06-20', 13), (2, '2024-06-21', 1)")
    job.release(lease)

    clean = _audit(lakelock_server, spark_warehouse)
    assert clean.exit_code == 0, clean.output
    assert json.loads(clean.stdout)["verdict"] == "clean"
    snapshots = read_snapshots(metadata_file(spark_warehouse, TABLE))
    assert snapshots[0].partitions == {"dt=2024-06-20/hr=13", "dt=2024-06-21/hr=1"}

    # forged: a writer reuses the ended lease's id, and one takes no lease at all
    _insert(spark, lease.lease_id, 1, "(3, '2024-06-20', 13)")
    _insert(spark, None, 2, "(4, '2024-06-20', 13)")
    forged = [s.snapshot_id for s in read_snapshots(metadata_file(spark_warehouse, TABLE))[1:]]
    caught = _audit(lakelock_server, spark_warehouse)
    assert caught.exit_code == 1, caught.output
    report = json.loads(caught.stdout)
    assert report["verdict"] == "violations"
    assert [v["snapshot_id"] for v in report["violations"]] == forged
    assert "outside its lease" in report["violations"][0]["problems"][0]
    assert "outside any lease" in report["violations"][1]["problems"][0]
