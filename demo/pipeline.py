"""The whole pipeline on one machine: service, event generator, gated streaming upsert, compactor.
Its knobs are demo.options, its compactor demo.compaction, what it leaves to judge demo.result.

    result = Pipeline(PipelineOptions(duration_s=120, workdir=Path("var/demo"))).run()
    result.summary()            # the figures of demo-summary.json
    result.verify()             # [] when every key holds its latest values

What runs, all in this process except the service (a child process on SQLite):

    generator   a thread writing JSON-lines files into the landing folder (duplicates, late
                updates, bad records), `rate` events/s, one file every `file_interval_s`; with
                `source="kafka"` the same records into a topic of `kafka_partitions` partitions
                of a broker the run starts (demo.kafka), keyed by row key, instead
    ingest      the streaming upsert job (ingest_gate.job.run) on a shared local Spark session;
                a batch that fails stops its query, and the pipeline restarts it from the
                checkpoint, as a cluster's supervisor would, counting the failure
    compactor   with `compactor="follow"` (`python -m demo`'s default) a compactor that follows
                the stream (compactor.follow): it long-polls the service for partitions the
                commits made due and compacts them at once, with the full plan
                (compactor.fleet) every `full_plan_every_s`; with `compactor="timer"` (and
                always when uncoordinated), compactor.run.run_table every `compact_every_s`,
                the cycle before following. Both on the same Spark session, the follower's
                rewrites in a session of their own of it

Two ways to end a run:

    by time     (the default) after `duration_s` the generator stops
    by counts   (`events` set) the generator writes exactly `events` events, one landing file
                per micro-batch, and the run goes on until the table has taken them all and
                `compactions` compactions have succeeded; `timeout_s` only guards against a hang
                (reaching it is a failed check). Machine speed changes how long this takes, not
                what happens, so tests use it.

`coordinated=False` runs the same workload with both jobs ignoring lakelock (the ingest gate
grants at once; the compactor's lease is a stand-in that always says yes): the baseline of
benchmarks/conflicts.py. After `duration_s` the generator stops, the stream drains what is left
(an available-now run from the same checkpoint), and everything started is stopped, also on
Ctrl-C.

Counts of the summary (`PipelineResult.summary()`), each exact:

    batches                    micro-batches the stream completed, each batch id once however
                               often it ran (a failed batch runs again after the restart; a batch
                               whose checkpoint commit a stop cut short runs again, as a no-op,
                               in the drain): the entries of the checkpoint's commit log
    batches_merged             those whose MERGE committed a snapshot (the others held no valid
                               record): the batch ids in the snapshot summaries
    batches_scoped             those whose commit lease named partitions, not the whole table
                               (lease_scope "partitions", the default: every merged batch)
    bad_records                bad records the generator wrote
    bad_records_dead_lettered  bad records the completed batches wrote to the dead-letter folder
                               (its lines); equal to bad_records once the drain has read every file
"""

from __future__ import annotations

import logging
import shutil
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from compactor.report import Outcome, RunReport
from demo.compaction import UncoordinatedClient, compact, run_line
from demo.generate import KEY_FIELDS, ChangeGenerator, EventGenerator, create_events_table
from demo.health import Health
from demo.kafka import LocalKafka, as_messages
from demo.lake import Lake
from demo.options import TOPIC, PipelineOptions
from demo.result import BatchSeen, FileWritten, PipelineResult
from demo.service import LocalService
from ingest_gate.job.config import IngestConfig
from ingest_gate.job.record import BatchHooks
from ingest_gate.job.run import run
from ingest_gate.job.table import read_rows, require_format_version, require_write_mode
from jobkit.spark import CatalogConfig, build_session
from service.client import LeaseClient
from service.ops.iceberg_audit import read_snapshots

__all__ = ["COMPLETED", "Pipeline"]

log = logging.getLogger("demo")


def _stop_queries(spark: Any) -> None:
    for query in spark.streams.active:
        query.stop()


def _cleanup(what: str, step: Callable[[], object]) -> None:
    try:
        step()
    except Exception as exc:
        log.warning("could not %s: %s", what, exc)


def _between_batches(handle: Any, timeout_s: float = 60.0) -> None:
    """Wait (bounded) until no batch is running, so stopping the query does not interrupt a
    MERGE mid-write (harmless, the batch is replayed, but Spark logs the abort loudly)."""
    deadline = time.monotonic() + timeout_s
    while handle.writer.in_progress is not None and time.monotonic() < deadline:
        time.sleep(0.05)


COMPLETED = frozenset(
    (
        "committed",
        "proceeded_without_lease",
        "proceeded_after_lease_lost",
        "ungated",
        "empty",
        "replayed",
    )
)
"""Outcomes of a batch that ran to its end (ingest_gate.job.record.BatchRecord); the rest
raised, and the restarted query runs that batch again."""


class Pipeline:
    def __init__(
        self,
        options: PipelineOptions,
        *,
        on_progress: Callable[[str], None] | None = None,
        more_catalogs: Callable[[Lake, LocalService | None], Sequence[CatalogConfig]] = (
            lambda lake, service: ()
        ),
    ) -> None:
        """`more_catalogs`: further Spark catalogs of the run's session, made once the lake
        and the service are up (a reader's beside the jobs)."""
        self.options = options
        self.more_catalogs = more_catalogs
        self.on_progress = on_progress or (lambda line: log.info("%s", line))
        self.stop = threading.Event()
        self.generator: EventGenerator
        if options.format == "json":
            self.generator = EventGenerator(
                seed=options.seed,
                update_ratio=options.update_ratio,
                duplicate_ratio=options.duplicate_ratio,
                late_update_ratio=options.late_update_ratio,
                bad_ratio=options.bad_ratio,
                update_window=options.update_window,
            )
        else:
            self.generator = ChangeGenerator(
                seed=options.seed,
                format=options.format,
                update_ratio=options.update_ratio,
                delete_ratio=options.delete_ratio,
                key_change_ratio=options.key_change_ratio,
                bad_ratio=options.bad_ratio,
            )
        self.files: list[FileWritten] = []
        self.batches: list[BatchSeen] = []
        self.failed_batches: list[dict[str, Any]] = []
        self.compactions: list[RunReport] = []
        self.windows: list[tuple[float, float]] = []
        self.health: list[Health] = []
        self.spark: Any = None
        self.service: LocalService | None = None  # for a reader beside the jobs, as `spark`
        # (start, end) on time.monotonic() of the stream's part of the run: from when its
        # threads start (after the service, Spark and the table) to the run's deadline; set
        # once they start (a reader beside the jobs times its queries by it)
        self.streaming: tuple[float, float] | None = None
        self.streaming_started = threading.Event()
        # by counts, the run also waits for these (a reader beside the jobs that must finish
        # its queries while the stream runs); by time, Spark stops only once they are set
        self.waits_for: list[threading.Event] = []
        self._query_run = 0
        self._committed_at: dict[int, float] = {}
        self._completed_ids: set[int] = set()
        self._events_written = 0
        self._generated = threading.Event()
        self.crashed: list[tuple[str, BaseException]] = []
        self.kafka: LocalKafka | None = None
        self.lake: Lake  # where the table lives, opened by `run`
        self.interrupted = False
        self._lock = threading.Lock()

    # -- paths ---------------------------------------------------------------------------------

    def _path(self, name: str) -> Path:
        return self.options.workdir / name

    def _ingest_config(self, service: LocalService | None) -> IngestConfig:
        o = self.options
        return IngestConfig(
            table=o.table,
            catalog=self.lake.catalog(service),
            landing_path=str(self._path("landing")),
            dead_letter_path=str(self._path("dead-letter")),
            checkpoint_path=self.lake.checkpoint("ingest"),
            trigger_interval_s=o.trigger_interval_s,
            gate_enabled=service is not None,
            lakelock_url=service.url if service else "http://127.0.0.1:8737",
            lakelock_token=service.token("job") if service else None,
            holder="demo-ingest",
            lease_ttl_s=o.lease_ttl_s,
            max_hold_s=o.max_hold_s,
            policy="fail",
            poll_s=5.0,
            lease_scope=o.lease_scope,
            spark_master=o.spark_master,
            format=o.format,
            key_columns=KEY_FIELDS,
            # by counts: one landing file per batch, or from a topic one file's worth of
            # messages, so the batches (and the small files the compactor waits for) come from
            # the event count, not from how fast Spark runs (a stream that starts after the
            # last message would read the whole topic in one batch)
            max_files_per_trigger=1 if o.by_counts else None,
            source=o.source,
            kafka=self._kafka_options(),
        )

    def _kafka_options(self) -> dict[str, str]:
        """The Kafka source's options (none without a broker)."""
        if self.kafka is None:
            return {}
        options = {"kafka.bootstrap.servers": self.kafka.bootstrap, "subscribe": TOPIC}
        if self.options.by_counts:
            options["maxOffsetsPerTrigger"] = str(max(1, round(self.options.events_per_file)))
        return options

    # -- the parts -----------------------------------------------------------------------------

    def _generate(self) -> None:
        o = self.options
        landing = self._path("landing")
        per_file = o.events_per_file
        left = self.options.events
        owed = 0.0
        while not self.stop.wait(self.options.file_interval_s):
            owed += per_file
            count, owed = int(owed), owed - int(owed)
            if left is not None:
                count = min(count, left)
                left -= count
            if count and self.kafka is not None:
                # a key change goes as two messages (demo.kafka.as_messages): count messages
                messages = as_messages(self.generator.records(count), o.format, KEY_FIELDS)
                self.kafka.produce(TOPIC, messages)
                self.files.append(FileWritten(TOPIC, len(messages), time.time()))
                self._events_written += len(messages)
            elif count:
                path = self.generator.write_file(landing, count)
                self.files.append(FileWritten(str(path), count, time.time()))
                self._events_written += count
            if left == 0:
                break
        self._generated.set()

    def _hooks(self) -> BatchHooks:
        def committed(batch_id: int, _pass: Any) -> None:
            # right after the Iceberg commit: when the batch's rows became visible
            self._committed_at[batch_id] = time.time()

        return BatchHooks(after_merge=committed)

    def _ingest(self, spark: Any, config: IngestConfig) -> None:
        """Run the query until stopped; restart it from the checkpoint after a failed batch."""
        from pyspark.errors import StreamingQueryException

        while not self.stop.is_set():
            self._query_run += 1
            handle = run(config, spark=spark, hooks=self._hooks())
            seen = 0
            try:
                while handle.query.isActive and not self.stop.is_set():
                    try:
                        handle.query.awaitTermination(0.5)
                    except StreamingQueryException:
                        break  # a batch failed: counted below, then the query restarts
                    seen = self._collect(handle, seen)
            finally:
                if handle.query.isActive:
                    _between_batches(handle)
                    handle.stop()
                self._collect(handle, seen)
            failure = handle.query.exception()
            if failure is not None and not handle.interrupted:
                last = handle.writer.records[-1] if handle.writer.records else None
                self._failed(last.batch_id if last else None, (last and last.error) or failure)
                time.sleep(1.0)

    def _failed(self, batch_id: int | None, error: object) -> None:
        message = str(error).split("\n")[0][:500]
        self.failed_batches.append({"batch_id": batch_id, "at": time.time(), "error": message})
        self.on_progress(f"ingest batch failed, restarting from checkpoint: {message[:160]}")

    def _collect(self, handle: Any, seen: int) -> int:
        """Keep the batches of `handle` recorded since `seen`: the first completed run of each
        batch id only (see COMPLETED and the module docstring's `batches`)."""
        records = handle.writer.records
        for record in records[seen:]:
            ended = self._committed_at.pop(record.batch_id, time.time())
            if record.outcome in COMPLETED and record.batch_id not in self._completed_ids:
                self._completed_ids.add(record.batch_id)
                with self._lock:
                    self.batches.append(
                        BatchSeen(record, ended - record.duration_s, ended, self._query_run)
                    )
        return len(records)

    def _counts(self) -> tuple[int, int]:
        """Events taken by the stream (bad ones included), and compactions that succeeded."""
        ingested = sum(b.record.rows_read for b in self.batches)
        return ingested, sum(r.outcome == Outcome.COMPACTED for r in self.compactions)

    def _counts_reached(self) -> bool:
        """By counts: every event written and taken by the stream, and the compactions done."""
        ingested, compacted = self._counts()
        return (
            self._generated.is_set()
            and ingested >= self._events_written
            and compacted >= self.options.compactions
            and all(e.is_set() for e in self.waits_for)
        )

    def _counts_missed(self) -> list[str]:
        o = self.options
        ingested, compacted = self._counts()
        waiting = sum(not e.is_set() for e in self.waits_for)
        return [
            f"gave up after {o.timeout_s:g}s (the hang guard): {self._events_written} of "
            f"{o.events} events written, {ingested} taken by the stream, "
            f"{compacted} of {o.compactions} compactions"
            + (f", {waiting} reader(s) beside the jobs not done" if waiting else "")
        ]

    def _compact(self, spark: Any, client: Any) -> None:
        compact(spark, client, self.options, stop=self.stop, on_run=self._ran)

    def _ran(self, report: RunReport) -> None:
        """A compactor run ended (published already): count it and say what it did."""
        with self._lock:
            self.compactions.append(report)
            number = len(self.compactions)
        if report.outcome not in ("skipped",):
            ended = time.time()
            self.windows.append((ended - (report.duration_s or 0.0), ended))
        self.on_progress(run_line(number, report))

    def _progress(self, started: float) -> None:
        while not self.stop.wait(self.options.progress_every_s):
            waits = [b.record.gate_wait_s for b in self.batches]
            pressed = sum(b.record.backpressure_s for b in self.batches)
            ok = sum(r.outcome == "compacted" for r in self.compactions)
            files = f"  {self.health[-1].line()}" if self.health else ""
            self.on_progress(
                f"t={time.monotonic() - started:5.0f}s  events={sum(f.records for f in self.files)}"
                f"  batches={len(self.batches)} failed={len(self.failed_batches)}"
                f"  compactions={ok}/{len(self.compactions)}"
                f"  max ingest wait={max(waits, default=0):.1f}s"
                + (f" backpressure={pressed:.1f}s" if pressed else "")
                + files
            )

    def _sample_health(self, service: LocalService | None) -> None:
        """The table as a reader finds it, every `health_every_s` (demo.health)."""
        while not self.stop.wait(self.options.health_every_s):
            try:
                self.health.append(self.lake.sample(self.options.table, service))
            except FileNotFoundError:
                continue  # the table is being created

    def _handle_ctrl_c(self) -> None:
        """The first Ctrl-C asks for an orderly stop (the batch in flight finishes, the jobs
        release their leases, then Spark and the service stop); a second one interrupts at once.
        Replaces PySpark's handler, which cancels every job from inside the signal handler."""
        if threading.current_thread() is not threading.main_thread():
            return

        def on_interrupt(_signum: int, _frame: Any) -> None:
            self.interrupted = True
            self.stop.set()
            self.on_progress("stopping (Ctrl-C again to interrupt at once)")
            signal.signal(signal.SIGINT, signal.default_int_handler)

        signal.signal(signal.SIGINT, on_interrupt)

    def _guarded(self, target: Callable[..., None]) -> Callable[..., None]:
        """`target`, but an exception ends the whole run (after cleanup) instead of one thread."""

        def run_guarded(*args: Any) -> None:
            try:
                target(*args)
            except BaseException as exc:
                log.exception("%s failed", target.__name__)
                self.crashed.append((target.__name__.strip("_"), exc))
                self.stop.set()

        return run_guarded

    # -- the run -------------------------------------------------------------------------------

    def _until_done(self, started: float) -> list[str]:
        """Wait for the counts (or the duration) or a stop; the goals missed at the deadline."""
        o = self.options
        deadline = started + (o.timeout_s if o.by_counts else o.duration_s)
        while not self.stop.is_set():
            if o.by_counts and self._counts_reached():
                return []
            if time.monotonic() >= deadline:
                return self._counts_missed() if o.by_counts else []
            time.sleep(0.2)
        return []

    def _join(self, threads: list[threading.Thread]) -> None:
        """Stop the threads; raise what stopped the run early (Ctrl-C, a thread's error)."""
        self.stop.set()
        for thread in threads:
            thread.join(timeout=600)
        if self.interrupted:
            raise KeyboardInterrupt
        if self.crashed:
            name, error = self.crashed[0]
            raise RuntimeError(f"the pipeline's {name} stopped with an error") from error

    def _drain(self, spark: Any, config: IngestConfig) -> None:
        """Ingest what the last trigger did not see: one available-now run, same checkpoint."""
        self._query_run += 1
        drain = run(replace(config, available_now=True), spark=spark, hooks=self._hooks())
        drain.query.awaitTermination(600)
        self._collect(drain, 0)
        if drain.query.exception() is not None:
            last = drain.writer.records[-1] if drain.writer.records else None
            self._failed(last.batch_id if last else None, (last and last.error) or "drain")

    def _wait_for_readers(self) -> None:
        """A reader beside the jobs finishes the query it is in on this Spark before Spark
        stops (a run by time may end during it); the time limit only guards against a hang."""
        for reader in self.waits_for:
            reader.wait(timeout=300)

    def _start_service(self) -> LocalService:
        """The lakelock service on SQLite in the workdir; on S3, the catalog front too."""
        if self.lake.s3 is not None:
            self.on_progress(f"S3 server on {self.lake.endpoint} (demo.s3)")
        service = LocalService.start(
            db_url=f"sqlite:///{(self.options.workdir / 'lakelock.db').resolve()}",
            log_path=self.options.workdir / "service.log",
            **self.lake.service_env(),
        )
        front = f", catalog front on {self.lake.warehouse}" if self.lake.on_s3 else ""
        self.on_progress(f"lakelock service on {service.url} (SQLite{front})")
        return service

    def run(self) -> PipelineResult:
        o = self.options
        if o.storage == "s3" and not o.coordinated:
            raise ValueError("the demo on S3 runs through the service's catalog front: coordinated")
        require_format_version(o.format_version)
        require_write_mode(o.write_mode)
        if o.workdir.exists():
            shutil.rmtree(o.workdir)
        (o.workdir / "landing").mkdir(parents=True)
        started = time.monotonic()
        service = None
        spark = None
        threads: list[threading.Thread] = []
        self.lake = Lake.open(o.storage, o.workdir, endpoint=o.s3_endpoint, bucket=o.s3_bucket)
        self.options = o = replace(o, table=self.lake.table(o.table))
        try:
            service = self._start_service() if o.coordinated else None
            self.service = service
            if o.source == "kafka":
                self.kafka = LocalKafka.start(o.workdir / "kafka")
                self.kafka.create_topic(TOPIC, partitions=o.kafka_partitions)
                self.on_progress(
                    f"kafka broker on {self.kafka.bootstrap}, topic {TOPIC} "
                    f"({o.kafka_partitions} partitions)"
                )
            config = self._ingest_config(service)
            more = [c.spark_conf() for c in self.more_catalogs(self.lake, service)]
            spark = build_session(
                config.catalog,
                app_name="lakelock-demo",
                master=o.spark_master,
                jar_sets=("spark-kafka",) if o.source == "kafka" else (),
                paths=(config.checkpoint_path,),
                extra_conf={k: v for conf in more for k, v in conf.items()},
            )
            spark.sparkContext.setLogLevel("ERROR")
            self.spark = spark  # for a reader beside the jobs (benchmarks.streaming_health)
            self._handle_ctrl_c()
            client: Any = (
                LeaseClient(service.url, token=service.token("job"))
                if service
                else UncoordinatedClient()
            )
            # the table first, with its DDL, as a user would: the ingest job reads its schema
            create_events_table(
                spark, o.table, format_version=o.format_version, write_mode=o.write_mode
            )
            # by time the run ends at its deadline; by counts `duration_s` is the window a
            # reader beside the jobs spreads its queries over, from here
            began = time.monotonic()
            self.streaming = (began, (began if o.by_counts else started) + o.duration_s)
            self.streaming_started.set()
            for target, args in (
                (self._generate, ()),
                (self._ingest, (spark, config)),
                *([(self._compact, (spark, client))] if o.compactions_on else []),
                (self._progress, (started,)),
                (self._sample_health, (service,)),
            ):
                thread = threading.Thread(target=self._guarded(target), args=args, daemon=True)
                thread.start()
                threads.append(thread)
            goals_missed = self._until_done(started)
            self._join(threads)
            self._drain(spark, config)
            rows = read_rows(spark, o.table)
            data_files = spark.sql(f"SELECT count(*) AS n FROM {o.table}.data_files").first()["n"]
            events = (
                LeaseClient(service.url, token=service.token("reader")).events(
                    table=o.table, limit=1000
                )
                if service
                else []
            )
            snapshots = read_snapshots(
                self.lake.metadata_location(o.table, service), self.lake.s3_properties()
            )
            return PipelineResult(
                options=o,
                generator=self.generator,
                files=list(self.files),
                batches=list(self.batches),
                failed_batches=list(self.failed_batches),
                compactions=list(self.compactions),
                compaction_windows=list(self.windows),
                rows=rows,
                data_files_now=int(data_files),
                events=events,
                duration_s=time.monotonic() - started,
                goals_missed=goals_missed,
                health=list(self.health),
                snapshots=snapshots,
                warehouse=(
                    self.lake.warehouse
                    if self.lake.on_s3
                    else str((o.workdir / "warehouse").resolve())
                ),
            )
        finally:
            # stop everything, in order, even when one step fails (after Ctrl-C the Spark
            # gateway may already be gone): each failure is logged, and the next step runs
            self.stop.set()
            if spark is not None:
                _cleanup("stop the streaming queries", lambda: _stop_queries(spark))
            for thread in threads:
                thread.join(timeout=60)
            self._wait_for_readers()
            if spark is not None:
                _cleanup("stop Spark", spark.stop)
            if service is not None:
                _cleanup("stop the lakelock service", service.stop)
            if self.kafka is not None:
                _cleanup("stop the Kafka broker", self.kafka.stop)
            _cleanup("stop the S3 server", self.lake.close)
