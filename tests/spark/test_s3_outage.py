"""The S3 server stopped in the middle of the ingest job's commits and of a compaction, on a
table behind the catalog front, its checkpoints on `s3a://` too.

What a user would notice: the compaction that meets the outage fails with an error that names
S3, releases its lease and commits nothing; the ingest batch that meets it fails and its query
stops; the service says it is not ready. Once the server is back, the query restarts from its
checkpoint, the next compaction succeeds, and the table holds exactly the generator's rows: no
lease is left held, and no object lies outside the warehouse and the checkpoints' folder.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import httpx
import pytest

from compactor.config import LeaseConfig, PlanConfig, TableConfig
from compactor.report import Outcome
from compactor.run import run_table
from demo.generate import EventGenerator
from demo.s3 import LocalS3
from ingest_gate.job.run import run as run_ingest
from jobkit.spark import error_message
from tests.conftest import Warehouse
from tests.spark.conftest import table_rows
from tests.spark.test_catalog_front import (
    CATALOG,
    front_ingest_config,
    front_session,
    s3a,
    sqlite_front,
)
from tests.support.helpers import HANG_GUARD_S, wait_until

pytestmark = pytest.mark.spark

# what S3's clients try before they give up, kept short: the outage lasts the test
FAST_FAILURE = {
    "spark.hadoop.fs.s3a.attempts.maximum": "1",
    "spark.hadoop.fs.s3a.retry.limit": "1",
    "spark.hadoop.fs.s3a.retry.interval": "100ms",
    "spark.hadoop.fs.s3a.connection.establish.timeout": "2000",
    f"spark.sql.catalog.{CATALOG}.s3.retry.num-retries": "1",
    f"spark.sql.catalog.{CATALOG}.s3.retry.min-wait-ms": "100",
}


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalS3]:
    """A server of this module's own: the test stops it."""
    server = LocalS3.start(tmp_path_factory.mktemp("s3-outage"))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def front(s3: LocalS3, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    server = sqlite_front(
        tmp_path_factory.mktemp("front-outage"), Warehouse(s3.warehouse("wh"), s3)
    )
    yield server
    server.stop()


@pytest.fixture(scope="module")
def lakelock_server(front: Any) -> Any:
    return front


@pytest.fixture(scope="module")
def spark(front: Any) -> Iterator[Any]:
    session = front_session(front, "lakelock-s3-outage", **FAST_FAILURE)
    session.sparkContext.setLogLevel("OFF")  # the outage's stack traces are expected
    yield session
    session.stop()


def restart(s3: LocalS3) -> None:
    """The server again, on its port and folder: every object it held is back."""
    again = LocalS3.start(s3.folder, port=s3.port)
    s3.process, s3.log = again.process, again.log


def compaction(spark: Any, client: Any, table: str) -> TableConfig:
    return TableConfig(
        table,
        lease=LeaseConfig(ttl=timedelta(seconds=30), max_wait=timedelta(seconds=120)),
        plan=PlanConfig(min_small_files=2, min_delete_files=1),
    )


def test_an_outage_during_commits_and_a_compaction_fails_clearly_and_leaves_the_table_exact(
    spark, front, s3, job_client, operator, tmp_path
):
    config = front_ingest_config(
        spark,
        tmp_path,
        front,
        "outage",
        checkpoint_path=s3a(front.store.uri + "-checkpoints", "outage"),
        available_now=True,
    )
    gen = EventGenerator(seed=11, update_ratio=0.3)
    for _ in range(3):
        gen.write_file(config.landing_path, 40)
    assert [r.outcome for r in run_ingest(config, spark=spark).wait(HANG_GUARD_S)] == [
        "committed"
    ] * 3

    # a compaction waits to drain a commit lease, the server stops, then it gets its lease
    blocker = job_client.acquire_commit(config.table, holder="ingest-elsewhere", ttl_s=120)
    reports: list[Any] = []
    run = threading.Thread(
        target=lambda: reports.append(
            run_table(spark, client=job_client, config=compaction(spark, job_client, config.table))
        )
    )
    run.start()
    wait_until(lambda: operator.state(config.table)["intent"], "the compaction's drain")
    s3.stop()
    job_client.release(blocker)
    run.join(HANG_GUARD_S)
    (report,) = reports
    assert report.outcome == Outcome.FAILED, report
    assert any(word in (report.error or "") for word in ("S3", "s3", "Connect", "connect"))

    # the ingest job's next batch meets the same outage: it fails, its query stops
    for _ in range(2):
        gen.write_file(config.landing_path, 40)
    try:
        run_ingest(config, spark=spark).wait(HANG_GUARD_S)
    except Exception as exc:  # what Spark raises, where the query met the outage
        said = error_message(exc)
    else:
        pytest.fail("the ingest job went on with its storage stopped")
    assert any(word in said for word in ("S3", "s3", "Connect", "connect")), said
    with httpx.Client(base_url=front.url) as c:
        ready = c.get("/readyz")
    assert ready.status_code == 503 and front.store.uri in ready.json()["detail"]

    restart(s3)
    with httpx.Client(base_url=front.url) as c:
        wait_until(lambda: c.get("/readyz").status_code == 200, "the service ready again")
    again = run_ingest(config, spark=spark).wait(HANG_GUARD_S)
    assert again and all(r.outcome == "committed" for r in again), again
    # the compactor, as its next ticks would run: this session's S3 client tries a request twice
    # (s3.retry.num-retries 1, FAST_FAILURE, so that the outage fails fast; Iceberg's default 32),
    # so two connections it pooled before the outage can fail the first run after it (a broken
    # pipe or a reset, named in the run's error; once in a CI run), and the run after compacts
    stale = ("Broken pipe", "Connection reset")
    runs = []
    while len(runs) < 2 and Outcome.COMPACTED not in [r.outcome for r in runs]:
        runs.append(
            run_table(spark, client=job_client, config=compaction(spark, job_client, config.table))
        )
    assert runs[-1].outcome == Outcome.COMPACTED, [r.error for r in runs]
    assert all(any(w in (r.error or "") for w in stale) for r in runs[:-1]), [r.error for r in runs]

    assert sorted(table_rows(spark, config.table), key=str) == sorted(gen.expected_rows(), key=str)
    state = operator.state(config.table)
    assert not state["maintenance_leases"] and not state["commit_leases"] and not state["intents"]
    bucket = front.store.uri.removeprefix("s3://").split("/")[0]
    outside = [
        key
        for key in s3.objects("", bucket=bucket)
        if not key.startswith(("wh/", "wh-checkpoints/"))
    ]
    assert outside == []
