"""A Flink SQL writer that never calls lakelock (flink_writer: PyFlink 1.20, Iceberg's Flink
runtime, a local MiniCluster) commits through the catalog front while lakelock's compactor
compacts the same table (docs/catalog-front.md, "Flink writers").

The upsert job's table holds equality deletes, which pyiceberg cannot apply; it is read by
Iceberg's own reader in Spark from the metadata file the front's database points at, not
through the front. The append job's table is read by pyiceberg.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from compactor.config import ExpireSnapshotsConfig, LeaseConfig, PlanConfig, TableConfig
from compactor.report import Outcome
from compactor.run import run_table, utcnow
from jobkit.flink import FlinkWriter
from jobkit.spark import build_session, error_message
from tests.conftest import start_server
from tests.spark.test_catalog_front import CATALOG, direct, events, rest_catalog

pytestmark = [pytest.mark.spark, pytest.mark.flink]

COLUMNS = "event_id STRING, dt STRING, hr INT, v BIGINT"
KEYS = 40  # keys per file, over 2 days x 2 hours: 4 partitions
WAIT_S = 240  # a guard against a hang only


@pytest.fixture(scope="module")
def front(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    folder = tmp_path_factory.mktemp("flink-front")
    db_url = f"sqlite:///{folder / 'lakelock.db'}"
    server = start_server(db_url, folder, LAKELOCK_CATALOG_WAREHOUSE=(folder / "wh").as_uri())
    server.db_url = db_url  # type: ignore[attr-defined]
    server.warehouse = folder / "wh"  # type: ignore[attr-defined]
    server.folder = folder  # type: ignore[attr-defined]
    yield server
    server.stop()


@pytest.fixture(scope="module")
def lakelock_server(front: Any) -> Any:
    """The front is the module's service: conftest's job_client and operator talk to it."""
    return front


@pytest.fixture(scope="module")
def spark(front: Any) -> Iterator[Any]:
    session = build_session(
        rest_catalog(front),
        app_name="lakelock-flink-writer",
        master="local[2]",
        jar_sets=("spark-kafka",),  # the process's first session fixes the driver classpath
        extra_conf={
            "spark.sql.shuffle.partitions": "2",
            "spark.default.parallelism": "2",
            # the catalog Iceberg's source loads a table by its metadata file through
            "spark.sql.catalog.default_iceberg": "org.apache.iceberg.spark.SparkCatalog",
            "spark.sql.catalog.default_iceberg.type": "hadoop",
            "spark.sql.catalog.default_iceberg.warehouse": (front.folder / "paths").as_uri(),
        },
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


class Landing:
    """The writer's landing folder: each file a batch of rows, and the row every key ends with
    (the last one written: the writer reads one file at a time, in order, at parallelism 1)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.files = 0
        self.latest: dict[tuple[str, str, int], int] = {}
        self.rows = 0

    def write(self, *, keys: int = KEYS, repeat: bool = True) -> int:
        """One file: `keys` rows over 4 partitions, each key written twice in the file when
        `repeat` (an upsert then replaces a row of its own checkpoint), then a marker row whose
        value is the file's number. Answers the file's number."""
        n = self.files
        rows = []
        for k in range(keys):
            key = (f"k{k}", f"2024-06-2{k % 2}", (k // 2) % 2)
            for attempt in range(2 if repeat else 1):
                value = 1000 + n * 10_000 + k * 10 + attempt  # markers stay below 1000
                rows.append({"event_id": key[0], "dt": key[1], "hr": key[2], "v": value})
                self.latest[key] = value
        rows.append({"event_id": "marker", "dt": "2024-06-20", "hr": 0, "v": n})
        self.latest["marker", "2024-06-20", 0] = n
        tmp = self.folder / f".{n:05d}.json.tmp"  # hidden from Flink until renamed
        tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
        tmp.rename(self.folder / f"{n:05d}.json")
        self.files += 1
        self.rows += len(rows)
        return n


@pytest.fixture
def writers() -> Iterator[list[FlinkWriter]]:
    """The writers a test starts, stopped at its end whatever happened."""
    started: list[FlinkWriter] = []
    yield started
    for writer in started:
        if writer.running():
            writer.stop()


def start_writer(
    started: list[FlinkWriter], front: Any, tmp: Path, *, table: str, mode: str, **extra: str
) -> FlinkWriter:
    args = {
        "--catalog-uri": f"{front.url}/iceberg",
        "--catalog-name": CATALOG,
        "--table": table,
        "--mode": mode,
        "--columns": COLUMNS,
        "--partitioned-by": "dt,hr",
        "--landing": (tmp / "landing").as_uri(),
        "--checkpoints": (tmp / "checkpoints").as_uri(),
        "--checkpoint-every-s": "1",
        **extra,
    }
    if mode == "upsert":
        args["--key"] = "event_id,dt,hr"
    argv = [part for pair in args.items() for part in pair]
    writer = FlinkWriter.start(args=argv, token=front.token("job"), log_path=tmp / "flink.log")
    started.append(writer)
    writer.job_id(timeout_s=WAIT_S)
    return writer


def marker(front: Any, table: str, spark: Any | None = None) -> int:
    """The newest file number the table holds (-1: none yet)."""
    if spark is None:  # pyiceberg: a table without equality deletes
        rows = direct(front, table).scan(row_filter="event_id == 'marker'").to_arrow()
        values = rows.column("v").to_pylist()
    else:
        found = snapshot_read(front, table, spark).where("event_id = 'marker'").collect()
        values = [r.v for r in found]
    return max(values, default=-1)


def snapshot_read(front: Any, table: str, spark: Any) -> Any:
    """The table as Iceberg's reader in Spark sees its current metadata file, named by the
    front's database (pyiceberg's SQL catalog): a DataFrame read without the front."""
    location = direct(front, table).metadata_location
    return spark.read.format("iceberg").load(location)


def wait_for(what: str, done: Any, writer: FlinkWriter) -> None:
    deadline = time.monotonic() + WAIT_S
    while not done():
        assert writer.running(), f"the Flink writer ended while waiting for {what}"
        assert time.monotonic() < deadline, f"no {what} in {WAIT_S}s"
        time.sleep(1)


def compactor_config(table: str) -> TableConfig:
    return replace(
        TableConfig(table, lease=LeaseConfig(ttl=timedelta(seconds=30))),
        plan=PlanConfig(
            min_small_files=2, min_delete_files=1, trigger_small_files=5, trigger_delete_files=1
        ),
    )


def test_a_flink_upsert_job_commits_beside_the_compactor_and_never_restarts(
    spark, front, tmp_path, job_client, operator, writers
):
    table = f"{CATALOG}.db.flink_upserts"
    landing = Landing(tmp_path / "landing")
    writer = start_writer(writers, front, tmp_path, table="db.flink_upserts", mode="upsert")
    stop = threading.Event()
    failures: list[BaseException] = []

    def feed() -> None:
        # one file at a time, the next once the table holds the one before: counts, not time
        # (the session made active in this thread's JVM thread, for its SQL settings)
        spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)
        try:
            while not stop.is_set():
                n = landing.write()
                wait_for(f"file {n}", lambda n=n: marker(front, table, spark) >= n, writer)
        except BaseException as exc:  # reported by the test's thread
            failures.append(exc)
            stop.set()

    wait_for("the table", lambda: spark.catalog.tableExists(table), writer)
    feeder = threading.Thread(target=feed, name="landing", daemon=True)
    feeder.start()
    runs = []
    try:
        deadline = time.monotonic() + 4 * WAIT_S
        while not stop.is_set() and (len(runs) < 4 or landing.files < 10):
            assert time.monotonic() < deadline, f"{len(runs)} runs, {landing.files} files"
            report = run_table(spark, client=job_client, config=compactor_config(table))
            if report.outcome != Outcome.NO_CHANGE and report.reason != "below_thresholds":
                runs.append(report)  # a compaction: planned, with work to do
    finally:
        stop.set()
        feeder.join(WAIT_S)
    assert not failures, error_message(failures[0])
    wait_for("the last file", lambda: marker(front, table, spark) >= landing.files - 1, writer)
    result = writer.stop()

    # no commit failed: Flink's committer catches nothing, so a failure is a restart
    assert result["status"] == "CANCELED" and result["restarts"] == 0, result
    trail = events(operator, table)
    assert [e for e in trail if e["event"] == "catalog.refused"] == []
    flink_commits = [e for e in trail if e["event"] == "catalog.commit" and e["kind"] == "data"]
    assert len(flink_commits) >= landing.files
    # every compaction committed, and some while the job's commits went on
    assert all(r.outcome == Outcome.COMPACTED for r in runs), [(r.outcome, r.error) for r in runs]
    replaced = [e for e in trail if "replace" in e["detail"].get("operations", [])]
    assert len(replaced) >= len(runs)
    # exact: every key holds the last row written for it, read without lakelock
    rows = {(r.event_id, r.dt, r.hr): r.v for r in snapshot_read(front, table, spark).collect()}
    assert rows == landing.latest


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
    landing = Landing(tmp_path / "landing")
    slow = {"--checkpoint-every-s": "6"}  # no checkpoint between the commit and the cancel
    writer = start_writer(writers, front, tmp_path, table=name, mode="append", **slow)
    for _ in range(2):
        n = landing.write(repeat=False)
        wait_for(f"file {n}", lambda n=n: marker(front, table) >= n, writer)
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
    writer = start_writer(
        writers,
        front,
        tmp_path,
        table=name,
        mode="append",
        **slow,
        **{"--restore-from": checkpoint},
    )
    n = landing.write(repeat=False)
    wait_for(f"file {n}", lambda: marker(front, table) >= n, writer)
    second = writer.stop()
    assert second["status"] == "CANCELED" and second["restarts"] == 0, second
    rows = direct(front, table).scan().to_arrow()
    written = landing.rows + others
    assert rows.num_rows == written  # nothing committed twice, nothing lost
    assert len(set(rows.column("v").to_pylist())) == written


def latest_checkpoint(folder: Path) -> str:
    """The newest retained checkpoint (`<job id>/chk-N`) under `folder`."""
    found = sorted(folder.glob("*/chk-*"), key=lambda p: p.stat().st_mtime)
    assert found, f"no retained checkpoint under {folder}"
    return found[-1].as_uri()
