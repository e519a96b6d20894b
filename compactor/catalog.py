"""What the catalog says about tables without a Spark job: their names, their current snapshot.

    candidates(spark, "lake.db.*")        # ["lake.db.a", "lake.db.b", ...] (SHOW TABLES)
    candidates(spark, "lake.*.events")    # every namespace of lake (SHOW NAMESPACES), its tables
    read_summary(spark, "lake.db.a")      # compactor.rank.Summary of the current snapshot
    spark_jobs(spark)                     # how many Spark jobs the driver has started so far

Both go through the Spark session's own catalogs, so any catalog the session was built with
(Hadoop, JDBC, Hive, Glue, REST) works unchanged. `SHOW TABLES` and `SHOW NAMESPACES` are
commands the driver runs itself; `read_summary` loads the table through the catalog (reading
its metadata file, as any query does first) and takes the current snapshot's JSON and the
number of snapshots kept over py4j: no Spark job either (checked in
tests/spark/test_fleet.py with `spark_jobs`).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from compactor.patterns import is_pattern, matches
from compactor.rank import Summary
from jobkit.spark import load_table

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["candidates", "read_summary", "spark_jobs"]


def _quoted(part: str) -> str:
    return "`" + part.replace("`", "``") + "`"


def candidates(spark: SparkSession, pattern: str) -> list[str]:
    """The tables of the namespaces `pattern` can match, named in the pattern's form
    (`catalog.namespace.table` or `namespace.table`); not yet filtered by the table part.

    Raises:
        pyspark.errors.AnalysisException: the catalog or a namespace named exactly is unknown.
    """
    parts = pattern.split(".")
    catalog = parts[0] if len(parts) == 3 else None
    prefix = f"{_quoted(catalog)}." if catalog else ""
    namespace = parts[-2]
    if is_pattern(namespace):
        rows = spark.sql(f"SHOW NAMESPACES IN {_quoted(catalog)}" if catalog else "SHOW NAMESPACES")
        spaces = [r[0] for r in rows.collect() if matches(namespace, r[0])]
    else:
        spaces = [namespace]
    names = []
    for space in spaces:
        for row in spark.sql(f"SHOW TABLES IN {prefix}{_quoted(space)}").collect():
            if row["isTemporary"]:
                continue
            names.append(".".join([*([catalog] if catalog else []), space, row["tableName"]]))
    return names


def read_summary(spark: SparkSession, table: str) -> Summary:
    """`table`'s current snapshot summary and the number of snapshots its metadata keeps.

    Raises:
        py4j.protocol.Py4JJavaError: no such table, or its metadata cannot be read.
    """
    loaded = load_table(spark, table)
    snapshot = loaded.currentSnapshot()
    kept = loaded.operations().current().snapshots().size()
    if snapshot is None:
        return Summary.of(table, None, kept)
    text = spark._jvm.org.apache.iceberg.SnapshotParser.toJson(snapshot)
    return Summary.of(table, json.loads(text), kept)


def spark_jobs(spark: SparkSession) -> int:
    """The number of Spark jobs this driver has started (the DAG scheduler's next job id):
    the difference over a stretch of code is the jobs it started, counted when submitted."""
    return int(spark.sparkContext._jsc.sc().dagScheduler().numTotalJobs())
