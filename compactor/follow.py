"""A compactor that follows the stream: due partitions compacted within seconds of the commit
that made them due (docs/jobs.md §3, docs/design.md §5).

    follower = Follower(fleet, every_s=300)   # fleet: compactor.fleet.Fleet, with a client
    follower.run(stop)                        # until `stop` is set (SIGTERM in the CLI)
    follower.round(stop)                      # one long-poll and the runs it brought

Every commit through lakelock adds its files per partition to the service's counts (the gate's
releases, the catalog front's commits); a partition whose counts reach the service's thresholds
is *due*. The follower, with its warm Spark session, long-polls the service for the due
partitions of the tables its selection names (`LeaseClient.due`, its names and patterns, as
the fleet's holder: the service leaves out tables another compactor has claimed) and, for
what comes back, most debt first:

    claim        the table, as the fleet does (compactor.claim): a table another process claimed
                 is left to it, so several followers share the tables of one lake; once claimed,
                 the service is asked again (no wait) what of it is still due: another follower
                 may have compacted it since the long-poll answered
    compact      the due partitions, without planning the table (compactor.run.follow_table):
                 one maintenance lease per `follow.partitions_per_group` of them, the rewrite of
                 only their small files and the files deletes apply to, in a Spark session of its
                 own sized for it (one shuffle partition: a partition's deletes are one join)
    release      each lease with the partitions it compacted: the service zeroes their counts
                 and records the time from due to compacted
    report       the run, as any run (compactor.report)

Wake-ups come only from the long-poll: the service answers at once when partitions are due,
else after `poll_s` with nothing; never a loop of asks. A table whose run could not compact
(claimed by another process or by this one's full plan, its partitions held, a failure) cools
down, 1 s doubling to `max_cool_s`, and is not tried again before; while every due table cools
the follower waits for the first to be ready instead of asking again at once. `stop` ends the
loop within the client's STOP_SLICE_S (2 s), even while a long-poll waits: the client asks a
poll given a stop event in slices of that length (service.client.LeaseClient.due). A service
that fails is retried by the client's retry policy; past it, the round waits `poll_s`, as long
as an idle long-poll would have, before the next asks (never a loop of asks in an outage).

The full plan (compactor.fleet.Fleet.tick) still runs on a slower grid, `every_s` (5 minutes by
default), in a thread of its own: it sees what the counts cannot (deletes per row, late data in
cold partitions, manifests, snapshots to expire, a table's first debt), reports each table's
measured debt with its partitions (the service's correction of its counts) and releases its
leases with the partitions it compacted too.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from compactor.claim import Held, take
from compactor.config import ConfigError, TableConfig
from compactor.plan.follow import DueCounts
from compactor.procedure_config import check_floors
from compactor.report import Outcome, RunReport, publish
from compactor.run import follow_table
from jobkit.spark import error_message
from service.wire.errors import LakelockError, OutcomeUnknown, ServerError, Unavailable

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from compactor.fleet import Fleet

__all__ = ["FOLLOW_POOL", "FollowStats", "Follower", "follow_session"]

log = logging.getLogger("compactor.follow")

FOLLOW_POOL = "lakelock-follow"
"""The FAIR scheduler pool of the follower's Spark jobs: a full plan's long rewrite does not
queue them (with `fleet.scheduler = "fair"`)."""

_POOL = "spark.scheduler.pool"
# the service's longest long-poll (LAKELOCK_MAX_WAIT_S)
MAX_POLL_S = 60.0


def follow_session(spark: SparkSession) -> SparkSession:
    """A session of its own for the follower's rewrites, on the same Spark context (its
    executors, its jars, its catalogs' settings): a due partition's rewrite reads a few files
    and joins its position deletes with its data files, so one shuffle partition, not the
    session's (4, or Spark's 200), each a task on two cores. The session's SQL settings are its
    own: the streaming job's MERGEs in the main session keep theirs. A clone of `spark`'s
    (as Iceberg's own rewriters clone theirs): its catalogs are the session's, also those
    a builder gave a Spark context that was running already, which a new session lacks."""
    from pyspark.sql import SparkSession

    session = SparkSession(spark.sparkContext, spark._jsparkSession.cloneSession())
    session.conf.set("spark.sql.shuffle.partitions", "1")
    return session


@dataclass
class FollowStats:
    """What the follower did so far: long-polls answered, of them with due partitions, runs by
    outcome, partitions reported compacted, tables left to other compactors, tables found
    compacted by another once claimed."""

    polls: int = 0
    woken: int = 0
    runs: dict[str, int] = field(default_factory=dict)
    compacted: int = 0
    left_to_others: int = 0
    # tables claimed with nothing due any more: another compactor compacted them meanwhile
    settled: int = 0
    poll_failures: int = 0

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


class Follower:
    """Follows the stream for the tables `fleet` names; see the module docstring.

    Follower(fleet)                                   # full plan every 5 min, polls of 30 s
    Follower(fleet, every_s=None, poll_s=5)           # follow only (tests)
    Follower(fleet, on_run=reports.append)            # hear every run, followed or planned
    """

    def __init__(
        self,
        fleet: Fleet,
        *,
        every_s: float | None = 300.0,
        poll_s: float = 30.0,
        limit: int = 100,
        max_cool_s: float = 60.0,
        on_run: Callable[[RunReport], None] | None = None,
        session: SparkSession | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if fleet.client is None:
            raise ValueError("a follower needs the service: the fleet has no client")
        if not 0 < poll_s <= MAX_POLL_S:
            raise ValueError(f"poll_s must be in (0, {MAX_POLL_S:g}], got {poll_s}")
        if every_s is not None and every_s <= 0:
            raise ValueError(f"every_s must be > 0, got {every_s}")
        self.fleet = fleet
        self.client = fleet.client
        self.every_s = every_s
        self.poll_s = poll_s
        self.limit = limit
        self.max_cool_s = max_cool_s
        self.on_run = on_run
        self.clock = clock
        self.session = session if session is not None else follow_session(fleet.spark)
        self.stats = FollowStats()
        # table -> (not before, the next cool-down's length)
        self._cooling: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()
        if on_run is not None:
            fleet.on_run = on_run

    # -- the loop -------------------------------------------------------------------------------

    def run(self, stop: threading.Event, *, rounds: int | None = None) -> FollowStats:
        """Follow until `stop` is set (or `rounds` rounds ran), with the full plan on its grid
        in a thread beside; what it did. Stopping waits for the runs in flight, a full plan's
        too (each releases its leases on every path).

        Raises:
            LakelockError: the service refused the long-poll (a token that may not, a table
                name it refuses): asking again would not help.
        """
        grid_stop = threading.Event()
        grid = None
        if self.every_s is not None:
            grid = threading.Thread(
                target=self._grid, args=(grid_stop,), name="lakelock-full-plan", daemon=True
            )
            grid.start()
        log.info(
            "following %s as %s: long-polls of %gs; full plan %s",
            ", ".join(self.fleet.selection),
            self.fleet.holder,
            self.poll_s,
            f"every {self.every_s:g}s" if self.every_s else "off",
        )
        try:
            done = 0
            while not stop.is_set() and (rounds is None or done < rounds):
                self.round(stop)
                done += 1
        finally:
            grid_stop.set()
            if grid is not None:
                # the tick in flight finishes its runs (their leases are released on every path)
                grid.join()
            log.info(json.dumps({"event": "compactor.follow", **self.stats.as_dict()}))
        return self.stats

    def _grid(self, stop: threading.Event) -> None:
        assert self.every_s is not None
        self.fleet.run(every_s=self.every_s, stop=stop)

    def round(self, stop: threading.Event) -> list[RunReport]:
        """One long-poll, and a run on each table it named that is not cooling down (up to
        `fleet.max_concurrent` at once); the reports of the runs."""
        due = self._poll(stop)
        if due is None:
            return []
        work = self._work(due)
        if not work:
            if due:
                # every due table cools down: asking again would be answered at once
                stop.wait(self._cooling_left())
            return []
        self.stats.woken += 1
        if len(work) == 1:
            return [r for r in (self._follow(*work[0], stop),) if r is not None]
        workers = min(self.fleet.config.fleet.max_concurrent, len(work))
        with ThreadPoolExecutor(workers, thread_name_prefix="lakelock-follow") as pool:
            found = list(pool.map(lambda item: self._follow(*item, stop), work))
        return [r for r in found if r is not None]

    # -- asking ---------------------------------------------------------------------------------

    def _poll(self, stop: threading.Event) -> list[Any] | None:
        """The due partitions the service answers within `poll_s` ([] when none came); None
        when `stop` was set meanwhile, or the service failed past the client's retries (then
        after `poll_s`, which a stop ends: the round an idle poll would have taken)."""
        try:
            due = self.client.due(
                list(self.fleet.selection),
                holder=self.fleet.holder,
                wait_s=self.poll_s,
                limit=self.limit,
                stop=stop,
            )
        except (Unavailable, OutcomeUnknown, ServerError) as error:
            # a refusal (a token that may not, a bad table name) does not heal by asking
            # again, and is raised; a failing service may
            if stop.is_set():
                return None  # the stop ended the client's retries: not a failure
            self.stats.poll_failures += 1
            log.warning(
                "cannot ask for due partitions (%s); asking again in %.0fs", error, self.poll_s
            )
            stop.wait(self.poll_s)
            return None
        if stop.is_set():
            return None
        self.stats.polls += 1
        return due

    def _work(self, due: Sequence[Any]) -> list[tuple[str, dict[str, DueCounts]]]:
        """The due partitions by table, tables not cooling down, most debt first (partitions
        within a table are ordered by follow_table)."""
        now = self.clock()
        by_table: dict[str, dict[str, DueCounts]] = {}
        for d in due:
            by_table.setdefault(d.table, {})[d.partition] = _counts(d)
        with self._lock:
            cooling = {t for t, (until, _) in self._cooling.items() if until > now}
        ready = {t: p for t, p in by_table.items() if t not in cooling}
        return sorted(
            ready.items(), key=lambda item: (-sum(sum(c[:2]) for c in item[1].values()), item[0])
        )

    # -- one table ------------------------------------------------------------------------------

    def _follow(
        self, table: str, due: Mapping[str, DueCounts], stop: threading.Event
    ) -> RunReport | None:
        """Claim `table`, compact its due partitions, release; the run's report, or None when
        the table was left (claimed elsewhere, its config refused, the service down). `stop`
        ends the run's waits for its leases."""
        config = self._config(table)
        if config is None:
            return None
        fleet = self.fleet
        try:
            got = take(
                self.client,
                table,
                holder=fleet.holder,
                ttl_s=fleet.config.fleet.claim_ttl.total_seconds(),
            )
        except LakelockError as exc:
            log.warning("%s: cannot claim to follow it: %s", table, exc)
            self._cool(table)
            return None
        if isinstance(got, Held):
            # another compactor (or this one's full plan) has it: not now
            log.info("%s: claimed by %s: not followed now", table, got.holder)
            self.stats.left_to_others += 1
            self._cool(table)
            return None
        try:
            # asked again now that the table is ours: another compactor may have compacted it
            # since the long-poll answered (as the fleet reads a summary again once claimed)
            due = self._still_due(table)
        except LakelockError as exc:
            got.release()
            log.warning("%s: cannot ask what is still due: %s", table, exc)
            self._cool(table)
            return None
        if not due:
            got.release()
            log.info("%s: nothing due any more once claimed: not followed", table)
            with self._lock:
                self.stats.settled += 1
            return None
        fair = fleet.config.fleet.scheduler == "fair"
        if fair:
            self.session.sparkContext.setLocalProperty(_POOL, FOLLOW_POOL)
        try:
            with got:
                report = follow_table(
                    self.session,
                    client=self.client,
                    config=config,
                    due=due,
                    holder=fleet.holder,
                    now=fleet.now,
                    before_step=got.check,
                    stop=stop,
                )
        finally:
            if fair:
                self.session.sparkContext.setLocalProperty(_POOL, None)
        publish(report, client=self.client)
        outcome = Outcome(report.outcome)
        with self._lock:
            self.stats.runs[str(outcome)] = self.stats.runs.get(str(outcome), 0) + 1
            self.stats.compacted += len(report.compacted)
        if outcome in (Outcome.COMPACTED, Outcome.NO_CHANGE) and report.compacted:
            with self._lock:
                self._cooling.pop(table, None)
        else:
            self._cool(table)
        if self.on_run is not None:
            self.on_run(report)
        return report

    def _still_due(self, table: str) -> dict[str, DueCounts]:
        """The due partitions of `table` now (no wait)."""
        found = self.client.due([table], holder=self.fleet.holder, wait_s=0, limit=self.limit)
        return {d.partition: _counts(d) for d in found if d.table.lower() == table.lower()}

    def _config(self, table: str) -> TableConfig | None:
        try:
            config = self.fleet.config.table(table)
            check_floors(config)
        except ConfigError as exc:
            log.error("%s: not followed: %s", table, exc)
            self._cool(table, self.max_cool_s)
            return None
        except Exception as exc:
            log.error("%s: not followed: %s", table, error_message(exc))
            self._cool(table, self.max_cool_s)
            return None
        return config

    def _cool(self, table: str, seconds: float | None = None) -> None:
        """Leave `table` alone for a while: 1 s, doubling with each run in a row that did not
        compact, up to `max_cool_s`."""
        with self._lock:
            _, length = self._cooling.get(table, (0.0, 1.0))
            length = seconds if seconds is not None else length
            self._cooling[table] = (self.clock() + length, min(length * 2, self.max_cool_s))

    def _cooling_left(self) -> float:
        now = self.clock()
        with self._lock:
            left = [until - now for until, _ in self._cooling.values() if until > now]
        return max(0.0, min(left, default=0.0))


def _counts(due: Any) -> DueCounts:
    """A due partition's counts as follow_table takes them."""
    return (int(due.data_files), int(due.delete_files), int(due.equality_delete_files))
