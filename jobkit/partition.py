"""Partition names: the one function that names an Iceberg partition for lakelock's scopes.

    spec = read_spec(spark, "local.db.events")             # PartitionSpec of the table
    scope = partition_scope(spark, "local.db.events", key_columns=("event_id", "dt", "hr"))
    scope.usable, scope.reason                             # (False, "...") -> lease the whole table
    partition_name(spec, (date(2024, 6, 20), 13))          # "dt=2024-06-20/hr=13"
    batch_partition_names(batch_df, spec, catalog="local") # ["dt=2024-06-20/hr=13", ...]
    table_partitions(spark, "local.db.events", spec)       # {name: partitions-table row}

A partition is named by its Iceberg partition path, byte for byte what
`PartitionSpec.partitionToPath` gives (docs/design.md §4): `<field>=<value>` per partition field,
joined by `/`, the value in the transform's human form (`toHumanString`) and both the field name
and the value escaped with `java.net.URLEncoder.encode(s, "UTF-8")`:

    identity date        dt=2024-06-20          identity int   hr=13
    day(ts)              ts_day=2024-06-20      hour(ts)       ts_hour=2024-06-20-13
    month(ts)            ts_month=2024-06       year(ts)       ts_year=2024
    bucket[16](id)       id_bucket=7            truncate[2]    name_trunc=ab
    null (any transform) field=null             identity ts    ts=2024-06-20T13%3A45Z
    "a b/c=d%e"          name=a+b%2Fc%3Dd%25e   (space -> "+", all but [A-Za-z0-9.*_-] -> %XX)

A null value and the string "null" get the same name, as in Iceberg's paths; for a scope that
only makes two partitions look like one, so a writer may wait, never conflict unseen.

Input representation: `partition_name` takes the transformed values as Spark hands them to
Python, which is the same from both sources lakelock reads them from, the `partition` struct of
the `partitions` metadata table and Iceberg's catalog functions (`<catalog>.system.days(col)`
etc.): `datetime.date` for identity dates and `days`; `int` for `hours`, `months`, `years`
(ordinals since 1970), `bucket` and integer `truncate`; `str`, `int`, `bool`, `Decimal`,
`bytes` for identity and `truncate` of those types; `datetime` for identity timestamps (naive
datetimes as PySpark gives them: local wall time for `timestamptz`, the stored wall time for
`timestamp_ntz`); `None` for null. Identity partitions on float, double and time columns are
refused (`UnsupportedPartition`): Java's and Python's shortest float text differ.

How the jobs use it: the ingest gate checks `partition_scope` once at start; when usable, it
counts each deduplicated micro-batch per partition (`batch_partition_counts`, the batch's one
counting job) before its MERGE and asks for a commit lease on those partitions' names (else the
whole table, logging `scope.reason` once). The compactor plans from `table_partitions` (files,
delete files, `last_updated_at` per name) and asks for a maintenance lease on the names it
rewrites. Both go through `partition_name`, so the gate's and the compactor's names for one
partition are equal strings.
"""

from __future__ import annotations

import base64
import re
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from jobkit.spark import load_table
from jobkit.sql import quote_identifier

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "PartitionField",
    "PartitionScope",
    "PartitionSpec",
    "UnsupportedPartition",
    "batch_partition_counts",
    "batch_partition_names",
    "batch_partition_values",
    "escape",
    "partition_name",
    "partition_names",
    "partition_scope",
    "read_spec",
    "scope_refusal",
    "spec_of",
    "table_partition_names",
    "table_partitions",
    "transform_sql",
]


class UnsupportedPartition(ValueError):
    """This partition field cannot be named in Python exactly as Iceberg names it; lease the
    whole table for this table."""


@dataclass(frozen=True)
class PartitionField:
    """One field of a partition spec, as Iceberg describes it.

    PartitionField(source="ts", source_type="timestamptz", transform="day", name="ts_day")
    PartitionField(source="id", source_type="long", transform="bucket[16]", name="id_bucket")
    """

    source: str  # the source column's full name (`a.b` when nested)
    source_type: str  # Iceberg's type string: date, timestamptz, string, decimal(9,2), ...
    transform: str  # Iceberg's transform string: identity, day, hour, bucket[16], truncate[2], ...
    name: str  # the partition field's name, the left-hand side in the path


@dataclass(frozen=True)
class PartitionSpec:
    """A table's current partition spec; `fields` empty for an unpartitioned table."""

    spec_id: int
    fields: tuple[PartitionField, ...]


@dataclass(frozen=True)
class PartitionScope:
    """Whether the gate may lease a batch's partitions instead of the whole table.

    PartitionScope(spec, reason=None)                          # usable
    PartitionScope(spec, reason="merge key lacks column dt")   # lease the whole table
    """

    spec: PartitionSpec
    reason: str | None

    @property
    def usable(self) -> bool:
        return self.reason is None


# java.net.URLEncoder keeps these bytes, turns a space into "+", and %XX-encodes the rest
_URL_SAFE = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-*_")


def escape(text: str) -> str:
    """`text` as `URLEncoder.encode(text, "UTF-8")` gives it, which `partitionToPath` applies
    to every field name and value (note: unlike Python's `quote_plus`, `~` is encoded)."""
    out = []
    for byte in text.encode("utf-8"):
        if byte in _URL_SAFE:
            out.append(chr(byte))
        elif byte == 0x20:
            out.append("+")
        else:
            out.append(f"%{byte:02X}")
    return "".join(out)


_EPOCH = datetime(1970, 1, 1)
_TIME_TRANSFORMS = ("day", "hour", "month", "year")
# the source types whose values _human_identity prints as Iceberg's toHumanString does
_IDENTITY_TYPES = frozenset(
    (
        "boolean",
        "int",
        "long",
        "string",
        "date",
        "timestamp",
        "timestamptz",
        "decimal",
        "uuid",
        "binary",
        "fixed",
    )
)
_PARAMETERISED = re.compile(r"^(bucket|truncate)\[(\d+)\]$")


def partition_name(spec: PartitionSpec, values: Sequence[Any] | Mapping[str, Any]) -> str:
    """The partition path of `values` (one per spec field, in spec order, or keyed by partition
    field name), byte-identical to Iceberg's `spec.partitionToPath(partition)`.

    Raises:
        ValueError: no partition fields, or a value count that does not match the spec.
        UnsupportedPartition: a transform or type this module cannot name as Iceberg does.
        TypeError: a value of a Python type the field's transform does not produce.
    """
    if not spec.fields:
        raise ValueError("an unpartitioned table has no partitions; lease the whole table")
    if isinstance(values, Mapping):
        values = [values[f.name] for f in spec.fields]
    if len(values) != len(spec.fields):
        raise ValueError(
            f"{len(values)} values for {len(spec.fields)} partition fields "
            f"({', '.join(f.name for f in spec.fields)})"
        )
    return "/".join(
        f"{escape(f.name)}={escape(_human(f, v))}" for f, v in zip(spec.fields, values, strict=True)
    )


def _human(field: PartitionField, value: Any) -> str:
    """The transform's `toHumanString(value)`."""
    transform = field.transform
    if value is None or transform == "void":
        return "null"
    if transform == "identity":
        return _human_identity(field.source_type, value)
    if transform in _TIME_TRANSFORMS:
        return _human_time(transform, value)
    match = _PARAMETERISED.match(transform)
    if match and match.group(1) == "bucket":
        return str(_int(value, field))
    if match:  # truncate keeps the source type
        return _human_identity(field.source_type, value)
    raise UnsupportedPartition(f"partition field {field.name}: unknown transform {transform!r}")


def _human_time(transform: str, value: Any) -> str:
    if transform == "day":
        # days come as a date from Spark; an int (days since 1970) is what Iceberg stores
        day = value if isinstance(value, date) else (_EPOCH + timedelta(days=_int(value))).date()
        return f"{day.year:04d}-{day.month:02d}-{day.day:02d}"
    ordinal = _int(value)
    if transform == "hour":
        at = _EPOCH + timedelta(hours=ordinal)
        return f"{at.year:04d}-{at.month:02d}-{at.day:02d}-{at.hour:02d}"
    if transform == "month":
        # floor division, as TransformUtil.humanMonth: month -1 is 1969-12
        return f"{1970 + ordinal // 12:04d}-{1 + ordinal % 12:02d}"
    return f"{1970 + ordinal:04d}"


def _human_identity(source_type: str, value: Any) -> str:
    kind = source_type.split("(", 1)[0]
    if kind == "boolean":
        return "true" if value else "false"
    if kind in ("int", "long"):
        return str(_int(value))
    if kind == "string":
        return str(value)
    if kind == "date":
        if not isinstance(value, date):
            raise TypeError(f"a date partition value must be a datetime.date, not {value!r}")
        return value.isoformat()
    if kind in ("timestamp", "timestamptz"):
        return _human_timestamp(value, with_zone=kind == "timestamptz")
    if kind == "decimal":
        # BigDecimal.toString and str(Decimal) follow the same rules; pin the type's scale
        scale = int(source_type.rstrip(")").split(",")[1])
        return str(Decimal(value).quantize(Decimal(1).scaleb(-scale)))
    if kind == "uuid":
        return str(uuid.UUID(str(value)))
    if kind in ("binary", "fixed"):
        return base64.b64encode(bytes(value)).decode("ascii")
    raise UnsupportedPartition(
        f"cannot name {source_type} partition values as Iceberg does (Java and Python print "
        "them differently); lease the whole table"
    )


def _human_timestamp(value: Any, *, with_zone: bool) -> str:
    """`OffsetDateTime`/`LocalDateTime.toString()` in UTC: seconds only when not zero, the
    fraction in 3, 6 digits as needed."""
    if isinstance(value, int) and not isinstance(value, bool):
        at = _EPOCH + timedelta(microseconds=value)
    elif isinstance(value, datetime):
        at = value
        if with_zone:
            # PySpark turns timestamptz into a naive local datetime; astimezone undoes that
            at = at.astimezone(UTC).replace(tzinfo=None)
        elif at.tzinfo is not None:
            raise TypeError(f"a timestamp (without zone) value must be naive, not {value!r}")
    else:
        raise TypeError(f"a timestamp partition value must be a datetime, not {value!r}")
    text = f"{at.year:04d}-{at.month:02d}-{at.day:02d}T{at.hour:02d}:{at.minute:02d}"
    if at.second or at.microsecond:
        text += f":{at.second:02d}"
    if at.microsecond:
        text += (
            f".{at.microsecond // 1000:03d}"
            if at.microsecond % 1000 == 0
            else f".{at.microsecond:06d}"
        )
    return text + ("Z" if with_zone else "")


def _int(value: Any, field: PartitionField | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        where = f" for partition field {field.name}" if field else ""
        raise TypeError(f"expected an int{where}, got {value!r}")
    return value


def scope_refusal(
    spec: PartitionSpec, *, specs_in_use: Iterable[int], key_columns: Sequence[str]
) -> str | None:
    """Why partition scope cannot be used (docs/design.md §4), or None when it can.

    `specs_in_use`: the spec ids of the table's live files (or of all its specs).
    """
    if not spec.fields:
        return "the table is not partitioned"
    others = sorted(set(specs_in_use) - {spec.spec_id})
    if others:
        return (
            f"live files are written with partition specs {others} besides the current "
            f"spec {spec.spec_id}; rewrite them to the current spec to use partition scope"
        )
    # Spark resolves column names case-insensitively, and so does the MERGE condition
    key = {c.lower() for c in key_columns}
    missing = [f.source for f in spec.fields if f.source.lower() not in key]
    if missing:
        return (
            f"merge key ({', '.join(key_columns)}) lacks partition source columns "
            f"{', '.join(missing)}: a batch row could match a row in another partition"
        )
    for f in spec.fields:
        try:
            _check_nameable(f)
        except UnsupportedPartition as exc:
            return str(exc)
    return None


def _check_nameable(field: PartitionField) -> None:
    transform = field.transform
    if transform in _TIME_TRANSFORMS or transform == "void" or transform.startswith("bucket["):
        return
    if transform == "identity" or transform.startswith("truncate["):
        if field.source_type.split("(", 1)[0] not in _IDENTITY_TYPES:
            raise UnsupportedPartition(
                f"partition field {field.name}: cannot name {field.source_type} values as "
                "Iceberg does (Java and Python print them differently)"
            )
        return
    raise UnsupportedPartition(f"partition field {field.name}: unknown transform {transform!r}")


# --- Spark side: py4j and DataFrames; pyspark is imported by the caller's session only ---


def spec_of(jtable: Any) -> PartitionSpec:
    """The current spec of a loaded Iceberg table (a py4j `org.apache.iceberg.Table`)."""
    schema = jtable.schema()
    jspec = jtable.spec()
    fields = tuple(
        PartitionField(
            source=str(schema.findColumnName(f.sourceId())),
            source_type=str(schema.findType(f.sourceId()).toString()),
            transform=str(f.transform().toString()),
            name=str(f.name()),
        )
        for f in jspec.fields()
    )
    return PartitionSpec(spec_id=int(jspec.specId()), fields=fields)


def read_spec(spark: SparkSession, table: str) -> PartitionSpec:
    """The current partition spec of `table`, read from Iceberg over py4j.

    Raises:
        py4j.protocol.Py4JJavaError: the table cannot be loaded.
    """
    return spec_of(load_table(spark, table))


def partition_scope(
    spark: SparkSession, table: str, *, key_columns: Sequence[str]
) -> PartitionScope:
    """The table's spec and whether a writer merging on `key_columns` may use partition scope.

    Several specs are fine when every live file is on the current one (the `files` metadata
    table is read only then).

    Raises:
        py4j.protocol.Py4JJavaError: the table cannot be loaded.
        pyspark.errors.PySparkException: the `files` metadata table cannot be read.
    """
    jtable = load_table(spark, table)
    spec = spec_of(jtable)
    in_use = [spec.spec_id]
    if int(jtable.specs().size()) > 1:
        rows = spark.sql(
            f"SELECT DISTINCT spec_id FROM {quote_identifier(table)}.`files`"
        ).collect()
        in_use = [int(r["spec_id"]) for r in rows]
    return PartitionScope(spec, scope_refusal(spec, specs_in_use=in_use, key_columns=key_columns))


def transform_sql(field: PartitionField, catalog: str, *, alias: str | None = None) -> str:
    """Spark SQL for `field`'s partition value of a row: the source column (`alias`.column when
    given) through Iceberg's transform function of `catalog`, e.g. `local`.system.days(`ts`).

    Raises:
        UnsupportedPartition: a transform this module cannot name.
    """
    column = quote_identifier(field.source)
    if alias is not None:
        column = f"{alias}.{column}"
    system = f"{quote_identifier(catalog)}.system"
    functions = {"day": "days", "hour": "hours", "month": "months", "year": "years"}
    if field.transform == "identity":
        return column
    if field.transform == "void":
        return "CAST(NULL AS INT)"
    if field.transform in functions:
        return f"{system}.{functions[field.transform]}({column})"
    match = _PARAMETERISED.match(field.transform)
    if match:
        return f"{system}.{match.group(1)}({match.group(2)}, {column})"
    raise UnsupportedPartition(
        f"partition field {field.name}: unknown transform {field.transform!r}"
    )


def batch_partition_counts(
    batch: DataFrame, spec: PartitionSpec, *, catalog: str
) -> dict[tuple[Any, ...], int]:
    """The rows of `batch` (a micro-batch whose columns have the table's types) per distinct
    partition tuple, in one Spark job: one transformed value per spec field, in spec order,
    computed with Iceberg's own transform functions of `catalog`. Name the tuples with
    `partition_names`.

    Raises:
        ValueError: the spec has no fields.
        UnsupportedPartition: a transform this module cannot name.
        pyspark.errors.PySparkException: Spark could not evaluate the transforms.
    """
    if not spec.fields:
        raise ValueError("an unpartitioned table has no partitions; lease the whole table")
    exprs = [f"{transform_sql(f, catalog)} AS `p{i}`" for i, f in enumerate(spec.fields)]
    columns = [f"p{i}" for i in range(len(spec.fields))]
    rows = batch.selectExpr(*exprs).groupBy(*columns).count().collect()
    return {tuple(row[c] for c in columns): int(row["count"]) for row in rows}


def batch_partition_values(
    batch: DataFrame, spec: PartitionSpec, *, catalog: str
) -> list[tuple[Any, ...]]:
    """The distinct partition tuples of the rows of `batch` (see batch_partition_counts).

    Raises:
        as batch_partition_counts.
    """
    return list(batch_partition_counts(batch, spec, catalog=catalog))


def partition_names(spec: PartitionSpec, values: Iterable[Sequence[Any]]) -> list[str]:
    """The sorted distinct names of partition tuples `values` (a null and the string "null"
    share one name, as in Iceberg's paths).

    Raises:
        as partition_name.
    """
    return sorted({partition_name(spec, v) for v in values})


def batch_partition_names(batch: DataFrame, spec: PartitionSpec, *, catalog: str) -> list[str]:
    """The sorted distinct partition names of the rows of `batch` (see batch_partition_values).

    Raises:
        as batch_partition_values.
    """
    return partition_names(spec, batch_partition_values(batch, spec, catalog=catalog))


def table_partitions(
    spark: SparkSession, table: str, spec: PartitionSpec
) -> dict[str, dict[str, Any]]:
    """The rows of `table`'s `partitions` metadata table written with `spec`, by partition name:
    file_count, position_delete_file_count, equality_delete_file_count, last_updated_at, ...

    Raises:
        ValueError: the spec has no fields.
        pyspark.errors.PySparkException: the metadata table cannot be read.
    """
    if not spec.fields:
        raise ValueError("an unpartitioned table has no partitions; lease the whole table")
    rows = spark.sql(
        f"SELECT * FROM {quote_identifier(table)}.`partitions` WHERE spec_id = {spec.spec_id}"
    ).collect()
    out: dict[str, dict[str, Any]] = {}
    for row in rows:
        data = row.asDict()
        partition = data.pop("partition").asDict()
        out[partition_name(spec, partition)] = data
    return out


def table_partition_names(spark: SparkSession, table: str, spec: PartitionSpec) -> list[str]:
    """The sorted names of `table`'s partitions with live files of `spec`.

    Raises:
        as table_partitions.
    """
    return sorted(table_partitions(spark, table, spec))
