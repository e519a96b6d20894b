"""The upsert statement of one micro-batch.

    merge_sql(target="local.db.events", source="batch_7",
              key_columns=("event_id", "dt", "hr"), event_time_column="event_time")

gives

    MERGE INTO `local`.`db`.`events` t
    USING `batch_7` s
    ON t.`event_id` = s.`event_id` AND t.`dt` = s.`dt` AND t.`hr` = s.`hr`
    WHEN MATCHED AND s.`event_time` >= t.`event_time` THEN UPDATE SET *
    WHEN NOT MATCHED THEN INSERT *

The event-time guard makes the statement idempotent: replaying a batch that already committed
matches every row with an equal event time and rewrites it with the same values, and an older
version of a key (a late update) never replaces a newer one. `>=` rather than `>` lets a later
batch win a tie, the same rule as within a batch (see ingest_gate.schema).

Under partition scope (DESIGN.md §3b) the ON condition also names the batch's partitions by
literal values, so the MERGE reads and may touch only them (`partition_filter`):

    ON t.`event_id` = s.`event_id` AND t.`dt` = s.`dt` AND t.`hr` = s.`hr` AND ((t.`dt` =
    DATE'2024-06-20' AND t.`hr` = 13) OR (t.`dt` = DATE'2024-06-20' AND t.`hr` = 14))

Spark pushes such a disjunction of equalities into Iceberg's scan as a partition filter; a
transform's value is compared through Iceberg's function (`local`.system.days(t.`ts`) =
DATE'2024-06-20'), which Iceberg 1.9 turns into `day(ts) = ...`. A row tuple `(t.dt, t.hr) IN
((...))` is not pushed down (checked with EXPLAIN), so the disjunction is spelled out.
"""

from __future__ import annotations

import binascii
from collections.abc import Iterable, Sequence
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ingest_gate.partition import PartitionField, PartitionSpec

__all__ = ["merge_sql", "partition_predicate", "sql_literal", "quote_identifier"]


def quote_identifier(name: str) -> str:
    """`a.b.c` -> `` `a`.`b`.`c` ``, each part back-quoted (back-quotes inside are doubled)."""
    return ".".join("`" + part.replace("`", "``") + "`" for part in name.split("."))


def merge_sql(
    *,
    target: str,
    source: str,
    key_columns: Sequence[str],
    event_time_column: str,
    partition_filter: str | None = None,
) -> str:
    """The MERGE INTO statement that upserts view `source` into table `target`; with
    `partition_filter` (from `partition_predicate`) ANDed to the ON condition.

    Raises:
        ValueError: no key column, or the event-time column is a key column.
    """
    if not key_columns:
        raise ValueError("key_columns must name at least one column")
    if event_time_column in key_columns:
        raise ValueError(f"event_time_column {event_time_column!r} must not be a key column")
    on = " AND ".join(f"t.{quote_identifier(c)} = s.{quote_identifier(c)}" for c in key_columns)
    if partition_filter is not None:
        on += f" AND ({partition_filter})"
    ts = quote_identifier(event_time_column)
    return (
        f"MERGE INTO {quote_identifier(target)} t\n"
        f"USING {quote_identifier(source)} s\n"
        f"ON {on}\n"
        f"WHEN MATCHED AND s.{ts} >= t.{ts} THEN UPDATE SET *\n"
        "WHEN NOT MATCHED THEN INSERT *"
    )


def partition_predicate(
    spec: PartitionSpec, values: Iterable[Sequence[Any]], *, catalog: str, alias: str | None = "t"
) -> str | None:
    """A predicate on `alias`'s partitions (the table's own columns when `alias` is None) that
    holds exactly for rows in the partitions of `values` (partition tuples in spec order, as
    ingest_gate.partition.batch_partition_values gives them), or None when it would not restrict
    anything (no values, or only void fields).

    Raises:
        ingest_gate.partition.UnsupportedPartition: a transform it cannot express.
        TypeError: a value of a Python type it cannot write as a literal.
    """
    from ingest_gate.partition import transform_sql

    disjuncts = []
    # distinct, in a stable order; by repr since binary values come as unhashable bytearrays
    rows = {repr(tuple(row)): tuple(row) for row in values}
    for _, row in sorted(rows.items()):
        terms = []
        for field, value in zip(spec.fields, row, strict=True):
            if field.transform == "void":
                continue  # always null: no restriction
            if value is None:
                # every transform maps null to null and only null: test the column itself
                column = quote_identifier(field.source)
                ref = column if alias is None else f"{alias}.{column}"
                terms.append(f"{ref} IS NULL")
            else:
                term = transform_sql(field, catalog, alias=alias)
                terms.append(f"{term} = {sql_literal(value, field)}")
        if not terms:
            return None
        disjuncts.append("(" + " AND ".join(terms) + ")")
    return " OR ".join(disjuncts) or None


def sql_literal(value: Any, field: PartitionField) -> str:
    """`value` (a transformed partition value of `field`, as PySpark returns it) as a Spark SQL
    literal of the same type; strings with a quote or backslash go as hex, so the literal does
    not depend on `spark.sql.parser.escapedStringLiterals`.

    Raises:
        TypeError: a Python type with no literal form here.
    """
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, Decimal):
        return f"{value}BD"
    if isinstance(value, datetime):
        if field.source_type == "timestamptz":
            # PySpark hands a timestamptz back as a naive local datetime; astimezone reads it so
            at = value.astimezone(UTC)
            return f"TIMESTAMP'{at.replace(tzinfo=None).isoformat(sep=' ')}Z'"
        return f"TIMESTAMP_NTZ'{value.isoformat(sep=' ')}'"
    if isinstance(value, date):
        return f"DATE'{value.isoformat()}'"
    if isinstance(value, str):
        if "'" in value or "\\" in value:
            return f"CAST(X'{binascii.hexlify(value.encode()).decode()}' AS STRING)"
        return f"'{value}'"
    if isinstance(value, bytes | bytearray):
        return f"X'{binascii.hexlify(bytes(value)).decode()}'"
    raise TypeError(f"no SQL literal for partition field {field.name} value {value!r}")
