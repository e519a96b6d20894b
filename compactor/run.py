"""One maintenance run of one table: stats, plan, lease, procedures, report.

    report = run_table(spark, client=client, config=table_config, holder="compactor@host:42")
    report.outcome      # compacted | no_change | skipped | refused | unavailable | lease_lost
                        # | failed

The order, and why:

    stats, plan      before any lease: a healthy table is skipped without holding ingest; with
                     partition scope the service's state says which partitions live commit
                     leases hold (hot, see compactor.plan)
    groups           one after another, each under its own lease on its partitions (or the
                     whole table), released before the next group asks: a group skipped because
                     its partitions are held or do not drain leaves the next groups to try; a
                     failure or a lost lease ends the run; no partition group starts once
                     `plan.run_budget` is spent (`left_for_next_run`); each partition's hold
                     (its group's drain, whose intent refuses new commits, plus its lease) is in
                     `partition_hold_s`
    backpressure     under the caller's claim, the partitions the plan found past the hard
                     bound have their writers held until their group's lease is granted (asked
                     before the first group; a skipped group lets its own go at once, the rest
                     are let go after the groups; docs/jobs.md §3)
    lease            acquire_maintenance waits through the drain (compactor.lease)
    renewer          renews at ttl/3 from a daemon thread; when the lease is lost (refused
                     renew, revoke, or no renew within the deadline) it cancels our Spark jobs
    steps            each one only while `renewer.safe_to_commit()` and a renew right before
                     it succeeds (a revoke is seen then, not at the renewer's next tick);
                     the Spark jobs carry our job group and a job tag of the same name. Iceberg's
                     actions replace the job group with their own, the tag survives, so the
                     cancel goes by tag (cancelJobsWithTag) and by group (for our own jobs)
    release          in every path, also after a failure or a lost lease (idempotent)
    no lease         expire_snapshots, remove_orphan_files after the groups, without a lease
                     (why that is safe: compactor.plan), unless maintenance is switched off
    report           one JSON line and the service's run history (compactor.report)

Each lease is released with the partitions its group's steps rewrote (`compacted`, once every
step ran): the service zeroes their counts (docs/jobs.md §3). `follow_table` is the follower's
run: the partitions the service says are due, grouped (compactor.plan.follow) and leased as
above, without stats or a full plan.

This module is the run; its parts are compactor.groups (each group under its lease: lease,
renewer, steps, release), compactor.backpressure, and compactor.unleased (the steps without a
lease).

What remains: a cancel that lands while an action is already inside its Iceberg commit cannot
stop that commit. The run then reports `lease_lost` with the step's output, and Iceberg's own
validation stays the last line (a conflicting ingest commit fails, it is not corrupted). For
the same reason `partial-progress.enabled` is off by default: with it, file groups finished
before the cancel are still committed by the action.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from compactor.backpressure import Backpressure
from compactor.config import TableConfig
from compactor.groups import no_group_hook, run_groups, settle
from compactor.plan import Mode, Plan, Step, plan
from compactor.plan.follow import DueCounts, follow_plan
from compactor.procedure_config import RetentionRefused
from compactor.report import Outcome, RunReport, changed_anything
from compactor.stats import TableStats, collect_stats
from compactor.unleased import unleased
from jobkit.partition import read_spec
from jobkit.spark import error_message
from service.client import Lease, LeaseClient, LeaseLost
from service.wire.errors import LakelockError, NotFound, OutcomeUnknown, ServerError, Unavailable
from service.wire.holders import run_holder

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["DueCounts", "LeaseLost", "default_holder", "follow_table", "run_table", "utcnow"]

log = logging.getLogger(__name__)


def utcnow() -> datetime:
    return datetime.now(UTC)


def default_holder() -> str:
    """`compactor@<host>:<pid>`: who holds the lease, as the service's events show it."""
    return f"compactor@{socket.gethostname()}:{os.getpid()}"


def run_table(
    spark: SparkSession,
    *,
    client: LeaseClient,
    config: TableConfig,
    holder: str | None = None,
    run_uid: str | None = None,
    now: Callable[[], datetime] = utcnow,
    clock: Callable[[], float] = time.monotonic,
    before_step: Callable[[Step], None] | None = None,
    on_stats: Callable[[TableStats, Plan | None], None] | None = None,
    claim: Lease | None = None,
    stop: threading.Event | None = None,
) -> RunReport:
    """Run maintenance on one table once; the report says how it ended.

    Every failure of a step, of planning or of the service ends in the report (outcome and
    `error`), not in an exception; the lease, when taken, is released on every path.
    `before_step` is called with each step right before it runs (progress, tests; raising
    LeaseLost there stops the run before that step). `on_stats` hears the stats the run read
    and what it made of them: (stats, plan) once planned, (stats after the run, None) at the
    end (compactor.fleet keeps them to rank the table at its next tick). `claim` is the
    caller's claim on the table, which a catalog front takes as the right to remove snapshots
    (without one, a run in a REST catalog claims the table for those steps itself). `stop`
    (the compactor is stopping) ends a wait for a lease and leaves the groups not begun for
    the next run (compactor.groups).

    Raises:
        BaseException other than Exception (KeyboardInterrupt, SystemExit), after releasing.
    """
    return _reported(
        config,
        holder=holder,
        run_uid=run_uid,
        now=now,
        clock=clock,
        what="run",
        body=lambda report: _run(
            spark,
            client,
            config,
            report,
            now=now,
            clock=clock,
            before_step=before_step,
            on_stats=on_stats or _ignore,
            claim=claim,
            stop=stop,
        ),
    )


def _reported(
    config: TableConfig,
    *,
    holder: str | None,
    run_uid: str | None,
    now: Callable[[], datetime],
    clock: Callable[[], float],
    what: str,
    body: Callable[[RunReport], None],
    mode: str | None = None,
) -> RunReport:
    """A new run's report, filled by `body`: a fault outside the steps (a bug, Spark gone)
    ends as a failed run that says why, never as an exception; its duration on every path."""
    run_uid = run_uid or uuid.uuid4().hex[:12]
    report = RunReport(
        table=config.name,
        run_uid=run_uid,
        holder=run_holder(holder or default_holder(), run_uid),
        started_at=now().isoformat(),
        mode=mode,
    )
    started = clock()
    try:
        body(report)
    except Exception as exc:
        log.exception("%s %s on %s failed", what, run_uid, config.name)
        report.outcome = Outcome.FAILED
        report.error = report.error or error_message(exc)
    finally:
        report.duration_s = clock() - started
    return report


def _run(
    spark: SparkSession,
    client: LeaseClient,
    config: TableConfig,
    report: RunReport,
    *,
    now: Callable[[], datetime],
    clock: Callable[[], float],
    before_step: Callable[[Step], None] | None,
    on_stats: Callable[[TableStats, Plan | None], None],
    claim: Lease | None,
    stop: threading.Event | None,
) -> None:
    budget_from = clock()
    stats = _stats(spark, config, report)
    if stats is None:
        return
    report.before = stats.totals().as_dict()
    report.snapshot_before = stats.current_snapshot_id
    at = now()
    try:
        the_plan = plan(stats, config, at)
    except RetentionRefused as exc:
        log.error("%s", exc)
        report.outcome, report.error = Outcome.REFUSED, str(exc)
        return
    state: dict[str, Any] = {}
    expires = any(step.procedure == "expire_snapshots" for step in the_plan.steps)
    if the_plan.run and (config.lease.scope == "partitions" or expires):
        # which partitions live commit leases hold (hot), where live readers stand (expiry
        # keeps their snapshots), and the operator's switch, which the steps without a lease
        # respect too; asked only now, so a healthy table needs no service
        found = _state(client, config, report)
        if found is None:
            return
        state = found
        the_plan = plan(
            stats,
            config,
            at,
            leased=_leased_partitions(state),
            readers=[hold["snapshot_id"] for hold in state.get("readers") or ()],
        )
    report.mode, report.where = str(the_plan.mode), the_plan.where
    report.lease_scope = "table" if the_plan.whole_table else "partitions"
    report.whole_table = the_plan.whole_table
    report.plan_reasons = list(the_plan.reasons)
    on_stats(stats, the_plan)
    if not the_plan.run:
        log.info("%s: skipped, below thresholds: %s", config.name, "; ".join(the_plan.reasons))
        report.outcome, report.reason = Outcome.SKIPPED, "below_thresholds"
        return

    pressure = Backpressure(client, config, report, the_plan, claim, clock)
    try:
        done = run_groups(
            spark,
            client,
            config,
            the_plan,
            report,
            clock=clock,
            before_step=before_step,
            budget_from=budget_from,
            before_group=pressure.hold,
            skipped=pressure.skipped,
            stop=stop,
        )
    finally:
        pressure.let_go()
    if done:
        done = unleased(
            spark,
            client,
            config,
            the_plan,
            report,
            state,
            claim=claim,
            before_step=before_step,
            stop=stop,
        )
    if done:
        settle(report)
    after = _stats(spark, config, report, after=True)
    if after is not None:
        report.after = after.totals().as_dict()
        report.snapshot_after = after.current_snapshot_id
        on_stats(after, None)
    if report.outcome is Outcome.COMPACTED and not changed_anything(report):
        # every step ran and changed nothing: the lease held ingest for nothing; say so
        log.warning("%s: every step changed nothing (plan: %s)", config.name, the_plan.reasons)
        report.outcome = Outcome.NO_CHANGE


def _ignore(stats: TableStats, the_plan: Plan | None) -> None:
    pass


def follow_table(
    spark: SparkSession,
    *,
    client: LeaseClient,
    config: TableConfig,
    due: Mapping[str, DueCounts],
    holder: str | None = None,
    run_uid: str | None = None,
    now: Callable[[], datetime] = utcnow,
    clock: Callable[[], float] = time.monotonic,
    before_step: Callable[[Step], None] | None = None,
    stop: threading.Event | None = None,
) -> RunReport:
    """Compact the partitions the service says are due, at once, without planning the table
    (compactor.follow): `due` maps each partition's name to the (data files, delete files,
    equality delete files of them; the last may be left out) the service counted since its
    last compaction. Most debt first, `follow.partitions_per_group`
    partitions under one maintenance lease on exactly them (the whole table with
    `lease.scope = "table"`), each group's steps sized to the stream
    (compactor.plan.follow_steps), limited to its partitions by the filter a full plan's group
    gets; each release reports the group's partitions compacted once its steps ran. A name that
    does not read back as a partition of the current spec is left to the full plan (the reasons
    say which). No stats are read before or after: the report's `before` and `after` stay
    empty, and the service's counts are the debt.

    Every failure ends in the report, as in run_table; each lease is released on every path.

    Raises:
        BaseException other than Exception (KeyboardInterrupt, SystemExit), after releasing.
    """
    return _reported(
        config,
        holder=holder,
        run_uid=run_uid,
        now=now,
        clock=clock,
        what="follow run",
        mode=str(Mode.FOLLOW),
        body=lambda report: _follow(
            spark, client, config, due, report, clock=clock, before_step=before_step, stop=stop
        ),
    )


def _follow(
    spark: SparkSession,
    client: LeaseClient,
    config: TableConfig,
    due: Mapping[str, DueCounts],
    report: RunReport,
    *,
    clock: Callable[[], float],
    before_step: Callable[[Step], None] | None,
    stop: threading.Event | None,
) -> None:
    budget_from = clock()
    # Spark resolves catalogs through the JVM thread's active session: in a thread of the
    # follower's, another session's, or none, unless set here
    spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)
    # the spec from the table's metadata over py4j: no Spark job before the lease
    the_plan = follow_plan(config, read_spec(spark, config.name), due)
    report.plan_reasons = list(the_plan.reasons)
    report.lease_scope = "table" if the_plan.whole_table else "partitions"
    report.whole_table = the_plan.whole_table
    if not the_plan.run:
        report.outcome, report.reason = Outcome.SKIPPED, "nothing_to_follow"
        return
    done = run_groups(
        spark,
        client,
        config,
        the_plan,
        report,
        clock=clock,
        before_step=before_step,
        budget_from=budget_from,
        before_group=no_group_hook,
        skipped=no_group_hook,
        stop=stop,
    )
    if done:
        settle(report)
    if report.outcome is Outcome.COMPACTED and not changed_anything(report):
        report.outcome = Outcome.NO_CHANGE


def _state(client: LeaseClient, config: TableConfig, report: RunReport) -> dict[str, Any] | None:
    """The table's state on the service ({} for a table it does not know yet), or None when
    it cannot be read (the report then says why)."""
    try:
        return client.state(config.name)
    except NotFound:
        return {}
    except (Unavailable, OutcomeUnknown, ServerError) as exc:
        log.error("%s: lakelock service unavailable, not compacting: %s", config.name, exc)
        report.outcome, report.error = Outcome.UNAVAILABLE, f"{exc.slug}: {exc}"
        return None
    except LakelockError as exc:
        log.error("%s: cannot read the table's state: %s", config.name, exc)
        report.outcome, report.error = Outcome.FAILED, f"{exc.slug}: {exc}"
        return None


def _leased_partitions(state: dict[str, Any]) -> set[str]:
    """The partitions live scoped commit leases cover. A whole-table commit lease names none:
    it is a writer that could not say, and would make every partition hot."""
    return {
        name for lease in state.get("commit_leases") or () for name in lease.get("partitions") or ()
    }


def _stats(
    spark: SparkSession, config: TableConfig, report: RunReport, *, after: bool = False
) -> TableStats | None:
    try:
        return collect_stats(spark, table=config.name, small_file_bytes=config.small_file_bytes)
    except Exception as exc:
        message = error_message(exc)
        if after:
            # the run itself is over; its outcome stands, the numbers after are missing
            log.error("%s: could not read the table after the run: %s", config.name, message)
            return None
        log.error("%s: could not read the table's metadata: %s", config.name, message)
        report.outcome, report.error = Outcome.FAILED, message
        return None
