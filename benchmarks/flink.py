"""The Flink upsert job (flink_writer) through lakelock's catalog front, against the same job
straight to a JdbcCatalog on the same MariaDB server (the real limit: what the job does without
lakelock), each with and without lakelock's compactor compacting the table meanwhile.

    python -m benchmarks.flink --files 60 --rows-per-file 2000 --file-every-s 1
    python -m benchmarks.flink --source kafka  # the rows as messages on a Kafka topic
    python -m benchmarks.flink --held 20     # each writer against 20 compactions instead

Per cell, a fresh MariaDB database for the catalog (the front's lock database, or the bare
JdbcCatalog's) and a new table, then the job started and idle; then `--files` files of
`--rows-per-file` upserts land, one every `--file-every-s` (a stream of that many rows/s); with
`--source kafka` each file's rows are produced to a topic of `--partitions` partitions on a
broker the run starts (bin/kafka-local's), which the job reads with Flink's Kafka connector. The
figures:

    rows/s       rows landed / (the commit that took the last of them - the first landing)
    lag p50/p95  per file: its landing to the commit that took it (each Flink snapshot's
                 added-records, summed, say which files a commit completed: pyiceberg reads
                 the snapshot summaries, no Spark scan)
    commits      the job's commits; restarts (Flink's numRestarts: a refused commit restarts
                 the job); the front's refusals; compactions and how each ended
    files        the worst partition's data and delete files at the end, and every 10 s while
                 the stream lands (`worst_over_time`, in --json; its peak on the line printed)

With the compactor, lakelock's compactor (one Spark session, local[2]) runs after run on the
table from the job's first commit, through the front (front cells) or the JdbcCatalog with
lakelock's leases (jdbc cells). Both share the machine's cores with the job.

`--held N` measures what the front's holds cost a writer instead: through the front, the Flink
upsert job (a file landed as soon as the one before is committed), then a Spark writer
appending a row per commit to the same partitions, each until the compactor compacted the table
N times: the writer's commits and failed commits (for Flink its restarts), the front's refusals,
the compactions. `--json out.json` writes every figure.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from benchmarks.lease_throughput import DEFAULT_MARIADB_URL, comma_list, percentile, write_figures

__all__ = ["Cell", "Held", "main"]

CATALOGS = ("front", "jdbc")
MARIADB_JAR = Path("/usr/share/java/mariadb-java-client.jar")
TABLE = "db.events"


@dataclass
class Cell:
    catalog: str
    compactor: bool
    rows: int = 0
    seconds: float = 0.0
    rows_per_s: float = 0.0
    lag_p50_s: float = 0.0
    lag_p95_s: float = 0.0
    commits: int = 0
    restarts: int = 0
    refusals: dict[str, int] = field(default_factory=dict)
    refused: list[dict[str, Any]] = field(default_factory=list)  # the first refusals' events
    compactions: list[str] = field(default_factory=list)
    worst_data_files: int = 0
    worst_delete_files: int = 0
    # the worst partition's files, sampled every SAMPLE_EVERY_S while the stream lands
    worst_over_time: list[tuple[float, int, int]] = field(default_factory=list)


SAMPLE_EVERY_S = 10.0


@dataclass
class Held:
    writer: str
    compactions: int = 0
    compactions_committed: int = 0
    commits: int = 0
    failed_commits: int = 0
    refusals: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0


@contextmanager
def database(mariadb_url: str) -> Iterator[str]:
    """A new, empty MariaDB database on the server; dropped afterwards. Yields its URL."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    name = f"lakelock_bench_{uuid.uuid4().hex[:8]}"
    admin = create_engine(mariadb_url)
    with admin.begin() as conn:
        conn.execute(text(f"CREATE DATABASE {name}"))
    try:
        yield make_url(mariadb_url).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.begin() as conn:
            conn.execute(text(f"DROP DATABASE IF EXISTS {name}"))
        admin.dispose()


def jdbc_properties(db_url: str) -> dict[str, str]:
    """Iceberg's JdbcCatalog on the database `db_url` names, through MariaDB Connector/J."""
    from sqlalchemy.engine import make_url

    url = make_url(db_url)
    return {
        "catalog-impl": "org.apache.iceberg.jdbc.JdbcCatalog",
        "uri": f"jdbc:mariadb://{url.host}:{url.port or 3306}/{url.database}",
        "jdbc.user": url.username or "root",
        "jdbc.password": url.password or "",
    }


class Bench:
    """The cells of one run, over one Spark session (the compactor's), each cell's catalog
    registered in it under a name of its own."""

    def __init__(self, args: argparse.Namespace, workdir: Path, kafka: Any = None) -> None:
        from demo.flink import PATH_READS
        from jobkit.spark import CatalogConfig, build_session

        self.args = args
        self.workdir = workdir
        self.kafka = kafka  # --source kafka: the broker each cell's topic lives on
        self.spark = build_session(
            CatalogConfig(name="scratch", warehouse=(workdir / "scratch").as_uri()),
            app_name="lakelock-bench-flink",
            master="local[2]",
            extra_conf={
                "spark.sql.shuffle.partitions": "2",
                "spark.driver.extraClassPath": str(MARIADB_JAR),
                **PATH_READS,
                "spark.sql.catalog.default_iceberg.warehouse": (workdir / "paths").as_uri(),
            },
        )
        self.spark.sparkContext.setLogLevel("ERROR")

    def cell(self, catalog: str, compactor: bool, n: int) -> Cell:
        from demo.service import LocalService
        from service.client import LeaseClient
        from service.lock import migrate

        name = f"{catalog}_{n}"  # the Spark catalog, and the front's catalog name
        folder = self.workdir / name
        folder.mkdir()
        warehouse = folder / "warehouse"
        with ExitStack() as stack:
            db_url = stack.enter_context(database(self.args.mariadb_url))
            lock_db = db_url
            env = {"LAKELOCK_CATALOG_NAME": name}
            if catalog == "front":
                env["LAKELOCK_CATALOG_WAREHOUSE"] = warehouse.as_uri()
            else:  # the lock tables apart from the bare catalog's
                lock_db = f"sqlite:///{folder / 'lakelock.db'}"
            migrate.upgrade(lock_db)
            service = stack.enter_context(
                LocalService.start(db_url=lock_db, log_path=folder / "service.log", **env)
            )
            client = LeaseClient(service.url, token=service.token("job"))
            properties = (
                {"uri": f"{service.url}/iceberg", "token": service.token("job")}
                if catalog == "front"
                else jdbc_properties(db_url)
            )
            self._register(name, catalog, warehouse, properties)
            result = self._run(name, catalog, compactor, folder, service, client, db_url)
            if catalog == "front":
                from demo.flink import front_counts

                result.refusals = front_counts(service.url, service.token("reader"))[1]
                operator = LeaseClient(service.url, token=service.token("operator"))
                trail = operator.events(table=f"{name}.{TABLE}", limit=1000)
                result.refused = [e for e in trail if e["event"] == "catalog.refused"][-5:]
            return result

    def _register(
        self, name: str, catalog: str, warehouse: Path, properties: dict[str, str]
    ) -> None:
        from jobkit.spark import CatalogConfig

        kind = "rest" if catalog == "front" else "jdbc"
        config = CatalogConfig(
            name=name, type=kind, warehouse=warehouse.as_uri(), properties=properties
        )
        for key, value in config.spark_conf().items():
            self.spark.conf.set(key, value)

    def _run(
        self,
        name: str,
        catalog: str,
        compactor: bool,
        folder: Path,
        service: Any,
        client: Any,
        db_url: str,
    ) -> Cell:
        from compactor.config import LeaseConfig, PlanConfig, TableConfig
        from demo.flink import (
            Compactor,
            TopicFeed,
            UpsertFeed,
            source_args,
            wait_until,
            writer_args,
        )
        from jobkit.flink import FlinkWriter

        args = self.args
        feed = UpsertFeed(folder / "landing", keys=args.keys, seed=1)
        if self.kafka is not None:  # each file's rows as messages on a topic of the cell's
            self.kafka.create_topic(name, partitions=args.partitions)
            feed = TopicFeed(self.kafka, name, folder / "landing", keys=args.keys, seed=1)
        argv = writer_args(
            catalog_uri=f"{service.url}/iceberg",
            catalog_name=name,
            table=TABLE,
            checkpoints=folder / "checkpoints",
            checkpoint_every_s=args.checkpoint_every_s,
            **source_args(feed),
        )
        if catalog == "jdbc":  # the same job, straight to the catalog
            properties = {**jdbc_properties(db_url), "warehouse": (folder / "warehouse").as_uri()}
            for key, value in properties.items():
                argv += ["--catalog-property", f"{key}={value}"]
        writer = FlinkWriter.start(
            args=argv,
            token=service.token("job"),
            log_path=folder / "flink.log",
            jars=(MARIADB_JAR,) if catalog == "jdbc" else (),
        )
        cell = Cell(catalog=catalog, compactor=compactor)
        table = _Table(self.spark, name)
        runs = Compactor(
            self.spark,
            client,
            TableConfig(
                f"{name}.{TABLE}",
                lease=LeaseConfig(ttl=timedelta(seconds=30)),
                plan=PlanConfig(min_small_files=2, min_delete_files=1),
            ),
            on_progress=lambda line: None,
        )
        try:
            writer.job_id(timeout_s=args.timeout_s)
            deadline = time.monotonic() + args.timeout_s
            wait_until("the table", table.exists, writer=writer, deadline=deadline)
            if compactor:
                runs.start()
            landed: list[tuple[float, int]] = []  # (when, rows landed by then)
            commits: list[tuple[float, int]] = []  # (seen at, rows committed by then)
            seen = 0

            def caught_up() -> bool:
                nonlocal seen
                total = table.flink_rows()
                if total > seen:
                    commits.append((time.monotonic(), total))
                    seen = total
                return total >= feed.rows

            start = sampled = time.monotonic()
            for i in range(args.files):
                while time.monotonic() < start + i * args.file_every_s:
                    caught_up()  # commits seen as they land, not after the last file
                    if time.monotonic() >= sampled + SAMPLE_EVERY_S:
                        sampled = time.monotonic()
                        worst = table.worst_partition()
                        cell.worst_over_time.append((round(sampled - start, 1), *worst))
                    time.sleep(0.2)
                feed.write(rows=args.rows_per_file)
                landed.append((time.monotonic(), feed.rows))

            wait_until(
                "every row committed", caught_up, writer=writer, deadline=deadline, compactor=runs
            )
        finally:
            runs.stop(args.timeout_s)
            report = writer.stop()
        cell.rows = feed.rows
        cell.seconds = round(commits[-1][0] - landed[0][0], 2)
        cell.rows_per_s = round(feed.rows / cell.seconds, 1)
        lags = [next(at for at, total in commits if total >= rows) - when for when, rows in landed]
        cell.lag_p50_s = round(percentile(lags, 0.5), 2)
        cell.lag_p95_s = round(percentile(lags, 0.95), 2)
        cell.commits = table.flink_commits()
        cell.restarts = int(report["restarts"])
        cell.compactions = [r.outcome.value for r in runs.runs]
        cell.worst_data_files, cell.worst_delete_files = table.worst_partition()
        return cell


class _Table:
    """The benchmark's table in a cell's catalog, read through Spark's metadata tables and
    its snapshot summaries (no scan of its rows)."""

    def __init__(self, spark: Any, catalog: str) -> None:
        self.spark = spark
        self.name = f"{catalog}.{TABLE}"

    def exists(self) -> bool:
        return bool(self.spark.catalog.tableExists(self.name))

    def _flink_snapshots(self) -> list[Any]:
        return [
            row
            for row in self.spark.sql(f"SELECT summary FROM {self.name}.snapshots").collect()
            if "flink.job-id" in row.summary
        ]

    def flink_rows(self) -> int:
        """Rows the job committed: its snapshots' added-records (an upsert adds each row as
        a new data row beside its equality delete)."""
        return sum(int(s.summary.get("added-records", 0)) for s in self._flink_snapshots())

    def flink_commits(self) -> int:
        return len(self._flink_snapshots())

    def worst_partition(self) -> tuple[int, int]:
        row = self.spark.sql(
            f"""SELECT max(file_count) AS data,
                max(position_delete_file_count + equality_delete_file_count) AS deletes
                FROM {self.name}.partitions"""
        ).first()
        return int(row.data or 0), int(row.deletes or 0)


def held(args: argparse.Namespace, workdir: Path) -> list[Held]:
    """Each writer through the front against `args.held` compactions of its table."""
    from compactor.config import LeaseConfig, PlanConfig, TableConfig
    from demo.flink import FlinkDemo, front_counts

    flink = FlinkDemo(
        workdir=workdir / "flink",
        files=1,
        rows_per_file=args.rows_per_file,
        keys=args.keys,
        checkpoint_every_s=args.checkpoint_every_s,
        compactions=args.held,
        timeout_s=args.timeout_s,
        on_progress=lambda line: None,
    )
    started = time.monotonic()
    problems = flink.run()
    s = flink.summary
    results = [
        Held(
            writer="flink upsert",
            compactions=len(s["compactions"]),
            compactions_committed=s["compactions"].count("compacted"),
            commits=s["front_commits"].get("data", 0),
            failed_commits=int(s["flink_job"]["restarts"]) + len(problems),
            refusals=s["front_refusals"],
            seconds=round(time.monotonic() - started, 1),
        )
    ]
    from demo.service import LocalService
    from service.client import LeaseClient
    from service.lock import migrate

    folder = workdir / "spark"
    folder.mkdir()
    db_url = f"sqlite:///{folder / 'lakelock.db'}"
    migrate.upgrade(db_url)
    warehouse = folder / "warehouse"
    with LocalService.start(
        db_url=db_url,
        log_path=folder / "service.log",
        LAKELOCK_CATALOG_WAREHOUSE=warehouse.as_uri(),
        LAKELOCK_CATALOG_NAME="appends",
    ) as service:
        bench = Bench(args, folder)
        properties = {"uri": f"{service.url}/iceberg", "token": service.token("job")}
        bench._register("appends", "front", warehouse, properties)
        client = LeaseClient(service.url, token=service.token("job"))
        config = TableConfig(
            f"appends.{TABLE}",
            lease=LeaseConfig(ttl=timedelta(seconds=30)),
            plan=PlanConfig(min_small_files=2, min_delete_files=1),
        )
        started = time.monotonic()
        result = _spark_appends(bench.spark, client, config, args)
        result.refusals = front_counts(service.url, service.token("reader"))[1]
        result.seconds = round(time.monotonic() - started, 1)
        bench.spark.stop()
    return [*results, result]


def _spark_appends(spark: Any, client: Any, config: Any, args: argparse.Namespace) -> Held:
    """A Spark writer appending one row per commit into the table's 4 partitions until the
    compactor compacted it `args.held` times."""
    from demo.flink import COLUMNS, Compactor

    table = config.name
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {table.rsplit('.', 1)[0]}")
    spark.sql(
        f"CREATE TABLE {table} ({COLUMNS}) USING iceberg "
        "PARTITIONED BY (dt, hr) TBLPROPERTIES ('format-version' = '2')"
    )
    result = Held(writer="spark append")
    compactor = Compactor(spark, client, config, on_progress=lambda line: None)
    compactor.start()
    deadline = time.monotonic() + args.timeout_s
    try:
        while len(compactor.runs) < args.held and time.monotonic() < deadline:
            n = result.commits + result.failed_commits
            try:
                spark.sql(
                    f"INSERT INTO {table} VALUES ('a{n}', '2024-06-2{n % 2}', {n // 2 % 2}, {n})"
                )
                result.commits += 1
            except Exception:  # a failed commit: what the figure counts
                result.failed_commits += 1
    finally:
        compactor.stop(args.timeout_s)
    result.compactions = len(compactor.runs)
    result.compactions_committed = sum(r.outcome.value == "compacted" for r in compactor.runs)
    return result


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.flink", description=__doc__)
    p.add_argument("--files", type=int, default=60)
    p.add_argument("--rows-per-file", type=int, default=2000)
    p.add_argument("--file-every-s", type=float, default=1.0)
    p.add_argument("--keys", type=int, default=20_000, help="distinct keys upserted")
    p.add_argument("--checkpoint-every-s", type=float, default=3.0)
    p.add_argument("--catalogs", type=comma_list, default=list(CATALOGS))
    p.add_argument("--compactor", type=comma_list, default=["off", "on"])
    p.add_argument("--timeout-s", type=float, default=900.0)
    p.add_argument("--mariadb-url", default=DEFAULT_MARIADB_URL)
    p.add_argument("--held", type=int, help="each writer against this many compactions")
    p.add_argument(
        "--source",
        choices=("files", "kafka"),
        default="files",
        help="the job reads landed files, or each file's rows as messages on a topic of a "
        "broker the run starts (upsert-kafka)",
    )
    p.add_argument("--partitions", type=int, default=3, help="--source kafka: the topics'")
    p.add_argument("--json", type=Path)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if not MARIADB_JAR.is_file():
        print(f"{MARIADB_JAR} is missing: apt-get install libmariadb-java", file=sys.stderr)
        return 2
    if args.held:
        with tempfile.TemporaryDirectory(prefix="lakelock-bench-flink-") as tmp:
            results = held(args, Path(tmp))
        for r in results:
            print(
                f"{r.writer:<13} {r.commits} commits, {r.failed_commits} failed, "
                f"refusals {r.refusals or 0}, {r.compactions} compactions "
                f"({r.compactions_committed} committed) in {r.seconds:.0f}s"
            )
        if args.json:
            write_figures(args.json, argv, results)
        return 0
    cells: list[Cell] = []
    with tempfile.TemporaryDirectory(prefix="lakelock-bench-flink-") as tmp, ExitStack() as stack:
        kafka = None
        if args.source == "kafka":
            from demo.kafka import LocalKafka

            kafka = stack.enter_context(LocalKafka.start(Path(tmp) / "kafka"))
        bench = Bench(args, Path(tmp), kafka)
        try:
            n = 0
            for compactor in args.compactor:
                for catalog in args.catalogs:
                    n += 1
                    cell = bench.cell(catalog, compactor == "on", n)
                    cells.append(cell)
                    print(_line(cell), flush=True)
        finally:
            bench.spark.stop()
    if args.json:
        write_figures(args.json, argv, cells)
    return 0


def _line(cell: Cell) -> str:
    return (
        f"{cell.catalog:<6} compactor {'on ' if cell.compactor else 'off'}  "
        f"{cell.rows} rows in {cell.seconds:.1f}s = {cell.rows_per_s:.0f} rows/s  "
        f"lag p50 {cell.lag_p50_s:.1f}s p95 {cell.lag_p95_s:.1f}s  commits {cell.commits}  "
        f"restarts {cell.restarts}  refusals {sum(cell.refusals.values())}  "
        f"compactions {len(cell.compactions)} {sorted(set(cell.compactions))}  "
        f"worst partition {cell.worst_data_files} data / {cell.worst_delete_files} delete files "
        f"(peak while landing {max((w[1] for w in cell.worst_over_time), default=0)} / "
        f"{max((w[2] for w in cell.worst_over_time), default=0)})"
    )


if __name__ == "__main__":
    sys.exit(main())
