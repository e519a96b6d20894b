"""What a table looks like now, read from its Iceberg metadata tables.

    stats = collect_stats(spark, table="local.db.events", small_file_bytes=100 << 20)
    stats.totals()                   # Totals over every partition
    stats.partitions[0].small_files  # data files under small_file_bytes in that partition
    stats.snapshots[-1].query_id     # `lakelock.query-id` of the newest snapshot, if any
    stats.partitions[0].name         # "dt=2024-05-01", as jobkit.partition names it
    stats.scope_refusal              # why leases must cover the whole table, or None

`collect_stats` is the only function here that touches Spark: it reads the `entries` metadata
table (the live data and delete files of the current snapshot, told apart by `content`: 0 data,
1 position deletes, 2 equality deletes, with their data sequence numbers), `manifests`,
`snapshots`, `refs` and, for each partition's name and `last_updated_at`, the `partitions`
table through `jobkit.partition.table_partitions`. The rest are plain values, so
`compactor.plan` is tested without Spark.

A delete file counts as a delete (`position_delete_files`, `equality_delete_files`) only while
it still applies to a live data file of its partition; one that no longer does is *dangling*
(`dangling_*`): after a data rewrite, a position delete names a file that is gone, and an
equality delete is older than every data file left. Iceberg's rules, read from metadata only:

    position delete  applies to a data file whose path is the delete's `referenced_data_file`,
                     else lies within the delete's `file_path` bounds (field 2147483546), and
                     whose data sequence number is not greater than the delete's
    equality delete  applies to every data file of its partition with a smaller data sequence
                     number
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from compactor.entries import FILE_PATH_ID
from jobkit.partition import partition_name, read_spec, scope_refusal, table_partitions

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "SUMMARY_PREFIX",
    "PartitionStats",
    "SnapshotStats",
    "TableStats",
    "Totals",
    "collect_stats",
]

SUMMARY_PREFIX = "lakelock."
# what a Flink job's committer writes into its snapshots' summaries and reads back on a restart
# to find what it committed: kept with the snapshot (docs/jobs.md §2)
FLINK_KEYS = ("flink.job-id", "flink.operator-id", "flink.max-committed-checkpoint-id")


@dataclass(frozen=True)
class FileCounts:
    """Data and delete files counted over some part of a table."""

    data_files: int = 0
    data_bytes: int = 0
    data_records: int = 0
    small_files: int = 0
    position_delete_files: int = 0
    equality_delete_files: int = 0
    delete_bytes: int = 0
    delete_records: int = 0
    # rows the position delete files that still apply delete (of `delete_records`)
    position_delete_records: int = 0
    # delete files that no longer apply to any live data file (see the module docstring)
    dangling_position_delete_files: int = 0
    dangling_equality_delete_files: int = 0

    @property
    def delete_files(self) -> int:
        """Delete files that still apply to live data."""
        return self.position_delete_files + self.equality_delete_files

    @property
    def dangling_delete_files(self) -> int:
        return self.dangling_position_delete_files + self.dangling_equality_delete_files

    @property
    def all_delete_files(self) -> int:
        """Delete files, applying or dangling: what a reader opens and the plan's triggers
        and bounds count."""
        return self.delete_files + self.dangling_delete_files

    @property
    def deleted_rows_share(self) -> float:
        """The share of data rows position deletes remove (0 without data rows)."""
        return self.position_delete_records / self.data_records if self.data_records else 0.0

    @property
    def debt(self) -> int:
        """Small files plus delete files: what the plan orders partitions by, most first."""
        return self.small_files + self.all_delete_files


_COUNTED = tuple(FileCounts.__dataclass_fields__)


@dataclass(frozen=True)
class PartitionStats(FileCounts):
    """Files of one partition in the current snapshot.

    PartitionStats({"dt": "2024-05-01"}, data_files=40, small_files=38, position_delete_files=9)
    PartitionStats({"dt": date(2024, 5, 1)}, name="dt=2024-05-01", last_updated_at=t, ...)

    `partition` holds the values by partition field name, as Spark gives them; `name` is the
    partition's name for a scoped lease (None when the table cannot use partition scope).
    """

    partition: Mapping[str, Any] = field(default_factory=dict)
    name: str | None = None
    # when a commit last touched the partition (the `partitions` table), aware UTC
    last_updated_at: datetime | None = None

    def __init__(
        self,
        partition: Mapping[str, Any] | None = None,
        *,
        name: str | None = None,
        last_updated_at: datetime | None = None,
        **counts: int,
    ) -> None:
        object.__setattr__(self, "partition", dict(partition or {}))
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "last_updated_at", last_updated_at)
        for name in _COUNTED:
            object.__setattr__(self, name, counts.pop(name, 0))
        if counts:
            raise TypeError(f"unknown counts: {sorted(counts)}")


@dataclass(frozen=True)
class Totals(FileCounts):
    """Sums over some partitions; what a report shows before and after a run.

    Totals.of(stats.partitions).as_dict()
    """

    partitions: int = 0
    # partitions holding at least this many small files (set by the planner's min-input-files)
    max_small_files_in_partition: int = 0

    @classmethod
    def of(cls, partitions: Iterable[PartitionStats]) -> Totals:
        parts = list(partitions)
        return cls(
            partitions=len(parts),
            max_small_files_in_partition=max((p.small_files for p in parts), default=0),
            **{name: sum(getattr(p, name) for p in parts) for name in _COUNTED},
        )

    @property
    def avg_file_bytes(self) -> float:
        return self.data_bytes / self.data_files if self.data_files else 0.0

    @property
    def delete_ratio(self) -> float:
        """Delete files per data file (0 when there are no data files)."""
        return self.delete_files / self.data_files if self.data_files else 0.0

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(
            delete_files=self.delete_files,
            dangling_delete_files=self.dangling_delete_files,
            avg_file_bytes=round(self.avg_file_bytes, 1),
            delete_ratio=round(self.delete_ratio, 4),
        )
        return out


@dataclass(frozen=True)
class SnapshotStats:
    """One snapshot: when, what, and the `lakelock.*` and Flink committer properties of its
    summary."""

    snapshot_id: int
    committed_at: datetime
    operation: str = ""
    summary: Mapping[str, str] = field(default_factory=dict)

    @property
    def query_id(self) -> str | None:
        """The streaming query that committed it (`lakelock.query-id`), if any."""
        return self.summary.get("lakelock.query-id")

    @property
    def flink_committer(self) -> str | None:
        """The Flink job (and its committing operator) that committed it with a checkpoint id
        its restart reads back (`flink.max-committed-checkpoint-id`), if any."""
        if "flink.max-committed-checkpoint-id" not in self.summary:
            return None
        job = self.summary.get("flink.job-id")
        if job is None:
            return None
        operator = self.summary.get("flink.operator-id")
        return job if operator is None else f"{job}/{operator}"


@dataclass(frozen=True)
class TableStats:
    """A table's files per partition and its snapshots (oldest first)."""

    table: str
    partitions: tuple[PartitionStats, ...] = ()
    snapshots: tuple[SnapshotStats, ...] = ()
    current_snapshot_id: int | None = None
    # the size under which `small_files` were counted
    small_file_bytes: int = 0
    # the length of each manifest of the current snapshot
    manifest_bytes: tuple[int, ...] = ()
    # why a maintenance lease must cover the whole table (not partitioned, several specs in
    # use, a partition Python cannot name), or None when partitions carry their names
    scope_refusal: str | None = None

    def totals(self) -> Totals:
        return Totals.of(self.partitions)

    @property
    def last_full_rewrite_at(self) -> datetime | None:
        """When a snapshot of a `rewrite-all` run last committed (`lakelock.mode`)."""
        times = [
            s.committed_at
            for s in self.snapshots
            if s.summary.get("lakelock.mode") == "rewrite-all"
        ]
        return max(times, default=None)


def collect_stats(spark: SparkSession, *, table: str, small_file_bytes: int) -> TableStats:
    """Read `table`'s metadata tables into a TableStats.

    Raises:
        pyspark.errors.AnalysisException: no such table (or not an Iceberg table).
        py4j.protocol.Py4JJavaError: the catalog or the metadata could not be read.
    """
    rows = spark.sql(_files_sql(spark, table, int(small_file_bytes))).collect()
    refusal, spec = _scope(spark, table, {int(r["spec_id"]) for r in rows})
    updated = _last_updated(spark, table, spec) if refusal is None else {}
    partitions = _partitions(
        (
            r["partition"].asDict() if r["partition"] is not None else {},
            r["content"],
            r["applies"],
            r["files"],
            r["bytes"],
            r["records"],
            r["small"],
        )
        for r in rows
    )
    if refusal is None:
        partitions = tuple(_named(p, spec, updated) for p in partitions)
    snapshots = tuple(
        SnapshotStats(
            snapshot_id=int(r["snapshot_id"]),
            committed_at=datetime.fromtimestamp(r["committed_ms"] / 1000, tz=UTC),
            operation=r["operation"] or "",
            summary={
                k: v
                for k, v in (r["summary"] or {}).items()
                if k.startswith(SUMMARY_PREFIX) or k in FLINK_KEYS
            },
        )
        for r in spark.sql(
            # epoch millis: PySpark would turn a timestamp into the Python process's local time
            f"SELECT snapshot_id, unix_millis(committed_at) AS committed_ms, operation, summary "
            f"FROM {table}.snapshots "
            "ORDER BY committed_at, snapshot_id"
        ).collect()
    )
    main = spark.sql(f"SELECT snapshot_id FROM {table}.refs WHERE name = 'main'").collect()
    manifests = spark.sql(f"SELECT length FROM {table}.manifests").collect()
    return TableStats(
        table=table,
        partitions=partitions,
        snapshots=snapshots,
        current_snapshot_id=int(main[0]["snapshot_id"]) if main else None,
        small_file_bytes=int(small_file_bytes),
        manifest_bytes=tuple(sorted(int(r["length"]) for r in manifests)),
        scope_refusal=refusal,
    )


def _scope(spark: SparkSession, table: str, specs_in_use: set[int]) -> tuple[str | None, Any]:
    """(why the whole table, or None; the current spec). The compactor limits its rewrites to
    the partitions it names, so the gate's merge-key condition does not apply: the key given
    is the spec's own source columns."""
    spec = read_spec(spark, table)
    sources = [f.source for f in spec.fields]
    return scope_refusal(
        spec, specs_in_use=specs_in_use or {spec.spec_id}, key_columns=sources
    ), spec


def _last_updated(spark: SparkSession, table: str, spec: Any) -> dict[str, datetime | None]:
    out = {}
    for name, row in table_partitions(spark, table, spec).items():
        at = row.get("last_updated_at")
        # PySpark gives a naive local datetime; astimezone reads it as local time, as it is
        out[name] = at.astimezone(UTC) if isinstance(at, datetime) else None
    return out


def _named(p: PartitionStats, spec: Any, updated: Mapping[str, datetime | None]) -> PartitionStats:
    name = partition_name(spec, p.partition)
    counts = {k: getattr(p, k) for k in _COUNTED}
    return PartitionStats(p.partition, name=name, last_updated_at=updated.get(name), **counts)


def _files_sql(spark: SparkSession, table: str, small_file_bytes: int) -> str:
    """Files of the current snapshot by (partition, content, applies): one scan of the
    manifests, and a join of each delete file with the data files of its partition."""
    columns = spark.table(f"{table}.entries").select("data_file.*").columns
    partitioned = "partition" in columns
    partition = "data_file.partition" if partitioned else "NULL"
    # joined on its JSON text: struct equality would not match partitions with null values
    key = "to_json(data_file.partition)" if partitioned else "'{}'"
    referenced = "data_file.referenced_data_file" if "referenced_data_file" in columns else "NULL"
    return f"""
        WITH live AS (
            SELECT {partition} AS partition, {key} AS pkey, data_file.spec_id AS spec_id,
                   data_file.content AS content, data_file.file_path AS path,
                   sequence_number AS seq, data_file.file_size_in_bytes AS bytes,
                   data_file.record_count AS records, {referenced} AS ref,
                   CAST(data_file.lower_bounds[{FILE_PATH_ID}] AS STRING) AS lo,
                   CAST(data_file.upper_bounds[{FILE_PATH_ID}] AS STRING) AS hi
            FROM {table}.entries
            WHERE status < 2
        ),
        data AS (SELECT * FROM live WHERE content = 0),
        deletes AS (SELECT * FROM live WHERE content > 0),
        applying AS (
            SELECT d.* FROM deletes d LEFT SEMI JOIN data x
            ON d.spec_id = x.spec_id AND d.pkey = x.pkey AND (
                (d.content = 2 AND x.seq < d.seq)
                OR (d.content = 1 AND x.seq <= d.seq AND (
                    x.path = d.ref
                    OR (d.ref IS NULL AND (d.lo IS NULL OR x.path >= d.lo)
                        AND (d.hi IS NULL OR x.path <= d.hi)))))
        ),
        tagged AS (
            SELECT *, true AS applies FROM data
            UNION ALL SELECT *, true AS applies FROM applying
            UNION ALL SELECT *, false AS applies FROM (
                SELECT * FROM deletes EXCEPT ALL SELECT * FROM applying)
        )
        SELECT partition, spec_id, content, applies,
               count(*) AS files,
               coalesce(sum(bytes), 0) AS bytes,
               coalesce(sum(records), 0) AS records,
               coalesce(sum(CASE WHEN bytes < {small_file_bytes} THEN 1 ELSE 0 END), 0) AS small
        FROM tagged
        GROUP BY 1, 2, 3, 4
    """


def _partitions(
    rows: Iterable[tuple[dict[str, Any], int, bool, int, int, int, int]],
) -> tuple[PartitionStats, ...]:
    """Fold (partition, content, applies, files, bytes, records, small) rows into one entry a
    partition (its values keyed by field name)."""
    by_key: dict[str, dict[str, Any]] = {}
    for partition, content, applies, files, size, records, small in rows:
        key = json.dumps(partition, sort_keys=True, default=str)
        entry = by_key.setdefault(key, {"partition": partition})
        # one row per spec as well: a partition's counts add up over the specs that wrote it
        if content == 0:
            added = {
                "data_files": files,
                "data_bytes": size,
                "data_records": records,
                "small_files": small,
            }
        else:
            kind = {1: "position_delete_files", 2: "equality_delete_files"}.get(content)
            if kind is None:
                continue
            if applies:
                added = {kind: files, "delete_bytes": size, "delete_records": records}
                if content == 1:
                    added["position_delete_records"] = records
            else:
                added = {f"dangling_{kind}": files}
        for name, value in added.items():
            entry[name] = entry.get(name, 0) + value
    return tuple(PartitionStats(**by_key[k]) for k in sorted(by_key))
