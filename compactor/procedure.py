"""The Iceberg maintenance procedures, through the Java actions API over py4j.

    out = run_step(spark, table="local.db.events", step=step, properties={"lakelock.token": "7"})
    out["rewritten_data_files"], out["added_data_files"], out["removed_delete_files"], ...

`SparkActions` is used rather than `CALL <catalog>.system.<procedure>` because the actions that
commit a snapshot take `snapshotProperty(k, v)`, so lakelock's fencing token, lease id and run id
land in the snapshot summary of every commit the compactor makes (`lakelock audit` calls a commit
without them a violation); the procedures cannot set them. Which commits each action makes in
Iceberg 1.9.2 and 1.11.0 alike, and how each is labelled:

    rewrite_data_files      one commit (or one per `partial-progress.max-commits` batch), all
                            through its commit manager, which applies the action's properties.
                            Its `remove-dangling-deletes` option makes one more commit, through
                            a RemoveDanglingDeleteFiles action it builds itself, WITHOUT them: so
                            the option is always sent as false, and the plan runs that action as
                            a step of its own (remove_dangling_deletes), with the properties
    remove_dangling_deletes one commit, removing only delete files that apply to no live data
                            file; Iceberg's action reads the whole table (it takes no filter),
                            so a step limited to partitions applies its rule to theirs alone
    convert_equality_deletes  one commit (a RewriteFiles: equality delete files out, position
                            delete files in), with the properties (compactor.convert)
    rewrite_position_delete_files  one commit (or one per partial-progress batch) through its
                            commit manager, with the properties
    rewrite_manifests       one commit, with the properties
    expire_snapshots, remove_orphan_files  commit no snapshot; their actions are used too, for
                            one code path and typed results

In a REST catalog each step's table is loaded through a catalog whose requests carry the lease
as headers (`X-Lakelock-Lease-Id`, `X-Lakelock-Token`, from the properties): lakelock's catalog
front fences `expire_snapshots` by them, the one commit without a summary (jobkit.spark
.fenced_table).

A failed action raises ProcedureFailed carrying the Iceberg exception's message. Note that
Iceberg's actions set their own Spark job group (`REWRITE-DATA-FILES-n`) around their jobs, so a
caller that wants to cancel them must tag the thread (`SparkContext.addJobTag`) as well as set a
job group: tags survive, groups do not (see compactor.run).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from compactor.convert import ConversionConflict, convert_equality_deletes
from compactor.entries import commit_rewrite, delete_files, partition_match
from compactor.plan import REMOVE_DANGLING, Step
from jobkit.partition import spec_of
from jobkit.predicate import partition_predicate
from jobkit.spark import error_message, fenced_table

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "PROCEDURES",
    "ProcedureFailed",
    "parse_sort_order",
    "partition_filter",
    "run_step",
]


class ProcedureFailed(Exception):
    """An Iceberg action failed; `message` is Iceberg's (root cause appended). Nothing of this
    step was committed unless partial progress was enabled."""

    def __init__(self, procedure: str, message: str) -> None:
        super().__init__(f"{procedure} failed: {message}")
        self.procedure = procedure
        self.message = message


def run_step(
    spark: SparkSession, *, table: str, step: Step, properties: Mapping[str, str]
) -> dict[str, Any]:
    """Run one planned step on `table`; its outputs as plain numbers.

    Raises:
        ProcedureFailed: the action (or loading the table) failed, with Iceberg's message.
        ValueError: an unknown procedure or a malformed sort order.
    """
    runner = PROCEDURES.get(step.procedure)
    if runner is None:
        raise ValueError(f"unknown procedure {step.procedure!r}; known: {sorted(PROCEDURES)}")
    from py4j.protocol import Py4JJavaError
    from pyspark.errors.exceptions.captured import CapturedException

    headers = {header: properties[key] for key, header in _HEADERS.items() if properties.get(key)}
    try:
        with fenced_table(spark, table, headers) as jtable:
            return runner(spark, table, jtable, step, properties)
    except Py4JJavaError as exc:
        raise ProcedureFailed(step.procedure, error_message(exc)) from exc
    except CapturedException as exc:
        raise ProcedureFailed(step.procedure, error_message(exc)) from exc


# the snapshot properties a REST catalog's requests carry as headers too
_HEADERS = {"lakelock.lease-id": "X-Lakelock-Lease-Id", "lakelock.token": "X-Lakelock-Token"}


def _rewrite_data_files(
    spark: SparkSession, table: str, jtable: Any, step: Step, properties: Mapping[str, str]
) -> dict[str, Any]:
    # Iceberg's own dangling-delete commit would carry none of `properties` (module docstring)
    options = {**step.options, REMOVE_DANGLING: "false"}
    action = _actions(spark).rewriteDataFiles(jtable)
    if step.strategy == "sort":
        order = _sort_order(spark, jtable, step.sort_order) if step.sort_order else None
        action = action.sort(order) if order is not None else action.sort()
    else:
        action = action.binPack()
    action = _filtered(spark, jtable, action, table, step)
    action = _with(action, options, properties)
    result = action.execute()
    return {
        "rewritten_data_files": int(result.rewrittenDataFilesCount()),
        "added_data_files": int(result.addedDataFilesCount()),
        "rewritten_bytes": int(result.rewrittenBytesCount()),
        "failed_data_files": int(result.failedDataFilesCount()),
        "removed_delete_files": int(result.removedDeleteFilesCount()),
        "file_groups": len(list(result.rewriteResults())),
    }


def _remove_dangling_deletes(
    spark: SparkSession, table: str, jtable: Any, step: Step, properties: Mapping[str, str]
) -> dict[str, Any]:
    if step.partition_values:
        removed = _remove_dangling_in(spark, table, jtable, step.partition_values, properties)
        return {"removed_delete_files": removed}
    action = _with(_actions(spark).removeDanglingDeleteFiles(jtable), step.options, properties)
    result = action.execute()
    return {"removed_delete_files": _size(spark, result.removedDeleteFiles())}


def _remove_dangling_in(
    spark: SparkSession,
    table: str,
    jtable: Any,
    partitions: Iterable[Mapping[str, Any]],
    properties: Mapping[str, str],
) -> int:
    """Iceberg's RemoveDanglingDeleteFiles within `partitions` only (Iceberg's action reads
    the whole table, so it may remove files of partitions a lease does not cover): the same
    rule, per partition, over the `entries` metadata table: a delete file with no live data
    file in its partition, a position delete older than its partition's oldest data file, an
    equality delete no newer than it. One commit, with `properties`; the count removed."""
    from pyspark.sql import functions as F

    current = jtable.currentSnapshot()
    if current is None or current.summary().get("total-equality-deletes") == "0":
        # no equality delete in the table: its position deletes are the next step's
        # (rewrite_position_delete_files), and no Spark job is spent here
        return 0
    fields = [f.name for f in spec_of(jtable).fields]
    partition = F.col("data_file")["partition"]
    chosen = partition_match(partition, fields, partitions)
    entries = spark.table(f"{table}.entries").where("status < 2").where(chosen)
    floors = (
        entries.where("data_file.content = 0")
        .groupBy(F.col("data_file.spec_id").alias("floor_spec"), partition.alias("floor_part"))
        .agg(F.min("sequence_number").alias("floor"))
    )
    deletes = entries.where("data_file.content != 0")
    joined = deletes.join(
        floors,
        (F.col("data_file.spec_id") == F.col("floor_spec"))
        & (F.col("data_file.partition") == F.col("floor_part")),
        "left",
    )
    content, sequence, floor = F.col("data_file.content"), F.col("sequence_number"), F.col("floor")
    dangling = joined.where(
        floor.isNull()
        | ((content == 1) & (sequence < floor))
        | ((content == 2) & (sequence <= floor))
    )
    files = delete_files(spark, jtable, dangling)
    if not files:
        return 0
    commit_rewrite(jtable, files, (), properties)
    return len(files)


def _convert_equality_deletes(
    spark: SparkSession, table: str, jtable: Any, step: Step, properties: Mapping[str, str]
) -> dict[str, Any]:
    try:
        return convert_equality_deletes(spark, table, jtable, step.partition_values, properties)
    except ConversionConflict as exc:
        raise ProcedureFailed(step.procedure, str(exc)) from exc


def _rewrite_position_delete_files(
    spark: SparkSession, table: str, jtable: Any, step: Step, properties: Mapping[str, str]
) -> dict[str, Any]:
    action = _actions(spark).rewritePositionDeletes(jtable)
    action = _filtered(spark, jtable, action, table, step)
    result = _with(action, step.options, properties).execute()
    return {
        "rewritten_delete_files": int(result.rewrittenDeleteFilesCount()),
        "added_delete_files": int(result.addedDeleteFilesCount()),
        "rewritten_delete_bytes": int(result.rewrittenBytesCount()),
        "added_delete_bytes": int(result.addedBytesCount()),
    }


def _rewrite_manifests(
    spark: SparkSession, table: str, jtable: Any, step: Step, properties: Mapping[str, str]
) -> dict[str, Any]:
    result = _with(_actions(spark).rewriteManifests(jtable), step.options, properties).execute()
    return {
        "rewritten_manifests": _size(spark, result.rewrittenManifests()),
        "added_manifests": _size(spark, result.addedManifests()),
    }


def _expire_snapshots(
    spark: SparkSession, table: str, jtable: Any, step: Step, properties: Mapping[str, str]
) -> dict[str, Any]:
    if step.older_than is None or step.retain_last is None:
        raise ValueError("expire_snapshots needs older_than and retain_last from the plan")
    action = (
        _actions(spark)
        .expireSnapshots(jtable)
        .expireOlderThan(int(step.older_than.timestamp() * 1000))
        .retainLast(int(step.retain_last))
    )
    for snapshot_id in step.snapshot_ids:
        action = action.expireSnapshotId(int(snapshot_id))
    for key, value in step.options.items():
        action = action.option(key, value)
    before = _size(spark, jtable.snapshots())
    result = action.execute()
    jtable.refresh()
    return {
        # the result counts deleted files only; expiring snapshots alone is a change too
        "expired_snapshots": max(0, before - _size(spark, jtable.snapshots())),
        "deleted_data_files": int(result.deletedDataFilesCount()),
        "deleted_position_delete_files": int(result.deletedPositionDeleteFilesCount()),
        "deleted_equality_delete_files": int(result.deletedEqualityDeleteFilesCount()),
        "deleted_manifests": int(result.deletedManifestsCount()),
        "deleted_manifest_lists": int(result.deletedManifestListsCount()),
    }


def _remove_orphan_files(
    spark: SparkSession, table: str, jtable: Any, step: Step, properties: Mapping[str, str]
) -> dict[str, Any]:
    if step.older_than is None:
        raise ValueError("remove_orphan_files needs older_than from the plan")
    action = (
        _actions(spark).deleteOrphanFiles(jtable).olderThan(int(step.older_than.timestamp() * 1000))
    )
    for key, value in step.options.items():
        action = action.option(key, value)
    result = action.execute()
    return {"orphan_files": _size(spark, result.orphanFileLocations())}


PROCEDURES: Mapping[
    str, Callable[[SparkSession, str, Any, Step, Mapping[str, str]], dict[str, Any]]
] = {
    "convert_equality_deletes": _convert_equality_deletes,
    "rewrite_data_files": _rewrite_data_files,
    "remove_dangling_deletes": _remove_dangling_deletes,
    "rewrite_position_delete_files": _rewrite_position_delete_files,
    "rewrite_manifests": _rewrite_manifests,
    "expire_snapshots": _expire_snapshots,
    "remove_orphan_files": _remove_orphan_files,
}


def _size(spark: SparkSession, iterable: Any) -> int:
    """The length of a Java Iterable."""
    iterables = spark._jvm.org.apache.iceberg.relocated.com.google.common.collect.Iterables
    return int(iterables.size(iterable))


def _actions(spark: SparkSession) -> Any:
    return spark._jvm.org.apache.iceberg.spark.actions.SparkActions.get(spark._jsparkSession)


def _with(action: Any, options: Mapping[str, str], properties: Mapping[str, str]) -> Any:
    for key, value in options.items():
        action = action.option(key, str(value))
    for key, value in properties.items():
        action = action.snapshotProperty(key, str(value))
    return action


def _filtered(spark: SparkSession, jtable: Any, action: Any, table: str, step: Step) -> Any:
    """`action` limited to the step's `where` and to its partitions (both, when both are set)."""
    if step.where:
        action = action.filter(_expression(spark, table, step.where))
    if step.partition_values:
        expression = partition_filter(spark, table, jtable, step.partition_values)
        if expression is not None:
            action = action.filter(expression)
    return action


def partition_filter(
    spark: SparkSession, table: str, jtable: Any, partitions: Iterable[Mapping[str, Any]]
) -> Any | None:
    """The Iceberg expression that selects exactly `partitions` of `table`'s current spec, or
    None when it would not restrict anything (a spec of void fields only). `partitions` hold the
    values by partition field name as Spark reads them from the metadata tables
    (compactor.stats).

    It is the gate's MERGE filter (jobkit.predicate.partition_predicate: OR over the partitions
    of AND over the fields of `transform(source) = value`, `IS NULL` for null) converted as the
    `CALL` procedures convert a `where`. A predicate on a transform term is projected onto the
    partition field with that transform, so the action plans only the files of these
    partitions, whichever the transform.

    Raises:
        ValueError: no partitions.
        KeyError: a partition lacks a field of the current spec.
        TypeError: a value of a type the filter cannot carry.
        jobkit.partition.UnsupportedPartition: a transform it cannot express.
    """
    spec = spec_of(jtable)
    values = [tuple(p[f.name] for f in spec.fields) for p in partitions]
    if not values:
        raise ValueError("a partition filter needs at least one partition")
    parts = table.split(".")
    catalog = parts[0] if len(parts) == 3 else spark.catalog.currentCatalog()
    where = partition_predicate(spec, values, catalog=catalog, alias=None)
    return None if where is None else _expression(spark, table, where)


def _expression(spark: SparkSession, table: str, where: str) -> Any:
    """`where` (Spark SQL) as an Iceberg expression, as the `CALL` procedures convert it."""
    converter = spark._jvm.org.apache.spark.sql.execution.datasources.SparkExpressionConverter
    resolved = converter.collectResolvedSparkExpression(spark._jsparkSession, table, where)
    return converter.convertToIcebergExpression(resolved)


_SORT_FIELD = re.compile(
    r"^\s*([A-Za-z_][A-Za-z0-9_.]*)(?:\s+(ASC|DESC))?(?:\s+NULLS\s+(FIRST|LAST))?\s*$", re.I
)


def parse_sort_order(text: str) -> list[tuple[str, str, str]]:
    """`"id DESC NULLS LAST, dt"` as `[("id", "DESC", "NULLS_LAST"), ("dt", "ASC", "NULLS_FIRST")]`.

    Nulls default as in Iceberg: first when ascending, last when descending.

    Raises:
        ValueError: a field is not `column [ASC|DESC] [NULLS FIRST|LAST]`.
    """
    fields = []
    for part in text.split(","):
        match = _SORT_FIELD.match(part)
        if not match:
            raise ValueError(
                f"sort order field {part.strip()!r}: use column [ASC|DESC] [NULLS FIRST|LAST]"
            )
        column, direction, nulls = match.groups()
        direction = (direction or "ASC").upper()
        nulls = (nulls or ("FIRST" if direction == "ASC" else "LAST")).upper()
        fields.append((column, direction, f"NULLS_{nulls}"))
    return fields


def _sort_order(spark: SparkSession, jtable: Any, text: str) -> Any:
    iceberg = spark._jvm.org.apache.iceberg
    builder = iceberg.SortOrder.builderFor(jtable.schema())
    for column, direction, nulls in parse_sort_order(text):
        builder = builder.sortBy(
            column, getattr(iceberg.SortDirection, direction), getattr(iceberg.NullOrder, nulls)
        )
    return builder.build()
