"""Equality deletes resolved into position deletes, under a maintenance lease (docs/jobs.md §3,
"Converting equality deletes"; docs/design.md §1, its row of the conflict table).

    out = convert_equality_deletes(spark, table, jtable, partitions, properties)
    out["converted_equality_delete_files"], out["added_position_delete_files"], ...

An equality delete of data sequence number S removes, from every data file of its partition
(of the whole table when it was written unpartitioned) whose data sequence number is smaller
than S, the rows equal to one of its rows on its equality columns, nulls equal. Every reader
joins it with those files again; a position delete names the rows once. Here Spark reads the
data files and the equality delete files as plain Parquet, by field id (`_metadata.row_index`
is a row's position), joins them, and writes one position delete file per data file it deletes
rows of (file-scoped: `referenced_data_file` set, as Spark's own merge-on-read writes them, so
Iceberg's `delete-ratio-threshold` sees them). One RewriteFiles commit removes the equality
delete files and adds the position delete files, the data files untouched, with the lease's
properties: a `replace`, maintenance to the catalog front, fenced like any rewrite.

A reader sees the same rows before and after. Commits that land meanwhile cannot change that:
appends and newer equality deletes (a Flink upsert's, which pass the lease) touch no file read
here. A data file removed meanwhile could: its rows, copied by a rewrite that keeps sequence
numbers, would lose the equality deletes while the positions name the file gone. Only a rewrite
or a copy-on-write commit does that, and the lease keeps both out (the catalog front holds such
a commit while the lease is live); the conversion also checks the snapshots since its start
just before it commits and refuses (ConversionConflict), writing nothing. Iceberg's own retry of
the commit does not check again: from there, the lease alone protects it.

Left as they are, and counted: equality deletes on a field that is not a top-level column
(`skipped_equality_delete_files`), and every equality delete of a format v3 table, which takes
deletion vectors, not position delete files (`skipped_format_v3`).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import reduce
from typing import TYPE_CHECKING, Any

from compactor.entries import (
    FILE_PATH_ID,
    POS_ID,
    commit_rewrite,
    data_files,
    delete_files,
    partition_match,
)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

__all__ = ["ConversionConflict", "convert_equality_deletes"]

log = logging.getLogger(__name__)

FIELD_ID_READ = "spark.sql.parquet.fieldId.read.enabled"
OUTPUTS = (
    "converted_equality_delete_files",
    "added_position_delete_files",
    "deleted_positions",
    "read_data_files",
    "skipped_equality_delete_files",
    "skipped_format_v3",
)


class ConversionConflict(Exception):
    """A data file the new position deletes name was removed since the conversion started."""


@dataclass(frozen=True)
class _File:
    path: str
    sequence: int
    spec_id: int
    partition: tuple[Any, ...]
    equality_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class _Group:
    """Equality delete files of one partition and one set of equality fields, and the data
    files they apply to."""

    ids: tuple[int, ...]
    deletes: tuple[_File, ...]
    targets: tuple[_File, ...]


def convert_equality_deletes(
    spark: SparkSession,
    table: str,
    jtable: Any,
    partitions: Sequence[Mapping[str, Any]],
    properties: Mapping[str, str],
) -> dict[str, int]:
    """Resolve the equality deletes of `partitions` (all of the table's when empty) into
    position deletes: one commit with `properties`; the counts of what it did (OUTPUTS).

    Raises:
        ConversionConflict: a data file it read was removed before the commit.
    """
    out = dict.fromkeys(OUTPUTS, 0)
    start = jtable.currentSnapshot()
    if start is None or start.summary().get("total-equality-deletes") in (None, "0"):
        return out
    if int(jtable.operations().current().formatVersion()) >= 3:
        out["skipped_format_v3"] = 1
        return out
    snapshot_id = int(start.snapshotId())
    entries, data, equality = _live(spark, table, jtable, snapshot_id, partitions)
    groups, skipped = _groups(jtable, data, equality)
    out["skipped_equality_delete_files"] = len(skipped)
    if not groups:
        return out
    read = {d.path for g in groups for d in g.targets}
    # a session of its own reads by field id (whatever the columns are named now or were
    # then): the setting never changes under another table's step sharing `spark`
    reader = spark.newSession()
    reader.conf.set(FIELD_ID_READ, "true")
    folder = str(jtable.locationProvider().newDataLocation(f"lakelock-converted-{uuid.uuid4()}"))
    try:
        added = _write_positions(reader, jtable, entries, groups, folder)
        _check_unchanged(jtable, snapshot_id, read)
        _commit(spark, jtable, entries, [f for g in groups for f in g.deletes], added, properties)
    except Exception as exc:
        if not _state_unknown(exc):  # the commit may have landed: its files stay
            _remove_folder(spark, folder)
        raise
    out["converted_equality_delete_files"] = sum(len(g.deletes) for g in groups)
    out["added_position_delete_files"] = len(added)
    out["deleted_positions"] = sum(rows for _, rows, _ in added)
    out["read_data_files"] = len(read)
    return out


def _live(
    spark: SparkSession,
    table: str,
    jtable: Any,
    snapshot_id: int,
    partitions: Sequence[Mapping[str, Any]],
) -> tuple[DataFrame, list[_File], list[_File]]:
    """The `entries` of snapshot `snapshot_id` this reads, its data files (of every partition)
    and its equality delete files (of `partitions`, or all)."""
    from pyspark.sql import functions as F

    entries = spark.sql(f"SELECT * FROM {table}.entries VERSION AS OF {snapshot_id}")
    # live entries; position deletes are skipped below: a filter on `data_file.content` is
    # pushed down to the manifests' own content (1 for every delete manifest), so `!= 1`
    # would drop the equality deletes too
    entries = entries.where("status < 2")
    # a table never partitioned has no partition column in its metadata tables
    partitioned = "partition" in entries.select("data_file.*").columns
    if partitions and partitioned:
        fields = [str(f.name()) for f in jtable.spec().fields()]
        deletes_in = partition_match(F.col("data_file.partition"), fields, partitions)
        # data files of any partition: an unpartitioned equality delete applies to them all
        entries = entries.where((F.col("data_file.content") == 0) | deletes_in)
    partition = F.col("data_file.partition") if partitioned else F.lit(None)
    columns = ["sequence_number", "data_file.content", "data_file.file_path"]
    columns += ["data_file.spec_id", partition.alias("partition"), "data_file.equality_ids"]
    data: list[_File] = []
    equality: list[_File] = []
    for row in entries.select(*columns).collect():
        file = _File(
            str(row.file_path),
            int(row.sequence_number),
            int(row.spec_id),
            tuple(row.partition or ()),
            tuple(sorted(row.equality_ids or ())),
        )
        if row.content != 1:
            (equality if row.content == 2 else data).append(file)
    return entries, data, equality


def _groups(
    jtable: Any, data: Sequence[_File], equality: Sequence[_File]
) -> tuple[list[_Group], list[_File]]:
    """The `equality` deletes by partition and equality fields, each with the `data` files it
    applies to; and the delete files left as they are (a field not a top-level column)."""
    columns = {int(f.fieldId()) for f in jtable.schema().columns()}
    unpartitioned = {f.spec_id for f in equality if jtable.specs().get(f.spec_id).isUnpartitioned()}
    by_key: dict[tuple[Any, ...], list[_File]] = {}
    for f in equality:
        by_key.setdefault((f.spec_id, f.partition, f.equality_ids), []).append(f)
    groups: list[_Group] = []
    skipped: list[_File] = []
    for (spec_id, partition, ids), deletes in by_key.items():
        if not ids or not set(ids) <= columns:
            skipped.extend(deletes)
            continue
        newest = max(f.sequence for f in deletes)
        targets = tuple(
            d
            for d in data
            if d.sequence < newest
            and (spec_id in unpartitioned or (d.spec_id, d.partition) == (spec_id, partition))
        )
        groups.append(_Group(ids, tuple(deletes), targets))
    return groups, skipped


def _write_positions(
    reader: SparkSession, jtable: Any, entries: DataFrame, groups: Sequence[_Group], folder: str
) -> list[tuple[str, int, Any]]:
    """One position delete file per data file of `groups` with a row deleted, in `folder`:
    (path, rows, the Java DeleteFile) each."""
    from pyspark.sql import functions as F

    paths = sorted({d.path for g in groups for d in g.targets})
    if not paths:
        return []  # equality deletes that apply to no data file: removed, nothing added
    number = {path: i for i, path in enumerate(paths)}
    matched = [_deleted_positions(reader, jtable, g, number) for g in groups if g.targets]
    # a row two groups delete (other equality fields, or a global delete) is named once
    positions = reduce(lambda a, b: a.unionByName(b), matched).distinct()
    (
        positions.repartition("f")
        .sortWithinPartitions("f", "pos")
        .select(
            "f",
            F.col("file_path").alias("file_path", metadata={"parquet.field.id": FILE_PATH_ID}),
            F.col("pos").alias("pos", metadata={"parquet.field.id": POS_ID}),
        )
        .write.partitionBy("f")
        .parquet(folder)
    )
    written = _written(reader, folder)
    if not written:
        return []  # no row of the data files is deleted
    # how many positions each file holds, read back from them: a few bytes per row
    rows = {r.f: r[1] for r in reader.read.parquet(folder).groupBy("f").count().collect()}
    java = data_files(reader, jtable, entries.where(F.col("data_file.file_path").isin(paths)))
    by_path = {str(file.location()): file for file in java}
    return [
        _position_file(
            reader,
            jtable,
            f"{folder}/f={f}/{part.getPath().getName()}",
            part.getLen(),
            by_path[paths[f]],
            rows[f],
        )
        for f, part in sorted(written.items())
    ]


def _written(spark: SparkSession, folder: str) -> dict[int, Any]:
    """The Parquet file (a Hadoop FileStatus) Spark wrote under `folder`/f=N, by N."""
    hadoop = spark._jvm.org.apache.hadoop.fs
    root = hadoop.Path(folder)
    fs = root.getFileSystem(spark._jsc.hadoopConfiguration())
    if not fs.exists(root):
        return {}
    written: dict[int, Any] = {}
    for status in fs.listStatus(root):
        name = str(status.getPath().getName())
        if name.startswith("f="):
            listed = fs.listStatus(status.getPath())
            (part,) = [s for s in listed if s.getPath().getName().endswith(".parquet")]
            written[int(name[2:])] = part
    return written


def _deleted_positions(
    reader: SparkSession, jtable: Any, group: _Group, number: Mapping[str, int]
) -> DataFrame:
    """(f, file_path, pos) of the rows of `group`'s data files its deletes delete: equal on
    every equality field, nulls equal, the delete newer than the data file; `f` the data file's
    `number`."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructField, StructType

    schema = jtable.schema()
    names = [f"c{i}" for i in range(len(group.ids))]
    by_id = StructType(
        [
            StructField(
                name,
                _spark_type(reader, schema.findType(field_id)),
                True,
                {"parquet.field.id": field_id},
            )
            for name, field_id in zip(names, group.ids, strict=True)
        ]
    )

    def each(files: Sequence[_File], extra: Callable[[_File], list[Column]]) -> DataFrame:
        frames = [
            reader.read.schema(by_id)
            .parquet(f.path)
            .select(
                F.lit(f.path).alias("file_path"),
                F.lit(f.sequence).alias("seq"),
                *extra(f),
                *names,
            )
            for f in files
        ]
        return reduce(lambda a, b: a.unionByName(b), frames)

    position = F.col("_metadata.row_index").alias("pos")
    rows = each(group.targets, lambda f: [position, F.lit(number[f.path]).alias("f")]).alias("d")
    keys = each(group.deletes, lambda f: []).drop("file_path").alias("e")
    on = reduce(
        lambda a, b: a & b,
        [F.col(f"d.{n}").eqNullSafe(F.col(f"e.{n}")) for n in names],
        F.col("d.seq") < F.col("e.seq"),
    )
    return rows.join(keys, on).select("d.f", "d.file_path", "d.pos")


def _spark_type(spark: SparkSession, iceberg_type: Any) -> Any:
    """The Spark type Iceberg maps `iceberg_type` to."""
    from pyspark.sql.types import _parse_datatype_json_string

    java = spark._jvm.org.apache.iceberg.spark.SparkSchemaUtil.convert(iceberg_type)
    return _parse_datatype_json_string(java.json())


def _position_file(
    spark: SparkSession, jtable: Any, path: str, size: int, data_file: Any, rows: int
) -> tuple[str, int, Any]:
    """The Java DeleteFile of the position delete file at `path` naming `rows` rows of
    `data_file` alone: in its spec and partition, `file_path` bounds and
    `referenced_data_file` its path."""
    iceberg = spark._jvm.org.apache.iceberg
    target = str(data_file.location())
    bound = iceberg.types.Conversions.toByteBuffer(iceberg.types.Types.StringType.get(), target)
    bounds = spark._jvm.java.util.HashMap()
    bounds.put(FILE_PATH_ID, bound)
    empty = spark._jvm.java.util.HashMap()
    metrics = iceberg.Metrics(int(rows), empty, empty, empty, empty, bounds, bounds)
    file = (
        iceberg.FileMetadata.deleteFileBuilder(jtable.specs().get(data_file.specId()))
        .ofPositionDeletes()
        .withPath(path)
        .withFormat("parquet")
        .withFileSizeInBytes(int(size))
        .withMetrics(metrics)
        .withPartition(data_file.partition())
        .withReferencedDataFile(target)
        .build()
    )
    return path, int(rows), file


def _check_unchanged(jtable: Any, since: int, referenced: set[str]) -> None:
    """Raise ConversionConflict when a snapshot after `since` removed a data file in
    `referenced`."""
    jtable.refresh()
    snapshot = jtable.currentSnapshot()
    while snapshot is not None and int(snapshot.snapshotId()) != since:
        for file in snapshot.removedDataFiles(jtable.io()):
            if str(file.location()) in referenced:
                raise ConversionConflict(
                    f"data file {file.location()} was removed by snapshot "
                    f"{snapshot.snapshotId()} ({snapshot.operation()}) while its equality "
                    "deletes were being converted; nothing was committed"
                )
        parent = snapshot.parentId()
        snapshot = None if parent is None else jtable.snapshot(parent)


def _commit(
    spark: SparkSession,
    jtable: Any,
    entries: DataFrame,
    removed: Sequence[_File],
    added: Sequence[tuple[str, int, Any]],
    properties: Mapping[str, str],
) -> None:
    """One RewriteFiles: the `removed` equality delete files out, the `added` position delete
    files in, with `properties`."""
    from pyspark.sql import functions as F

    chosen = entries.where(F.col("data_file.file_path").isin([f.path for f in removed]))
    files = delete_files(spark, jtable, chosen)
    commit_rewrite(jtable, files, [file for _, _, file in added], properties)


def _state_unknown(exc: BaseException) -> bool:
    """Whether `exc` is Iceberg's CommitStateUnknownException: the commit may have landed."""
    java = getattr(exc, "java_exception", None)
    return java is not None and str(java.getClass().getName()).endswith(
        "CommitStateUnknownException"
    )


def _remove_folder(spark: SparkSession, folder: str) -> None:
    """Remove what a conversion that did not commit wrote; a failure to is logged, so the
    conversion's own error is the one raised."""
    path = spark._jvm.org.apache.hadoop.fs.Path(folder)
    try:
        path.getFileSystem(spark._jsc.hadoopConfiguration()).delete(path, True)
    except Exception:
        log.warning(
            "could not remove %s, written by a conversion that did not commit",
            folder,
            exc_info=True,
        )
