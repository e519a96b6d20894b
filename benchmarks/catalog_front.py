"""Commit latency and throughput through lakelock's catalog front, against the same commits
straight to the JdbcCatalog tables (pyiceberg's SqlCatalog on the same database): the real
limit, what a JDBC-catalog client does without the front.

    python -m benchmarks.catalog_front --commits 200 --writers 8 --seconds 20 \\
        --databases sqlite,mariadb

Two kinds of commit, each alternated between the two paths so both see the same machine:

    append      one row appended by pyiceberg (a parquet file, a manifest, a manifest list, the
                metadata file, the pointer swap): a streaming writer's commit
    properties  one table property set (the metadata file and the swap only): what the front
                adds shows most plainly

Through the front a commit also crosses HTTP, is checked against the leases in the transaction
of its swap, has its new manifests read for the partitions it touched, and is audited. The
figures are the client's wall time per commit (p50, p95) on each path and the difference of the
medians. Then `--writers` processes append to a table each for `--seconds`, first straight to
the catalog, then through the front: commits per second over all of them. `--json` writes
every figure.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

from benchmarks.lease_throughput import (
    DEFAULT_MARIADB_URL,
    comma_list,
    percentile,
    running_service,
    write_figures,
)
from testkit import fresh_database

__all__ = ["Latency", "Throughput", "main"]

CATALOG = "lakelock"
PATHS = ("direct", "front")
KINDS = ("append", "properties")


@dataclass
class Latency:
    database: str
    kind: str
    path: str
    commits: int
    p50_ms: float
    p95_ms: float


@dataclass
class Throughput:
    database: str
    path: str
    writers: int
    seconds: float
    commits: int
    commits_per_s: float


def _catalog(path: str, db_url: str, service_url: str, warehouse: str) -> Any:
    if path == "direct":
        from pyiceberg.catalog.sql import SqlCatalog

        return SqlCatalog(CATALOG, uri=db_url, warehouse=warehouse)
    from pyiceberg.catalog.rest import RestCatalog

    return RestCatalog(CATALOG, uri=f"{service_url}/iceberg")


def _table(catalog: Any, name: str) -> Any:
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import IdentityTransform
    from pyiceberg.types import DateType, LongType, NestedField, StringType

    schema = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "dt", DateType(), required=False),
        NestedField(3, "v", StringType(), required=False),
    )
    spec = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "dt"))
    return catalog.create_table(f"bench.{name}", schema, partition_spec=spec)


def _one_row(i: int) -> Any:
    import pyarrow as pa

    return pa.table(
        {"id": pa.array([i], pa.int64()), "dt": pa.array([date(2024, 6, 20)]), "v": ["x"]}
    )


def _commit(table: Any, kind: str, i: int) -> float:
    started = time.perf_counter()
    if kind == "append":
        table.append(_one_row(i))
    else:
        with table.transaction() as tx:
            tx.set_properties({"bench.commit": str(i)})
    return (time.perf_counter() - started) * 1000


def latencies(
    db_name: str, db_url: str, service_url: str, warehouse: str, commits: int
) -> list[Latency]:
    tables = {
        (path, kind): _table(_catalog(path, db_url, service_url, warehouse), f"{kind}_{path}")
        for path in PATHS
        for kind in KINDS
    }
    results = []
    for kind in KINDS:
        samples: dict[str, list[float]] = {path: [] for path in PATHS}
        for i in range(commits):
            for path in PATHS if i % 2 == 0 else reversed(PATHS):
                samples[path].append(_commit(tables[path, kind], kind, i))
        for path in PATHS:
            values = samples[path][max(1, commits // 10) :]  # the first tenth warms up
            results.append(
                Latency(
                    db_name,
                    kind,
                    path,
                    len(values),
                    percentile(values, 0.5),
                    percentile(values, 0.95),
                )
            )
    return results


def _writer(args: tuple[str, str, str, str, str, float]) -> int:
    path, db_url, service_url, warehouse, name, seconds = args
    table = _catalog(path, db_url, service_url, warehouse).load_table(f"bench.{name}")
    done, until, i = 0, time.monotonic() + seconds, 0
    while time.monotonic() < until:
        table.append(_one_row(i))
        done, i = done + 1, i + 1
    return done


def throughput(
    db_name: str, db_url: str, service_url: str, warehouse: str, writers: int, seconds: float
) -> list[Throughput]:
    results = []
    for path in PATHS:
        catalog = _catalog(path, db_url, service_url, warehouse)
        names = [f"load_{path}_{n}" for n in range(writers)]
        for name in names:
            _table(catalog, name)
        jobs = [(path, db_url, service_url, warehouse, name, seconds) for name in names]
        with multiprocessing.get_context("spawn").Pool(writers) as pool:
            started = time.monotonic()
            done = sum(pool.map(_writer, jobs))
            elapsed = time.monotonic() - started
        results.append(
            Throughput(db_name, path, writers, seconds, done, done / max(elapsed, seconds))
        )
    return results


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.catalog_front", description=__doc__.split("\n")[0]
    )
    p.add_argument("--commits", type=int, default=200, help="commits per path and kind")
    p.add_argument("--writers", type=int, default=8, help="writer processes for throughput")
    p.add_argument("--seconds", type=float, default=20.0, help="seconds of the throughput run")
    p.add_argument("--databases", type=comma_list, default=["sqlite", "mariadb"])
    p.add_argument("--mariadb-url", default=DEFAULT_MARIADB_URL)
    p.add_argument("--json", type=Path, help="write every figure to this file")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    rows: list[Any] = []
    overheads = []
    print(f"{'database':9} {'kind':11} {'path':7} {'commits':>7} {'p50_ms':>8} {'p95_ms':>8}")
    for db_name in args.databases:
        with (
            tempfile.TemporaryDirectory(prefix="lakelock-catalog-front-") as tmp,
            ExitStack() as stack,
        ):
            work = Path(tmp)
            db_url = stack.enter_context(
                fresh_database(db_name, mariadb_url=args.mariadb_url, workdir=work)
            )
            warehouse = (work / "warehouse").as_uri()
            service_url = stack.enter_context(
                running_service(
                    db_url, log_path=work / "service.log", LAKELOCK_CATALOG_WAREHOUSE=warehouse
                )
            )
            _catalog("front", db_url, service_url, warehouse).create_namespace("bench")
            measured = latencies(db_name, db_url, service_url, warehouse, args.commits)
            for r in measured:
                figures = f"{r.commits:7} {r.p50_ms:8.1f} {r.p95_ms:8.1f}"
                print(f"{r.database:9} {r.kind:11} {r.path:7} {figures}")
            for kind in KINDS:
                by_path = {r.path: r for r in measured if r.kind == kind}
                extra = by_path["front"].p50_ms - by_path["direct"].p50_ms
                overheads.append(
                    {"database": db_name, "kind": kind, "front_minus_direct_p50_ms": extra}
                )
                print(f"{db_name:9} {kind:11} front - direct at p50: {extra:+.1f} ms")
            loaded = throughput(db_name, db_url, service_url, warehouse, args.writers, args.seconds)
            for t in loaded:
                print(
                    f"{t.database:9} {t.writers} writers {t.path:7} {t.commits:6} commits "
                    f"{t.commits_per_s:7.1f}/s"
                )
            rows += measured + loaded
    if args.json:
        write_figures(args.json, argv, rows, overheads=overheads)
    return 0


if __name__ == "__main__":
    sys.exit(main())
