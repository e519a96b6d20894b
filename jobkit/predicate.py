"""SQL predicates that select exactly a set of partitions: the gate's MERGE filter and the
compactor's `where` per group (one builder for both, so the two select the same rows).

    partition_predicate(spec, [(date(2024, 6, 20), 13)], catalog="local")
    # ((t.`dt` = DATE'2024-06-20' AND t.`hr` = 13))
    merge_filter(spec, values, catalog="local", exact_max=64)   # exact, or the superset

Under partition scope (docs/design.md §4) the gate's MERGE condition also names the batch's
partitions by
literal values, so the MERGE reads and may touch only them (`partition_filter`):

    ON t.`event_id` = s.`event_id` AND t.`dt` = s.`dt` AND t.`hr` = s.`hr` AND ((t.`dt` =
    DATE'2024-06-20' AND t.`hr` = 13) OR (t.`dt` = DATE'2024-06-20' AND t.`hr` = 14))

Spark pushes such a disjunction of equalities into Iceberg's scan as a partition filter; a
transform's value is compared through Iceberg's function (`local`.system.days(t.`ts`) =
DATE'2024-06-20'), which Iceberg 1.9 turns into `day(ts) = ...`. A row tuple `(t.dt, t.hr) IN
((...))` is not pushed down (checked with EXPLAIN), so the disjunction is spelled out.

That disjunction costs one AND per partition wherever it is evaluated (Iceberg's planning of
each file, each scan task's residual), so a wide batch pays for its width: on a table of
30,000 files in 1,000 hour partitions, a MERGE under the OR of 1,000 ANDs was slower than with
no filter at all (benchmarks/README.md, wide batches). Past `exact_max` partitions
`merge_filter` gives `partition_superset` instead, one IN list per partition field:

    t.`dt` IN (DATE'2024-06-20', DATE'2024-06-21') AND t.`hr` IN (0, 1, 22, 23)

a superset of the batch's partitions (here hours 22-23 of one day and 0-1 of the next, so it
admits eight partitions for four) at one set lookup per field, pushed down the same way. It
only widens what the MERGE reads: the rows a key matches are in the batch's own partitions, and
the commit lease still names exactly those.
"""

from __future__ import annotations

import binascii
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any, Literal

from jobkit.partition import PartitionField, PartitionSpec, transform_sql
from jobkit.sql import quote_identifier

__all__ = [
    "MergeFilter",
    "merge_filter",
    "partition_predicate",
    "partition_superset",
    "sql_literal",
]


@dataclass(frozen=True)
class MergeFilter:
    """The partition filter of one MERGE: `predicate` (None: no filter) and its `kind`,
    `exact` (partition_predicate) or `superset` (partition_superset)."""

    predicate: str | None
    kind: Literal["exact", "superset"]


def merge_filter(
    spec: PartitionSpec,
    values: Iterable[Sequence[Any]],
    *,
    catalog: str,
    exact_max: int,
    alias: str | None = "t",
) -> MergeFilter:
    """The partition filter for a batch in the partitions of `values`: exact for at most
    `exact_max` distinct partitions, else the per-field superset (see the module docstring).

    Raises:
        as partition_predicate.
    """
    rows = _distinct(values)
    if len(rows) <= exact_max:
        return MergeFilter(partition_predicate(spec, rows, catalog=catalog, alias=alias), "exact")
    return MergeFilter(partition_superset(spec, rows, catalog=catalog, alias=alias), "superset")


def _distinct(values: Iterable[Sequence[Any]]) -> list[tuple[Any, ...]]:
    """The distinct tuples of `values` in a stable order (by repr: binary values come as
    unhashable bytearrays)."""
    rows = {repr(tuple(row)): tuple(row) for row in values}
    return [row for _, row in sorted(rows.items())]


def partition_predicate(
    spec: PartitionSpec, values: Iterable[Sequence[Any]], *, catalog: str, alias: str | None = "t"
) -> str | None:
    """A predicate on `alias`'s partitions (the table's own columns when `alias` is None) that
    holds exactly for rows in the partitions of `values` (partition tuples in spec order, as
    jobkit.partition.batch_partition_values gives them), or None when it would not restrict
    anything (no values, or only void fields).

    Raises:
        jobkit.partition.UnsupportedPartition: a transform it cannot express.
        TypeError: a value of a Python type it cannot write as a literal.
    """
    disjuncts = []
    for row in _distinct(values):
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


def partition_superset(
    spec: PartitionSpec, values: Iterable[Sequence[Any]], *, catalog: str, alias: str | None = "t"
) -> str | None:
    """A predicate that holds for every row in the partitions of `values` (as
    partition_predicate takes them) and for rows of other partitions that combine the same
    field values: per field, its transformed value IN the field's distinct values (`OR
    column IS NULL` when null is one of them), ANDed over the fields. None when it would not
    restrict anything (no values, or only void fields).

    Raises:
        as partition_predicate.
    """
    rows = _distinct(values)
    if not rows:
        return None
    terms = []
    for i, field in enumerate(spec.fields):
        if field.transform == "void":
            continue  # always null: no restriction
        term = _field_in(field, [row[i] for row in rows], catalog=catalog, alias=alias)
        terms.append(term)
    return " AND ".join(terms) or None


def _field_in(field: PartitionField, values: list[Any], *, catalog: str, alias: str | None) -> str:
    """`field`'s transformed value IN `values`, and/or its source column IS NULL."""
    by_literal = {sql_literal(v, field): v for v in values if v is not None}
    literals = [literal for literal, _ in sorted(by_literal.items(), key=lambda item: item[1])]
    tests = []
    if literals:
        tests.append(f"{transform_sql(field, catalog, alias=alias)} IN ({', '.join(literals)})")
    if any(v is None for v in values):
        column = quote_identifier(field.source)
        tests.append(f"{column if alias is None else f'{alias}.{column}'} IS NULL")
    return tests[0] if len(tests) == 1 else "(" + " OR ".join(tests) + ")"


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
