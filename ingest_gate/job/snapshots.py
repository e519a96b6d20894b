"""Snapshot-summary properties of ingest commits: writing them, and finding a batch by them.

    props = batch_properties(query_id=q, batch_id=7, lease_id=lease.lease_id)
    with_commit_properties(spark, props, lambda: spark.sql(merge))   # MERGE carries `props`
    find_batch_snapshot(spark, "local.db.events", query_id=q, batch_id=7)  # -> snapshot id

Iceberg 1.9.2 takes `snapshot-property.<key>` write options only on DataFrame writes; a SQL MERGE
reads extra summary properties from the thread-local of
`org.apache.iceberg.spark.CommitMetadata.withCommitProperties(map, callable, exceptionClass)`, so
the MERGE runs inside a Java `Callable` implemented in Python over py4j's callback server. The
Java thread that sets the thread-local is the one that runs the callable and, through py4j's
pinned threads, the statement it issues.
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
    "find_batch_snapshot",
    "snapshot_summary",
    "with_commit_properties",
]

QUERY_ID = "lakelock.query-id"
BATCH_ID = "lakelock.batch-id"
LEASE_ID = "lakelock.lease-id"

R = TypeVar("R")


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
