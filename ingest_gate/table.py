"""Create the upsert table when it is missing.

    create_table_sql("local.db.events", partition_columns=("dt", "hr"))
    ensure_table(spark, "local.db.events", partition_columns=("dt", "hr"))

Merge-on-read for MERGE, UPDATE and DELETE (position deletes instead of rewritten data files, so
a micro-batch is cheap), file-scoped delete granularity (one delete file per data file, which
`rewrite_position_delete_files` can drop when the data file is compacted), format version 2.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ingest_gate.merge import quote_identifier
from ingest_gate.schema import EVENT_COLUMNS

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["TABLE_PROPERTIES", "create_table_sql", "ensure_table", "read_rows"]

# how the generator writes event times (ingest_gate.generate.format_time), in Spark's pattern
TIMESTAMP_FORMAT = "yyyy-MM-dd'T'HH:mm:ss.SSSSSS'Z'"

log = logging.getLogger(__name__)

TABLE_PROPERTIES: Mapping[str, str] = {
    "format-version": "2",
    "write.merge.mode": "merge-on-read",
    "write.update.mode": "merge-on-read",
    "write.delete.mode": "merge-on-read",
    "write.delete.granularity": "file",
}


def create_table_sql(table: str, *, partition_columns: Sequence[str]) -> str:
    """`CREATE TABLE IF NOT EXISTS` with the event columns, partitioning and TABLE_PROPERTIES."""
    columns = ",\n  ".join(f"{quote_identifier(n)} {kind}" for n, kind in EVENT_COLUMNS)
    partitioned = ""
    if partition_columns:
        partitioned = (
            "\nPARTITIONED BY (" + ", ".join(quote_identifier(c) for c in partition_columns) + ")"
        )
    props = ",\n  ".join(f"'{k}' = '{v}'" for k, v in TABLE_PROPERTIES.items())
    return (
        f"CREATE TABLE IF NOT EXISTS {quote_identifier(table)} (\n  {columns}\n)\n"
        f"USING iceberg{partitioned}\nTBLPROPERTIES (\n  {props}\n)"
    )


def ensure_table(spark: SparkSession, table: str, *, partition_columns: Sequence[str]) -> None:
    """Create `table` (and its namespace) if missing; warn when an existing table's write modes
    differ from TABLE_PROPERTIES (its owner chose them; the job does not alter them).

    Raises:
        pyspark.errors.PySparkException: the catalog refused the statements.
    """
    namespace = table.rsplit(".", 1)[0]
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {quote_identifier(namespace)}")
    spark.sql(create_table_sql(table, partition_columns=partition_columns))
    rows = spark.sql(f"SHOW TBLPROPERTIES {quote_identifier(table)}").collect()
    actual = {row["key"]: row["value"] for row in rows}
    for key, wanted in TABLE_PROPERTIES.items():
        if key != "format-version" and actual.get(key) != wanted:
            log.warning(
                "table %s has %s=%s, expected %s: each batch may rewrite data files",
                table,
                key,
                actual.get(key),
                wanted,
            )


def read_rows(
    spark: SparkSession, table: str, *, key_columns: Sequence[str] = ("event_id", "dt", "hr")
) -> list[dict[str, Any]]:
    """Every row of `table` as the JSON-shaped dict the generator wrote for it, sorted by key;
    comparable with `EventGenerator.expected_rows()`."""
    rows = spark.sql(
        f"SELECT to_json(struct(*), map('timestampFormat', \"{TIMESTAMP_FORMAT}\")) AS j "
        f"FROM {quote_identifier(table)}"
    ).collect()
    out = [json.loads(row["j"]) for row in rows]
    return sorted(out, key=lambda r: tuple(r[k] for k in key_columns))
