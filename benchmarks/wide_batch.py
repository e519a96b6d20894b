"""What the MERGE of one micro-batch costs by the number of partitions it spans, under each
partition filter the ingest job could give it, on a table of many small files.

    python -m benchmarks.wide_batch                          # 1,000 partitions x 30 files
    python -m benchmarks.wide_batch --warehouse var/wide     # keep the table for the next run
    python -m benchmarks.wide_batch --partitions 40 --files 2 --widths 1,40 --json out.json
    python -m benchmarks.wide_batch --fanout --widths 500    # Iceberg's default writer

The table is the demo's click-event table (demo.generate: partitioned by dt, hr),
written in `--files` rounds of one INSERT each, every round one file of `--rows-per-file` rows
in each of `--partitions` consecutive hour partitions: 1,000 x 30 = 30,000 data files by
default. A `--warehouse` folder keeps it (with `wide-batch.json`, its shape and first snapshot)
and a later run with the same shape reuses it.

Each batch has `--rows` rows over K partitions (`--widths`), a partition's first half of rows
updates keys the table holds (so the MERGE writes position deletes too) and the rest are new
keys; `--layout recent` puts them in the K newest hours (a stream catching up), `spread` in K
hours spread evenly over the whole table (late data from everywhere: where a per-field superset
admits the most partitions it does not need). The MERGE is the ingest job's own statement
(ingest_gate.job.merge.merge_sql) with each partition filter (`--filters`):

    none      no partition filter: the MERGE reads every file of the table
    exact     partition_predicate: one OR term per partition (the job's up to
              exact_filter_max_partitions)
    superset  partition_superset: one IN list per partition field (the job's past it)

Per MERGE: seconds (planning, reading, writing, commit), the data files the filter plans (its
scan alone, planned again after), the driver's old-generation heap peak during it (what outlived
young collections: the memory a batch of that width needs), and a check of the snapshot it
committed (rows added = the batch's rows; position deletes = its updates). After each MERGE the
table is rolled back to the snapshot before it, so every MERGE meets the same table; the first
MERGE of a run (K = 1, exact) only warms the JVM up. One local[2] session with the job's
settings and Spark's default driver heap (1 GiB, unless spark-submit or PYSPARK_SUBMIT_ARGS set
one); with `--fanout` the table is written with Iceberg's fanout writer for the measured MERGEs
(as tables were before the job set `write.spark.fanout.enabled=false`): a MERGE that fails is
reported with its error, and a run whose Spark context died stops there.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

__all__ = ["Result", "Shape", "batch_rows", "build_table", "main", "measure"]

TABLE = "local.db.wide"
START = datetime(2024, 1, 1)
FILTERS = ("none", "exact", "superset")
LAYOUTS = ("recent", "spread")
MARKER = "wide-batch.json"


@dataclass(frozen=True)
class Shape:
    """The table: `files` files of `rows_per_file` rows in each of `partitions` hours."""

    partitions: int
    files: int
    rows_per_file: int


@dataclass
class Result:
    """One MERGE: a batch of `rows` rows over `width` partitions under filter `kind`."""

    width: int
    layout: str
    kind: str
    rows: int
    seconds: float | None = None
    files_planned: int | None = None
    filter_chars: int = 0
    old_gen_peak_mib: int | None = None
    error: str | None = None


# -- the table ---------------------------------------------------------------------------------


def build_table(spark: Any, shape: Shape, warehouse: Path) -> int:
    """Create and fill the table (or reuse the one `warehouse` holds with the same shape);
    return the snapshot every MERGE starts from.

    Raises:
        AssertionError: a round did not write exactly one file per partition.
    """
    from demo.generate import create_events_table

    marker = warehouse / MARKER
    if marker.is_file():
        kept = json.loads(marker.read_text())
        if kept["shape"] == asdict(shape):
            print(f"reusing the table in {warehouse} (snapshot {kept['snapshot']})", flush=True)
            return int(kept["snapshot"])
        raise SystemExit(f"{warehouse} holds a table of another shape: {kept['shape']}")
    create_events_table(spark, TABLE)
    started = time.monotonic()
    for n in range(shape.files):
        _insert_round(spark, shape, n)
        if n % 5 == 4 or n == shape.files - 1:
            print(f"  round {n + 1}/{shape.files}: {time.monotonic() - started:.0f} s", flush=True)
    files = spark.sql(f"SELECT count(*) FROM {TABLE}.files").first()[0]
    assert files == shape.partitions * shape.files, (files, shape)
    snapshot = spark.sql(
        f"SELECT snapshot_id FROM {TABLE}.snapshots ORDER BY committed_at DESC LIMIT 1"
    ).first()[0]
    marker.write_text(json.dumps({"shape": asdict(shape), "snapshot": snapshot}) + "\n")
    return int(snapshot)


def _insert_round(spark: Any, shape: Shape, n: int) -> None:
    """Round `n`: keys r<n>-h<hour>-<i>, one file per hour partition (the table's hash
    distribution puts each partition in one write task)."""
    p, per = shape.partitions, shape.rows_per_file
    hour = f"CAST(id % {p} AS INT)"
    at = f"timestamp'{START:%Y-%m-%d %H:%M:%S}' + make_interval(0, 0, 0, 0, {hour}, 0, id DIV {p})"
    spark.sql(
        f"""
        INSERT INTO {TABLE}
        SELECT concat('r{n}-h', {hour}, '-', id DIV {p}) AS event_id, id AS user_id,
               concat('p', id % 500) AS product_id, 'view' AS event_type, {at} AS event_time,
               to_date({at}) AS dt, hour({at}) AS hr, CAST(id % 1000 AS DOUBLE) AS amount
        FROM range(0, {p * per}, 1, 2)
        """
    )


# -- a batch -----------------------------------------------------------------------------------


def hours_of(width: int, layout: str, partitions: int) -> list[int]:
    """The hour partitions (0 = the oldest) a batch of `width` partitions writes."""
    if layout == "recent":
        return list(range(partitions - width, partitions))
    return sorted({i * partitions // width for i in range(width)})


def batch_rows(shape: Shape, hours: list[int], rows: int) -> tuple[list[tuple[Any, ...]], int]:
    """`rows` rows of the event table's columns spread over `hours`, and how many of them
    update a key the table holds (the first half of each partition's rows, at most its keys)."""
    out: list[tuple[Any, ...]] = []
    updates = 0
    per_hour = [rows // len(hours) + (1 if i < rows % len(hours) else 0) for i in range(len(hours))]
    held = shape.files * shape.rows_per_file  # keys per partition
    for hour, count in zip(hours, per_hour, strict=True):
        at = START + timedelta(hours=hour, minutes=59)  # newer than every row of the hour
        for i in range(count):
            if i < min(count // 2, held):
                key = f"r{i // shape.rows_per_file}-h{hour}-{i % shape.rows_per_file}"
                updates += 1
            else:
                key = f"new-h{hour}-{i}"
            out.append((key, i, "p1", "click", at, at.date(), at.hour, float(i)))
    return out, updates


# -- measuring ---------------------------------------------------------------------------------


def _predicate(
    kind: str, spec: Any, values: list[tuple[Any, ...]], alias: str | None = "t"
) -> str | None:
    from jobkit.predicate import partition_predicate, partition_superset

    if kind == "none":
        return None
    build = partition_predicate if kind == "exact" else partition_superset
    return build(spec, values, catalog="local", alias=alias)


def planned_files(spark: Any, where: str | None) -> int:
    """The data files Iceberg's scan planning keeps for `where` (a predicate on the table's
    columns, converted as the CALL procedures convert theirs; None: all), counted in the JVM."""
    from jobkit.spark import load_table

    scan = load_table(spark, TABLE).newScan()
    if where is not None:
        converter = spark._jvm.org.apache.spark.sql.execution.datasources.SparkExpressionConverter
        resolved = converter.collectResolvedSparkExpression(spark._jsparkSession, TABLE, where)
        scan = scan.filter(converter.convertToIcebergExpression(resolved))
    iterables = spark._jvm.org.apache.iceberg.relocated.com.google.common.collect.Iterables
    return int(iterables.size(scan.planFiles()))


def old_generation(spark: Any) -> Any:
    """The driver JVM's old-generation heap pool (G1 Old Gen under Java 17's default collector):
    its peak during a MERGE is the memory that outlived young collections, what a wider batch
    would run the heap out with."""
    factory = spark._jvm.java.lang.management.ManagementFactory
    for pool in factory.getMemoryPoolMXBeans():
        if pool.getType().toString() == "Heap memory" and (
            "Old" in pool.getName() or "Tenured" in pool.getName()
        ):
            return pool
    raise RuntimeError("the driver JVM has no old-generation heap pool")


def merge_once(spark: Any, spec: Any, base: int, result: Result, batch: Any, updates: int) -> None:
    """Run one MERGE of `batch` (a persisted view `wide_batch`), time it, check its snapshot,
    plan its filter's scan alone, then roll the table back to `base`.

    Raises:
        AssertionError: the snapshot added other rows or deletes than the batch asks for.
    """
    from ingest_gate.job.merge import merge_sql
    from jobkit.partition import batch_partition_counts

    values = list(batch_partition_counts(batch, spec, catalog="local"))
    assert len(values) == result.width, (len(values), result.width)
    predicate = _predicate(result.kind, spec, values)
    result.filter_chars = len(predicate or "")
    statement = merge_sql(
        target=TABLE,
        source="wide_batch",
        key_columns=("event_id", "dt", "hr"),
        event_time_column="event_time",
        partition_filter=predicate,
    )
    old = old_generation(spark)
    old.resetPeakUsage()
    started = time.perf_counter()
    spark.sql(statement)
    result.seconds = round(time.perf_counter() - started, 2)
    result.old_gen_peak_mib = int(old.getPeakUsage().getUsed()) // 2**20
    summary = spark.sql(
        f"SELECT summary FROM {TABLE}.snapshots ORDER BY committed_at DESC LIMIT 1"
    ).first()[0]
    assert int(summary["added-records"]) == result.rows, summary
    assert int(summary.get("added-position-deletes", 0)) == updates, (summary, updates)
    spark.sql(f"CALL local.system.rollback_to_snapshot('db.wide', {base})")
    result.files_planned = planned_files(spark, _predicate(result.kind, spec, values, alias=None))


def measure(
    spark: Any,
    shape: Shape,
    base: int,
    *,
    widths: Sequence[int],
    kinds: Sequence[str],
    layout: str,
    rows: int,
) -> list[Result]:
    """One MERGE per width and filter kind (kinds rotated per width), warm-up first."""
    from jobkit.partition import read_spec

    spec = read_spec(spark, TABLE)
    results = []
    plan = [(1, "exact", True)]  # warm-up
    for i, width in enumerate(widths):
        order = list(kinds[i % len(kinds) :]) + list(kinds[: i % len(kinds)])
        plan += [(width, kind, False) for kind in order]
    for width, kind, warmup in plan:
        result = Result(width=width, layout=layout, kind=kind, rows=rows)
        if not _run(spark, spec, base, shape, result):
            results.append(result)
            break  # the Spark context is gone
        if not warmup:
            results.append(result)
            print(_line(result), flush=True)
    return results


def _run(spark: Any, spec: Any, base: int, shape: Shape, result: Result) -> bool:
    """Measure `result`'s MERGE; False when it failed and took the Spark context with it."""
    from demo.generate import EVENT_COLUMNS
    from jobkit.spark import error_message

    hours = hours_of(result.width, result.layout, shape.partitions)
    data, updates = batch_rows(shape, hours, result.rows)
    schema = ", ".join(f"{name} {kind.split()[0]}" for name, kind in EVENT_COLUMNS)
    batch = spark.createDataFrame(data, schema).persist()
    batch.createOrReplaceTempView("wide_batch")
    try:
        merge_once(spark, spec, base, result, batch, updates)
    except Exception as exc:
        result.error = error_message(exc)
        return spark.sparkContext._jsc is not None and not spark.sparkContext._jsc.sc().isStopped()
    finally:
        if spark.sparkContext._jsc is not None and not spark.sparkContext._jsc.sc().isStopped():
            batch.unpersist()
    return True


def _restore(spark: Any, base: int) -> None:
    from jobkit.spark import load_table

    current = load_table(spark, TABLE).currentSnapshot().snapshotId()
    if current != base:
        spark.sql(f"CALL local.system.set_current_snapshot('db.wide', {base})")


def _line(r: Result) -> str:
    took = f"{r.seconds:8.1f}" if r.seconds is not None else "       -"
    files = f"{r.files_planned:8d}" if r.files_planned is not None else "       -"
    old = f"{r.old_gen_peak_mib:8d}" if r.old_gen_peak_mib is not None else "       -"
    tail = f"  FAILED {r.error}" if r.error else ""
    return f"{r.width:6d} {r.layout:7} {r.kind:9} {took} {files} {old}{tail}"


# -- the command -------------------------------------------------------------------------------


def _ints(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.wide_batch", description=__doc__)
    parser.add_argument("--partitions", type=int, default=1000, help="hour partitions")
    parser.add_argument("--files", type=int, default=30, help="data files per partition")
    parser.add_argument("--rows-per-file", type=int, default=20)
    parser.add_argument("--rows", type=int, default=2000, help="rows per batch")
    parser.add_argument("--widths", type=_ints, default=[1, 100, 500, 1000], help="K, comma list")
    parser.add_argument("--filters", default=",".join(FILTERS), help="none,exact,superset")
    parser.add_argument("--layouts", default="recent", help="recent,spread")
    parser.add_argument("--fanout", action="store_true", help="measure with the fanout writer")
    parser.add_argument("--warehouse", type=Path, help="keep (and reuse) the table here")
    parser.add_argument("--json", type=Path, help="write every result here too")
    return parser


def _check(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    kinds = [k for k in args.filters.split(",") if k]
    layouts = [k for k in args.layouts.split(",") if k]
    if not set(kinds) <= set(FILTERS) or not set(layouts) <= set(LAYOUTS) or not kinds:
        raise SystemExit(f"--filters are some of {FILTERS}, --layouts some of {LAYOUTS}")
    if not all(1 <= w <= args.partitions and args.rows >= w for w in args.widths):
        raise SystemExit("every width must be within [1, --partitions] and at most --rows")
    return kinds, layouts


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    kinds, layouts = _check(args)
    from ingest_gate.job.table import FANOUT_PROPERTY
    from jobkit.spark import CatalogConfig, build_session

    shape = Shape(args.partitions, args.files, args.rows_per_file)
    warehouse = args.warehouse or Path(tempfile.mkdtemp(prefix="lakelock-wide-batch-"))
    warehouse.mkdir(parents=True, exist_ok=True)
    spark = build_session(
        CatalogConfig(warehouse=str(warehouse)), app_name="lakelock-wide-batch", master="local[2]"
    )
    spark.sparkContext.setLogLevel("ERROR")
    heap = spark._jvm.java.lang.Runtime.getRuntime().maxMemory() // 2**20
    print(f"driver heap {heap} MiB; table {shape} in {warehouse}", flush=True)
    results: list[Result] = []
    try:
        base = build_table(spark, shape, warehouse)
        writer = "true" if args.fanout else "false"
        spark.sql(f"ALTER TABLE {TABLE} SET TBLPROPERTIES ('{FANOUT_PROPERTY}' = '{writer}')")
        _restore(spark, base)  # a run cut short may have left a MERGE's snapshot current
        columns = f"{'K':>6} {'layout':7} {'filter':9} {'seconds':>8} {'files':>8} {'old MiB':>8}"
        print(columns, flush=True)
        for layout in layouts:
            results += measure(
                spark, shape, base, widths=args.widths, kinds=kinds, layout=layout, rows=args.rows
            )
    finally:
        spark.stop()
        if args.warehouse is None:
            shutil.rmtree(warehouse, ignore_errors=True)
    if args.json:
        document = {"heap_mib": heap, "shape": asdict(shape), "fanout": args.fanout}
        document["results"] = [asdict(r) for r in results]
        args.json.write_text(json.dumps(document, indent=2) + "\n")
    return 1 if any(r.error for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
