"""Snapshot-summary properties of ingest commits: writing them, and finding a batch by them.

    props = batch_properties(query_id=q, batch_id=7, lease_id=lease.lease_id)
    with_commit_properties(spark, props, lambda: spark.sql(merge))   # MERGE carries `props`
    find_batch_snapshot(spark, "local.db.events", query_id=q, batch_id=7)  # -> snapshot id
    committed_snapshot(spark, "local.db.events", query_id=q, batch_id=7)   # -> (id, summary)
    partition_counts(summary)    # {"dt=2024-06-20/hr=13": (2, 1)}: data, delete files added

Iceberg 1.9.2 takes `snapshot-property.<key>` write options only on DataFrame writes; a SQL MERGE
reads extra summary properties from the thread-local of
`org.apache.iceberg.spark.CommitMetadata.withCommitProperties(map, callable, exceptionClass)`, so
the MERGE runs inside a Java `Callable` implemented in Python over py4j's callback server. The
Java thread that sets the thread-local is the one that runs the callable and, through py4j's
pinned threads, the statement it issues.

Per-partition counts: with `write.summary.partition-limit` set (ingest_gate.job.table), Iceberg's
`SnapshotSummary.Builder` writes, for a commit that changes at most that many partitions,
`partition-summaries-included=true` and one `partitions.<partition path>` key per partition,
its value the partition's metrics joined as `key=value` pairs by commas (Guava's MapJoiner;
only the non-zero ones), e.g.

    partitions.dt=2024-06-20/hr=13 -> added-data-files=1,added-delete-files=1,
        added-position-delete-files=1,added-files-size=3210,added-position-deletes=4,
        added-records=12

The path is `PartitionSpec.partitionToPath`, the name lakelock's scopes use
(jobkit.partition.partition_name). Counts are `int`s in Iceberg 1.9.2 (SnapshotSummary.java).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from jobkit.sql import quote_identifier

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "BATCH_ID",
    "LEASE_ID",
    "QUERY_ID",
    "batch_properties",
    "committed_snapshot",
    "find_batch_snapshot",
    "partition_counts",
    "snapshot_summary",
    "with_commit_properties",
]

QUERY_ID = "lakelock.query-id"
BATCH_ID = "lakelock.batch-id"
LEASE_ID = "lakelock.lease-id"

R = TypeVar("R")

# Iceberg's SnapshotSummary keys (1.9.2)
PARTITION_SUMMARIES = "partition-summaries-included"
PARTITION_PREFIX = "partitions."


def batch_properties(*, query_id: str, batch_id: int, lease_id: str | None) -> dict[str, str]:
    """The summary properties of one batch's commit; lease id `none` when ungated."""
    return {QUERY_ID: query_id, BATCH_ID: str(batch_id), LEASE_ID: lease_id or "none"}


class _PythonCallable:
    """A `java.util.concurrent.Callable` whose `call()` runs a Python function.

    The function's own exception is kept so that the caller re-raises it as itself rather than
    as the Py4JJavaError it becomes on its way through Java.
    """

    def __init__(self, fn: Callable[[], Any]) -> None:
        self._fn = fn
        self.result: Any = None
        self.error: BaseException | None = None

    def call(self) -> None:
        try:
            self.result = self._fn()
        except BaseException as exc:
            self.error = exc
            raise
        return None

    class Java:
        implements: ClassVar[list[str]] = ["java.util.concurrent.Callable"]  # read by py4j


def with_commit_properties(
    spark: SparkSession, properties: Mapping[str, str], fn: Callable[[], R]
) -> R:
    """Run `fn` (which issues Spark SQL writes) so that its Iceberg commits carry `properties`.

    Raises:
        Whatever `fn` raises, unchanged.
        py4j.protocol.Py4JError: the callback could not be made.
    """
    from pyspark.java_gateway import ensure_callback_server_started

    sc = spark.sparkContext
    gateway = sc._gateway
    ensure_callback_server_started(gateway)
    jvm = sc._jvm
    props = jvm.java.util.HashMap()
    for key, value in properties.items():
        props.put(key, value)
    callable_ = _PythonCallable(fn)
    try:
        jvm.org.apache.iceberg.spark.CommitMetadata.withCommitProperties(
            props, callable_, jvm.java.lang.Class.forName("java.lang.Exception")
        )
    except Exception:
        if callable_.error is not None:
            raise callable_.error from None
        raise
    return callable_.result


def find_batch_snapshot(
    spark: SparkSession, table: str, *, query_id: str, batch_id: int
) -> int | None:
    """The id of the snapshot committed by batch `batch_id` of query `query_id`, else None.

    Only snapshots still in the table's history are seen: after `expire_snapshots` removed it, a
    replay is no longer detected here, and the MERGE's event-time guard keeps it harmless.

    Raises:
        pyspark.errors.PySparkException: the table cannot be read.
    """
    from pyspark.sql import functions as F

    rows = (
        spark.table(f"{quote_identifier(table)}.snapshots")
        .where(
            (F.col("summary")[QUERY_ID] == F.lit(query_id))
            & (F.col("summary")[BATCH_ID] == F.lit(str(batch_id)))
        )
        .orderBy(F.col("committed_at").desc())
        .select("snapshot_id")
        .limit(1)
        .collect()
    )
    return rows[0]["snapshot_id"] if rows else None


def snapshot_summary(spark: SparkSession, table: str, snapshot_id: int) -> dict[str, str]:
    """The summary map of one snapshot (empty when it is not in the history).

    Raises:
        pyspark.errors.PySparkException: the table cannot be read.
    """
    from pyspark.sql import functions as F

    rows = (
        spark.table(f"{quote_identifier(table)}.snapshots")
        .where(F.col("snapshot_id") == F.lit(snapshot_id))
        .select("summary")
        .collect()
    )
    return dict(rows[0]["summary"]) if rows else {}


def partition_counts(summary: Mapping[str, str]) -> dict[str, tuple[int, int]] | None:
    """Per partition name, the data files and delete files a commit added to it, net of those
    it removed (never below 0; a merge-on-read MERGE removes none), from a snapshot summary
    (see the module docstring). None when the summary has no per-partition counts: the
    table's `write.summary.partition-limit` is 0, or the commit changed more partitions.
    Partitions whose file counts did not grow are left out.

    Raises:
        ValueError: a partition's entry is not Iceberg's `key=value,...` of integers.
    """
    if summary.get(PARTITION_SUMMARIES) != "true":
        return None
    out: dict[str, tuple[int, int]] = {}
    for key, text in summary.items():
        if not key.startswith(PARTITION_PREFIX) or len(key) == len(PARTITION_PREFIX):
            continue
        metrics = _metrics(key, text)
        data = metrics.get("added-data-files", 0) - metrics.get("deleted-data-files", 0)
        deletes = metrics.get("added-delete-files", 0) - metrics.get("removed-delete-files", 0)
        if data > 0 or deletes > 0:
            out[key[len(PARTITION_PREFIX) :]] = (max(data, 0), max(deletes, 0))
    return out


def _metrics(key: str, text: str) -> dict[str, int]:
    out = {}
    for pair in text.split(","):
        name, sep, value = pair.partition("=")
        if not sep:
            raise ValueError(f"{key}: {pair!r} is not key=value")
        try:
            out[name.strip()] = int(value)
        except ValueError:
            raise ValueError(f"{key}: {name} is not an integer: {value!r}") from None
    return out


def committed_snapshot(
    spark: SparkSession, table: str, *, query_id: str, batch_id: int, depth: int = 20
) -> tuple[int, dict[str, str]] | None:
    """(id, summary) of the snapshot batch `batch_id` of query `query_id` committed, looked for
    among the table's current snapshot and its `depth` ancestors, loaded fresh through the
    catalog over py4j: one metadata read, no Spark job, so the gate can pass the commit's
    counts on before it lets its lease go. None when not found there (find_batch_snapshot
    searches the whole history).

    Raises:
        py4j.protocol.Py4JJavaError: the table cannot be loaded.
    """
    from jobkit.spark import load_table

    jtable = load_table(spark, table)
    snapshot = jtable.currentSnapshot()
    for _ in range(depth + 1):
        if snapshot is None:
            return None
        summary = {str(k): str(v) for k, v in dict(snapshot.summary()).items()}
        if summary.get(QUERY_ID) == query_id and summary.get(BATCH_ID) == str(batch_id):
            return int(snapshot.snapshotId()), summary
        parent = snapshot.parentId()
        if parent is None:
            return None
        snapshot = jtable.snapshot(parent)
    return None
