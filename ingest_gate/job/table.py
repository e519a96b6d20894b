"""What the ingest job expects of its table, and reading one back.

    check_write_modes(spark, "local.db.events")     # warns unless merge- or copy-on-write
    ensure_clustered_writes(spark, "local.db.events")  # one writer open per task, not per partition
    ensure_partition_summaries(spark, "local.db.events")  # per-partition counts in each summary
    create_table_sql("local.db.events", columns="event_id STRING NOT NULL, ...",
                     partitioned_by="dt, hr", identifier=("event_id", "dt", "hr"))
    read_rows(spark, "local.db.events", key_columns=("event_id", "dt", "hr"))

The job never creates its table: the table is the schema (ingest_gate.job.target). A table made for
it is best merge-on-read for MERGE, UPDATE and DELETE (position deletes instead of rewritten
data files, so a micro-batch is cheap), with file-scoped delete granularity (one delete file per
data file, which `rewrite_position_delete_files` can drop when the data file is compacted),
format version 2 (TABLE_PROPERTIES; 3 for deletion vectors), and identifier fields naming its
key. A table read far more than it is written may be copy-on-write instead (WRITE_MODES): each
batch rewrites the data files it changes and leaves no delete file for a reader to apply.

It also needs Spark to write it with the clustered writer (`write.spark.fanout.enabled` =
`false`). Iceberg's MERGE already distributes rows by partition (`write.merge.distribution-mode`
is `hash` by default), but a small batch still lands in one write task, and with the fanout
writer, Iceberg's default for an unsorted table, that task keeps one Parquet writer open per
partition at once: a batch over 500 hour partitions ran a 1 GiB driver out of heap
(`FanoutDataWriter.newWriter`) and took the streaming query down. Without fanout Iceberg asks
Spark to sort each task's rows by partition, and the clustered writer keeps one file open at a
time however many partitions the batch spans (benchmarks/README.md, wide batches). No session
setting or MERGE option chooses the writer: only this table property (or a write option, which
SQL MERGE cannot pass), so the job sets it at start where the table's owner left it unset.

And it wants Iceberg to count each commit's files per partition in the snapshot summary
(`write.summary.partition-limit`, PARTITION_SUMMARY_LIMIT partitions; Iceberg's default 0 writes
none): after each MERGE the job reads its own snapshot's counts and the gate hands them to the
lakelock service when the commit lease ends, so the service knows the moment a partition becomes
due for compaction without reading a manifest (docs/jobs.md §3). A commit that changes more
partitions than the limit carries no per-partition counts; the compactor's full plan measures
those. The job sets the property at start where the table's owner left it unset.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from jobkit.sql import quote_identifier

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "FANOUT_PROPERTY",
    "FORMAT_VERSIONS",
    "PARTITION_SUMMARY_LIMIT",
    "PARTITION_SUMMARY_PROPERTY",
    "TABLE_PROPERTIES",
    "TIMESTAMP_FORMAT",
    "check_write_modes",
    "create_table_sql",
    "ensure_clustered_writes",
    "ensure_partition_summaries",
    "identifier_merge_refusal",
    "read_rows",
    "require_format_version",
    "require_write_mode",
    "table_properties",
]

# how the generator writes event times (demo.generate.format_time), in Spark's pattern
TIMESTAMP_FORMAT = "yyyy-MM-dd'T'HH:mm:ss.SSSSSS'Z'"

log = logging.getLogger(__name__)

TABLE_PROPERTIES: Mapping[str, str] = {
    "format-version": "2",
    "write.merge.mode": "merge-on-read",
    "write.update.mode": "merge-on-read",
    "write.delete.mode": "merge-on-read",
    "write.delete.granularity": "file",
    "write.spark.fanout.enabled": "false",
    "write.summary.partition-limit": "100",
}
# the versions a table made for the job may have: 2, or 3 for deletion vectors
FORMAT_VERSIONS = (2, 3)
# how a MERGE, UPDATE or DELETE changes rows of a data file: a delete file beside it
# (merge-on-read, TABLE_PROPERTIES) or the data file rewritten (copy-on-write)
WRITE_MODE_PROPERTIES = ("write.merge.mode", "write.update.mode", "write.delete.mode")
WRITE_MODES = ("merge-on-read", "copy-on-write")
FANOUT_PROPERTY = "write.spark.fanout.enabled"
PARTITION_SUMMARY_PROPERTY = "write.summary.partition-limit"
# the most partitions a commit may change and still carry per-partition counts in its summary:
# about 150 bytes of table metadata per partition and snapshot kept
PARTITION_SUMMARY_LIMIT = 100


def create_table_sql(
    table: str,
    *,
    columns: str,
    partitioned_by: str = "",
    identifier: Sequence[str] = (),
    format_version: int = 2,
    write_mode: str = "merge-on-read",
) -> list[str]:
    """The statements a user runs to make a table for the job: `CREATE TABLE IF NOT EXISTS`
    with TABLE_PROPERTIES, then `ALTER TABLE ... SET IDENTIFIER FIELDS` (the key; its columns
    must be NOT NULL). `format_version` 3 makes Iceberg (1.11, the jobs' default) write a
    deletion vector per data file instead of position delete files; `write_mode`
    copy-on-write makes a batch rewrite the data files it changes instead (docs/jobs.md §2).

    Raises:
        ValueError: `format_version` is neither 2 nor 3, or `write_mode` not of WRITE_MODES.
    """
    require_format_version(format_version)
    require_write_mode(write_mode)
    properties = {
        **TABLE_PROPERTIES,
        "format-version": str(format_version),
        **dict.fromkeys(WRITE_MODE_PROPERTIES, write_mode),
    }
    props = ",\n  ".join(f"'{k}' = '{v}'" for k, v in properties.items())
    partitioned = f"\nPARTITIONED BY ({partitioned_by})" if partitioned_by else ""
    statements = [
        f"CREATE TABLE IF NOT EXISTS {quote_identifier(table)} (\n  {columns}\n)\n"
        f"USING iceberg{partitioned}\nTBLPROPERTIES (\n  {props}\n)"
    ]
    if identifier:
        fields = ", ".join(quote_identifier(c) for c in identifier)
        statements.append(f"ALTER TABLE {quote_identifier(table)} SET IDENTIFIER FIELDS {fields}")
    return statements


def require_format_version(version: int) -> None:
    """Raises ValueError, saying what to use, unless a table made for the job may be of
    format `version` (FORMAT_VERSIONS)."""
    if version not in FORMAT_VERSIONS:
        raise ValueError(
            f"format version {version}: use 2 or 3 (2: position delete files, or 3: deletion "
            "vectors)"
        )


def require_write_mode(mode: str) -> None:
    """Raises ValueError, saying what to use, unless `mode` is one of WRITE_MODES."""
    if mode not in WRITE_MODES:
        raise ValueError(
            f"write mode {mode!r}: use merge-on-read (a delete file beside each data file a "
            "batch changes) or copy-on-write (the data file rewritten)"
        )


def table_properties(spark: SparkSession, table: str) -> dict[str, str]:
    """`SHOW TBLPROPERTIES` of `table`.

    Raises:
        pyspark.errors.PySparkException: the table's properties cannot be read.
    """
    rows = spark.sql(f"SHOW TBLPROPERTIES {quote_identifier(table)}").collect()
    return {row["key"]: row["value"] for row in rows}


def identifier_merge_refusal(
    properties: Mapping[str, str], *, identifier: Sequence[str], iceberg_version: str
) -> str | None:
    """Why Spark cannot MERGE into this table, or None.

    Iceberg before 1.10 fails every merge-on-read MERGE, UPDATE and DELETE from Spark on a table
    with identifier fields ("Cannot add fieldId 1 as an identifier field: field does not
    exist", apache/iceberg#11341): said at start, with the way out, instead of at each batch.
    """
    parts = [int(p) for p in iceberg_version.split(".")[:2] if p.isdigit()]
    if not identifier or properties.get("write.merge.mode") != "merge-on-read":
        return None
    if len(parts) == 2 and tuple(parts) >= (1, 10):
        return None
    fields = ", ".join(identifier)
    return (
        f"Iceberg {iceberg_version} cannot MERGE into a merge-on-read table with identifier "
        f"fields (apache/iceberg#11341, fixed in 1.10): drop them (ALTER TABLE ... DROP "
        f"IDENTIFIER FIELDS {fields}) and set key_columns = [{fields}], or make the table "
        "copy-on-write (write.merge.mode), or run Iceberg 1.10 or later"
    )


def check_write_modes(spark: SparkSession, table: str) -> None:
    """Warn when `table`'s write modes differ from TABLE_PROPERTIES (its owner chose them; the
    job does not alter them), unless its owner made it copy-on-write throughout (WRITE_MODES:
    logged; a property left unset is Iceberg's default, copy-on-write, and warned of).

    Raises:
        pyspark.errors.PySparkException: the table's properties cannot be read.
    """
    actual = table_properties(spark, table)
    skipped = {"format-version", FANOUT_PROPERTY, PARTITION_SUMMARY_PROPERTY}
    if all(actual.get(key) == "copy-on-write" for key in WRITE_MODE_PROPERTIES):
        log.info(
            "table %s is copy-on-write: each batch rewrites the data files it changes, and "
            "leaves no delete file",
            table,
        )
        skipped.update(WRITE_MODE_PROPERTIES, ["write.delete.granularity"])
    for key, wanted in TABLE_PROPERTIES.items():
        if key in skipped:
            # the version is Iceberg's to check; the writer and the summaries, ensure_*
            continue
        if actual.get(key) != wanted:
            log.warning(
                "table %s has %s=%s, expected %s%s: each batch may rewrite data files",
                table,
                key,
                actual.get(key),
                wanted,
                " (or copy-on-write in all three write modes)"
                if key in WRITE_MODE_PROPERTIES
                else "",
            )


def ensure_clustered_writes(spark: SparkSession, table: str) -> bool:
    """Make Spark write `table` with the clustered writer (see the module docstring): set
    `write.spark.fanout.enabled` to `false` when the table does not have the property (logged,
    one metadata commit that changes no data file); warn when its owner set it to `true`.
    True when the table is (now) written clustered.

    Raises:
        pyspark.errors.PySparkException: the properties cannot be read or set.
    """
    value = table_properties(spark, table).get(FANOUT_PROPERTY)
    if value is None:
        spark.sql(
            f"ALTER TABLE {quote_identifier(table)} SET TBLPROPERTIES ('{FANOUT_PROPERTY}' = "
            "'false')"
        )
        log.info(
            "table %s: set %s=false, so a batch over many partitions keeps one Parquet writer "
            "open per write task instead of one per partition",
            table,
            FANOUT_PROPERTY,
        )
        return True
    if value.strip().lower() == "false":
        return True
    log.warning(
        "table %s has %s=%s: each write task keeps one Parquet writer open per partition it "
        "writes, so a batch over a few hundred partitions can run the driver or an executor out "
        "of heap (about 2 MiB per partition); ALTER TABLE %s SET TBLPROPERTIES ('%s' = 'false') "
        "keeps one open per task",
        table,
        FANOUT_PROPERTY,
        value,
        table,
        FANOUT_PROPERTY,
    )
    return False


def ensure_partition_summaries(
    spark: SparkSession, table: str, *, limit: int = PARTITION_SUMMARY_LIMIT
) -> bool:
    """Make Iceberg count each commit's files per partition in its snapshot summary (see the
    module docstring): set `write.summary.partition-limit` to `limit` when the table does not
    have the property (logged, one metadata commit that changes no data file); warn when its
    owner set it to 0 or something unreadable. True when the table's commits carry the counts.

    Raises:
        pyspark.errors.PySparkException: the properties cannot be read or set.
    """
    value = table_properties(spark, table).get(PARTITION_SUMMARY_PROPERTY)
    if value is None:
        spark.sql(
            f"ALTER TABLE {quote_identifier(table)} SET TBLPROPERTIES "
            f"('{PARTITION_SUMMARY_PROPERTY}' = '{int(limit)}')"
        )
        log.info(
            "table %s: set %s=%d, so each commit's summary counts its files per partition and "
            "the lakelock service learns which partitions are due for compaction",
            table,
            PARTITION_SUMMARY_PROPERTY,
            limit,
        )
        return True
    try:
        if int(value.strip()) > 0:
            return True
    except ValueError:
        pass
    log.warning(
        "table %s has %s=%s: commits carry no per-partition counts, so the lakelock service "
        "learns a partition's debt from the compactor's full plan only; ALTER TABLE %s SET "
        "TBLPROPERTIES ('%s' = '%d') lets a following compactor compact it within seconds",
        table,
        PARTITION_SUMMARY_PROPERTY,
        value,
        table,
        PARTITION_SUMMARY_PROPERTY,
        limit,
    )
    return False


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
