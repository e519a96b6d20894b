"""A table's `entries` metadata table, as the procedures that commit by hand read it: which
rows lie in some partitions, and the Java files their rows stand for."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

__all__ = ["delete_files", "partition_match"]


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


def delete_files(spark: SparkSession, jtable: Any, files: DataFrame) -> list[Any]:
    """The Java DeleteFile of each row of `files` (an `entries` table's `data_file.*`), which
    a RewriteFiles can remove."""
    iceberg = spark._jvm.org.apache.iceberg
    combined = iceberg.DataFile.getType(iceberg.Partitioning.partitionType(jtable))
    schema = files._jdf.schema()
    out = []
    for row in files._jdf.collectAsList():
        spec = jtable.specs().get(row.getInt(row.fieldIndex("spec_id")))
        projection = iceberg.DataFile.getType(spec.partitionType())
        out.append(iceberg.spark.SparkDeleteFile(combined, projection, schema).wrap(row))
    return out
