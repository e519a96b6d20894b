"""Many tables, one compactor process: list, rank, claim, run a few at once, remember.

    fleet = Fleet(spark, client=client, config=config, selection=["lake.db.*"])
    tick = fleet.tick()              # one pass over every table the selection names
    tick.left_to_others              # {"lake.db.b": "compactor@other:77"}: claimed elsewhere
    tick.exit_code                   # 0, 1 (a run failed, a table unreadable), 2 (refused)
    fleet.run(every_s=600, stop=stop)  # ticks on a grid until `stop` is set
    fleet.on_run = reports.append    # hear each run's report (the demo counts them)

A tick, and why:

    list      the selection's patterns expanded through the catalog (compactor.catalog) at
              every tick, so tables created since are picked up; exact names as given
    rank      each table's current snapshot summary, read from its metadata without a Spark job,
              judged by compactor.rank: a healthy table costs nothing more. The tables with
              debt queue up, most first
    run       at most `fleet.max_concurrent` tables at once, each in a thread of its own over
              the one Spark session (with `fleet.scheduler = "fair"` each in its own FAIR
              pool, so one huge rewrite does not hold the others' tasks back): claim the table
              (docs/design.md §5; a table another compactor claimed is left to it at once), read
              its summary again (another compactor may have compacted it since the rank), then
              compactor.run.run_table (stats, plan, maintenance leases, housekeeping) with the
              claim renewed throughout and checked before each step, then release it
    remember  what each plan and run saw (compactor.rank.Look), so that a table whose snapshot
              has not changed since a plan that found nothing is not planned again; the debt
              each plan and run saw goes to the service (compactor.debt), with its partitions:
              the service's counts of each partition's files are corrected by it

A compactor that follows the stream (compactor.follow, `run --follow`) long-polls the service
for due partitions between ticks and runs the ticks on a slower grid in a thread beside.

Without claims (`claims=False`, the command's `--no-claim`, for one-off runs only) every table
with debt is planned whatever other compactors do; their maintenance leases still keep their
steps apart, but two processes may plan and compact the same table one after the other.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from compactor.catalog import candidates, read_summary, spark_jobs
from compactor.claim import Claim, Held, take
from compactor.config import CompactorConfig, ConfigError, TableConfig
from compactor.debt import debt_of, send_debt
from compactor.patterns import expand
from compactor.plan import Plan
from compactor.procedure_config import check_floors
from compactor.rank import Assessment, Look, Track, advance, assess, rank
from compactor.report import EXIT_CODES, Outcome, RunReport, publish
from compactor.run import default_holder, run_table, utcnow
from compactor.stats import TableStats
from jobkit.spark import error_message
from jobkit.token import TOKEN_ENV, refused_token
from service.client import LeaseClient
from service.wire.errors import LakelockError, OutcomeUnknown, ServerError, Unavailable
from service.wire.holders import run_holder

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["Fleet", "TickReport"]

log = logging.getLogger("compactor.fleet")

_POOL = "spark.scheduler.pool"


@dataclass
class TickReport:
    """What one tick did; `as_dict()` is its `compactor.tick` log line.

    tables           how many tables the selection named this tick
    healthy          of them, how many the rank left alone (no Spark job spent on them)
    queued           the tables with debt, in the order they were taken up
    outcomes         each run's outcome (compactor.report.Outcome), by table
    left_to_others   tables another compactor had claimed, and its holder
    settled          tables found without debt once claimed (compacted elsewhere meanwhile)
    failed           tables (or patterns) that could not be listed, configured or read: why
    rank_s           seconds to list and rank; rank_spark_jobs: Spark jobs started meanwhile
    """

    tables: int = 0
    healthy: int = 0
    queued: list[str] = field(default_factory=list)
    outcomes: dict[str, str] = field(default_factory=dict)
    left_to_others: dict[str, str | None] = field(default_factory=dict)
    settled: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    claims: bool = True
    exit_code: int = 0
    rank_s: float = 0.0
    rank_spark_jobs: int = 0
    duration_s: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        for key in ("rank_s", "duration_s"):
            out[key] = round(out[key], 3)
        return out

    def worsen(self, code: int) -> None:
        self.exit_code = max(self.exit_code, code)


class Fleet:
    """One compactor process working through every table its selection names (see the module
    docstring). Keeps what it learnt of each table from one tick to the next."""

    def __init__(
        self,
        spark: SparkSession,
        *,
        client: LeaseClient | None,
        config: CompactorConfig,
        selection: Sequence[str] | None = None,
        holder: str | None = None,
        claims: bool = True,
        token_env: str = TOKEN_ENV,
        now: Callable[[], datetime] = utcnow,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.spark = spark
        self.client = client
        self.config = config
        self.selection = tuple(selection or config.selection)
        self.holder = holder or default_holder()
        self.claims = claims
        self.token_env = token_env
        self.now = now
        self.clock = clock
        self.tracks: dict[str, Track] = {}
        self._configs: dict[str, TableConfig] = {}
        self._lock = threading.Lock()
        # hears each run's report once published (from the thread that ran it)
        self.on_run: Callable[[RunReport], None] | None = None

    # -- one tick ---------------------------------------------------------------------------

    def tick(self, stop: threading.Event | None = None) -> TickReport:
        """List, rank and run every table with debt once; see the module docstring."""
        started = self.clock()
        report, ranked = self.rank()
        queue = [a for a in ranked if a.debt]
        log.info(
            "tick: %d tables, %d healthy by their summary, %d with debt; ranked in %.2fs "
            "(%d Spark jobs)",
            report.tables,
            report.healthy,
            len(queue),
            report.rank_s,
            report.rank_spark_jobs,
        )
        for a in queue:
            log.info("%s: to plan (score %.1f): %s", a.table, a.score, "; ".join(a.debt))
        self._run_queue(queue, report, stop)
        report.duration_s = self.clock() - started
        _log_tick(report)
        return report

    def rank(self) -> tuple[TickReport, list[Assessment]]:
        """Every table the selection names, listed and assessed from its summary (no Spark
        job), in the order a tick takes them up; the report counts them."""
        started = self.clock()
        report = TickReport(claims=self.claims)
        jobs = spark_jobs(self.spark)
        names = self._names(report)
        assessments = [a for a in (self._assess(n, report) for n in names) if a is not None]
        ranked = rank(assessments)
        report.rank_s = self.clock() - started
        report.rank_spark_jobs = spark_jobs(self.spark) - jobs
        report.tables = len(names)
        report.queued = [a.table for a in ranked if a.debt]
        report.healthy = len(assessments) - len(report.queued)
        return report, ranked

    def _names(self, report: TickReport) -> list[str]:
        def listed(pattern: str) -> list[str]:
            try:
                return candidates(self.spark, pattern)
            except Exception as exc:
                # a namespace or catalog that is not there: the other patterns still run
                log.error("%s: cannot list the catalog's tables: %s", pattern, error_message(exc))
                report.failed[pattern] = error_message(exc)
                report.worsen(1)
                return []

        return expand(self.selection, listed)

    def _table_config(self, name: str, report: TickReport) -> TableConfig | None:
        found = self._configs.get(name)
        if found is not None:
            return found
        try:
            found = self.config.table(name)
            # again here: a config built in code, not loaded from a file, was never checked
            check_floors(found)
        except ConfigError as exc:
            # a pattern's keys over an exact entry's, or over each other, may break a rule
            # (a retention floor) that each respects alone: nothing runs on the table
            log.error("%s", exc)
            self._publish_unrun(name, Outcome.REFUSED, str(exc), report)
            return None
        self._configs[name] = found
        return found

    def _assess(self, name: str, report: TickReport) -> Assessment | None:
        config = self._table_config(name, report)
        if config is None:
            return None
        try:
            summary = read_summary(self.spark, name)
        except Exception as exc:
            message = f"could not read the table's metadata: {error_message(exc)}"
            log.error("%s: %s", name, message)
            self._publish_unrun(name, Outcome.FAILED, message, report)
            return None
        now = self.now()
        with self._lock:
            track = self.tracks.get(name)
        assessment = assess(
            summary, config, track, now, replan_after=self.config.fleet.replan_after
        )
        with self._lock:
            self.tracks[name] = advance(track, assessment, now)
        return assessment

    def _publish_unrun(self, name: str, outcome: Outcome, error: str, report: TickReport) -> None:
        """A run report for a table nothing could run on (the service's run history shows it,
        as it shows any failed run)."""
        run_uid = uuid.uuid4().hex[:12]
        unrun = RunReport(
            table=name,
            run_uid=run_uid,
            holder=run_holder(self.holder, run_uid),
            outcome=outcome,
            error=error,
            started_at=self.now().isoformat(),
        )
        publish(unrun, client=self.client)
        report.failed[name] = error
        report.worsen(EXIT_CODES[outcome])

    # -- runs -------------------------------------------------------------------------------

    def _run_queue(
        self, queue: Sequence[Assessment], report: TickReport, stop: threading.Event | None
    ) -> None:
        if not queue:
            return
        if not self.claims:
            log.warning(
                "claims are off: another compactor may plan and compact these tables too "
                "(maintenance leases still keep the steps apart)"
            )
        workers = min(self.config.fleet.max_concurrent, len(queue))
        with ThreadPoolExecutor(workers, thread_name_prefix="lakelock-compactor") as pool:
            futures = [pool.submit(self._one, a, report, stop) for a in queue]
            for future in futures:
                future.result()

    def _one(self, a: Assessment, report: TickReport, stop: threading.Event | None) -> None:
        if stop is not None and stop.is_set():
            return
        try:
            config = self._configs[a.table]
            if not self.claims:
                self._run(config, report, claim=None, stop=stop)
                return
            got = self._take(a.table, config, report)
            if got is None:
                return
            with got:
                if not self._settled(a, config, report):
                    self._run(config, report, claim=got, stop=stop)
        except Exception as exc:
            # run_table reports its own failures; this is a fault around it
            log.exception("%s: the run failed", a.table)
            with self._lock:
                report.outcomes[a.table] = str(Outcome.FAILED)
                report.failed[a.table] = error_message(exc)
                report.worsen(1)

    def _take(self, table: str, config: TableConfig, report: TickReport) -> Claim | None:
        """Our claim on `table`, or None when the table is left (claimed elsewhere: said in the
        report; the service failing: the run counts as unavailable)."""
        try:
            got = take(
                self.client,
                table,
                holder=self.holder,
                ttl_s=self.config.fleet.claim_ttl.total_seconds(),
            )
        except (Unavailable, OutcomeUnknown, ServerError) as exc:
            log.error("%s: cannot claim (service unavailable), not planning: %s", table, exc)
            self._settle_unrun(table, Outcome.UNAVAILABLE, f"{exc.slug}: {exc}", report)
            return None
        except LakelockError as exc:
            log.error("%s: claim refused: %s", table, exc)
            self._explain(exc.slug)
            self._settle_unrun(table, Outcome.FAILED, f"{exc.slug}: {exc}", report)
            return None
        if isinstance(got, Held):
            log.info("%s: claimed by %s: left to it", table, got.holder or "another compactor")
            with self._lock:
                report.left_to_others[table] = got.holder
            return None
        return got

    def _settle_unrun(self, table: str, outcome: Outcome, error: str, report: TickReport) -> None:
        with self._lock:
            report.outcomes[table] = str(outcome)
            report.failed[table] = error
            report.worsen(EXIT_CODES[outcome])

    def _settled(self, a: Assessment, config: TableConfig, report: TickReport) -> bool:
        """Whether the table, read again now that it is ours, no longer needs a plan: another
        compactor compacted it between our rank and our claim."""
        summary = read_summary(self.spark, a.table)
        if summary.snapshot_id == a.summary.snapshot_id:
            return False
        with self._lock:
            track = self.tracks.get(a.table)
        again = assess(summary, config, track, self.now(), replan_after=None)
        if again.debt:
            return False
        log.info("%s: no debt any more once claimed (%s): not planned", a.table, again.healthy)
        with self._lock:
            report.settled.append(a.table)
        return True

    def _run(
        self,
        config: TableConfig,
        report: TickReport,
        *,
        claim: Claim | None,
        stop: threading.Event | None,
    ) -> None:
        sc = self.spark.sparkContext
        watch = _Watch(self, config)
        if self.config.fleet.scheduler == "fair":
            # a pool per worker thread: Spark shares the executors between concurrent runs
            # instead of running the first job's tasks first (local, thread-scoped property)
            sc.setLocalProperty(_POOL, threading.current_thread().name)
        try:
            run = run_table(
                self.spark,
                client=self.client,
                config=config,
                holder=self.holder,
                before_step=claim.check if claim is not None else None,
                on_stats=watch.saw,
                claim=claim.lease if claim is not None else None,
                stop=stop,
            )
        finally:
            sc.setLocalProperty(_POOL, None)
        publish(run, client=self.client)
        if (run.error or "").startswith("unauthorized"):
            self._explain("unauthorized")
        watch.finished(run)
        if self.on_run is not None:
            self.on_run(run)
        with self._lock:
            report.outcomes[config.name] = str(run.outcome)
            report.worsen(EXIT_CODES[Outcome(run.outcome)])

    def _explain(self, slug: str) -> None:
        """Name the token variable when the service refused the compactor's token (401)."""
        if slug == "unauthorized":
            log.error("%s", refused_token(self.token_env, token=os.environ.get(self.token_env)))

    def remember(self, table: str, look: Look) -> None:
        """Keep what a plan or run of `table` saw, for the next tick's rank."""
        with self._lock:
            track = self.tracks.get(table) or Track(first_seen_at=look.at)
            self.tracks[table] = replace(track, looked=look)

    # -- the schedule -----------------------------------------------------------------------

    def run(self, *, every_s: float, stop: threading.Event, ticks: int | None = None) -> int:
        """Tick every `every_s` seconds (from the first) until `stop` is set, or `ticks` ran;
        the number of ticks run. A tick that fails is logged and the next one runs."""
        done = 0
        next_at = self.clock()
        while not stop.is_set() and (ticks is None or done < ticks):
            try:
                self.tick(stop)
            except Exception:
                log.exception("tick failed; going on with the next")
            done += 1
            # ticks stay on the grid: a long tick skips the ticks it overran instead of bunching
            next_at += every_s
            while next_at <= self.clock():
                next_at += every_s
            if ticks is None or done < ticks:
                stop.wait(next_at - self.clock())
        return done


class _Watch:
    """Hears a run's stats (run_table's `on_stats`): remembers what its plan and the table
    after it showed, and reports the debt each time."""

    def __init__(self, fleet: Fleet, config: TableConfig) -> None:
        self.fleet = fleet
        self.config = config
        self.planned: Look | None = None
        self.after: TableStats | None = None

    def saw(self, stats: TableStats, the_plan: Plan | None) -> None:
        if the_plan is not None:
            self.planned = Look.of_plan(
                stats, the_plan, self.fleet.now(), hot_window=self.config.plan.hot_window
            )
            self.fleet.remember(self.config.name, self.planned)
        else:
            self.after = stats
        debt = debt_of(stats, self.config, measured_at=self.fleet.now())
        send_debt(self.fleet.client, self.config.name, debt)

    def finished(self, run: RunReport) -> None:
        if self.after is None:
            return
        done = Outcome(run.outcome) in (Outcome.COMPACTED, Outcome.NO_CHANGE) and all(
            g.get("outcome") != Outcome.SKIPPED for g in run.groups
        )
        look = Look.after_run(self.planned, self.after, self.fleet.now(), done=done)
        self.fleet.remember(self.config.name, look)


def _log_tick(report: TickReport) -> None:
    for table, holder in sorted(report.left_to_others.items()):
        log.info("%s: left to %s, which holds its claim", table, holder or "another compactor")
    counts: dict[str, int] = {}
    for outcome in report.outcomes.values():
        counts[outcome] = counts.get(outcome, 0) + 1
    log.info(
        "tick done in %.1fs: %s; %d left to other compactors%s",
        report.duration_s,
        ", ".join(f"{n} {o}" for o, n in sorted(counts.items())) or "no run",
        len(report.left_to_others),
        "" if report.claims else " (claims off)",
    )
    log.info(json.dumps({"event": "compactor.tick", **report.as_dict()}, sort_keys=True))
