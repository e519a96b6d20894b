"""The target table as the ingest job sees it: the table is the schema.

    target = read_target(spark, "local.db.user_member")   # TableMissing: one line, what to do
    target.columns          # (Field("userid", Primitive("string"), required=True), ...)
    target.identifier       # ("userid",): Iceberg's identifier fields, the default merge key
    target.spec             # its partition spec (jobkit.partition.PartitionSpec)
    target.version          # (schema id, spec id): changes when the table is altered
    target_of(schema_json, spec)      # the same from Iceberg's schema JSON, without Spark
    spark_schema(target.columns)      # the Spark StructType of the columns

Read at the start of each micro-batch through the catalog (one metadata read), so a column
added with `ALTER TABLE ... ADD COLUMN` is parsed and written from the next batch on.

Types the job reads records into (Iceberg's names): boolean, int, long, float, double,
decimal(P,S), date, timestamp, timestamptz, string, uuid, fixed[L], binary, and struct, list and
map of them. Refused at start, naming the column: time, timestamp_ns, timestamptz_ns, unknown,
variant and the geospatial types (Spark 3.5 cannot write them), and a map whose key is not a
primitive.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Union

from jobkit.partition import PartitionSpec, spec_of
from jobkit.spark import CatalogConfig, catalog_place, load_table

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import DataType, StructType

__all__ = [
    "Field",
    "IcebergType",
    "ListOf",
    "MapOf",
    "Primitive",
    "Struct",
    "TableMissing",
    "Target",
    "UnsupportedTable",
    "missing_table_line",
    "read_target",
    "spark_schema",
    "spark_type",
    "target_of",
    "unsupported",
]

PRIMITIVES = frozenset(
    (
        "boolean",
        "int",
        "long",
        "float",
        "double",
        "date",
        "timestamp",
        "timestamptz",
        "string",
        "uuid",
        "binary",
    )
)
_DECIMAL = re.compile(r"^decimal\((\d+),\s*(\d+)\)$")
_FIXED = re.compile(r"^fixed\[(\d+)\]$")


@dataclass(frozen=True)
class Primitive:
    """An Iceberg primitive by its name: `long`, `decimal(9,2)`, `fixed[16]`, ..."""

    name: str

    @property
    def decimal(self) -> tuple[int, int] | None:
        """(precision, scale) of a decimal, else None."""
        match = _DECIMAL.match(self.name)
        return (int(match.group(1)), int(match.group(2))) if match else None

    @property
    def fixed(self) -> int | None:
        """The length of a fixed, else None."""
        match = _FIXED.match(self.name)
        return int(match.group(1)) if match else None

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class Field:
    name: str
    type: IcebergType
    required: bool = False


@dataclass(frozen=True)
class Struct:
    fields: tuple[Field, ...]

    def __str__(self) -> str:
        return "struct<" + ", ".join(f"{f.name}: {f.type}" for f in self.fields) + ">"


@dataclass(frozen=True)
class ListOf:
    element: IcebergType
    element_required: bool = False

    def __str__(self) -> str:
        return f"list<{self.element}>"


@dataclass(frozen=True)
class MapOf:
    key: IcebergType
    value: IcebergType
    value_required: bool = False

    def __str__(self) -> str:
        return f"map<{self.key}, {self.value}>"


IcebergType = Union[Primitive, Struct, ListOf, MapOf]  # noqa: UP007 (a forward-referenced alias)


@dataclass(frozen=True)
class Target:
    """The table's columns, identifier fields, partition spec and their ids.

    Target(name="local.db.t", columns=(Field("id", Primitive("long"), True),), identifier=("id",),
           spec=PartitionSpec(0, ()), version=(0, 0))
    """

    name: str
    columns: tuple[Field, ...]
    identifier: tuple[str, ...]
    spec: PartitionSpec
    version: tuple[int, int]

    def column(self, name: str) -> Field | None:
        return next((c for c in self.columns if c.name == name), None)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)


class TableMissing(LookupError):
    """The target table does not exist; create it (the message says how), then start again."""


class UnsupportedTable(ValueError):
    """The table has a column the job cannot write, or the key names no usable column."""


def _type_of(data: Any) -> IcebergType:
    if isinstance(data, str):
        return Primitive(data)
    kind = data["type"]
    if kind == "struct":
        return Struct(tuple(_field_of(f) for f in data["fields"]))
    if kind == "list":
        return ListOf(_type_of(data["element"]), bool(data.get("element-required")))
    if kind == "map":
        return MapOf(
            _type_of(data["key"]), _type_of(data["value"]), bool(data.get("value-required"))
        )
    return Primitive(str(kind))


def _field_of(data: dict[str, Any]) -> Field:
    return Field(data["name"], _type_of(data["type"]), bool(data.get("required")))


def target_of(
    schema_json: str | dict[str, Any], spec: PartitionSpec, *, name: str = "t", spec_id: int = 0
) -> Target:
    """A Target from Iceberg's schema JSON (`SchemaParser.toJson`)."""
    data = json.loads(schema_json) if isinstance(schema_json, str) else schema_json
    columns = tuple(_field_of(f) for f in data["fields"])
    by_id = {f["id"]: f["name"] for f in data["fields"]}
    ids = data.get("identifier-field-ids") or []
    # a nested identifier field has no top-level id: named as missing, refused by key checks
    identifier = tuple(by_id.get(i, f"<nested field {i}>") for i in ids)
    return Target(
        name=name,
        columns=columns,
        identifier=identifier,
        spec=spec,
        version=(int(data.get("schema-id", 0)), spec_id),
    )


def unsupported(columns: Sequence[Field]) -> list[str]:
    """Why each column the job cannot write is refused; [] when all can be written."""
    out = []

    def check(path: str, kind: IcebergType) -> None:
        if isinstance(kind, Struct):
            for f in kind.fields:
                check(f"{path}.{f.name}", f.type)
        elif isinstance(kind, ListOf):
            check(f"{path}.element", kind.element)
        elif isinstance(kind, MapOf):
            if not isinstance(kind.key, Primitive):
                out.append(f"{path}: a map key must be a primitive, not {kind.key}")
            check(f"{path}.key", kind.key)
            check(f"{path}.value", kind.value)
        elif not (kind.name in PRIMITIVES or kind.decimal or kind.fixed is not None):
            out.append(f"{path}: type {kind.name} cannot be written from Spark 3.5")

    for column in columns:
        check(column.name, column.type)
    return out


def missing_table_line(table: str, catalog: CatalogConfig) -> str:
    """One line for a target table the catalog does not have: where, and how to create it."""
    return (
        f"{table}: no such table in {catalog_place(catalog)}; the ingest job writes into an "
        f"existing table: create it first, e.g. in spark-sql: CREATE TABLE {table} (id BIGINT "
        "NOT NULL, ...) USING iceberg PARTITIONED BY (...) TBLPROPERTIES ('format-version'='2', "
        "'write.merge.mode'='merge-on-read'); ALTER TABLE "
        f"{table} SET IDENTIFIER FIELDS id (or set key_columns)"
    )


def read_target(spark: SparkSession, table: str, *, catalog: CatalogConfig) -> Target:
    """The table's schema, identifier fields and partition spec, read fresh from the catalog.

    Raises:
        TableMissing: no such table (the message says where it looked and how to create one).
        py4j.protocol.Py4JJavaError, pyspark.errors.PySparkException: the catalog failed
            otherwise.
    """
    try:
        jtable = load_table(spark, table)
    except Exception as exc:
        # py4j's error, or the PySpark exception PySpark turns a Spark AnalysisException into
        origin = getattr(exc, "java_exception", None) or getattr(exc, "_origin", None)
        name = str(origin.getClass().getName()) if origin is not None else type(exc).__name__
        if name.endswith(("NoSuchTableException", "NoSuchNamespaceException")):
            raise TableMissing(missing_table_line(table, catalog)) from None
        raise
    jvm = spark._jvm
    schema_json = jvm.org.apache.iceberg.SchemaParser.toJson(jtable.schema())
    spec = spec_of(jtable)
    return target_of(schema_json, spec, name=table, spec_id=spec.spec_id)


# -- Spark types -----------------------------------------------------------------------------


def spark_type(kind: IcebergType) -> DataType:
    """The Spark type Iceberg maps `kind` to (uuid is a string, fixed a binary)."""
    from pyspark.sql import types as T

    if isinstance(kind, Struct):
        return spark_schema(kind.fields)
    if isinstance(kind, ListOf):
        return T.ArrayType(spark_type(kind.element), containsNull=True)
    if isinstance(kind, MapOf):
        return T.MapType(spark_type(kind.key), spark_type(kind.value), valueContainsNull=True)
    if kind.decimal:
        return T.DecimalType(*kind.decimal)
    if kind.fixed is not None:
        return T.BinaryType()
    simple = {
        "boolean": T.BooleanType(),
        "int": T.IntegerType(),
        "long": T.LongType(),
        "float": T.FloatType(),
        "double": T.DoubleType(),
        "date": T.DateType(),
        "timestamp": T.TimestampNTZType(),
        "timestamptz": T.TimestampType(),
        "string": T.StringType(),
        "uuid": T.StringType(),
        "binary": T.BinaryType(),
    }
    return simple[kind.name]


def spark_schema(columns: Sequence[Field]) -> StructType:
    """The columns as a Spark StructType, every field nullable (a source, not the table)."""
    from pyspark.sql import types as T

    return T.StructType([T.StructField(c.name, spark_type(c.type), True) for c in columns])
