"""What naming a micro-batch's partitions costs the ingest job, before its gate.

    python -m benchmarks.batch_count                      # 2,000 rows over 3 hours, 15 runs
    python -m benchmarks.batch_count --rows 20000 --hours 24 --runs 10 --json out.json

The job counts each deduplicated batch (a persisted DataFrame) before its MERGE; the count also
fills the cache the MERGE reads. With partition scope it must also know the batch's partitions.
Three ways, each on a freshly persisted batch of the event table's columns, interleaved, on a
local[2] session with the job's own settings:

    count only        `count()`: what a batch pays with whole-table leases (the limit)
    count + distinct  `count()`, then the distinct partition tuples: two Spark jobs
    one groupBy       `batch_partition_counts`: rows per partition tuple, one job (the job's way)

Prints the median and p90 of each, in milliseconds; the first two runs of each are warm-up.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks.lease_throughput import percentile

__all__ = ["main", "measure"]

TABLE = "local.db.events"
WARMUP = 2


def _ways(spec: Any) -> dict[str, Callable[[Any], tuple[int, int]]]:
    """Each way: a persisted batch -> (rows, distinct partitions)."""
    from jobkit.partition import batch_partition_counts, batch_partition_values

    def count_only(df: Any) -> tuple[int, int]:
        return df.count(), 0

    def count_and_distinct(df: Any) -> tuple[int, int]:
        return df.count(), len(batch_partition_values(df, spec, catalog="local"))

    def one_group_by(df: Any) -> tuple[int, int]:
        counts = batch_partition_counts(df, spec, catalog="local")
        return sum(counts.values()), len(counts)

    return {
        "count only": count_only,
        "count + distinct": count_and_distinct,
        "one groupBy": one_group_by,
    }


def measure(spark: Any, *, rows: int, hours: int, runs: int) -> dict[str, dict[str, float]]:
    """Milliseconds per way over `runs` measured runs: median and p90.

    Raises:
        AssertionError: a way counted other rows or partitions than the batch has.
    """
    from demo.generate import EVENT_COLUMNS, create_events_table
    from jobkit.partition import read_spec

    create_events_table(spark, TABLE)
    spec = read_spec(spark, TABLE)
    step = max(1, hours * 3600 // rows)
    at = f"timestamp'2024-06-20 00:00:00' + make_interval(0, 0, 0, 0, 0, 0, id * {step})"
    derived = {"event_time": at, "dt": f"to_date({at})", "hr": f"hour({at})"}
    # the event table's columns and types; event times spread evenly over `hours` hours
    source = spark.range(rows).selectExpr(
        *[
            f"{derived.get(name, f'CAST(id AS {kind.split()[0]})')} AS {name}"
            for name, kind in EVENT_COLUMNS
        ]
    )
    ways = _ways(spec)
    times: dict[str, list[float]] = {name: [] for name in ways}
    for run in range(WARMUP + runs):
        order = list(ways) if run % 2 else list(reversed(ways))
        for name in order:
            batch = source.selectExpr("*").persist()
            started = time.perf_counter()
            counted, partitions = ways[name](batch)
            elapsed = time.perf_counter() - started
            batch.unpersist(blocking=True)
            assert counted == rows, (name, counted, rows)
            assert partitions in (0, hours), (name, partitions, hours)
            if run >= WARMUP:
                times[name].append(elapsed * 1000)
    return {
        name: {
            "median_ms": round(statistics.median(values), 1),
            "p90_ms": round(percentile(values, 0.9), 1),
        }
        for name, values in times.items()
    }


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.batch_count", description=__doc__)
    parser.add_argument("--rows", type=int, default=2000, help="rows per batch")
    parser.add_argument("--hours", type=int, default=3, help="hour partitions the batch spans")
    parser.add_argument("--runs", type=int, default=15, help="measured runs of each way")
    parser.add_argument("--json", type=Path, help="write the figures here too")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.rows < args.hours * 2 or args.hours < 1 or args.runs < 1:
        raise SystemExit("need --hours >= 1, --runs >= 1 and at least 2 rows per hour")
    from jobkit.spark import CatalogConfig, build_session

    warehouse = Path(tempfile.mkdtemp(prefix="lakelock-batch-count-"))
    spark = build_session(
        CatalogConfig(warehouse=str(warehouse)), app_name="lakelock-batch-count", master="local[2]"
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        figures = measure(spark, rows=args.rows, hours=args.hours, runs=args.runs)
    finally:
        spark.stop()
        shutil.rmtree(warehouse, ignore_errors=True)
    print(f"{args.rows} rows over {args.hours} hour partitions, {args.runs} runs each (ms):")
    print(f"{'':18} {'median':>8} {'p90':>8}")
    for name, row in figures.items():
        print(f"{name:18} {row['median_ms']:8.1f} {row['p90_ms']:8.1f}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
