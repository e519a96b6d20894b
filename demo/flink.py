"""Flink writing through lakelock, beside lakelock's compactor: `bin/run --writer flink`, and the
parts its benchmark (benchmarks.flink) and tests share.

    python -m demo --writer flink                       # about a minute
    python -m demo --writer flink --files 30 --rows-per-file 500
    python -m demo --writer flink --source kafka        # from a topic on a local broker
    python -m demo --writer flink --source binlog       # from a MariaDB table's binlog

Starts the lakelock service with its catalog front (SQLite), a Flink SQL upsert job
(flink_writer, in PyFlink's own Python: jobkit.flink) reading a landing folder (or a Kafka
topic of three partitions on a broker the run starts, `--source kafka`; or the binlog of a
private MariaDB's table the upserts go to, `--source binlog`), and lakelock's
compactor compacting the same table through the front while the job commits. Then stops the
job and checks: the table holds the last row written for every key (read by Iceberg's reader
in Spark from the metadata file, not through the front), the job never restarted (Flink's
committer catches nothing: a refused commit restarts the job), the front refused no commit,
and every compaction committed.

    feed = UpsertFeed(folder)            # JSON-lines files of upserts, and the answer
    feed.write(rows=400)                 # one file; feed.latest: the row each key ends with
    GrowingFeed(folder).write(rows=200)  # keys that grow with event time: new partitions
    writer_args(...)                     # flink_writer's options for a table at a catalog
    marker(spark, metadata, feed)        # the newest file the table holds

    with front_service(workdir) as service:            # the service, its front on SQLite
        spark = front_session(service, workdir)        # Spark with the front as `lakelock`
        writer = start_writer(service, feed, workdir)  # the Flink upsert job on the feed
        current_metadata(service.db_url, TABLE)        # the table's metadata file, or None
        flink_commits(metadata)                        # the job's commits: when, rows added
"""

from __future__ import annotations

import argparse
import functools
import json
import random
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

__all__ = [
    "COLUMNS",
    "TABLE",
    "Compactor",
    "FlinkDemo",
    "GrowingFeed",
    "TableFeed",
    "TopicFeed",
    "UpsertFeed",
    "committed",
    "current_metadata",
    "flink_commits",
    "front_service",
    "front_session",
    "main",
    "marker",
    "snapshot_read",
    "source_args",
    "start_writer",
    "table_problems",
    "wait_until",
    "writer_args",
]

COLUMNS = "event_id STRING, dt STRING, hr INT, v BIGINT"
"""The upsert table's columns (Flink SQL); key (event_id, dt, hr), partitioned by dt, hr."""

KEY = ("event_id", "dt", "hr")
MARKER = "marker"
"""Each file's last row: key `marker`, its value the file's number, so a reader knows which
files the table holds. Other values start at 1,000,000 and never collide with it."""

Key = tuple[str, str, int]

BINLOG_DATABASE = "demo"
"""The private MariaDB's database whose table `events` the binlog source reads."""

TABLE = "lakelock.db.events"
"""The demo's table, as Spark and the service name it: the front's catalog `lakelock`."""


class UpsertFeed:
    """The writer's landing folder: JSON-lines files of upserts over a key space, and the row
    each key ends with (the last written: the writer reads one file after another, in order,
    at parallelism 1, so the file order is the commit order of each key)."""

    def __init__(
        self, folder: Path, *, keys: int = 40, days: int = 2, hours: int = 2, seed: int = 1
    ):
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.keys, self.days, self.hours = keys, days, hours
        self.random = random.Random(seed)
        self.files = 0
        self.rows = 0
        self.latest: dict[Key, int] = {}

    def key(self, k: int) -> Key:
        return (f"k{k}", f"2024-06-{20 + k % self.days:02d}", (k // self.days) % self.hours)

    def write(self, *, rows: int | None = None, repeat: bool = True) -> int:
        """One file, atomically (hidden until renamed), answering its number: `rows` upserts
        of keys drawn at random (None: every key once, or twice when `repeat`: an upsert that
        replaces a row of its own checkpoint), then the marker row."""
        n = self.files
        lines = []
        for i, key in enumerate(self._draw(rows, repeat)):
            value = 1_000_000 + n * 100_000 + i
            lines.append({"event_id": key[0], "dt": key[1], "hr": key[2], "v": value})
            self.latest[key] = value
        lines.append({"event_id": MARKER, "dt": "2024-06-20", "hr": 0, "v": n})
        self.latest[MARKER, "2024-06-20", 0] = n
        self._land(n, lines)
        self.files += 1
        self.rows += len(lines)
        return n

    def _land(self, n: int, lines: list[dict[str, Any]]) -> None:
        tmp = self.folder / f".{n:06d}.json.tmp"
        tmp.write_text("".join(json.dumps(line) + "\n" for line in lines))
        tmp.rename(self.folder / f"{n:06d}.json")

    def _draw(self, rows: int | None, repeat: bool) -> list[Key]:
        """The keys of one file's upserts, in order (see write)."""
        if rows is None:
            return [self.key(k) for k in range(self.keys) for _ in range(2 if repeat else 1)]
        return [self.key(self.random.randrange(self.keys)) for _ in range(rows)]


class TopicFeed(UpsertFeed):
    """An UpsertFeed that lands each batch on a Kafka topic instead of a file, as upsert-kafka
    messages (key: the key columns as JSON; value: the row). One key's messages go to one
    partition, in order, so each key still ends with its last row; the marker row tells only
    that its own partition is read up to the batch."""

    def __init__(self, kafka: Any, topic: str, folder: Path, **how: Any) -> None:
        super().__init__(folder, **how)
        self.kafka, self.topic = kafka, topic

    def _land(self, n: int, lines: list[dict[str, Any]]) -> None:
        def key(line: dict[str, Any]) -> bytes:
            return json.dumps({k: line[k] for k in KEY}, sort_keys=True).encode()

        self.kafka.produce(self.topic, [(key(line), json.dumps(line).encode()) for line in lines])


class TableFeed(UpsertFeed):
    """An UpsertFeed that lands each batch as upserts into a MySQL table (`INSERT ... ON
    DUPLICATE KEY UPDATE`, one transaction per batch) whose row binlog the job reads. The
    binlog is one ordered log, so the marker row tells that the whole batch is read."""

    def __init__(self, mariadb: Any, folder: Path, **how: Any) -> None:
        super().__init__(folder, **how)
        self.mariadb = mariadb
        with mariadb.connect() as conn, conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE IF NOT EXISTS {BINLOG_DATABASE}")
            cur.execute(
                f"CREATE TABLE IF NOT EXISTS {BINLOG_DATABASE}.events (event_id VARCHAR(64), "
                "dt VARCHAR(10), hr INT, v BIGINT NOT NULL, PRIMARY KEY (event_id, dt, hr))"
            )

    def _land(self, n: int, lines: list[dict[str, Any]]) -> None:
        with self.mariadb.connect(BINLOG_DATABASE) as conn, conn.cursor() as cur:
            conn.begin()
            cur.executemany(
                "INSERT INTO events VALUES (%s, %s, %s, %s) ON DUPLICATE KEY UPDATE v = VALUES(v)",
                [(line["event_id"], line["dt"], line["hr"], line["v"]) for line in lines],
            )
            conn.commit()


class GrowingFeed(UpsertFeed):
    """An UpsertFeed whose keys grow with event time, as a stream's do: each upsert is a second
    of event time from `start`, either a new key in the partition (dt, hr) of its moment or, at
    `update_ratio`, an update of any key written before. A new partition opens every 3,600
    upserts (at 200 a second, every 18 s) and the older ones keep taking updates: the ingest
    pipeline's click events, in the upsert job's columns."""

    def __init__(
        self,
        folder: Path,
        *,
        update_ratio: float = 0.3,
        start: datetime = datetime(2024, 6, 20),
        seed: int = 1,
    ) -> None:
        super().__init__(folder, seed=seed)
        if not 0.0 <= update_ratio < 1.0:
            raise ValueError(f"update_ratio must be within [0, 1), got {update_ratio}")
        self.update_ratio = update_ratio
        self.start = start
        self.born: list[Key] = []

    def _draw(self, rows: int | None, repeat: bool) -> list[Key]:
        if rows is None:
            raise ValueError("a growing feed writes a number of rows: its keys have no end")
        keys = []
        for _ in range(rows):
            if self.born and self.random.random() < self.update_ratio:
                keys.append(self.random.choice(self.born))
                continue
            moment = self.start + timedelta(seconds=self.rows + len(keys))
            key = (f"e{len(self.born)}", moment.strftime("%Y-%m-%d"), moment.hour)
            self.born.append(key)
            keys.append(key)
        return keys


def writer_args(
    *,
    catalog_uri: str,
    table: str,
    checkpoints: Path,
    landing: Path | None = None,
    mode: str = "upsert",
    checkpoint_every_s: float = 1.0,
    catalog_name: str = "lakelock",
    **extra: str,
) -> list[str]:
    """flink_writer's options (flink_writer.job): the table made with COLUMNS when missing,
    partitioned by dt, hr; an upsert table keyed by KEY; its source the `landing` folder, or
    the one `extra` names. `extra`: more options by flag."""
    args = {
        "--catalog-uri": catalog_uri,
        "--catalog-name": catalog_name,
        "--table": table,
        "--mode": mode,
        "--columns": COLUMNS,
        "--partitioned-by": "dt,hr",
        **({"--landing": landing.as_uri()} if landing is not None else {}),
        "--checkpoints": checkpoints.as_uri(),
        "--checkpoint-every-s": f"{checkpoint_every_s:g}",
        **extra,
    }
    if mode == "upsert":
        args["--key"] = ",".join(KEY)
    return [part for pair in args.items() for part in pair]


PATH_READS = {
    # the catalog Iceberg's Spark source loads a table by its metadata file through
    "spark.sql.catalog.default_iceberg": "org.apache.iceberg.spark.SparkCatalog",
    "spark.sql.catalog.default_iceberg.type": "hadoop",
}
"""Spark settings for snapshot_read; `.warehouse` (any folder) is added by the caller."""


def snapshot_read(spark: Any, metadata_location: str, snapshot_id: int | None = None) -> Any:
    """The table at `metadata_location` (its current snapshot, or `snapshot_id`) as Iceberg's
    reader in Spark sees it (equality deletes applied, which pyiceberg cannot), without any
    catalog: a DataFrame. The session needs PATH_READS; a thread other than the session's own
    makes it active first (SQL settings are per thread in the JVM)."""
    spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)
    read = spark.read.format("iceberg")
    if snapshot_id is not None:
        read = read.option("snapshot-id", snapshot_id)
    return read.load(metadata_location)


def marker(spark: Any, metadata_location: str) -> int:
    """The newest file number the table holds (-1: none yet)."""
    found = snapshot_read(spark, metadata_location).where(f"event_id = '{MARKER}'").collect()
    return max((row.v for row in found), default=-1)


def rows_of(spark: Any, metadata_location: str) -> dict[Key, int]:
    return {
        (row.event_id, row.dt, row.hr): row.v
        for row in snapshot_read(spark, metadata_location).collect()
    }


def table_problems(rows: dict[Key, int], feed: UpsertFeed) -> list[str]:
    """How the table's `rows` (rows_of) differ from what `feed` wrote: [] when each key holds
    its last row and no other row is there."""
    if rows == feed.latest:
        return []
    wrong = sum(1 for k, v in feed.latest.items() if rows.get(k) != v)
    extra = len(rows.keys() - feed.latest.keys())
    return [f"{wrong} keys do not hold their last row, {extra} rows of no key ({len(rows)} rows)"]


@dataclass
class FlinkDemo:
    """One run: options, and what it saw."""

    workdir: Path = Path("var/flink-demo")
    files: int = 20
    rows_per_file: int = 400
    keys: int = 2000
    checkpoint_every_s: float = 2.0
    compactions: int = 3
    compactor: bool = True
    timeout_s: float = 600.0
    seed: int = 1
    source: str = "files"  # a landing folder; "kafka": a topic of a local broker; "binlog": a
    # private MariaDB's table
    partitions: int = 3  # the topic's
    on_progress: Callable[[str], None] = print
    summary: dict[str, Any] = field(default_factory=dict)

    def run(self) -> list[str]:
        """Run it; answer the problems found (none: the check passed)."""
        from compactor.config import LeaseConfig, PlanConfig, TableConfig
        from service.client import LeaseClient

        table = TABLE
        with front_service(self.workdir) as service, ExitStack() as stack:
            self.on_progress(f"lakelock service at {service.url}, its catalog at /iceberg")
            feed = self._feed(stack)
            client = LeaseClient(service.url, token=service.token("job"))
            spark = front_session(service, self.workdir, app_name="lakelock-flink-demo")
            writer = start_writer(service, feed, self.workdir, self.checkpoint_every_s)
            try:
                job_id = writer.job_id(timeout_s=self.timeout_s)
                self.on_progress(f"Flink upsert job {job_id} running (PyFlink MiniCluster)")
                config = TableConfig(
                    table,
                    lease=LeaseConfig(ttl=timedelta(seconds=30)),
                    plan=PlanConfig(min_small_files=2, min_delete_files=1),
                )
                started = time.monotonic()
                compacted = self._stream(spark, client, config, feed, writer, service.db_url)
                elapsed = time.monotonic() - started
                # a topic's partitions are read side by side: the last marker is no proof
                # that the other partitions are read as far, so wait for every key's last row
                wait_until(
                    "every key's last row",
                    lambda: not table_problems(_rows(spark, service.db_url), feed),
                    writer=writer,
                    deadline=time.monotonic() + self.timeout_s,
                )
            finally:
                report = writer.stop()
            metadata = _metadata(service.db_url, self.workdir / "warehouse", table)
            rows = rows_of(spark, metadata)
            commits, refused = front_counts(service.url, service.token("reader"))
            spark.stop()
        self.summary = {
            "table": table,
            "files_written": feed.files,
            "rows_written": feed.rows,
            "seconds": round(elapsed, 1),
            "rows_per_s": round(feed.rows / elapsed, 1),
            "flink_job": report,
            "front_commits": commits,
            "front_refusals": refused,
            "compactions": [r.outcome.value for r in compacted],
            "rows_in_table": len(rows),
            "distinct_keys_written": len(feed.latest),
        }
        problems = []
        if report["restarts"] or report["status"] != "CANCELED":
            problems.append(f"the Flink job restarted or failed: {report}")
        if refused:
            problems.append(f"the front refused or held back commits: {refused}")
        failed = [r for r in compacted if r.outcome.value != "compacted"]
        if failed:
            problems.append(f"{len(failed)} compactions did not commit: {failed[0].error}")
        if self.compactor and len(compacted) < self.compactions:
            problems.append(f"{len(compacted)} compactions, fewer than {self.compactions}")
        return problems + table_problems(rows, feed)

    def _feed(self, stack: ExitStack) -> UpsertFeed:
        """The landing folder, or a topic on a broker started in the workdir (kept to `stack`)."""
        how = {"keys": self.keys, "seed": self.seed}
        if self.source == "files":
            return UpsertFeed(self.workdir / "landing", **how)
        if self.source == "binlog":
            from demo.mariadb import PrivateMariaDB

            mariadb = stack.enter_context(PrivateMariaDB.start(self.workdir / "mariadb"))
            self.on_progress(f"MariaDB at 127.0.0.1:{mariadb.port}, table demo.events")
            return TableFeed(mariadb, self.workdir / "landing", **how)
        from demo.kafka import LocalKafka

        kafka = stack.enter_context(LocalKafka.start(self.workdir / "kafka"))
        kafka.create_topic("events", partitions=self.partitions)
        self.on_progress(f"Kafka broker at {kafka.bootstrap}, topic events ({self.partitions})")
        return TopicFeed(kafka, "events", self.workdir / "landing", **how)

    def _stream(
        self, spark: Any, client: Any, config: Any, feed: UpsertFeed, writer: Any, db_url: str
    ) -> list[Any]:
        """Land the files, each once the table holds the one before, while the compactor runs
        through the front; answer the compactions (runs that found work)."""
        compactor = Compactor(spark, client, config, self.on_progress)
        if self.compactor:
            compactor.start()
        deadline = time.monotonic() + self.timeout_s
        try:
            while feed.files < self.files or len(compactor.runs) < self.compactions:
                n = feed.write(rows=self.rows_per_file)
                wait_until(
                    f"file {n} in the table",
                    lambda n=n: committed(spark, db_url) >= n,
                    writer=writer,
                    deadline=deadline,
                    compactor=compactor,
                )
                if n % 5 == 4:
                    self.on_progress(f"  {feed.files} files, {feed.rows} rows committed")
        finally:
            compactor.stop(self.timeout_s)
        return compactor.runs


@contextmanager
def front_service(workdir: Path) -> Iterator[Any]:
    """The lakelock service with its catalog front on a new SQLite database in `workdir`
    (emptied first), its warehouse `workdir/warehouse`: a demo.service.LocalService, stopped
    on leaving."""
    from demo.service import LocalService
    from service.lock import migrate

    if workdir.exists():
        shutil.rmtree(workdir)
    _catalog.cache_clear()  # none may hold a database this run replaces
    workdir.mkdir(parents=True)
    db_url = f"sqlite:///{workdir / 'lakelock.db'}"
    migrate.upgrade(db_url)
    with LocalService.start(
        db_url=db_url,
        log_path=workdir / "service.log",
        LAKELOCK_CATALOG_WAREHOUSE=(workdir / "warehouse").as_uri(),
    ) as service:
        yield service


def front_session(
    service: Any,
    workdir: Path,
    *,
    app_name: str = "lakelock-flink",
    extra_conf: dict[str, str] | None = None,
) -> Any:
    """A local Spark session (two cores) with the front as its catalog `lakelock` (the job
    token) and PATH_READS (their folder `workdir/paths`); `extra_conf` over them."""
    from jobkit.spark import CatalogConfig, build_session

    catalog = CatalogConfig(
        name="lakelock",
        type="rest",
        warehouse=(workdir / "warehouse").as_uri(),
        properties={"uri": f"{service.url}/iceberg", "token": service.token("job")},
    )
    spark = build_session(
        catalog,
        app_name=app_name,
        master="local[2]",
        extra_conf={
            "spark.sql.shuffle.partitions": "2",
            **PATH_READS,
            "spark.sql.catalog.default_iceberg.warehouse": (workdir / "paths").as_uri(),
            **(extra_conf or {}),
        },
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def source_args(feed: UpsertFeed) -> dict[str, str]:
    """The writer's options that point it at `feed`: its topic, its MySQL table, or else its
    folder."""
    if isinstance(feed, TopicFeed):
        return {
            "--source": "kafka",
            "--kafka-bootstrap": feed.kafka.bootstrap,
            "--kafka-topic": feed.topic,
            "--format": "upsert-kafka",
        }
    if isinstance(feed, TableFeed):
        return {
            "--source": "mysql-cdc",
            "--mysql": f"127.0.0.1:{feed.mariadb.port}",
            "--mysql-database": BINLOG_DATABASE,
            "--mysql-table": "events",
        }
    return {"--landing": feed.folder.as_uri()}


def start_writer(service: Any, feed: UpsertFeed, workdir: Path, checkpoint_every_s: float) -> Any:
    """The Flink upsert job (jobkit.flink.FlinkWriter) on `feed`'s folder, or its topic, into
    TABLE through the front, its checkpoints and log in `workdir`."""
    from jobkit.flink import FlinkWriter

    return FlinkWriter.start(
        args=writer_args(
            catalog_uri=f"{service.url}/iceberg",
            table=TABLE.split(".", 1)[1],
            checkpoints=workdir / "checkpoints",
            checkpoint_every_s=checkpoint_every_s,
            **source_args(feed),
        ),
        token=service.token("job"),
        log_path=workdir / "flink.log",
    )


class Compactor:
    """lakelock's compactor on one table, run after run in a thread of its own until stopped:
    `runs` are those that found work (their reports), `failures` what stopped it."""

    def __init__(
        self, spark: Any, client: Any, config: Any, on_progress: Callable[[str], None] = print
    ) -> None:
        self.spark, self.client, self.config = spark, client, config
        self.on_progress = on_progress
        self.runs: list[Any] = []
        self.failures: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="compactor", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    def _loop(self) -> None:
        from compactor.run import run_table

        # SQL settings are per thread in the JVM: this thread's runs use the session's
        self.spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(
            self.spark._jsparkSession
        )
        try:
            while not self._stop.is_set():
                report = run_table(self.spark, client=self.client, config=self.config)
                if report.outcome.value != "no_change" and report.reason != "below_thresholds":
                    self.runs.append(report)
                    self.on_progress(f"  compaction {len(self.runs)}: {report.outcome.value}")
                self._stop.wait(1.0)
        except BaseException as exc:  # reported by the thread that waits on the run
            self.failures.append(exc)


def wait_until(
    what: str,
    done: Callable[[], bool],
    *,
    writer: Any,
    deadline: float,
    compactor: Compactor | None = None,
) -> None:
    """Poll `done` until it holds; fail at once when the Flink job or the compactor ended, or
    at `deadline` (time.monotonic: a guard against a hang only)."""
    while not done():
        if not writer.running():
            raise RuntimeError(f"the Flink job ended while waiting for {what}: {writer.log_path}")
        if compactor is not None and compactor.failures:
            raise compactor.failures[0]
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {what} in time")
        time.sleep(0.5)


def committed(spark: Any, db_url: str, table: str = TABLE) -> int:
    """The newest file number `table` holds (-1: none, or no table yet), read from its
    metadata file as the front's database names it."""
    metadata = current_metadata(db_url, table)
    return -1 if metadata is None else marker(spark, metadata)


def _rows(spark: Any, db_url: str) -> dict[Key, int]:
    metadata = current_metadata(db_url)
    return {} if metadata is None else rows_of(spark, metadata)


def current_metadata(db_url: str, table: str = TABLE) -> str | None:
    """The current metadata file of `table` as the front's database names it (None: no table
    yet)."""
    from pyiceberg.exceptions import NoSuchTableError

    try:
        return _metadata(db_url, None, table)
    except NoSuchTableError:
        return None


def flink_commits(metadata_location: str) -> list[tuple[float, int]]:
    """The Flink job's commits the table's metadata lists (its snapshots: those whose summary
    carries `flink.job-id`), in commit order: (when, on time.time(); rows it added). An upsert
    adds each row it takes as a data row (beside its equality delete), so the rows added sum
    to the rows the job took. Read with pyiceberg; no scan."""
    from demo.health import static_table

    snapshots = static_table(metadata_location).metadata.snapshots
    return [
        (s.timestamp_ms / 1000, int(s.summary["added-records"] or 0))
        for s in sorted(snapshots, key=lambda s: s.sequence_number or 0)
        if s.summary is not None and s.summary["flink.job-id"] is not None
    ]


def front_counts(url: str, token: str) -> tuple[dict[str, int], dict[str, int]]:
    """The front's commits by kind and its refusals by reason, from the service's /metrics
    (any role's `token` reads it)."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    commits: dict[str, int] = {}
    refusals: dict[str, int] = {}
    answer = httpx.get(f"{url}/metrics", headers={"Authorization": f"Bearer {token}"})
    answer.raise_for_status()
    for family in text_string_to_metric_families(answer.text):
        for sample in family.samples:
            if sample.name == "lakelock_catalog_commits_total":
                kind = sample.labels["kind"]
                commits[kind] = commits.get(kind, 0) + int(sample.value)
            elif sample.name == "lakelock_catalog_refusals_total":
                refusals[sample.labels["reason"]] = int(sample.value)
    return commits, refusals


@functools.lru_cache(maxsize=8)
def _catalog(db_url: str, warehouse: Path | None) -> Any:
    """pyiceberg's SQL catalog over the front's database: one per database (and warehouse),
    kept, so a wait that polls the table every half second opens no engine per poll."""
    from pyiceberg.catalog.sql import SqlCatalog

    return SqlCatalog(
        "lakelock", uri=db_url, **({"warehouse": warehouse.as_uri()} if warehouse else {})
    )


def _metadata(db_url: str, warehouse: Path | None, table: str) -> str:
    """The table's current metadata file, read from the front's database (pyiceberg's SQL
    catalog over the JdbcCatalog tables), not through the front."""
    return str(_catalog(db_url, warehouse).load_table(table.split(".", 1)[1]).metadata_location)


def _parser() -> argparse.ArgumentParser:
    defaults = FlinkDemo()
    p = argparse.ArgumentParser(
        prog="bin/run --writer flink",
        description="A Flink upsert job writes through lakelock's catalog front while lakelock's "
        "compactor compacts the same table; then the table, the job's restarts and the front's "
        "refusals are checked.",
        epilog="Exit status: 0 check passed, 1 check failed, 130 interrupted (Ctrl-C).",
    )
    for flag, kind, default, text in (
        ("--files", int, defaults.files, "files to land, one after the other is committed"),
        ("--rows-per-file", int, defaults.rows_per_file, "upserts per file"),
        ("--keys", int, defaults.keys, "distinct keys the upserts draw from"),
        ("--checkpoint-every-s", float, defaults.checkpoint_every_s, "Flink's checkpoints"),
        ("--compactions", int, defaults.compactions, "compactions to reach before stopping"),
        ("--timeout-s", float, defaults.timeout_s, "seconds before giving up"),
        ("--workdir", Path, defaults.workdir, "where the run keeps everything; emptied first"),
        ("--summary", Path, Path("flink-demo-summary.json"), "the summary as JSON"),
    ):
        p.add_argument(flag, type=kind, default=default, help=f"{text} (default %(default)s)")
    p.add_argument("--no-compactor", action="store_true", help="the Flink job alone")
    p.add_argument(
        "--source",
        choices=("files", "kafka", "binlog"),
        default=defaults.source,
        help="the job reads a landing folder, a Kafka topic of 3 partitions on a broker the "
        "run starts, or the binlog of a table of a private MariaDB it starts, which each "
        "file's upserts go to (default %(default)s)",
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    demo = FlinkDemo(
        workdir=args.workdir,
        files=args.files,
        rows_per_file=args.rows_per_file,
        keys=args.keys,
        checkpoint_every_s=args.checkpoint_every_s,
        compactions=0 if args.no_compactor else args.compactions,
        compactor=not args.no_compactor,
        timeout_s=args.timeout_s,
        source=args.source,
        on_progress=lambda line: print(line, flush=True),
    )
    batches = {"files": "files", "kafka": "batches on a Kafka topic", "binlog": "transactions"}[
        args.source
    ]
    print(f"lakelock Flink demo: {args.files} {batches} of {args.rows_per_file} upserts")
    try:
        problems = demo.run()
    except KeyboardInterrupt:
        print("interrupted; everything started was stopped", file=sys.stderr)
        return 130
    summary = {**demo.summary, "checks": {"passed": not problems, "problems": problems}}
    args.summary.parent.mkdir(parents=True, exist_ok=True)
    args.summary.write_text(json.dumps(summary, indent=2) + "\n")
    for key, value in demo.summary.items():
        print(f"  {key:<22}  {value}")
    print(f"\nsummary written to {args.summary}")
    if problems:
        print("CHECK FAILED:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 1
    print(
        f"check passed: {summary['rows_in_table']} rows = {summary['distinct_keys_written']} keys, "
        "each holding its last row; no restart, no refusal"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
