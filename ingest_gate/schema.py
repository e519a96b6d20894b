"""The declared click-event schema, and the steps that enforce it on raw records.

    parsed = parse_events(raw_df, required=("event_id", "dt", "hr", "event_time"))
    good, bad = split_valid(parsed)              # bad: raw, reason
    deduped = dedupe_latest(good, key_columns=..., event_time_column="event_time")
    write_dead_letters(bad, path, query_id=q, batch_id=7)

A raw record is one JSON object per line (the `raw` column); `_source_file` and `_source_pos`
say where it was read (file and position, or Kafka topic-partition and offset) and break ties
between versions of a key with equal event time: the record written later wins, as the MERGE's
`s.event_time >= t.event_time` lets a later batch win a tie.

Reasons a record is dead-lettered (several may apply, joined by "; "):
    unparseable JSON: not a JSON object
    missing field <name>            a required field is absent or null
    wrong type for <name>: expected <type>
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from pyspark.sql import types as T

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = [
    "EVENT_COLUMNS",
    "EVENT_SCHEMA",
    "ORDER_COLUMNS",
    "RAW_COLUMN",
    "REASON_COLUMN",
    "dedupe_latest",
    "dead_letter_path_for",
    "parse_events",
    "split_valid",
    "write_dead_letters",
]

EVENT_COLUMNS: tuple[tuple[str, str], ...] = (
    ("event_id", "string"),
    ("user_id", "bigint"),
    ("product_id", "string"),
    ("event_type", "string"),
    ("event_time", "timestamp"),
    ("dt", "date"),
    ("hr", "int"),
    ("amount", "double"),
)
"""Column name and Spark SQL type of the target table, in table order."""

_SPARK_TYPES = {
    "string": T.StringType(),
    "bigint": T.LongType(),
    "int": T.IntegerType(),
    "double": T.DoubleType(),
    "timestamp": T.TimestampType(),
    "date": T.DateType(),
}

EVENT_SCHEMA = T.StructType(
    [T.StructField(name, _SPARK_TYPES[kind]) for name, kind in EVENT_COLUMNS]
)

RAW_COLUMN = "raw"
REASON_COLUMN = "reason"
ORDER_COLUMNS = ("_source_file", "_source_pos")

# Dates and timestamps are read as strings and cast afterwards: from_json's own date parser
# throws on a value such as "2024-13-01" and fails the whole batch instead of one record.
_CAST_AFTER = {"timestamp", "date"}


def parse_events(raw: DataFrame, *, required: Sequence[str]) -> DataFrame:
    """Every event column typed, plus `raw`, `reason` (null when the record is good) and any
    other columns of `raw` (the order columns).

    Never raises for a bad record: its problems end up in `reason`.
    """
    from pyspark.sql import functions as F

    json_schema = T.StructType(
        [
            T.StructField(name, T.StringType() if kind in _CAST_AFTER else _SPARK_TYPES[kind])
            for name, kind in EVENT_COLUMNS
        ]
    )
    passthrough = [c for c in raw.columns if c != RAW_COLUMN]
    step = raw.select(
        F.col(RAW_COLUMN),
        *passthrough,
        F.from_json(RAW_COLUMN, json_schema).alias("_typed"),
        # the same record as plain strings: tells "absent" from "present but not of the type"
        F.from_json(RAW_COLUMN, T.MapType(T.StringType(), T.StringType())).alias("_fields"),
    )
    typed = []
    for name, kind in EVENT_COLUMNS:
        value = F.col(f"_typed.`{name}`")
        if kind in _CAST_AFTER:
            value = F.expr(f"try_cast(_typed.`{name}` AS {kind.upper()})")
        typed.append(value.alias(name))
    step = step.select(RAW_COLUMN, *passthrough, "_fields", *typed)

    problems = []
    for name in required:
        problems.append(F.when(F.col("_fields")[name].isNull(), F.lit(f"missing field {name}")))
    for name, kind in EVENT_COLUMNS:
        problems.append(
            F.when(
                F.col("_fields")[name].isNotNull() & F.col(name).isNull(),
                F.lit(f"wrong type for {name}: expected {kind}"),
            )
        )
    reason = F.when(F.col("_fields").isNull(), F.lit("unparseable JSON: not a JSON object"))
    reason = reason.otherwise(F.nullif(F.concat_ws("; ", *problems), F.lit("")))
    return step.select(
        *[name for name, _ in EVENT_COLUMNS], RAW_COLUMN, *passthrough, reason.alias(REASON_COLUMN)
    )


def split_valid(parsed: DataFrame) -> tuple[DataFrame, DataFrame]:
    """(good records with the event and order columns, bad records as `raw`, `reason`)."""
    from pyspark.sql import functions as F

    keep = [c for c in parsed.columns if c not in (RAW_COLUMN, REASON_COLUMN)]
    good = parsed.where(F.col(REASON_COLUMN).isNull()).select(*keep)
    bad = parsed.where(F.col(REASON_COLUMN).isNotNull()).select(RAW_COLUMN, REASON_COLUMN)
    return good, bad


def dedupe_latest(
    good: DataFrame, *, key_columns: Sequence[str], event_time_column: str
) -> DataFrame:
    """One row per key: the latest by event time, ties to the record written later.

    The order columns are dropped, so the result has exactly the table's columns.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    order = [F.col(event_time_column).desc()]
    order += [F.col(c).desc() for c in ORDER_COLUMNS if c in good.columns]
    window = Window.partitionBy(*key_columns).orderBy(*order)
    return (
        good.withColumn("_rank", F.row_number().over(window))
        .where(F.col("_rank") == 1)
        .select(*[name for name, _ in EVENT_COLUMNS])
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
            REASON_COLUMN,
            F.lit(query_id).alias("query_id"),
            F.lit(batch_id).alias("batch_id"),
            F.current_timestamp().alias("received_at"),
        )
        .coalesce(1)
        .write.mode("overwrite")
        .json(path)
    )
    return path
