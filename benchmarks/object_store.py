"""What a commit costs on object storage: the S3 requests and the time of an append, an upsert
and a compaction, through lakelock's catalog front against the same commit straight to a
JdbcCatalog (the real limit: what Spark does without lakelock), both on the project's S3 server.

    python -m benchmarks.object_store --rounds 20
    python -m benchmarks.object_store --rounds 20 --storage file    # the same on local files
    python -m benchmarks.object_store --rounds 1 --warmup 1 --json out.json   # the tests' size

One S3 server (demo.s3: S3Proxy over a local folder, on loopback; its requests counted from
its own log), one Spark session (local[2], Iceberg's S3FileIO from the AWS bundle) with both
catalogs registered: `front` (Iceberg's RESTCatalog on a lakelock service whose warehouse is
on the S3 server, its lock database a fresh MariaDB database) and `jdbc` (Iceberg's JdbcCatalog
on another fresh MariaDB database, the same S3 server). Each round, in each catalog, in turn:

    append       4 x INSERT of 20 rows into one partition (a fast append)
    upsert       a MERGE INTO updating 10 rows and inserting 10 (merge-on-read: position
                 deletes against the older files)
    compaction   rewrite_data_files of the table, under a maintenance lease of lakelock (the
                 front checks it; the JdbcCatalog carries it as a label)

Per operation: p50 and p95 of the statement's time (the whole statement: reading the table,
writing its files, the commit), and the S3 requests served during it, by kind (GET, PUT,
LIST, HEAD, DELETE, POST), per statement, and the front's extra (front less jdbc). The front's
own reads of a commit are the new manifest list and the new manifests (one GET each; the
parent's list and metadata are those of its last commit, kept in memory) and its write is the
metadata file (one conditional PUT): docs/catalogs.md, "Object storage". `--json` writes
every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections import Counter
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.flink import MARIADB_JAR, database, jdbc_properties
from benchmarks.lease_throughput import DEFAULT_MARIADB_URL, comma_list, percentile, write_figures

__all__ = ["Op", "main"]

CATALOGS = ("front", "jdbc")
OPERATIONS = ("append", "upsert", "compaction")
KINDS = ("GET", "PUT", "LIST", "HEAD", "DELETE", "POST")
TABLE = "db.events"


@dataclass
class Op:
    catalog: str
    operation: str
    count: int = 0
    p50_ms: float = 0.0
    p95_ms: float = 0.0
    requests: dict[str, float] = field(default_factory=dict)  # per statement, by kind
    times_ms: list[float] = field(default_factory=list)


class Bench:
    def __init__(self, args: argparse.Namespace, workdir: Path) -> None:
        from demo.s3 import LocalS3

        self.args = args
        self.workdir = workdir
        self.stack = ExitStack()
        self.s3 = self.stack.enter_context(LocalS3.start(workdir / "s3", count=True))
        os.environ.update(self.s3.env)  # Spark's keys: the standard AWS chain
        self.spark: Any = None
        self.front_commit_ms: list[float] = []
        self.ops: dict[tuple[str, str], Op] = {}

    def close(self) -> None:
        if self.spark is not None:
            self.spark.stop()
        self.stack.close()

    def run(self) -> list[Op]:
        from jobkit.spark import build_session

        catalogs, clients = self._catalogs()
        first, *others = catalogs.values()
        extra = {
            "spark.sql.shuffle.partitions": "2",
            "spark.driver.extraClassPath": str(MARIADB_JAR),
        }
        for other in others:
            extra.update(other.spark_conf())
        self.spark = build_session(
            first, app_name="lakelock-bench-object-store", master="local[2]", extra_conf=extra
        )
        self.spark.sparkContext.setLogLevel("ERROR")
        self.ops = {(c, o): Op(c, o) for c in catalogs for o in OPERATIONS}
        self.totals: dict[tuple[str, str], Counter[str]] = {key: Counter() for key in self.ops}
        for name in catalogs:
            self._create(name)
        log = self.workdir / "service-front.log"
        counted = 0  # the service's log lines before the counted rounds
        for round_ in range(-self.args.warmup, self.args.rounds):
            if round_ == 0:  # the warm-up rounds are not counted (the JVM compiles meanwhile)
                for key, op in self.ops.items():
                    op.times_ms.clear()
                    self.totals[key].clear()
                counted = len(log.read_text().splitlines()) if log.exists() else 0
            for name in catalogs:  # in turn: neither catalog runs on a warmer machine
                self._round(name, clients[name], round_ + self.args.warmup)
        self.front_commit_ms = _commit_times(log, counted)
        for key, op in self.ops.items():
            op.count = len(op.times_ms)
            op.p50_ms = round(percentile(op.times_ms, 0.5), 1)
            op.p95_ms = round(percentile(op.times_ms, 0.95), 1)
            op.requests = {k: round(self.totals[key][k] / max(op.count, 1), 2) for k in KINDS}
        return list(self.ops.values())

    def _catalogs(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """Each catalog's service (the front's lock database and catalog a fresh MariaDB
        database; the bare JdbcCatalog's another, its leases on SQLite), its Spark catalog and
        a job client of its leases."""
        from demo.s3 import REGION
        from demo.service import LocalService
        from jobkit.spark import CatalogConfig
        from service.client import LeaseClient
        from service.lock import migrate

        s3 = {
            "s3.endpoint": self.s3.endpoint,
            "s3.path-style-access": "true",
            "client.region": REGION,
        }
        catalogs: dict[str, CatalogConfig] = {}
        clients: dict[str, Any] = {}
        on_s3 = self.args.storage == "s3"
        for name in self.args.catalogs:
            db_url = self.stack.enter_context(database(self.args.mariadb_url))
            warehouse = (
                self.s3.warehouse(name) if on_s3 else (self.workdir / name).resolve().as_uri()
            )
            # info: the request log's lines, whose durations give the front's own commit time
            env = {"LAKELOCK_CATALOG_NAME": name, "LAKELOCK_LOG_LEVEL": "info"}
            lock_db = db_url
            if name == "front":
                env |= {"LAKELOCK_CATALOG_WAREHOUSE": warehouse}
                env |= self.s3.settings if on_s3 else {}
            else:  # the lock tables apart from the bare catalog's
                lock_db = f"sqlite:///{self.workdir / 'lakelock.db'}"
            migrate.upgrade(lock_db)
            service = self.stack.enter_context(
                LocalService.start(
                    db_url=lock_db, log_path=self.workdir / f"service-{name}.log", **env
                )
            )
            clients[name] = self.stack.enter_context(
                LeaseClient(service.url, token=service.token("job"))
            )
            properties = (
                {"uri": f"{service.url}/iceberg", "token": service.token("job")}
                if name == "front"
                else jdbc_properties(db_url)
            )
            kind = "rest" if name == "front" else "jdbc"
            catalogs[name] = CatalogConfig(
                name=name,
                type=kind,
                warehouse=warehouse,
                properties={**properties, **(s3 if on_s3 else {})},
            )
        return catalogs, clients

    def _round(self, name: str, client: Any, n: int) -> None:
        """Four appends, an upsert, a compaction under a maintenance lease; `n` numbers the
        round's rows."""
        for i in range(4):
            self._measure(name, "append", self._append, n * 4 + i)
        self._measure(name, "upsert", self._upsert, n)
        lease = client.acquire_maintenance(f"{name}.{TABLE}", holder="bench-compactor", ttl_s=120)
        try:
            self._measure(name, "compaction", self._compact, n, lease=lease)
        finally:
            client.release(lease)

    def _measure(self, name: str, operation: str, do: Any, n: int, **more: Any) -> None:
        before = self.s3.requests()
        started = time.perf_counter()
        do(name, n, **more)
        self.ops[(name, operation)].times_ms.append((time.perf_counter() - started) * 1000)
        self.totals[(name, operation)] += self.s3.requests() - before

    def _create(self, name: str) -> None:
        self.spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {name}.db")
        self.spark.sql(
            f"""CREATE TABLE {name}.{TABLE} (id BIGINT, dt DATE, v STRING) USING iceberg
            PARTITIONED BY (dt)
            TBLPROPERTIES ('format-version' = '2', 'write.merge.mode' = 'merge-on-read',
                           'write.update.mode' = 'merge-on-read',
                           'write.delete.mode' = 'merge-on-read',
                           'write.distribution-mode' = 'none')"""
        )

    def _append(self, name: str, n: int) -> None:
        self.spark.sql(
            f"""INSERT INTO {name}.{TABLE} SELECT id, DATE '2024-06-20', 'v' || id
            FROM range({n * 20}, {(n + 1) * 20}, 1, 1)"""
        )

    def _upsert(self, name: str, n: int) -> None:
        low = n * 80
        self.spark.sql(
            f"""MERGE INTO {name}.{TABLE} t
            USING (SELECT id, DATE '2024-06-20' AS dt, 'u' || id AS v
                   FROM range({low + 70}, {low + 90}, 1, 1)) s
            ON t.id = s.id AND t.dt = s.dt
            WHEN MATCHED THEN UPDATE SET v = s.v
            WHEN NOT MATCHED THEN INSERT *"""
        )

    def _compact(self, name: str, n: int, *, lease: Any) -> None:
        from compactor.plan import Step
        from compactor.procedure import run_step

        properties = {"lakelock.lease-id": lease.lease_id, "lakelock.token": str(lease.token)}
        step = Step("rewrite_data_files", "small files", options={"min-input-files": "2"})
        run_step(self.spark, table=f"{name}.{TABLE}", step=step, properties=properties)


def _commit_times(log: Path, skip: int) -> list[float]:
    """The front's own time of each table commit (its request log's `duration_ms` of the
    POSTs to the table), after the first `skip` lines."""
    if not log.exists():
        return []
    found = []
    for line in log.read_text().splitlines()[skip:]:
        if not line.startswith("{"):
            continue
        entry = json.loads(line)
        path = str(entry.get("path", ""))
        if entry.get("method") == "POST" and path.endswith(f"/tables/{TABLE.split('.')[1]}"):
            found.append(float(entry["duration_ms"]))
    return found


def show(ops: list[Op]) -> str:
    lines = [
        f"{'operation':<11} {'catalog':<6} {'n':>3} {'p50 ms':>8} {'p95 ms':>8}  "
        + " ".join(f"{k:>6}" for k in KINDS)
    ]
    by = {(o.catalog, o.operation): o for o in ops}
    for operation in OPERATIONS:
        for catalog in CATALOGS:
            op = by.get((catalog, operation))
            if op is None:
                continue
            lines.append(
                f"{operation:<11} {catalog:<6} {op.count:>3} {op.p50_ms:>8.1f} {op.p95_ms:>8.1f}  "
                + " ".join(f"{op.requests[k]:>6.2f}" for k in KINDS)
            )
        front, jdbc = by.get(("front", operation)), by.get(("jdbc", operation))
        if front and jdbc:
            lines.append(
                f"{operation:<11} {'extra':<6} {'':>3} {front.p50_ms - jdbc.p50_ms:>+8.1f} "
                f"{front.p95_ms - jdbc.p95_ms:>+8.1f}  "
                + " ".join(f"{front.requests[k] - jdbc.requests[k]:>+6.2f}" for k in KINDS)
            )
    return "\n".join(lines)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.object_store", description=__doc__)
    p.add_argument(
        "--rounds", type=int, default=20, help="rounds of 4 appends, 1 upsert, 1 rewrite"
    )
    p.add_argument("--warmup", type=int, default=2, help="rounds run first, not counted")
    p.add_argument(
        "--storage",
        choices=("s3", "file"),
        default="s3",
        help="s3: both warehouses on the S3 server; file: on local files (no request counts)",
    )
    p.add_argument("--catalogs", type=comma_list, default=list(CATALOGS))
    p.add_argument("--mariadb-url", default=DEFAULT_MARIADB_URL)
    p.add_argument("--json", type=Path)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if not MARIADB_JAR.is_file():
        print(f"{MARIADB_JAR} is missing: apt-get install libmariadb-java", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="lakelock-bench-s3-") as tmp:
        bench = Bench(args, Path(tmp))
        try:
            ops = bench.run()
        finally:
            bench.close()
    print(show(ops))
    commits = bench.front_commit_ms
    if commits:
        print(
            f"the front's own commit (its request log, {len(commits)} commits): p50 "
            f"{percentile(commits, 0.5):.1f} ms, p95 {percentile(commits, 0.95):.1f} ms"
        )
    if args.json:
        write_figures(args.json, argv, ops, front_commit_ms=commits)
    return 0


if __name__ == "__main__":
    sys.exit(main())
