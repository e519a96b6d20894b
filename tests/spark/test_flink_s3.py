"""The Flink upsert job (flink_writer) through the catalog front on an S3 warehouse (the
project's S3 server), beside lakelock's compactor: the job reaches S3 with Iceberg's S3FileIO,
its endpoint and region from the front's /v1/config and its keys from the environment; no
commit is refused, the job never restarts, and the table holds the last row of every key, read
by Iceberg's own reader in Spark from the metadata file the front's database points at.
"""

from __future__ import annotations

import time

import pytest

from compactor.report import Outcome
from demo.flink import Compactor, UpsertFeed, rows_of, wait_until
from tests.spark.test_catalog_front import CATALOG, direct, events
from tests.spark.test_flink_writer import (
    WAIT_S,
    compactor_config,
    flink_fixtures,
    land,
    start_writer,
    upserted,
)

pytestmark = [pytest.mark.spark, pytest.mark.flink]

front, lakelock_server, spark = flink_fixtures("flink-s3", s3=True)


def test_a_flink_upsert_job_writes_an_s3_table_through_the_front_beside_the_compactor(
    spark, front, tmp_path, job_client, operator, writers
):
    table = f"{CATALOG}.db.flink_s3"
    feed = UpsertFeed(tmp_path / "landing")
    writer = start_writer(writers, front, tmp_path, table="db.flink_s3", mode="upsert")
    deadline = time.monotonic() + WAIT_S
    wait_until(
        "the table", lambda: spark.catalog.tableExists(table), writer=writer, deadline=deadline
    )
    compactor = Compactor(spark, job_client, compactor_config(table), on_progress=lambda _: None)
    compactor.start()
    try:
        # one file at a time, the next once the table holds the one before: counts, not time
        while feed.files < 6 or len(compactor.runs) < 2:
            assert not compactor.failures, compactor.failures
            assert time.monotonic() < deadline + WAIT_S, "a guard against a hang"
            land(feed, table, upserted(front, spark), writer)
    finally:
        compactor.stop(WAIT_S)
    result = writer.stop()

    assert result["status"] == "CANCELED" and result["restarts"] == 0, result
    assert [e for e in events(operator, table) if e["event"] == "catalog.refused"] == []
    runs = compactor.runs
    assert all(r.outcome == Outcome.COMPACTED for r in runs), [(r.outcome, r.error) for r in runs]
    location = direct(front, table).metadata_location
    assert location.startswith(f"{front.store.uri}/db/flink_s3/metadata/")
    data = [uri for uri in front.store.objects("db/flink_s3/data") if uri.endswith(".parquet")]
    assert data, "the job's files are in the bucket"
    assert rows_of(spark, location) == feed.latest
