"""The Flink SQL the writer runs, built from its options: pure functions, so they are tested
without Flink.

    catalog(name, uri=..., token=...)          CREATE CATALOG over lakelock's /iceberg
    target(options)                             CREATE TABLE IF NOT EXISTS, with the key
    source(options)                             the landing folder as a temporary table
    insert(options)                             INSERT INTO target SELECT * FROM source

Names are quoted with backticks; a value in a WITH clause is a quoted literal. The token is a
catalog property, so it is passed here and never logged (flink_writer.job logs the statements
without it).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = ["Options", "catalog", "insert", "quote", "source", "target"]

SOURCE = "lakelock_source"
"""The temporary table over the landing folder."""

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class Options:
    """What the writer writes, and from where.

    `table` is `namespace.table` inside the catalog; `columns` the table's columns in Flink SQL
    (`event_id STRING, dt STRING, v BIGINT`), used when the job creates the table; `key` the
    primary key of an upsert table (Flink's `PRIMARY KEY ... NOT ENFORCED`, which Iceberg makes
    the identifier fields); `partitioned_by` identity partition columns.
    """

    catalog_uri: str
    table: str
    mode: str = "upsert"  # "upsert" | "append"
    columns: str = ""
    key: Sequence[str] = ()
    partitioned_by: Sequence[str] = ()
    landing: str = ""
    monitor_interval_s: float = 1.0
    catalog_name: str = "lakelock"
    properties: dict[str, str] = field(default_factory=dict)
    # another Iceberg catalog than lakelock's front (its Flink catalog properties, e.g.
    # catalog-impl, uri, warehouse): the same job straight to the catalog, for comparison
    catalog_properties: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.mode not in ("upsert", "append"):
            raise ValueError(f"mode {self.mode!r}: upsert or append")
        if self.mode == "upsert" and not self.key:
            raise ValueError("an upsert writer needs its key columns (--key event_id,dt,hr)")
        parts = self.table.split(".")
        if len(parts) != 2 or not all(_NAME.match(p) for p in parts):
            raise ValueError(f"table {self.table!r}: namespace.table, each a plain name")
        for name in (*self.key, *self.partitioned_by, self.catalog_name):
            if not _NAME.match(name):
                raise ValueError(f"{name!r} is not a plain column or catalog name")

    @property
    def qualified(self) -> str:
        return ".".join(quote(p) for p in (self.catalog_name, *self.table.split(".")))


def quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _with(properties: dict[str, str]) -> str:
    return ",\n  ".join(f"{_literal(k)} = {_literal(v)}" for k, v in properties.items())


def catalog(options: Options, *, token: str) -> str:
    """The Iceberg REST catalog at lakelock's front, with the job's token; or the catalog
    `options.catalog_properties` name, without lakelock."""
    props = {"type": "iceberg"}
    if options.catalog_properties:
        props.update(options.catalog_properties)
    else:
        props.update({"catalog-type": "rest", "uri": options.catalog_uri, "token": token})
    return f"CREATE CATALOG {quote(options.catalog_name)} WITH (\n  {_with(props)}\n)"


def target(options: Options) -> str:
    """The table, when the job creates it: format v2; an upsert table with its key, upsert on
    (equality deletes, one commit per checkpoint), as Flink users write them."""
    if not options.columns:
        raise ValueError("the table does not exist: give its columns (--columns) to create it")
    columns = options.columns
    if options.key:
        columns += f",\n  PRIMARY KEY ({', '.join(map(quote, options.key))}) NOT ENFORCED"
    props = {"format-version": "2", **options.properties}
    if options.mode == "upsert":
        props["write.upsert.enabled"] = "true"
    partitioned = (
        f"\nPARTITIONED BY ({', '.join(map(quote, options.partitioned_by))})"
        if options.partitioned_by
        else ""
    )
    return (
        f"CREATE TABLE IF NOT EXISTS {options.qualified} (\n  {columns}\n){partitioned}\n"
        f"WITH (\n  {_with(props)}\n)"
    )


def source(options: Options, columns: Sequence[tuple[str, str]]) -> str:
    """The landing folder's JSON-lines files as a table of the target's columns (name, SQL
    type, as `DESCRIBE` answers them), watched for new files every `monitor_interval_s` (an
    unbounded source: the job runs until stopped)."""
    props = {
        "connector": "filesystem",
        "path": options.landing,
        "format": "json",
        "source.monitor-interval": f"{int(options.monitor_interval_s * 1000)}ms",
    }
    fields = ",\n  ".join(f"{quote(name)} {kind}" for name, kind in columns)
    return f"CREATE TEMPORARY TABLE {quote(SOURCE)} (\n  {fields}\n) WITH (\n  {_with(props)}\n)"


def insert(options: Options) -> str:
    return f"INSERT INTO {options.qualified} SELECT * FROM {quote(SOURCE)}"
