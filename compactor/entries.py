"""A table's `entries` metadata table, as the procedures that commit by hand read it: which
rows lie in some partitions, and the Java files their rows stand for; and their commit."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

__all__ = [
    "FILE_PATH_ID",
    "POS_ID",
    "commit_rewrite",
    "data_files",
    "delete_files",
    "partition_match",
]

# Iceberg's reserved field ids of a position delete file's columns
FILE_PATH_ID, POS_ID = 2147483546, 2147483545


def partition_match(
    partition: Column, fields: Sequence[str], partitions: Iterable[Mapping[str, Any]]
) -> Column:
    """A condition on an `entries` table's `data_file.partition` column: one of `partitions`
    (their values by partition field name, as Spark reads them), null matching null."""
    from pyspark.sql import functions as F

    chosen = F.lit(False)
    for values in partitions:
        match = F.lit(True)
        for name in fields:
            value = values[name]
            match &= partition[name].isNull() if value is None else partition[name] == value
        chosen |= match
    return chosen


def delete_files(spark: SparkSession, jtable: Any, entries: DataFrame) -> list[Any]:
    """The Java DeleteFile of each row of `entries` (an `entries` table), which a RewriteFiles
    can remove."""
    return _wrapped(spark, jtable, entries, "SparkDeleteFile")


def data_files(spark: SparkSession, jtable: Any, entries: DataFrame) -> list[Any]:
    """The Java DataFile of each row of `entries` (an `entries` table): its spec and
    partition, as Iceberg holds them."""
    return _wrapped(spark, jtable, entries, "SparkDataFile")


def _wrapped(spark: SparkSession, jtable: Any, entries: DataFrame, wrapper: str) -> list[Any]:
    iceberg = spark._jvm.org.apache.iceberg
    combined = iceberg.DataFile.getType(iceberg.Partitioning.partitionType(jtable))
    files = entries.select("data_file.*")
    schema = files._jdf.schema()
    out = []
    for row in files._jdf.collectAsList():
        spec = jtable.specs().get(row.getInt(row.fieldIndex("spec_id")))
        projection = iceberg.DataFile.getType(spec.partitionType())
        out.append(getattr(iceberg.spark, wrapper)(combined, projection, schema).wrap(row))
    return out


def commit_rewrite(
    jtable: Any, removed: Iterable[Any], added: Iterable[Any], properties: Mapping[str, str]
) -> None:
    """One RewriteFiles of `jtable`: the Java files `removed` out, `added` in, with
    `properties` in its snapshot summary."""
    rewrite = jtable.newRewrite()
    for file in removed:
        rewrite = rewrite.deleteFile(file)
    for file in added:
        rewrite = rewrite.addFile(file)
    for key, value in properties.items():
        rewrite = rewrite.set(key, str(value))
    rewrite.commit()
