"""Equality deletes resolved into position deletes, under a maintenance lease (docs/jobs.md §3,
"Converting equality deletes"; docs/design.md §1, its row of the conflict table).

    out = convert_equality_deletes(spark, table, jtable, partitions, properties)
    out["converted_equality_delete_files"], out["added_position_delete_files"], ...

An equality delete of data sequence number S removes, from every data file of its partition
(of the whole table when it was written unpartitioned) whose data sequence number is smaller
than S, the rows equal to one of its rows on its equality columns, nulls equal. Every reader
joins it with those files again; a position delete names the rows once. Here Spark reads the
data files and the equality delete files as plain Parquet, by field id (`_metadata.row_index`
is a row's position), joins them, and writes one position delete file per data files'
partition (`file_path`, `pos`, sorted, with the spec's field ids and `file_path` bounds). One
RewriteFiles commit removes the equality delete files and adds the position delete files, the
data files untouched, with the lease's properties: a `replace`, maintenance to the catalog
front, fenced like any rewrite.

A reader sees the same rows before and after. Commits that land meanwhile cannot change that:
appends and newer equality deletes (a Flink upsert's, which pass the lease) touch no file read
here. A data file removed meanwhile could: its rows, copied by a rewrite that keeps sequence
numbers, would lose the equality deletes while the positions name the file gone. Only a
rewrite does that, which the lease keeps out; the commit still checks the snapshots since its
start and refuses (ConversionConflict), writing nothing.

Format v2 only: a v3 table takes deletion vectors, not position delete files, and is left as
it is (`skipped_format_v3`).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import reduce
from typing import TYPE_CHECKING, Any

from compactor.entries import delete_files, partition_match

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

__all__ = ["ConversionConflict", "convert_equality_deletes"]

# Iceberg's reserved field ids of a position delete file's columns
FILE_PATH_ID, POS_ID = 2147483546, 2147483545
FIELD_ID_READ = "spark.sql.parquet.fieldId.read.enabled"


class ConversionConflict(Exception):
    """A data file the new position deletes name was removed since the conversion started."""


@dataclass(frozen=True)
class _File:
    path: str
    sequence: int
    spec_id: int
    partition: tuple[Any, ...]
    equality_ids: tuple[int, ...] = ()


def convert_equality_deletes(
    spark: SparkSession,
    table: str,
    jtable: Any,
    partitions: Sequence[Mapping[str, Any]],
    properties: Mapping[str, str],
) -> dict[str, int]:
    """Resolve the equality deletes of `partitions` (all of the table's when empty) into
    position deletes: one commit with `properties`; the counts of what it did.

    Raises:
        ConversionConflict: a data file it read was removed before the commit.
    """
    from pyspark.sql import functions as F

    out = {
        "converted_equality_delete_files": 0,
        "added_position_delete_files": 0,
        "deleted_positions": 0,
        "read_data_files": 0,
        "skipped_format_v3": 0,
    }
    start = jtable.currentSnapshot()
    if start is None or start.summary().get("total-equality-deletes") in (None, "0"):
        return out
    if int(jtable.operations().current().formatVersion()) >= 3:
        out["skipped_format_v3"] = 1
        return out
    snapshot_id = int(start.snapshotId())
    entries, data, equality = _live(spark, table, jtable, snapshot_id, partitions)
    if not equality:
        return out
    keys = sorted({(d.spec_id, d.partition) for d in data}, key=repr)
    owner = {key: i for i, key in enumerate(keys)}
    matched, read = _matches(spark, jtable, data, equality, owner)
    # the columns are read by Iceberg's field ids, whatever they are named now or were then
    by_id = spark.conf.get(FIELD_ID_READ, "false")
    spark.conf.set(FIELD_ID_READ, "true")
    try:
        added = _write_positions(spark, jtable, data, keys, matched) if matched else []
    finally:
        spark.conf.set(FIELD_ID_READ, by_id)
    try:
        _check_unchanged(jtable, snapshot_id, read)
        rewrite = jtable.newRewrite().validateFromSnapshot(snapshot_id)
        removed = entries.where(F.col("data_file.file_path").isin([f.path for f in equality]))
        for java in delete_files(spark, jtable, removed.select("data_file.*")):
            rewrite = rewrite.deleteFile(java)
        for _, _, java in added:
            rewrite = rewrite.addFile(java)
        for key, value in properties.items():
            rewrite = rewrite.set(key, str(value))
        rewrite.commit()
    except BaseException:
        _remove(spark, [location for location, _, _ in added])
        raise
    out["converted_equality_delete_files"] = len(equality)
    out["added_position_delete_files"] = len(added)
    out["deleted_positions"] = sum(count for _, count, _ in added)
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
    if partitions:
        fields = [str(f.name()) for f in jtable.spec().fields()]
        deletes_in = partition_match(F.col("data_file.partition"), fields, partitions)
        # data files of any partition: an unpartitioned equality delete applies to them all
        entries = entries.where((F.col("data_file.content") == 0) | deletes_in)
    columns = ("sequence_number", "data_file.content", "data_file.file_path")
    columns += ("data_file.spec_id", "data_file.partition", "data_file.equality_ids")
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


def _matches(
    spark: SparkSession,
    jtable: Any,
    data: Sequence[_File],
    equality: Sequence[_File],
    owner: Mapping[tuple[int, tuple[Any, ...]], int],
) -> tuple[list[DataFrame], set[str]]:
    """The positions each group of `equality` deletes (by partition and equality fields)
    deletes in the `data` files it applies to, with the number `owner` gives the data file's
    partition (`g`), and the paths of those data files."""
    unpartitioned = {f.spec_id for f in equality if jtable.specs().get(f.spec_id).isUnpartitioned()}
    groups: dict[tuple[Any, ...], list[_File]] = {}
    for f in equality:
        groups.setdefault((f.spec_id, f.partition, f.equality_ids), []).append(f)
    matched: list[DataFrame] = []
    read: set[str] = set()
    for (spec_id, partition, ids), deletes in groups.items():
        newest = max(f.sequence for f in deletes)
        targets = [
            d
            for d in data
            if d.sequence < newest
            and (spec_id in unpartitioned or (d.spec_id, d.partition) == (spec_id, partition))
        ]
        if targets:
            read.update(d.path for d in targets)
            matched.append(_deleted_positions(spark, jtable, ids, targets, deletes, owner))
    return matched, read


def _deleted_positions(
    spark: SparkSession,
    jtable: Any,
    ids: tuple[int, ...],
    targets: Sequence[_File],
    deletes: Sequence[_File],
    owner: Mapping[tuple[int, tuple[Any, ...]], int],
) -> DataFrame:
    """(g, file_path, pos) of the rows of `targets` that `deletes` (of equality field `ids`)
    delete: equal on every field, nulls equal, the delete newer than the data file; `g` the
    number `owner` gives its partition."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructField, StructType

    schema = jtable.schema()
    by_id = StructType(
        [
            StructField(
                f"c{i}",
                _spark_type(spark, schema.findType(field_id)),
                True,
                {"parquet.field.id": field_id},
            )
            for i, field_id in enumerate(ids)
        ]
    )
    names = [f"c{i}" for i in range(len(ids))]

    def each(files: Sequence[_File], extra: Callable[[_File], list[Column]]) -> DataFrame:
        frames = [
            spark.read.schema(by_id)
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
    rows = each(
        targets, lambda f: [position, F.lit(owner[(f.spec_id, f.partition)]).alias("g")]
    ).alias("d")
    keys = each(deletes, lambda f: []).drop("file_path").alias("e")
    on = reduce(
        lambda a, b: a & b,
        [F.col(f"d.{n}").eqNullSafe(F.col(f"e.{n}")) for n in names],
        F.col("d.seq") < F.col("e.seq"),
    )
    return rows.join(keys, on).select("d.g", "d.file_path", "d.pos").distinct()


def _spark_type(spark: SparkSession, iceberg_type: Any) -> Any:
    """The Spark type Iceberg maps `iceberg_type` to."""
    from pyspark.sql.types import _parse_datatype_json_string

    java = spark._jvm.org.apache.iceberg.spark.SparkSchemaUtil.convert(iceberg_type)
    return _parse_datatype_json_string(java.json())


def _write_positions(
    spark: SparkSession,
    jtable: Any,
    data: Sequence[_File],
    keys: Sequence[tuple[int, tuple[Any, ...]]],
    matched: Sequence[DataFrame],
) -> list[tuple[str, int, Any]]:
    """One position delete file per data files' partition (`keys`, numbered `g`) holding
    `matched` rows, under the table's data location: (path, rows, the Java DeleteFile) each."""
    from pyspark.sql import functions as F

    positions = reduce(lambda a, b: a.unionByName(b), matched)
    name = f"lakelock-converted-{uuid.uuid4()}"
    folder = str(jtable.locationProvider().newDataLocation(name))
    (
        positions.repartition("g")
        .sortWithinPartitions("g", "file_path", "pos")
        .select(
            "g",
            F.col("file_path").alias("file_path", metadata={"parquet.field.id": FILE_PATH_ID}),
            F.col("pos").alias("pos", metadata={"parquet.field.id": POS_ID}),
        )
        .write.partitionBy("g")
        .parquet(folder)
    )
    root = spark._jvm.org.apache.hadoop.fs.Path(folder)
    fs = root.getFileSystem(spark._jsc.hadoopConfiguration())
    if not any(s.getPath().getName().startswith("g=") for s in fs.listStatus(root)):
        # no row of the data files is deleted: nothing to add
        fs.delete(root, True)
        return []
    # what the files hold, read back from them (a few bytes per deleted row), rather than a
    # second pass over the join
    counts = (
        spark.read.parquet(folder)
        .groupBy("g")
        .agg(
            F.count("*").alias("rows"),
            F.min("file_path").alias("lower"),
            F.max("file_path").alias("upper"),
            F.countDistinct("file_path").alias("files"),
        )
    )
    summary = {row.g: row for row in counts.collect()}
    return _delete_files(spark, jtable, folder, keys, summary, data)


def _delete_files(
    spark: SparkSession,
    jtable: Any,
    folder: str,
    keys: Sequence[tuple[int, tuple[Any, ...]]],
    summary: Mapping[int, Any],
    data: Sequence[_File],
) -> list[tuple[str, int, Any]]:
    jvm = spark._jvm
    iceberg = jvm.org.apache.iceberg
    hadoop = spark._jsc.hadoopConfiguration()
    root = jvm.org.apache.hadoop.fs.Path(folder)
    fs = root.getFileSystem(hadoop)
    fs.delete(jvm.org.apache.hadoop.fs.Path(f"{folder}/_SUCCESS"), False)
    example = {(d.spec_id, d.partition): d.path for d in reversed(data)}
    partitions = _partitions(spark, jtable, list(example.values()))
    string = iceberg.types.Types.StringType.get()
    added: list[tuple[str, int, Any]] = []
    for g, row in sorted(summary.items()):
        listed = fs.listStatus(jvm.org.apache.hadoop.fs.Path(f"{folder}/g={g}"))
        files = [s for s in listed if s.getPath().getName().endswith(".parquet")]
        if len(files) != 1:
            raise RuntimeError(f"expected one position delete file in {folder}/g={g}: {files}")
        path = f"{folder}/g={g}/{files[0].getPath().getName()}"
        spec_id, partition = keys[g]
        lower, upper = jvm.java.util.HashMap(), jvm.java.util.HashMap()
        lower.put(FILE_PATH_ID, iceberg.types.Conversions.toByteBuffer(string, row.lower))
        upper.put(FILE_PATH_ID, iceberg.types.Conversions.toByteBuffer(string, row.upper))
        empty = jvm.java.util.HashMap()
        metrics = iceberg.Metrics(int(row.rows), empty, empty, empty, empty, lower, upper)
        builder = (
            iceberg.FileMetadata.deleteFileBuilder(jtable.specs().get(spec_id))
            .ofPositionDeletes()
            .withPath(path)
            .withFormat("parquet")
            .withFileSizeInBytes(int(files[0].getLen()))
            .withMetrics(metrics)
            .withPartition(partitions[example[(spec_id, partition)]])
        )
        if row.files == 1:
            builder = builder.withReferencedDataFile(row.lower)
        added.append((path, int(row.rows), builder.build()))
    return added


def _partitions(spark: SparkSession, jtable: Any, paths: Sequence[str]) -> dict[str, Any]:
    """The Iceberg partition (a StructLike) of each data file in `paths`."""
    wanted = set(paths)
    found: dict[str, Any] = {}
    tasks = jtable.newScan().planFiles()
    try:
        iterator = tasks.iterator()
        while iterator.hasNext() and len(found) < len(wanted):
            file = iterator.next().file()
            path = str(file.location())
            if path in wanted:
                found[path] = file.partition()
    finally:
        tasks.close()
    return found


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


def _remove(spark: SparkSession, paths: Iterable[str]) -> None:
    jvm = spark._jvm
    hadoop = spark._jsc.hadoopConfiguration()
    for location in paths:
        path = jvm.org.apache.hadoop.fs.Path(location)
        path.getFileSystem(hadoop).delete(path, False)
