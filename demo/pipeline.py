"""The whole pipeline on one machine: service, event generator, gated streaming upsert, compactor.

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
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from compactor.claim import Held, take
from compactor.config import (
    CompactorConfig,
    FleetConfig,
    LeaseConfig,
    PlanConfig,
    RewriteDataFilesConfig,
    TableConfig,
)
from compactor.fleet import Fleet
from compactor.follow import Follower
from compactor.report import Outcome, RunReport, publish
from compactor.run import run_table
from demo.generate import KEY_FIELDS, ChangeGenerator, EventGenerator, create_events_table
from demo.health import Health
from demo.kafka import LocalKafka, as_messages
from demo.lake import Lake
from demo.s3 import BUCKET
from demo.service import LocalService
from ingest_gate.job.config import IngestConfig
from ingest_gate.job.run import BatchHooks, BatchRecord, run
from ingest_gate.job.table import read_rows
from jobkit.spark import build_session
from service.client import Lease, LeaseClient
from service.ops.iceberg_audit import SnapshotRecord, read_snapshots
from service.wire.figures import quantile

__all__ = [
    "COMPACTORS",
    "BatchSeen",
    "FileWritten",
    "Pipeline",
    "PipelineOptions",
    "PipelineResult",
    "UncoordinatedClient",
    "compact",
    "compact_once",
    "run_line",
    "warm_samples",
]

log = logging.getLogger("demo")

TOPIC = "events"  # the demo's topic with `source="kafka"`
COMPACTORS = ("follow", "timer")
"""How the demo compacts: following the stream (the default), or every `compact_every_s`."""
HOLDER = "demo-compactor"


@dataclass(frozen=True)
class PipelineOptions:
    """One run's knobs; the defaults are the demo's."""

    duration_s: float = 120.0
    workdir: Path = Path("var/demo")
    table: str = "local.db.events"
    rate: float = 200.0
    file_interval_s: float = 1.0
    trigger_interval_s: float = 2.0
    # "follow": the follower (long-polls for due partitions, full plan every
    # full_plan_every_s); "timer": a run every compact_every_s (see the module docstring).
    # `python -m demo` and benchmarks.streaming_health follow by default; the benchmarks built
    # on benchmarks.modes keep the timer they were measured with
    compactor: str = "timer"
    compact_every_s: float = 20.0
    full_plan_every_s: float = 300.0
    follow_poll_s: float = 10.0
    seed: int = 1
    update_ratio: float = 0.3
    duplicate_ratio: float = 0.1
    late_update_ratio: float = 0.05
    bad_ratio: float = 0.01
    # updates only to keys of the newest event hours (None: any key), so older partitions go
    # cold: the workload partition scopes are for (benchmarks/scopes.py)
    update_window: timedelta | None = None
    # the compactor leaves partitions a commit touched within it alone (0: only those a live
    # commit lease covers)
    hot_window: timedelta = timedelta(0)
    coordinated: bool = True
    # json: click events (duplicates, late updates); debezium, canal: change events of the
    # same table (updates, key changes, deletes), see demo.generate.ChangeGenerator
    format: str = "json"
    delete_ratio: float = 0.1
    key_change_ratio: float = 0.05
    lease_scope: str = "partitions"  # the key (event_id, dt, hr) holds both partition columns
    lease_ttl_s: float = 20.0
    max_hold_s: float = 120.0
    spark_master: str = "local[2]"
    progress_every_s: float = 5.0
    health_every_s: float = 5.0
    # False: no compactor at all (the streaming-health benchmark's baseline)
    compactions_on: bool = True
    # by counts (see the module docstring): `events` set switches from duration_s to counts
    events: int | None = None
    compactions: int = 1
    timeout_s: float = 900.0
    # files: a landing folder; kafka: a topic of a broker started for the run (demo.kafka)
    source: str = "files"
    kafka_partitions: int = 4
    # the compactor's plan settings over the demo's (compactor.config.PlanConfig field names,
    # e.g. {"trigger_small_files": 8}): what benchmarks.streaming_health --plan sweeps
    plan: dict[str, Any] = field(default_factory=dict)
    # file: a Hadoop catalog in the workdir; s3: the service's catalog front on an S3
    # warehouse, the checkpoints beside it (demo.lake): the project's S3 server, or
    # `s3_endpoint`'s bucket `s3_bucket` (keys from the AWS environment)
    storage: str = "file"
    s3_endpoint: str | None = None
    s3_bucket: str = BUCKET

    @property
    def by_counts(self) -> bool:
        return self.events is not None

    @property
    def follows(self) -> bool:
        """The compactor follows the stream (it needs the service: uncoordinated, the timer)."""
        return self.compactor == "follow" and self.coordinated

    def table_config(self) -> TableConfig:
        """The compactor's config of `table`: demo-sized thresholds (the files here are KBs,
        not the 128 MiB of a real table), `plan` over them."""
        return TableConfig(
            name=self.table,
            lease=LeaseConfig(
                ttl=timedelta(seconds=self.lease_ttl_s),
                max_wait=timedelta(seconds=60),
                scope=self.lease_scope,
            ),
            plan=PlanConfig(
                **{
                    "min_small_files": 8,
                    "min_delete_files": 8,
                    "hot_window": self.hot_window,
                    **self.plan,
                }
            ),
            rewrite_data_files=RewriteDataFilesConfig(
                options={
                    "target-file-size-bytes": str(8 * 1024 * 1024),
                    "min-input-files": "2",
                    "max-concurrent-file-group-rewrites": "2",
                    "partial-progress.enabled": "false",
                }
            ),
        )


@dataclass(frozen=True)
class FileWritten:
    path: str
    records: int
    at: float  # time.time() when the file appeared in the landing folder


@dataclass(frozen=True)
class BatchSeen:
    """A batch's record; `ended_at` is when its MERGE committed (time.time()), `started_at`
    that minus the batch's duration (it includes the gate wait)."""

    record: BatchRecord
    started_at: float
    ended_at: float
    query_run: int  # which start of the query (restarts after failures count up)


@dataclass
class PipelineResult:
    options: PipelineOptions
    generator: EventGenerator
    files: list[FileWritten]
    batches: list[BatchSeen]
    failed_batches: list[dict[str, Any]]
    compactions: list[RunReport]
    compaction_windows: list[tuple[float, float]]
    rows: list[dict[str, Any]]
    data_files_now: int
    events: list[dict[str, Any]] = field(default_factory=list)
    # the table's snapshots at the end, read from its metadata file (on local files or S3)
    # before the run stopped its storage: what `lakelock audit` checks against `events`
    snapshots: list[SnapshotRecord] = field(default_factory=list)
    warehouse: str = ""  # the local folder, or the S3 warehouse's URI
    # the table read with pyiceberg every `health_every_s` while the stream ran (demo.health)
    health: list[Health] = field(default_factory=list)
    duration_s: float = 0.0
    goals_missed: list[str] = field(default_factory=list)

    def verify(self) -> list[str]:
        """What is wrong with the table, compared with what the generator wrote; [] if nothing."""
        expected = {_key(r): r for r in self.generator.expected_rows()}
        actual: dict[tuple[Any, ...], dict[str, Any]] = {}
        problems: list[str] = list(self.goals_missed)
        for row in self.rows:
            if _key(row) in actual:
                problems.append(f"key {_key(row)} appears more than once")
            actual[_key(row)] = row
        missing = expected.keys() - actual.keys()
        extra = actual.keys() - expected.keys()
        if missing:
            problems.append(f"{len(missing)} keys missing, e.g. {sorted(missing)[:3]}")
        if extra:
            problems.append(f"{len(extra)} unexpected keys, e.g. {sorted(extra)[:3]}")
        stale = [k for k in expected.keys() & actual.keys() if expected[k] != actual[k]]
        if stale:
            k = sorted(stale)[0]
            problems.append(
                f"{len(stale)} keys do not hold their latest values, e.g. {k}: "
                f"table {actual[k]} != expected {expected[k]}"
            )
        return problems

    def max_ingest_wait_s(self) -> float:
        return max((b.record.gate_wait_s for b in self.batches), default=0.0)

    def warm(self) -> list[Health]:
        """The samples after the compactor's warm-up (see warm_samples)."""
        return warm_samples(
            self.health, self.compactions, compactions_on=self.options.compactions_on
        )

    def ingest_held(self) -> dict[str, float]:
        """Seconds the gate held batches (all waits, and of them backpressure), and their share
        of the run."""
        waited = sum(b.record.gate_wait_s for b in self.batches)
        pressed = sum(b.record.backpressure_s for b in self.batches)
        run = self.duration_s or 1.0
        return {
            "ingest_wait_s": round(waited, 2),
            "ingest_wait_share": round(waited / run, 4),
            "backpressure_s": round(pressed, 2),
            "backpressure_share": round(pressed / run, 4),
        }

    def summary(self) -> dict[str, Any]:
        compacted = [r for r in self.compactions if r.outcome == "compacted"]
        failed = [r for r in self.compactions if r.outcome in ("failed", "lease_lost")]
        last = compacted[-1] if compacted else None
        follow = [r for r in self.compactions if r.mode == "follow"]
        durations = [r.duration_s or 0.0 for r in follow if r.outcome == "compacted"]
        return {
            "mode": "coordinated" if self.options.coordinated else "uncoordinated",
            "compactor": "follow" if self.options.follows else "timer",
            "format": self.options.format,
            "source": self.options.source,
            "storage": self.options.storage,
            "duration_s": round(self.duration_s, 1),
            "events_generated": sum(self.generator.by_kind.values()),
            "distinct_keys_generated": len(self.generator.expected_rows()),
            "bad_records": self.generator.by_kind.get("bad", 0),
            "bad_records_dead_lettered": sum(b.record.bad_rows for b in self.batches),
            "records_skipped": sum(sum(b.record.skipped.values()) for b in self.batches),
            "deletes": sum(b.record.deletes for b in self.batches),
            "rows_in_table": len(self.rows),
            "batches": len(self.batches),
            "batches_merged": sum(b.record.outcome != "empty" for b in self.batches),
            "lease_scope": self.options.lease_scope,
            "batches_scoped": sum(isinstance(b.record.scope, list) for b in self.batches),
            "failed_batches": len(self.failed_batches),
            "compactions": len(compacted),
            "compaction_runs": len(self.compactions),
            "follow_runs": len(follow),
            "follow_run_p50_s": quantile(durations, 0.5, ndigits=3),
            "follow_run_p95_s": quantile(durations, 0.95, ndigits=3),
            "failed_compactions": len(failed),
            "data_files_before_last_compaction": (last.before or {}).get("data_files")
            if last
            else None,
            "data_files_after_last_compaction": (last.after or {}).get("data_files")
            if last
            else None,
            "data_files_now": self.data_files_now,
            "max_ingest_wait_s": round(
                max((b.record.gate_wait_s for b in self.batches), default=0), 3
            ),
            **self.ingest_held(),
            "compactor_hold_s": round(sum(r.hold_s or 0.0 for r in self.compactions), 2),
            "compactor_max_partition_hold_s": round(
                max((v for r in self.compactions for v in r.partition_hold_s.values()), default=0),
                2,
            ),
            **_worst_after_warmup(self.warm()),
            "warehouse": self.warehouse,
            "table": self.options.table,
            **(
                {"topic": f"{TOPIC} ({self.options.kafka_partitions} partitions)"}
                if self.options.source == "kafka"
                else {"landing": str((self.options.workdir / "landing").resolve())}
            ),
        }


def warm_samples(
    health: list[Health], compactions: list[RunReport], *, compactions_on: bool
) -> list[Health]:
    """The samples after the second compactor run ended (all of them without a compactor or
    before a second run): what the compaction cycle holds the table to."""
    starts = [r.started_at for r in compactions if r.started_at is not None]
    if not compactions_on or len(starts) < 2:
        return list(health)
    after = datetime.fromisoformat(starts[1]).timestamp() + (compactions[1].duration_s or 0)
    return [h for h in health if h.at >= after]


def compact(
    spark: Any,
    client: Any,
    options: PipelineOptions,
    *,
    stop: threading.Event,
    on_run: Callable[[RunReport], None],
) -> None:
    """lakelock's compactor on `options.table` until `stop`: following the stream
    (`options.follows`), else a run every `compact_every_s`; each run published, then handed
    to `on_run`. Whatever writes the table: the demo's ingest job, or a Flink job through the
    catalog front (whose commits count the due partitions as the gate's releases do)."""
    config = options.table_config()
    if options.follows:
        _follow(spark, client, config, options, stop=stop, on_run=on_run)
        return
    while not stop.wait(options.compact_every_s):
        report = compact_once(spark, client, config)
        publish(report, client=client)
        on_run(report)


def _follow(
    spark: Any,
    client: LeaseClient,
    config: TableConfig,
    options: PipelineOptions,
    *,
    stop: threading.Event,
    on_run: Callable[[RunReport], None],
) -> None:
    """Follow the stream until `stop` (compactor.follow): the demo's table only, one table run
    at a time, the full plan every `full_plan_every_s`."""
    fleet = Fleet(
        spark,
        client=client,
        config=CompactorConfig(
            tables=(config,),
            fleet=FleetConfig(max_concurrent=1, claim_ttl=timedelta(seconds=60)),
        ),
        selection=[config.name],
        holder=HOLDER,
    )
    follower = Follower(
        fleet, every_s=options.full_plan_every_s, poll_s=options.follow_poll_s, on_run=on_run
    )
    follower.run(stop)


def compact_once(spark: Any, client: Any, config: TableConfig) -> RunReport:
    """One run, under a claim on the table as the fleet takes it (so the run may hold back
    writers of partitions past the hard bound); uncoordinated, without one."""
    if isinstance(client, UncoordinatedClient):
        return run_table(spark, client=client, config=config, holder=HOLDER)
    got = take(client, config.name, holder=HOLDER, ttl_s=60)
    if isinstance(got, Held):  # no other compactor runs here; said if one ever does
        raise RuntimeError(f"the demo's table is claimed by {got.holder}")
    with got:
        return run_table(
            spark,
            client=client,
            config=config,
            holder=HOLDER,
            claim=got.lease,
            before_step=got.check,
        )


def run_line(number: int, report: RunReport) -> str:
    """A progress line for the compactor's run `number`: its outcome, what it did, its waits."""
    error = f" ({report.error.splitlines()[0][:120]})" if report.error else ""
    if report.mode == "follow":
        what = f"followed {', '.join(report.compacted) or 'nothing'}"
    else:
        what = (
            f"data files {(report.before or {}).get('data_files')} -> "
            f"{(report.after or {}).get('data_files')}"
        )
    return (
        f"compaction {number}: {report.outcome}{error}, {what}, "
        f"lease wait {report.lease_wait_s or 0:.1f}s, {report.duration_s or 0:.1f}s"
    )


def _worst_after_warmup(samples: list[Health]) -> dict[str, Any]:
    """The worst partition the samples saw (after the warm-up), and the table's peak."""
    if not samples:
        return {"worst_partition_after_warmup": None}
    worst = max(
        ((name, f) for h in samples for name, f in h.partitions.items()),
        key=lambda nf: (nf[1].total, nf[0]),
        default=None,
    )
    return {
        "worst_partition_after_warmup": None
        if worst is None
        else f"{worst[0]}: {worst[1].data} data + {worst[1].deletes} delete files",
        "table_files_peak_after_warmup": max(h.data_files + h.delete_files for h in samples),
    }


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
"""Outcomes of a batch that ran to its end (ingest_gate.job.BatchRecord); the rest raised, and
the restarted query runs that batch again."""


def _key(row: dict[str, Any]) -> tuple[Any, ...]:
    return (row["event_id"], row["dt"], row["hr"])


class UncoordinatedClient:
    """A stand-in for LeaseClient that grants every maintenance lease at once and never
    refuses a renew: the compactor then runs as if lakelock did not exist."""

    def acquire_maintenance(self, table: str, *, holder: str, ttl_s: float, **_: Any) -> Lease:
        return Lease(
            lease_id=str(uuid.uuid4()),
            table=table,
            kind="maintenance",
            holder=holder,
            request_id="uncoordinated",
            token=0,
            ttl_s=ttl_s,
            remaining_s=ttl_s,
        )

    def renew(self, lease: Lease, **_: Any) -> Lease:
        return lease

    def release(self, lease: Lease) -> None:
        return None

    def report_run(self, table: str, report: dict[str, Any]) -> int:
        return 0


class Pipeline:
    def __init__(
        self, options: PipelineOptions, *, on_progress: Callable[[str], None] | None = None
    ) -> None:
        self.options = options
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
            # by counts: one landing file per batch, so the batches (and the small files the
            # compactor waits for) come from the event count, not from how fast Spark runs
            max_files_per_trigger=1 if o.by_counts else None,
            source=o.source,
            kafka=(
                {"kafka.bootstrap.servers": self.kafka.bootstrap, "subscribe": TOPIC}
                if self.kafka is not None
                else {}
            ),
        )

    # -- the parts -----------------------------------------------------------------------------

    def _generate(self) -> None:
        o = self.options
        landing = self._path("landing")
        per_file = self.options.rate * self.options.file_interval_s
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
            if o.source == "kafka":
                self.kafka = LocalKafka.start(o.workdir / "kafka")
                self.kafka.create_topic(TOPIC, partitions=o.kafka_partitions)
                self.on_progress(
                    f"kafka broker on {self.kafka.bootstrap}, topic {TOPIC} "
                    f"({o.kafka_partitions} partitions)"
                )
            config = self._ingest_config(service)
            spark = build_session(
                config.catalog,
                app_name="lakelock-demo",
                master=o.spark_master,
                jar_sets=("spark-kafka",) if o.source == "kafka" else (),
                paths=(config.checkpoint_path,),
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
            create_events_table(spark, o.table)
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
