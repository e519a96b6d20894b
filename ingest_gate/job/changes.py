"""A micro-batch of raw records as the changes to merge: decode, count, dead letters, last change.

    decoded = decode_batch(batch, decoder)     # one row per change, bad or skipped record
    counts = count_decoded(decoded)            # BatchCounts: rows, bad, skipped by reason, ...
    write_dead_letters(bad_records(decoded), path, query_id=q, batch_id=7)
    merged = last_change_per_key(changes(decoded), key_columns=("id",), names=target.names)

`decode_batch` runs `ingest_gate.job.decode.Decoder.rows` over each partition of the batch (the
batch's `raw`, `_source_file`, `_source_pos`), so the columns come from the target table read
at the start of the batch. Its rows: `_kind` (change | bad | skip), `_reason`, `_raw`,
`_deleted`, `_unknown` (record fields with no column), the order `_source_file`, `_source_pos`,
`_sub`, `_first` (the record's first row: counts records, not rows), then the table's columns.

Order within a batch: the place in the stream (file name and line, or Kafka topic-partition and
offset: a key's changes are in one partition), then `_sub` within a record. The json format
puts the event time first, so the newest version wins and a tie goes to the record written
later; the MERGE's guard does the same across batches (see ingest_gate.job.merge).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ingest_gate.job.target import spark_schema

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from ingest_gate.job.decode import Decoder

__all__ = [
    "DELETED",
    "ORDER_COLUMNS",
    "RAW_COLUMN",
    "BatchCounts",
    "bad_records",
    "changes",
    "count_decoded",
    "dead_letter_path_for",
    "decode_batch",
    "last_change_per_key",
    "write_dead_letters",
]

RAW_COLUMN = "raw"
ORDER_COLUMNS = ("_source_file", "_source_pos")
DELETED = "_deleted"


def decode_batch(batch: DataFrame, decoder: Decoder) -> DataFrame:
    """The decoded rows of `batch` (columns `raw` and the ORDER_COLUMNS)."""
    from pyspark.sql import types as T

    meta = T.StructType(
        [
            T.StructField("_kind", T.StringType(), False),
            T.StructField("_reason", T.StringType(), True),
            T.StructField("_raw", T.StringType(), True),
            T.StructField(DELETED, T.BooleanType(), True),
            T.StructField("_unknown", T.ArrayType(T.StringType()), True),
            T.StructField(ORDER_COLUMNS[0], T.StringType(), True),
            T.StructField(ORDER_COLUMNS[1], T.LongType(), True),
            T.StructField("_sub", T.IntegerType(), False),
            T.StructField("_first", T.BooleanType(), False),
        ]
    )
    schema = T.StructType(meta.fields + spark_schema(decoder.target.columns).fields)
    records = batch.select(RAW_COLUMN, *ORDER_COLUMNS).rdd.mapPartitions(decoder.rows)
    return batch.sparkSession.createDataFrame(records, schema, verifySchema=False)


@dataclass
class BatchCounts:
    """What a batch's records were: `rows` read, `bad` dead-lettered, `skipped` by reason
    (tombstone, DDL, message), `changes` they made (`deletes` of them), `unknown_fields`
    (occurrences of record fields the table has no column for) and their names, `sources`
    (files, or Kafka topic-partitions, the records came from) and the last of them by name."""

    rows: int = 0
    bad: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    changes: int = 0
    deletes: int = 0
    sources: int = 0
    last_source: str | None = None
    unknown_fields: int = 0
    unknown_names: list[str] = field(default_factory=list)


def count_decoded(decoded: DataFrame) -> BatchCounts:
    """The counts of a decoded batch, in one Spark job. A record counts once in `rows` however
    many changes it made (a canal message's rows, a key change's two)."""
    from pyspark.sql import functions as F

    rows = (
        decoded.groupBy("_kind", F.when(F.col("_kind") == "skip", F.col("_reason")).alias("why"))
        .agg(
            F.count(F.lit(1)).alias("n"),
            F.count(F.when(F.col("_first"), 1)).alias("records"),
            F.count(F.when(F.col(DELETED), 1)).alias("deletes"),
            F.collect_set(ORDER_COLUMNS[0]).alias("sources"),
            F.max(ORDER_COLUMNS[0]).alias("last_source"),
            F.sum(F.size(F.coalesce("_unknown", F.array()))).alias("unknown"),
            F.array_distinct(F.flatten(F.collect_set(F.coalesce("_unknown", F.array())))).alias(
                "names"
            ),
        )
        .collect()
    )
    counts = BatchCounts()
    names: set[str] = set()
    sources: set[str] = set()
    for row in rows:
        sources.update(row["sources"] or [])
        if row["last_source"] is not None:
            counts.last_source = max(counts.last_source or "", row["last_source"])
        counts.unknown_fields += int(row["unknown"] or 0)
        names.update(row["names"] or [])
        # a bad canal message may also have made changes (its good rows): one record still
        counts.rows += int(row["records"])
        if row["_kind"] == "change":
            counts.changes += int(row["n"])
            counts.deletes += int(row["deletes"])
        elif row["_kind"] == "bad":
            counts.bad += int(row["n"])
        else:
            counts.skipped[row["why"]] = int(row["n"])
    counts.unknown_names = sorted(names)
    counts.sources = len(sources)
    return counts


def changes(decoded: DataFrame) -> DataFrame:
    return decoded.where("_kind = 'change'")


def bad_records(decoded: DataFrame) -> DataFrame:
    """The bad records as `raw`, `reason`."""
    from pyspark.sql import functions as F

    return decoded.where("_kind = 'bad'").select(
        F.col("_raw").alias(RAW_COLUMN), F.col("_reason").alias("reason")
    )


def last_change_per_key(
    rows: DataFrame,
    *,
    key_columns: Sequence[str],
    names: Sequence[str],
    event_time_column: str | None = None,
) -> DataFrame:
    """One row per key: its last change by stream order (json: by event time first), as the
    table's columns `names` plus `_deleted`."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    order = [F.col(event_time_column).desc()] if event_time_column else []
    order += [F.col(c).desc() for c in (*ORDER_COLUMNS, "_sub")]
    window = Window.partitionBy(*key_columns).orderBy(*order)
    return (
        rows.withColumn("_rank", F.row_number().over(window))
        .where(F.col("_rank") == 1)
        .select(*names, DELETED)
    )


def dead_letter_path_for(base: str, *, query_id: str, batch_id: int) -> str:
    """The folder of one batch's dead letters; a replayed batch overwrites its own folder."""
    return f"{base.rstrip('/')}/query_id={query_id}/batch_id={batch_id}"


def write_dead_letters(bad: DataFrame, base: str, *, query_id: str, batch_id: int) -> str:
    """Write `bad` as JSON files (raw, reason, query_id, batch_id, received_at); return the folder.

    Raises:
        pyspark.errors.PySparkException: the files could not be written.
    """
    from pyspark.sql import functions as F

    path = dead_letter_path_for(base, query_id=query_id, batch_id=batch_id)
    (
        bad.select(
            RAW_COLUMN,
            "reason",
            F.lit(query_id).alias("query_id"),
            F.lit(batch_id).alias("batch_id"),
            F.current_timestamp().alias("received_at"),
        )
        .coalesce(1)
        .write.mode("overwrite")
        .json(path)
    )
    return path
