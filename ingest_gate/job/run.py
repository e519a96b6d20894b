"""The streaming upsert job: source -> parse -> dead letters -> dedupe -> gate -> MERGE.

    handle = run(load_config(), spark=spark)   # starts the query, returns at once
    handle.wait()                              # until available-now, max_batches or run_for_s
    handle.records                             # one BatchRecord per micro-batch
    handle.stop()

Each micro-batch (`BatchWriter`, the `foreachBatch` function) does, in order:

1. read the target table from the catalog (schema, identifier fields, partition spec; see
   ingest_gate.job.target): when it changed since the last batch (an `ALTER TABLE ... ADD
   COLUMN`), records are parsed against the new columns from this batch on;
2. decode the records in the configured format (ingest_gate.job.decode) into changes; bad records
   go to the dead-letter folder of the batch with their reason, tombstones and DDL are
   counted as skipped, record fields the table has no column for are counted and ignored;
3. keep the last change of each key (ingest_gate.job.changes.last_change_per_key);
4. skip the batch when a snapshot of the table already carries this query id and batch id: the
   batch committed before a crash and is being replayed from the checkpoint;
5. name the batch's partitions (jobkit.partition), enter the gate with a commit lease on
   them (see ingest_gate.gate) and run the MERGE (ingest_gate.job.merge): upserts, and for change
   streams deletes, its ON condition limited to those partitions (exactly up to
   `exact_filter_max_partitions`, past it by one IN list per partition field, a cheaper
   superset), with the query id, batch id and lease id in the snapshot summary; then, still
   inside the gate, read its own snapshot's per-partition counts (data and delete files added,
   ingest_gate.job.snapshots.partition_counts) and hand them to the gate, which gives them to
   the service with the lease's release, so the service knows the moment a partition is due
   for compaction (docs/jobs.md §3);
6. source kafka: measure the lag per topic-partition after the batch and report it to the
   service (ingest_gate.job.kafka);
7. log one JSON line (logger `ingest_gate.job.run`) and keep it as a `BatchRecord`.

Source kafka, before the query starts: the checkpoint's position is checked against what the
topics still hold; records retention deleted before the job read them stop it (`RetentionLoss`)
unless `on_data_loss = "skip"`, which records each range as an `ingest.gap` event.

The table must exist: the job reads its schema and never creates it (`TableMissing` says how).
Key columns come from `key_columns`, or else from the table's identifier fields.

Lease scope (`lease_scope`, docs/design.md §4) is decided once per run, at the first batch: the
batch's partitions when the table has one partition spec in use and the key holds every
partition source column, else the whole table, with the reason logged once. A batch in more
than `max_lease_partitions` partitions leases the whole table (its MERGE keeps the filter).
`lease_scope = "table"` keeps every lease and MERGE exactly as without scopes.

A batch that raises fails the streaming query; a restart from the same checkpoint replays the
batch, which step 3 and the MERGE's event-time guard make harmless. The query id (not the run
id) survives restarts, so it identifies a batch across them. A run stopped at its bound
(`max_batches`, `run_for_s`) or by `stop()` interrupts the batch running then; that batch ends
`interrupted`, the run does not fail, and the next start runs the batch again.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ingest_gate.job.changes import (
    DELETED,
    bad_records,
    changes,
    count_decoded,
    decode_batch,
    last_change_per_key,
    write_dead_letters,
)
from ingest_gate.job.decode import Decoder
from ingest_gate.job.gating import GateLike, make_gate
from ingest_gate.job.merge import merge_sql
from ingest_gate.job.record import BatchHooks, BatchRecord, note_gate
from ingest_gate.job.snapshots import (
    batch_properties,
    committed_snapshot,
    find_batch_snapshot,
    partition_counts,
    snapshot_summary,
    with_commit_properties,
)
from ingest_gate.job.source import count_files, read_stream, with_source_position
from ingest_gate.job.table import (
    check_write_modes,
    ensure_clustered_writes,
    ensure_partition_summaries,
    identifier_merge_refusal,
    table_properties,
)
from ingest_gate.job.target import Primitive, TableMissing, Target, read_target, unsupported
from jobkit.partition import (
    PartitionScope,
    batch_partition_counts,
    partition_names,
    partition_scope,
)
from jobkit.predicate import MergeFilter, merge_filter
from jobkit.spark import error_message

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from ingest_gate.job.config import IngestConfig
    from ingest_gate.job.kafka import KafkaProgress

__all__ = [
    "BatchWriter",
    "IngestError",
    "IngestRun",
    "TableMissing",
    "plan_decoder",
    "run",
]

log = logging.getLogger(__name__)

QUERY_ID_PROPERTY = "sql.streaming.queryId"  # set by Spark on the thread that runs the query


class IngestError(Exception):
    """The ingest job cannot run as configured; the message says what to fix."""


def plan_decoder(config: IngestConfig, target: Target) -> Decoder:
    """The decoder of `config`'s format for `target`, its key checked against the table.

    Raises:
        IngestError: no usable key, a key or event-time column the table lacks, or a column
            the job cannot write.
    """
    problems = unsupported(target.columns)
    keys = tuple(config.key_columns) or target.identifier
    if not keys:
        problems.append(
            f"no key: set key_columns, or give the table identifier fields (ALTER TABLE "
            f"{target.name} SET IDENTIFIER FIELDS ...)"
        )
    for key in keys:
        column = target.column(key)
        if column is None:
            problems.append(f"key column {key!r} is not a column of the table")
        elif not isinstance(column.type, Primitive):
            problems.append(f"key column {key!r} must be of a primitive type, not {column.type}")
    event_time = config.event_time_column if config.format == "json" else None
    if event_time is not None and target.column(event_time) is None:
        problems.append(
            f"event_time_column {event_time!r} is not a column of the table (format json orders "
            "the versions of a key by it)"
        )
    if problems:
        raise IngestError(f"{target.name}: " + "; ".join(problems))
    return Decoder(
        target,
        key_columns=keys,
        format=config.format,
        event_time_column=event_time,
        time_zone=config.time_zone,
    )


class BatchWriter:
    """The `foreachBatch` function. See the module docstring for the steps.

    BatchWriter(config, gate=Ungated())                  # query id read from the running query
    BatchWriter(config, gate=gate, query_id="q-1")       # called directly, e.g. to replay a batch
    """

    def __init__(
        self,
        config: IngestConfig,
        *,
        gate: GateLike,
        query_id: str | None = None,
        hooks: BatchHooks | None = None,
        replay_guard: bool = True,
        stopping: threading.Event | None = None,
    ) -> None:
        self.config = config
        self.gate = gate
        self.query_id = query_id
        self.hooks = hooks or BatchHooks()
        self.replay_guard = replay_guard
        self.records: list[BatchRecord] = []
        # (batch id, step) of the batch being written, for operators and tests; None between
        self.in_progress: tuple[int, str] | None = None
        self.last_error: BaseException | None = None
        # set by IngestRun.stop() before the query is stopped: what a batch raises from then on
        # is the stop's interruption, not a failure (the gate's stop too: make_gate)
        self.stopping = stopping if stopping is not None else threading.Event()
        # the table's partition scope, decided at the first batch that merges (see _table_scope)
        # and again after the table changed
        self._scope: PartitionScope | None = None
        self._scope_decided = False
        # the decoder for the table as read at the last batch, and that table's version
        self._decoder: Decoder | None = None
        self._lock = threading.Lock()
        self._recorded = threading.Condition(self._lock)
        # source kafka: measures (and reports) the lag after each batch; set by run()
        self.progress: KafkaProgress | None = None

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        """Upsert one micro-batch.

        Raises:
            ingest_gate.gate.GateTimeout: no lease within max_hold_s under policy `fail`.
            ingest_gate.gate.LeaseLost: the lease was lost before the commit under `fail`.
            service.client.Stopped: the run was stopped while the batch waited at the gate.
            IngestError: the query id cannot be found.
            pyspark.errors.PySparkException: Spark or Iceberg failed (e.g. a commit conflict).
        """
        started = time.monotonic()
        spark = batch.sparkSession
        record = BatchRecord(query_id=self._query_id(spark), batch_id=batch_id)
        parsed = None
        self.in_progress = (batch_id, "parse")
        try:
            decoder = self.prepare(spark)
            parsed = decode_batch(with_source_position(batch), decoder).persist()
            self._upsert(spark, parsed, record, decoder)
            if self.progress is not None:
                record.lag = self.progress.after_batch(batch_id, record.query_id)
        except BaseException as exc:
            if self.stopping.is_set():
                record.outcome = "interrupted"
            elif record.outcome not in ("timed_out", "lease_lost"):
                record.outcome = "failed"
            record.error = error_message(exc)
            self.last_error = exc
            raise  # never swallowed: Spark must not mark the batch done in its checkpoint
        finally:
            self.in_progress = None
            if parsed is not None:
                parsed.unpersist()
            record.duration_s = round(time.monotonic() - started, 3)
            log.info(json.dumps(record.as_dict(), default=str))
            with self._recorded:
                self.records.append(record)
                self._recorded.notify_all()

    def wait_for(self, count: int, timeout: float | None = None) -> bool:
        """Block until `count` batches were recorded; False on timeout."""
        with self._recorded:
            return self._recorded.wait_for(lambda: len(self.records) >= count, timeout)

    # -- steps ----------------------------------------------------------------------------------

    def prepare(self, spark: SparkSession) -> Decoder:
        """The decoder for the table as it is now: read from the catalog, rebuilt (and the
        partition scope decided again) when its schema or spec changed since the last batch.

        Raises:
            TableMissing: the table is gone.
            IngestError: as plan_decoder.
        """
        target = read_target(spark, self.config.table, catalog=self.config.catalog)
        if self._decoder is not None and self._decoder.target.version == target.version:
            return self._decoder
        decoder = plan_decoder(self.config, target)
        if target.identifier:
            refusal = identifier_merge_refusal(
                table_properties(spark, target.name),
                identifier=target.identifier,
                iceberg_version=str(spark._jvm.org.apache.iceberg.IcebergBuild.version()),
            )
            if refusal is not None:
                raise IngestError(f"{target.name}: {refusal}")
        if self._decoder is not None:
            before = set(self._decoder.target.names)
            log.warning(
                "table %s changed (schema %d, spec %d): columns added %s, dropped %s; "
                "records are read against it from this batch on",
                target.name,
                *target.version,
                sorted(set(target.names) - before),
                sorted(before - set(target.names)),
            )
        self._decoder = decoder
        self._scope_decided = False
        return decoder

    def _query_id(self, spark: SparkSession) -> str:
        if self.query_id is not None:
            return self.query_id
        query_id = spark.sparkContext.getLocalProperty(QUERY_ID_PROPERTY)
        if not query_id:
            raise IngestError(
                "no streaming query id on this thread: run BatchWriter as a foreachBatch "
                "function, or pass query_id="
            )
        return query_id

    def _upsert(
        self, spark: SparkSession, parsed: DataFrame, record: BatchRecord, decoder: Decoder
    ) -> None:
        cfg = self.config
        counts = count_decoded(parsed)
        record.rows_read, record.bad_rows = counts.rows, counts.bad
        for name in ("sources", "last_source", "skipped", "changes", "deletes"):
            setattr(record, name, getattr(counts, name))
        record.unknown_fields, record.unknown_names = counts.unknown_fields, counts.unknown_names
        if record.bad_rows:
            # before the gate: dead letters are not the table's, and a replay overwrites them
            record.dead_letter_path = write_dead_letters(
                bad_records(parsed),
                cfg.dead_letter_path,
                query_id=record.query_id,
                batch_id=record.batch_id,
            )
        last = last_change_per_key(
            changes(parsed),
            key_columns=decoder.key_columns,
            names=decoder.target.names,
            event_time_column=decoder.event_time_column,
        ).persist()
        try:
            record.rows_in_merge, values = self._count(spark, last)
            record.duplicates_dropped = record.changes - record.rows_in_merge
            if record.rows_in_merge == 0:
                record.outcome = "empty"
                return
            if self.replay_guard:
                found = find_batch_snapshot(
                    spark, cfg.table, query_id=record.query_id, batch_id=record.batch_id
                )
                if found is not None:
                    # committed before a crash, replayed from the checkpoint: a second MERGE
                    # would change no row but still add an empty snapshot
                    record.snapshot_id = found
                    record.outcome = "replayed"
                    return
            self._merge(spark, last, record, values, decoder)
        finally:
            last.unpersist()

    def _count(
        self, spark: SparkSession, deduped: DataFrame
    ) -> tuple[int, list[tuple[Any, ...]] | None]:
        """The batch's rows and, when its leases name partitions, its distinct partition tuples
        (None: the whole table). One Spark job either way, run before the gate: it also fills
        the batch's cache for the MERGE.

        Raises:
            as _table_scope and jobkit.partition.batch_partition_counts.
        """
        keys = self._decoder.key_columns if self._decoder else self.config.key_columns
        scope = self._table_scope(spark, keys)
        if scope is None:
            return deduped.count(), None
        counts = batch_partition_counts(deduped, scope.spec, catalog=self.config.catalog.name)
        return sum(counts.values()), list(counts)

    def _merge(
        self,
        spark: SparkSession,
        deduped: DataFrame,
        record: BatchRecord,
        values: list[tuple[Any, ...]] | None,
        decoder: Decoder,
    ) -> None:
        cfg = self.config
        view = f"lakelock_batch_{record.batch_id}"
        partitions, partition_filter = self._batch_scope(values, record.batch_id)
        record.merge_filter = None if partition_filter.predicate is None else partition_filter.kind
        deduped.createOrReplaceTempView(view)
        statement = merge_sql(
            target=cfg.table,
            source=view,
            key_columns=decoder.key_columns,
            columns=decoder.target.names,
            event_time_column=decoder.event_time_column,
            delete_column=None if cfg.format == "json" else DELETED,
            partition_filter=partition_filter.predicate,
        )
        gate_pass = None
        self.in_progress = (record.batch_id, "gate")
        try:
            with self.gate.commit(cfg.table, partitions=partitions) as gate_pass:
                self.in_progress = (record.batch_id, "merge")
                note_gate(record, gate_pass)
                if self.hooks.before_merge is not None:
                    self.hooks.before_merge(record.batch_id, gate_pass)
                gate_pass.check()
                lease = gate_pass.lease
                record.lease_id = None if lease is None else lease.lease_id
                props = batch_properties(
                    query_id=record.query_id, batch_id=record.batch_id, lease_id=record.lease_id
                )
                merge_started = time.monotonic()
                with_commit_properties(spark, props, lambda: spark.sql(statement))
                record.commit_s = round(time.monotonic() - merge_started, 3)
                self._counts_to_gate(spark, record, gate_pass)
        except BaseException as exc:
            if gate_pass is None:
                gate_pass = getattr(exc, "gate_pass", None)
            if gate_pass is not None:
                note_gate(record, gate_pass)
            raise
        finally:
            spark.catalog.dropTempView(view)
        note_gate(record, gate_pass)
        if record.outcome == "lease_lost":
            # the gate let the batch through (policy proceed), so the MERGE did commit
            record.outcome = "proceeded_after_lease_lost"
        if record.snapshot_id is None:
            # not among the newest snapshots (many commits since, by other writers)
            record.snapshot_id = find_batch_snapshot(
                spark, cfg.table, query_id=record.query_id, batch_id=record.batch_id
            )
            if record.snapshot_id is not None:
                summary = snapshot_summary(spark, cfg.table, record.snapshot_id)
                record.rows_merged = int(summary.get("added-records", 0))
        if self.hooks.after_merge is not None:
            self.hooks.after_merge(record.batch_id, gate_pass)

    def _counts_to_gate(self, spark: SparkSession, record: BatchRecord, gate_pass: Any) -> None:
        """Right after the MERGE committed, inside the gate: find the batch's snapshot (no
        Spark job) and hand its per-partition counts to the gate, which reports them to the
        service when it releases the lease. A failure here is logged, never raised: the
        commit stands, and the compactor's full plan measures what the service missed."""
        cfg = self.config
        try:
            found = committed_snapshot(
                spark, cfg.table, query_id=record.query_id, batch_id=record.batch_id
            )
            if found is None:
                return
            record.snapshot_id, summary = found
            # merge-on-read: each inserted or updated row is one added record
            record.rows_merged = int(summary.get("added-records", 0))
            counts = partition_counts(summary)
        except Exception as exc:
            log.warning(
                "batch %d: cannot read the per-partition counts of its commit to %s: %s",
                record.batch_id,
                cfg.table,
                error_message(exc),
            )
            return
        wrote = getattr(gate_pass, "wrote", None)  # a gate of a test may not take them
        if counts is not None and wrote is not None:
            record.written_partitions = len(counts)
            wrote(counts)

    def _table_scope(
        self, spark: SparkSession, key_columns: Sequence[str]
    ) -> PartitionScope | None:
        """The table's partition scope when its leases may name partitions, else None (the
        whole table, the reason logged). Decided once per writer, at its first merge.

        Raises:
            as jobkit.partition.partition_scope.
        """
        if self._scope_decided:
            return self._scope
        cfg = self.config
        if cfg.lease_scope == "table":
            log.info("commit leases on %s cover the whole table (lease_scope = table)", cfg.table)
        else:
            scope = partition_scope(spark, cfg.table, key_columns=key_columns)
            if scope.usable:
                log.info(
                    "commit leases on %s cover each batch's partitions (spec %d: %s)",
                    cfg.table,
                    scope.spec.spec_id,
                    ", ".join(f"{f.transform}({f.source})" for f in scope.spec.fields),
                )
                self._scope = scope
            else:
                log.warning(
                    "commit leases on %s cover the whole table, not partitions: %s",
                    cfg.table,
                    scope.reason,
                )
        self._scope_decided = True
        return self._scope

    def _batch_scope(
        self, values: list[tuple[Any, ...]] | None, batch_id: int
    ) -> tuple[list[str] | None, MergeFilter]:
        """The partitions to lease for a batch in partitions `values` (None: the whole table)
        and the MERGE's partition filter (its predicate None: none).

        Raises:
            as jobkit.partition.partition_name; TypeError from the filter.
        """
        cfg = self.config
        if values is None or self._scope is None:
            return None, MergeFilter(None, "exact")
        names = partition_names(self._scope.spec, values)
        partition_filter = merge_filter(
            self._scope.spec,
            values,
            catalog=cfg.catalog.name,
            exact_max=cfg.exact_filter_max_partitions,
        )
        if len(names) > cfg.max_lease_partitions:
            log.warning(
                "batch %d touches %d partitions of %s (max_lease_partitions %d): "
                "leasing the whole table",
                batch_id,
                len(names),
                cfg.table,
                cfg.max_lease_partitions,
            )
            return None, partition_filter
        return names, partition_filter


class IngestRun:
    """A running ingest query. See `run()`.

    handle.query        # the StreamingQuery (its `id` is the query id of the snapshot summaries)
    handle.records      # BatchRecords so far, oldest first
    handle.wait()       # until the configured bound, then stop; raises if the query failed
    handle.stop()
    handle.interrupted  # the stop interrupted a batch (not a failure; it runs again)
    """

    def __init__(
        self,
        query: StreamingQuery,
        writer: BatchWriter,
        config: IngestConfig,
        *,
        files_at_start: int | None = None,
    ) -> None:
        self.query = query
        self.writer = writer
        self.config = config
        self.files_at_start = files_at_start
        self.started = time.monotonic()

    def summary(self) -> dict[str, Any]:
        """What the run did, summed over its batches; `note` says when nothing was there."""
        records = [r for r in self.records if r.outcome not in ("failed", "interrupted")]
        skipped: dict[str, int] = {}
        for r in records:
            for why, n in r.skipped.items():
                skipped[why] = skipped.get(why, 0) + n
        out: dict[str, Any] = {
            "format": self.config.format,
            "files_matched_at_start": self.files_at_start,
            "sources_read": sum(r.sources for r in records),
            "batches": len(records),
            "records": sum(r.rows_read for r in records),
            "bad_records": sum(r.bad_rows for r in records),
            "skipped": skipped,
            "unknown_fields": sum(r.unknown_fields for r in records),
            "changes": sum(r.changes for r in records),
            "deletes": sum(r.deletes for r in records),
            "rows_merged": sum(r.rows_in_merge for r in records),
        }
        lags = [r.lag for r in records if r.lag is not None]
        if lags:
            out["lag"] = lags[-1]
        if self.config.source == "files" and not out["sources_read"]:
            out["note"] = (
                f"no file matching {self.config.file_pattern!r} was read from "
                f"{self.config.landing_path} (set file_pattern to the names your files have)"
            )
        return out

    @property
    def records(self) -> list[BatchRecord]:
        return list(self.writer.records)

    @property
    def query_id(self) -> str:
        return str(self.query.id)

    def stop(self) -> None:
        """Stop the query. A running batch is interrupted: it ends `interrupted`, not failed, and
        the next start runs it again (its checkpoint was not committed)."""
        self.writer.stopping.set()
        self.query.stop()
        if self.writer.progress is not None:
            self.writer.progress.close()

    def wait(self, timeout: float | None = None) -> list[BatchRecord]:
        """Block until the query ends by itself (available-now), `max_batches` batches ran,
        `run_for_s` passed or `timeout` passed; then stop it and return the records.

        Stopping at a bound interrupts a batch that is running then; that is not a failure.

        Raises:
            The exception that failed the last batch (e.g. GateTimeout), when the query died of
            it; else pyspark.errors.StreamingQueryException if the query failed.
        """
        from pyspark.errors import StreamingQueryException

        cfg = self.config
        deadlines = [t for t in (cfg.run_for_s, timeout) if t is not None]
        deadline = self.started + min(deadlines) if deadlines else None
        try:
            while self.query.isActive:
                if cfg.max_batches is not None and len(self.writer.records) >= cfg.max_batches:
                    break
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    break
                try:
                    self.query.awaitTermination(0.2 if left is None else min(0.2, left))
                except StreamingQueryException:
                    break  # raised below, as the batch's own error where there is one
        finally:
            self.stop()
        self._raise_failure()
        return self.records

    def _raise_failure(self) -> None:
        failure = self.query.exception()
        if failure is None or self.interrupted:
            return
        if self.writer.last_error is not None:
            raise self.writer.last_error from failure
        raise failure

    @property
    def interrupted(self) -> bool:
        """The query ended by `stop()` while a batch ran: that batch ended `interrupted` and the
        next start runs it again. Not a failure, whatever the query's exception says."""
        records = self.writer.records
        return bool(records) and records[-1].outcome == "interrupted"


def run(
    config: IngestConfig,
    *,
    spark: SparkSession | None = None,
    gate: GateLike | None = None,
    hooks: BatchHooks | None = None,
) -> IngestRun:
    """Read the target table and start the streaming query; returns at once.

    `spark` lets tests and notebooks share a session; else one is built from `config.catalog`.
    `gate` replaces the one built from config (`make_gate`, given the run's stop); a gate passed
    here ends its waits at `stop()` only when built with a stop event of its own (`Gate(stop=)`).

    Raises:
        TableMissing: the table does not exist (one line: where the job looked, how to create it).
        IngestError: the table and the config do not fit (the message says what to fix).
        ingest_gate.job.kafka.RetentionLoss: source kafka lost records the job had not read, and
            `on_data_loss` is `stop`.
        pyspark.errors.PySparkException: the query cannot be set up.
    """
    if spark is None:
        from ingest_gate.job import EXECUTOR_PACKAGES
        from jobkit.spark import build_session

        spark = build_session(
            config.catalog,
            app_name="lakelock-ingest",
            master=config.spark_master,
            executor_packages=EXECUTOR_PACKAGES,
            jar_sets=("spark-kafka",) if config.source == "kafka" else (),
            paths=(config.checkpoint_path, config.landing_path, config.dead_letter_path),
        )
    stopping = threading.Event()
    if gate is None:
        gate = make_gate(config, spark, stop=stopping)
    writer = BatchWriter(config, gate=gate, hooks=hooks, stopping=stopping)
    decoder = writer.prepare(spark)  # refuses a missing table or a misfit before any batch
    check_write_modes(spark, config.table)
    ensure_clustered_writes(spark, config.table)
    ensure_partition_summaries(spark, config.table)
    files = None
    if config.source == "files":
        if "://" not in config.landing_path:
            # the file source refuses a missing folder; an empty one just has nothing yet
            Path(config.landing_path).mkdir(parents=True, exist_ok=True)
        files = count_files(spark, config)
        level = logging.INFO if files else logging.WARNING
        log.log(
            level,
            "%d files in %s match %r%s",
            files,
            config.landing_path,
            config.file_pattern,
            "" if files else " (file_pattern): nothing to read yet",
        )
    kafka_options = None
    if config.source == "kafka":
        from ingest_gate.job.kafka import KafkaProgress

        # lag and gaps go where the gate's lease calls go (none without a service)
        writer.progress = KafkaProgress(spark, config, getattr(writer.gate, "client", None))
        try:
            kafka_options = writer.progress.reader_options()
        except BaseException:
            writer.progress.close()  # its consumer in the driver: the query never starts
            raise
    stream = read_stream(spark, config, kafka_options=kafka_options).writeStream
    stream = stream.foreachBatch(writer)
    stream = stream.option("checkpointLocation", config.checkpoint_path)
    if config.available_now:
        stream = stream.trigger(availableNow=True)
    else:
        interval_ms = max(int(config.trigger_interval_s * 1000), 1)
        stream = stream.trigger(processingTime=f"{interval_ms} milliseconds")
    query = stream.start()
    log.info(
        "ingest query %s (run %s) started: %s (%s) -> %s, key %s",
        query.id,
        query.runId,
        config.landing_path if config.source == "files" else "kafka",
        config.format,
        config.table,
        ", ".join(decoder.key_columns),
    )
    return IngestRun(query, writer, config, files_at_start=files)
