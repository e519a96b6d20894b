"""What converting a partition's equality deletes costs against rewriting its data, and what
each leaves its readers: seconds and bytes read per step, and a count and a point lookup on the
table as it is, converted, and compacted.

    python -m benchmarks.equality_deletes                   # 2,000,000 rows, 10 deletes of 200
    python -m benchmarks.equality_deletes --rows 200000 --deletes 4 --keys 50 --json out.json

One local[2] Spark session (the jobs' settings) and two identical tables on a Hadoop catalog:
one partition of `--rows` rows in one data file (a partition compacted before), then `--deletes`
equality delete files of `--keys` keys each, committed one at a time as a Flink upsert commits
them (demo.equality, Iceberg's own generic writer), and a second partition of equal size beside
it. On the first table the compactor's `convert_equality_deletes` step runs over the partition;
on the second, `rewrite_data_files` with `delete-file-threshold` 1, what the follower runs
without conversion: the partition compacted, its deletes applied. Both through
compactor.procedure.run_step, as a run calls them.

    step        seconds of the step, and bytes Spark read for it (its stages' input bytes,
                from the driver's status store)
    readers     `count(*)` of the partition and a lookup of one id in it, median of `--reads`
                reads each, on the table with its equality deletes, converted, and compacted;
                each against the compacted copy
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

__all__ = ["main", "measure"]

HOT, COLD = "d0", "d1"


def _session(warehouse: Path) -> Any:
    from jobkit.spark import CatalogConfig, build_session

    spark = build_session(
        CatalogConfig(name="local", warehouse=str(warehouse)),
        app_name="lakelock-bench-equality-deletes",
        master="local[2]",
        extra_conf={"spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "false"},
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def build(spark: Any, table: str, *, rows: int, deletes: int, keys: int, seed: int) -> None:
    """The table: `rows` rows in each of two partitions, one data file each, then `deletes`
    equality delete files of `keys` ids of the first."""
    from demo.equality import delete_equal

    spark.sql(
        f"CREATE TABLE {table} (id int, payload string, dt string) USING iceberg "
        "PARTITIONED BY (dt) TBLPROPERTIES ('format-version'='2')"
    )
    for dt in (HOT, COLD):
        spark.range(rows).selectExpr(
            "CAST(id AS int) AS id", "sha2(CAST(id AS string), 256) AS payload", f"'{dt}' AS dt"
        ).coalesce(1).writeTo(table).append()
    draw = random.Random(seed)
    for _ in range(deletes):
        ids = draw.sample(range(rows), keys)
        delete_equal(spark, table, {"dt": HOT}, ["id", "dt"], [(i, HOT) for i in ids])


def _read_bytes(spark: Any) -> Callable[[], int]:
    """A function answering the input bytes of the stages completed since it was made."""
    store = spark.sparkContext._jsc.sc().statusStore()
    jvm, gateway = spark._jvm, spark.sparkContext._gateway
    # every stage, no details, no summaries, no quantiles, any task status (Spark 3.5's
    # AppStatusStore.stageList with its defaults spelled out: py4j has no default arguments)
    arguments = (jvm.java.util.ArrayList(), False, False, gateway.new_array(jvm.double, 0))

    def stages() -> dict[int, int]:
        listed = store.stageList(*arguments, jvm.java.util.ArrayList())
        return {
            int(listed.apply(i).stageId()): int(listed.apply(i).inputBytes())
            for i in range(listed.size())
        }

    before = stages()
    return lambda: sum(b for s, b in stages().items() if s not in before)


def _step(spark: Any, table: str, procedure: str, options: dict[str, str]) -> dict[str, Any]:
    from compactor.plan import Step
    from compactor.procedure import run_step

    step = Step(procedure, "benchmark", options=options, partition_values=({"dt": HOT},))
    read = _read_bytes(spark)
    started = time.perf_counter()
    output = run_step(spark, table=table, step=step, properties={"lakelock.token": "1"})
    seconds = time.perf_counter() - started
    spark.sql(f"REFRESH TABLE {table}")
    return {"procedure": procedure, "seconds": seconds, "read_bytes": read(), "output": output}


def _readers(spark: Any, table: str, reads: int, lookup: int) -> dict[str, float]:
    queries = {
        "count": f"SELECT count(*) FROM {table} WHERE dt = '{HOT}'",
        "lookup": f"SELECT * FROM {table} WHERE dt = '{HOT}' AND id = {lookup}",
    }
    out = {}
    for name, sql in queries.items():
        times = []
        for _ in range(reads):
            started = time.perf_counter()
            spark.sql(sql).collect()
            times.append(time.perf_counter() - started)
        out[name] = statistics.median(times)
    return out


def measure(
    *, rows: int, deletes: int, keys: int, reads: int, seed: int, workdir: Path
) -> dict[str, Any]:
    spark = _session(workdir / "warehouse")
    try:
        converted, compacted = "local.db.converted", "local.db.compacted"
        for table in (converted, compacted):
            build(spark, table, rows=rows, deletes=deletes, keys=keys, seed=seed)
        lookup = rows // 2
        # the first reads warm the JVM up; the figures read the second table first
        _readers(spark, converted, 1, lookup)
        live = _readers(spark, compacted, reads, lookup)
        before = spark.table(converted).where(f"dt = '{HOT}'").count()
        convert = _step(spark, converted, "convert_equality_deletes", {})
        after_convert = _readers(spark, converted, reads, lookup)
        rewrite = _step(spark, compacted, "rewrite_data_files", {"delete-file-threshold": "1"})
        after_rewrite = _readers(spark, compacted, reads, lookup)
        same = spark.table(converted).where(f"dt = '{HOT}'").count() == before
        same = same and spark.table(compacted).where(f"dt = '{HOT}'").count() == before
    finally:
        spark.stop()
    return {
        "rows": rows,
        "deletes": deletes,
        "keys": keys,
        "rows_after": before,
        "rows_equal": same,
        "steps": [convert, rewrite],
        "readers": {
            "equality deletes": live,
            "converted": after_convert,
            "compacted": after_rewrite,
        },
    }


def report(figures: dict[str, Any]) -> str:
    lines = [
        f"{figures['rows']:,} rows in the partition, {figures['deletes']} equality delete files "
        f"of {figures['keys']} keys; {figures['rows_after']:,} rows after, equal on both "
        f"copies: {figures['rows_equal']}",
        "",
        "| step | seconds | MiB read |",
        "| --- | ---: | ---: |",
    ]
    for step in figures["steps"]:
        lines.append(
            f"| {step['procedure']} | {step['seconds']:.2f} | {step['read_bytes'] / 2**20:.1f} |"
        )
    lines += [
        "",
        "| table | count ms (x compacted) | lookup ms (x compacted) |",
        "| --- | ---: | ---: |",
    ]
    readers = figures["readers"]
    base = readers["compacted"]
    for name, times in readers.items():
        cells = [f"{times[q] * 1000:.0f} ({times[q] / base[q]:.1f}x)" for q in ("count", "lookup")]
        lines.append(f"| {name} | {' | '.join(cells)} |")
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.equality_deletes")
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--deletes", type=int, default=10)
    parser.add_argument("--keys", type=int, default=200)
    parser.add_argument("--reads", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", type=Path, help="write the figures here too")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if min(args.rows, args.deletes, args.keys, args.reads) < 1 or args.keys > args.rows:
        print("--rows, --deletes, --keys and --reads must be positive, --keys at most --rows")
        return 2
    with tempfile.TemporaryDirectory(prefix="lakelock-bench-eq-") as tmp:
        figures = measure(
            rows=args.rows,
            deletes=args.deletes,
            keys=args.keys,
            reads=args.reads,
            seed=args.seed,
            workdir=Path(tmp),
        )
    print(report(figures))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
