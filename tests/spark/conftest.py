"""Spark fixtures: ONE SparkSession per test module, with an Iceberg Hadoop catalog `local` in a
warehouse under the module's temp folder.

    pytestmark = pytest.mark.spark        # in each module

    def test_x(spark, spark_warehouse): ...           # the module's session and warehouse
    start_spark(path, app_name="other")               # for a module that needs its own settings
    local_session(config, app_name="front")           # the same over any CatalogConfig
    table_rows(spark, "local.db.events")              # JSON-shaped rows, comparable with
                                                      # EventGenerator.expected_rows()
    lease_intervals(operator, table, "claim")         # (start, end, process) of each lease
    compactions_under_ingest(spark, client, ingest, compaction, gen, compactions=2)
                                                      # the stream and the compactor at once

The session is stopped at the end of the module (the JVM stays up, so the next module starts a
new context in about a second, with its own catalog settings).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from compactor.config import TableConfig
from compactor.report import Outcome, RunReport
from compactor.run import run_table
from demo.flink_cluster import FlinkCluster
from demo.generate import KEY_FIELDS, EventGenerator, create_events_table
from demo.kafka import LocalKafka
from ingest_gate.job.config import IngestConfig, load_config
from ingest_gate.job.record import BatchRecord
from ingest_gate.job.run import run as run_ingest
from ingest_gate.job.table import read_rows
from jobkit.spark import CatalogConfig, build_session
from service.client import LeaseClient
from tests.support.helpers import wait_parked


def start_spark(warehouse: Path, *, app_name: str = "lakelock-tests", catalog: str = "local"):
    """A local[2] session (local_session) with a Hadoop catalog over `warehouse`."""
    return local_session(
        CatalogConfig(name=catalog, warehouse=str(warehouse)),
        app_name=app_name,
        **{"spark.sql.streaming.forceDeleteTempCheckpointLocation": "true"},
    )


def local_session(catalog: CatalogConfig, *, app_name: str, **extra_conf: str):
    """A local[2] session, small (two shuffle partitions), quiet (errors alone in its log),
    with the Iceberg runtime, Spark's Kafka source, the S3 jars and `catalog`. Every module's
    session carries the Kafka source and the S3 jars: the process's first session starts the
    one JVM of the test run and fixes its driver's classpath, whichever module comes first."""
    session = build_session(
        catalog,
        app_name=app_name,
        master="local[2]",
        jar_sets=("spark-kafka", "spark-s3"),
        extra_conf={
            "spark.sql.shuffle.partitions": "2",
            "spark.default.parallelism": "2",
            **extra_conf,
        },
    )
    session.sparkContext.setLogLevel("ERROR")
    return session


@pytest.fixture(scope="module")
def spark_warehouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("warehouse")


@pytest.fixture(scope="module")
def spark(request: pytest.FixtureRequest, spark_warehouse: Path) -> Iterator[Any]:
    session = start_spark(spark_warehouse, app_name=f"lakelock-{request.module.__name__}")
    yield session
    for query in session.streams.active:
        query.stop()
    session.stop()


@pytest.fixture(scope="session")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKafka]:
    """A broker on loopback (demo.kafka, bin/kafka-local's), one per worker, up until the worker
    ends: the Flink cluster, Flink Kafka and Kafka modules of the JVM unit share it, each test
    on topics named for it alone."""
    with LocalKafka.start(tmp_path_factory.mktemp("kafka")) as broker:
        yield broker


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FlinkCluster]:
    """A Flink session cluster (demo.flink_cluster, bin/flink-cluster's): a JobManager and a
    TaskManager, each a process of its own, one per worker, up until the worker ends. The
    Flink CDC and Flink cluster modules of the JVM unit share it, each test's jobs stopped at
    its end (`writers`); a test that kills a TaskManager starts another."""
    with FlinkCluster.start(tmp_path_factory.mktemp("flink-cluster")) as running:
        yield running


@pytest.fixture
def writers() -> Iterator[list[Any]]:
    """The Flink writers (jobkit.flink.FlinkWriter) a test starts, stopped at its end whatever
    happened."""
    started: list[Any] = []
    yield started
    for writer in started:
        if writer.running():
            writer.stop()


table_rows = read_rows  # the tests' name for it


def snapshots(spark: Any, table: str) -> list[dict[str, Any]]:
    """The table's snapshots, oldest first: snapshot_id, committed_at, operation, summary."""
    rows = spark.sql(
        f"SELECT snapshot_id, committed_at, operation, summary FROM {table}.snapshots "
        "ORDER BY committed_at"
    ).collect()
    return [row.asDict() for row in rows]


def ingest_config(
    spark: Any, tmp_path: Path, server: Any, name: str, format_version: int = 2, **overrides: Any
) -> IngestConfig:
    """An ingest job config for the click-event table `local.db.<name>` (created, as a user
    would, with its DDL, of `format_version`), gated by `server`, its folders under
    `tmp_path`; tiny batches (one file each) so tests see every commit."""
    values = {
        "table": f"local.db.{name}",
        "landing_path": str(tmp_path / "landing"),
        "dead_letter_path": str(tmp_path / "dead-letter"),
        "checkpoint_path": str(tmp_path / "checkpoint"),
        "max_files_per_trigger": 1,
        "trigger_interval_s": 1.0,
        "lakelock_url": server.url,
        "lakelock_token": server.token("job"),
        "holder": f"ingest-test-{name}",
        "lease_ttl_s": 10.0,  # renewed every 3 s: a slow renew on a busy machine loses nothing
        "poll_s": 1.0,
        "max_hold_s": 60.0,
        "key_columns": KEY_FIELDS,
    }
    values.update(overrides)
    config = load_config(overrides=values)
    create_events_table(spark, config.table, format_version=format_version)
    return config


def compactions_under_ingest(
    spark: Any,
    client: LeaseClient,
    ingest: IngestConfig,
    compaction: TableConfig,
    gen: EventGenerator,
    *,
    compactions: int,
    wait_s: float = 800.0,
) -> tuple[list[BatchRecord], list[RunReport]]:
    """The ingest job on `ingest` fed one file ahead of it, and the compactor's run on
    `compaction` after every second batch, until `compactions` runs compacted; then the stream
    takes every file written and stops. Its batch records and the compactor's reports; each
    run compacted or skipped. `wait_s` bounds the whole scenario, so a stuck run fails."""
    landing = Path(ingest.landing_path)
    gen.write_file(landing, 40)
    handle = run_ingest(ingest, spark=spark)
    stop = threading.Event()

    def feed() -> None:
        # a new file whenever the stream is at most one file behind: ingest never stops and
        # never falls behind, however fast this machine runs it (one file per batch)
        while not stop.wait(0.1):
            if len(gen.files) - len(handle.records) < 2:
                gen.write_file(landing, 40)

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    reports: list[RunReport] = []
    deadline = time.monotonic() + wait_s
    try:
        while sum(r.outcome == Outcome.COMPACTED for r in reports) < compactions:
            assert time.monotonic() < deadline, [r.as_dict() for r in reports]
            assert handle.query.isActive, handle.query.exception()
            # let a few batches add small files and deletes between compactions
            batches = len(handle.records)
            while len(handle.records) < batches + 2 and time.monotonic() < deadline:
                time.sleep(0.2)
            report = run_table(spark, client=client, config=compaction)
            assert report.outcome in (Outcome.COMPACTED, Outcome.SKIPPED), report.as_dict()
            reports.append(report)
    finally:
        stop.set()
        feeder.join(wait_s)
    files = len(gen.files)
    while len(handle.records) < files and time.monotonic() < deadline:
        assert handle.query.isActive, handle.query.exception()
        time.sleep(0.2)
    handle.stop()
    return handle.records, reports


def wait_held_at_the_service(server: Any) -> None:
    """The gate's request for a commit lease waits at the service (a long-poll parked there):
    whatever the batch does next, it does after the service answers."""
    with httpx.Client(base_url=server.url, headers=server.headers("reader")) as reader:
        wait_parked(reader, 1)


def lease_intervals(operator: LeaseClient, table: str, kind: str) -> list[tuple]:
    """(start, end, process) of each `kind` lease on `table`, from the audit trail; the
    process is the holder up to its run uid."""
    start: dict[str, tuple[datetime, str]] = {}
    out = []
    for e in reversed(operator.events(table=table, limit=1000)):
        if e["kind"] != kind or not e["lease_id"]:
            continue
        at = datetime.fromisoformat(e["at"])
        if e["event"] == "lease.acquired":
            start[e["lease_id"]] = (at, e["holder"].split("/")[0])
        elif e["event"] in ("lease.released", "lease.expired", "lease.revoked"):
            began, process = start.pop(e["lease_id"])
            out.append((began, at, process))
    assert not start, f"leases never ended: {start}"
    return out
