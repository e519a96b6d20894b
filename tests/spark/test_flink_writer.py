"""A Flink SQL writer that never calls lakelock (flink_writer: PyFlink 1.20, Iceberg's Flink
runtime, a local MiniCluster) commits through the catalog front while lakelock's compactor
compacts the same table (docs/catalog-front.md, "Flink writers"). The warehouse is on the
project's S3 server, as its users' lakes are: the job reaches it with Iceberg's S3FileIO, its
endpoint and region from the front's /v1/config (the front's part is the same on local files).

The upsert job's table holds equality deletes, which pyiceberg cannot apply; it is read by
Iceberg's own reader in Spark from the metadata file the front's database points at, not
through the front. The append job's table is read by pyiceberg.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from compactor.config import LeaseConfig, PlanConfig, TableConfig
from compactor.procedure_config import ConvertEqualityDeletesConfig, ExpireSnapshotsConfig
from compactor.report import Outcome
from compactor.run import follow_table, run_table, utcnow
from demo.flink import (
    MARKER,
    PATH_READS,
    Compactor,
    UpsertFeed,
    marker,
    rows_of,
    snapshot_read,
    wait_until,
    writer_args,
)
from jobkit.flink import FlinkWriter
from jobkit.spark import error_message
from tests.conftest import Warehouse
from tests.spark.test_catalog_front import (
    CATALOG,
    direct,
    events,
    front_session,
    sqlite_front,
)
from tests.support.invariants import check, load_history

pytestmark = [pytest.mark.spark, pytest.mark.flink]

WAIT_S = 240  # a guard against a hang only


def flink_session(front: Any, app_name: str) -> Any:
    """The module's session on `front`, with the path catalog that reads an upsert table by
    its metadata file (demo.flink.snapshot_read)."""
    return front_session(
        front,
        app_name,
        **PATH_READS,
        **{"spark.sql.catalog.default_iceberg.warehouse": (front.folder / "paths").as_uri()},
    )


def flink_fixtures(name: str, *, s3: bool = False) -> tuple[Any, Any, Any]:
    """A Flink module's module-scoped fixtures: `front` (a front on SQLite in a folder named
    `name`, its warehouse on the project's S3 server when `s3`), `lakelock_server` (the front:
    conftest's job_client and operator talk to it) and `spark` (flink_session on it):

        front, lakelock_server, spark = flink_fixtures("flink-cdc")
    """

    @pytest.fixture(scope="module")
    def front(
        request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
    ) -> Iterator[Any]:
        folder = tmp_path_factory.mktemp(name)
        store = None
        if s3:
            server = request.getfixturevalue("s3_server")
            store = Warehouse(server.warehouse(folder.name), server)
        running = sqlite_front(folder, store)
        yield running
        running.stop()

    @pytest.fixture(scope="module")
    def lakelock_server(front: Any) -> Any:
        return front

    @pytest.fixture(scope="module")
    def spark(front: Any) -> Iterator[Any]:
        session = flink_session(front, f"lakelock-{name}")
        yield session
        session.stop()

    return front, lakelock_server, spark


front, lakelock_server, spark = flink_fixtures("flink-writer", s3=True)


def start_writer(
    started: list[FlinkWriter], front: Any, tmp: Path, *, table: str, mode: str, **extra: str
) -> FlinkWriter:
    args = writer_args(
        catalog_uri=f"{front.url}/iceberg",
        table=table,
        landing=tmp / "landing",
        checkpoints=tmp / "checkpoints",
        mode=mode,
        **extra,
    )
    writer = FlinkWriter.start(args=args, token=front.token("job"), log_path=tmp / "flink.log")
    started.append(writer)
    writer.job_id(timeout_s=WAIT_S)
    return writer


def land(feed: UpsertFeed, table: str, newest: Any, writer: FlinkWriter, **kind: Any) -> None:
    """One file, then wait until `table` holds it (`newest(table)`: the newest file number)."""
    n = feed.write(**kind)
    deadline = time.monotonic() + WAIT_S
    wait_until(f"file {n}", lambda: newest(table) >= n, writer=writer, deadline=deadline)


def appended(front: Any) -> Any:
    """The newest file a table without equality deletes holds, read by pyiceberg."""

    def newest(table: str) -> int:
        rows = direct(front, table).scan(row_filter=f"event_id == '{MARKER}'").to_arrow()
        return max(rows.column("v").to_pylist(), default=-1)

    return newest


def upserted(front: Any, spark: Any) -> Any:
    """The newest file an upsert table holds, read by Iceberg's reader in Spark."""
    return lambda table: marker(spark, direct(front, table).metadata_location)


def compactor_config(table: str) -> TableConfig:
    return replace(
        # a TTL no run outlasts on a loaded machine: the invariant check (tests.support.invariants,
        # inv7) knows no renewal of the compactor's, so it takes a run past its TTL for one
        # that committed after its lease expired
        TableConfig(table, lease=LeaseConfig(ttl=timedelta(seconds=120))),
        plan=PlanConfig(
            min_small_files=2, min_delete_files=1, trigger_small_files=5, trigger_delete_files=1
        ),
    )


class ForeignDeletes:
    """Spark inserts, then deletes, a key the Flink job never writes, over and over in a thread
    of its own through the front, naming no lease. Each delete is copy-on-write: it replaces
    or drops the data file that holds the row, a commit that can conflict with a rewrite (held
    while a maintenance lease covers its partition). One whose file a rewrite replaced
    meanwhile fails in Iceberg's validation, which no hold can save (docs/flink.md): counted,
    not an error. `present`: the value the key holds now, None when deleted."""

    KEY = ("spark-k", "2024-06-20", 0)
    # a delete that lost to a concurrent commit: Iceberg's validation, its retries spent, or
    # Spark's runtime filtering, which finds the table moved under its scan
    LOST = ("ValidationException", "CommitFailed", "has been concurrently modified")

    def __init__(self, spark: Any, table: str) -> None:
        self.spark, self.table = spark, table
        self.committed = self.failed = 0
        self.present: int | None = None
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="foreign-deletes", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(WAIT_S)

    def _loop(self) -> None:
        event_id, dt, hr = self.KEY
        self.spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(
            self.spark._jsparkSession
        )
        n = 0
        try:
            while not self._stop.is_set():
                n += 1
                try:
                    if self.present is None:
                        self.spark.sql(
                            f"INSERT INTO {self.table} VALUES ('{event_id}', '{dt}', {hr}, {n})"
                        )
                        self.present = n
                    self.spark.sql(f"DELETE FROM {self.table} WHERE event_id = '{event_id}'")
                    self.present = None
                    self.committed += 1
                except Exception as exc:
                    message = error_message(exc)
                    if not any(cause in message for cause in self.LOST):
                        raise
                    self.failed += 1
        except BaseException as exc:  # reported by the test
            self.failures.append(error_message(exc))


def test_a_flink_upsert_job_commits_beside_the_compactor_and_never_restarts(
    spark, front, tmp_path, job_client, operator, writers
):
    """Beside it, Spark deletes a key of its own through the front (foreign commits that can
    conflict); afterwards the audit trail is checked for the invariants of docs/design.md
    §3.1, inv10 among them: no commit that can conflict landed inside a live maintenance
    lease's partitions."""
    table = f"{CATALOG}.db.flink_upserts"
    feed = UpsertFeed(tmp_path / "landing")
    # Spark's deletes beside it commit to the same partition several times a second: a Flink
    # commit that loses the head to them (a 409) tries again on fresh metadata, and Iceberg's
    # five tries by default can all lose on a busy machine, which would restart the job (once
    # in a CI run, with no refusal and no fault at the front; result["restart_causes"] now
    # names a restart's cause); a table with such a writer beside it gives commits more tries
    retries = {"--property": "commit.retry.num-retries=20"}
    writer = start_writer(
        writers, front, tmp_path, table="db.flink_upserts", mode="upsert", **retries
    )
    deadline = time.monotonic() + WAIT_S
    exists = lambda: spark.catalog.tableExists(table)  # noqa: E731
    wait_until("the table", exists, writer=writer, deadline=deadline)
    compactor = Compactor(spark, job_client, compactor_config(table), on_progress=lambda _: None)
    deletes = ForeignDeletes(spark, table)
    deletes.start()
    compactor.start()
    try:
        # one file at a time, the next once the table holds the one before: counts, not time
        while feed.files < 5 or len(compactor.runs) < 3 or deletes.committed < 3:
            assert not compactor.failures, compactor.failures
            assert not deletes.failures, deletes.failures
            assert time.monotonic() < deadline + WAIT_S, "a guard against a hang"
            land(feed, table, upserted(front, spark), writer)
    finally:
        compactor.stop(WAIT_S)
        deletes.stop()
    result = writer.stop()

    # no commit failed: Flink's committer catches nothing, so a failure is a restart
    assert result["status"] == "CANCELED" and result["restarts"] == 0, result
    trail = events(operator, table)
    assert [e for e in trail if e["event"] == "catalog.refused"] == []
    flink_commits = [e for e in trail if e["event"] == "catalog.commit" and e["kind"] == "data"]
    assert len(flink_commits) >= feed.files
    # every compaction committed, while the job's commits went on
    runs = compactor.runs
    assert all(r.outcome == Outcome.COMPACTED for r in runs), [(r.outcome, r.error) for r in runs]
    replaced = [e for e in trail if "replace" in e["detail"].get("operations", [])]
    assert len(replaced) >= len(runs)
    # the deletes that can conflict were among the commits the fence judged, and none landed
    # inside a live maintenance lease
    conflicting = [e for e in trail if e["detail"].get("can_conflict")]
    assert len(conflicting) >= deletes.committed
    assert check(load_history(front.db_url, [])) == []
    # on S3: the job reached the bucket with Iceberg's S3FileIO, its endpoint and region from
    # the front's /v1/config and its keys from the environment
    location = direct(front, table).metadata_location
    assert location.startswith(f"{front.store.uri}/db/flink_upserts/metadata/")
    data = front.store.objects("db/flink_upserts/data")
    assert any(uri.endswith(".parquet") for uri in data), "the job's files are in the bucket"
    # exact: every key holds the last row written for it, read without lakelock
    rows = rows_of(spark, location)
    assert rows.pop(ForeignDeletes.KEY, None) == deletes.present
    assert rows == feed.latest


def test_equality_deletes_are_converted_under_a_lease_while_the_upsert_job_commits(
    spark, front, tmp_path, job_client, operator, writers
):
    """The follower with convert_equality_deletes (compactor.convert) beside a Flink upsert job
    committing newer equality deletes through the front, which pass its lease: each conversion
    commit reads the same rows as its parent, read by Iceberg's reader in Spark without
    lakelock, and the table ends exact."""
    table = f"{CATALOG}.db.flink_converted"
    feed = UpsertFeed(tmp_path / "landing")
    writer = start_writer(writers, front, tmp_path, table="db.flink_converted", mode="upsert")
    newest = upserted(front, spark)
    land(feed, table, newest, writer, repeat=False)
    # the upsert's commit wrote an equality delete in each partition it touched: the front made
    # each due at once (LAKELOCK_DUE_EQUALITY_DELETE_FILES, 1)
    counted = job_client.due([table], holder="a-probe", wait_s=0)
    assert counted and all(d.equality_delete_files >= 1 for d in counted), counted
    config = replace(
        compactor_config(table), convert_equality_deletes=ConvertEqualityDeletesConfig(True)
    )
    names = [f"dt={feed.key(k)[1]}/hr={feed.key(k)[2]}" for k in range(feed.days * feed.hours)]
    converted: list[dict[str, int]] = []
    deadline = time.monotonic() + WAIT_S
    # counts, not time: 3 follow runs, and positions resolved by one of them at least
    while len(converted) < 3 or not sum(c["deleted_positions"] for c in converted):
        assert time.monotonic() < deadline + WAIT_S, "a guard against a hang"
        # the file lands while the follow run converts: the job commits beside it
        n = feed.write(rows=30)
        report = follow_table(
            spark, client=job_client, config=config, due=dict.fromkeys(names, (1, 1, 1))
        )
        # no change: nothing older for its equality deletes to apply to yet
        assert report.outcome in (Outcome.COMPACTED, Outcome.NO_CHANGE), (
            report.outcome,
            report.error,
            report.steps,
        )
        (step,) = [s for s in report.steps if s["procedure"] == "convert_equality_deletes"]
        converted.append(step["output"])
        wait_until(f"file {n}", lambda n=n: newest(table) >= n, writer=writer, deadline=deadline)
    result = writer.stop()

    assert result["status"] == "CANCELED" and result["restarts"] == 0, result
    metadata = direct(front, table).metadata_location
    # the compactor's commits that removed equality deletes: conversions, and rewrites that
    # applied them
    conversions = [
        row
        for row in snapshot_read(spark, f"{metadata}#snapshots").collect()
        if int(row.summary.get("removed-equality-delete-files", 0)) > 0
        and row.summary.get("lakelock.token")
    ]
    assert len(conversions) >= sum(1 for c in converted if c["converted_equality_delete_files"])
    assert any(int(r.summary.get("added-position-deletes", 0)) for r in conversions)
    for row in conversions:
        assert at(spark, metadata, row.snapshot_id) == at(spark, metadata, row.parent_id)
    trail = events(operator, table)
    assert [e for e in trail if e["event"] == "catalog.refused"] == []
    assert check(load_history(front.db_url, [])) == []
    assert rows_of(spark, metadata) == feed.latest


def at(spark: Any, metadata_location: str, snapshot_id: int) -> list[tuple[Any, ...]]:
    """The rows of the table at `metadata_location` as of `snapshot_id`, sorted."""
    read = snapshot_read(spark, metadata_location, snapshot_id)
    return sorted(map(tuple, read.collect()))


def test_flink_restarts_from_its_checkpoint_after_expiry_and_commits_nothing_twice(
    spark, front, tmp_path, job_client, writers
):
    """An append job (no key: a checkpoint committed twice would show as duplicate rows) is
    cancelled right after a commit, so its last checkpoint holds files it committed; another
    writer commits five times more, so the job's snapshots are past the five the floor keeps;
    a compaction and an expiry with the clock six days ahead follow; the job restarts from that
    checkpoint. Its committer finds the checkpoint committed in the snapshot lakelock kept."""
    name = "db.flink_appends"
    table = f"{CATALOG}.{name}"
    feed = UpsertFeed(tmp_path / "landing")
    slow = {"checkpoint_every_s": 6}  # no checkpoint between the commit and the cancel
    writer = start_writer(writers, front, tmp_path, table=name, mode="append", **slow)
    for _ in range(2):
        land(feed, table, appended(front), writer, repeat=False)
    first = writer.stop()
    assert first["status"] == "CANCELED" and first["restarts"] == 0, first
    history = direct(front, table).metadata.snapshots
    flink_snapshots = [s for s in history if "flink.job-id" in (s.summary or {})]
    assert flink_snapshots

    others = 5
    for i in range(others):
        spark.sql(f"INSERT INTO {table} VALUES ('other{i}', '2024-06-22', 0, {900_000 + i})")
    config = replace(compactor_config(table), expire_snapshots=ExpireSnapshotsConfig(retain_last=5))
    report = run_table(
        spark, client=job_client, config=config, now=lambda: utcnow() + timedelta(days=6)
    )
    assert report.outcome == Outcome.COMPACTED, report.error
    expire = next(s for s in report.steps if s["procedure"] == "expire_snapshots")
    assert expire["output"]["expired_snapshots"] >= 1
    kept = {s.snapshot_id for s in direct(front, table).metadata.snapshots}
    assert flink_snapshots[-1].snapshot_id in kept  # the restart point
    assert not {s.snapshot_id for s in flink_snapshots[:-1]} & kept  # the others went

    checkpoint = latest_checkpoint(tmp_path / "checkpoints")
    restart = {"--restore-from": checkpoint}
    writer = start_writer(writers, front, tmp_path, table=name, mode="append", **slow, **restart)
    land(feed, table, appended(front), writer, repeat=False)
    second = writer.stop()
    assert second["status"] == "CANCELED" and second["restarts"] == 0, second
    rows = direct(front, table).scan().to_arrow()
    written = feed.rows + others
    assert rows.num_rows == written  # nothing committed twice, nothing lost
    assert len(set(rows.column("v").to_pylist())) == written


def latest_checkpoint(folder: Path) -> str:
    """The newest retained checkpoint (`<job id>/chk-N`) under `folder`."""
    found = sorted(folder.glob("*/chk-*"), key=lambda p: p.stat().st_mtime)
    assert found, f"no retained checkpoint under {folder}"
    return found[-1].as_uri()
