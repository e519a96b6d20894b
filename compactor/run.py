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
run: the partitions the service says are due, grouped and leased as above, without stats or a
plan.

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
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from compactor.claim import Held, take
from compactor.config import RetentionRefused, TableConfig
from compactor.lease import DrainTimeout, acquire_maintenance
from compactor.plan import Group, Mode, Plan, Step, follow_steps, partition_mapping, plan
from compactor.procedure import ProcedureFailed, run_step
from compactor.report import Outcome, RunReport, changed_anything, step_changed
from compactor.stats import TableStats, collect_stats
from jobkit.partition import read_spec
from jobkit.spark import SparkJobGroups, error_message, rest_catalog
from service.client import Lease, LeaseClient, LeaseLost, Renewer
from service.wire.errors import (
    InvalidRequest,
    LakelockError,
    LeaseExpired,
    MaintenanceHeld,
    MaintenanceOff,
    NotFound,
    NotOwner,
    OutcomeUnknown,
    ServerError,
    StaleToken,
    Unavailable,
)
from service.wire.holders import run_holder

DueCounts = tuple[int, int] | tuple[int, int, int]
"""A due partition's (data files, delete files[, equality delete files of them]), as the
service counted them (compactor.follow)."""

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
) -> RunReport:
    """Run maintenance on one table once; the report says how it ended.

    Every failure of a step, of planning or of the service ends in the report (outcome and
    `error`), not in an exception; the lease, when taken, is released on every path.
    `before_step` is called with each step right before it runs (progress, tests; raising
    LeaseLost there stops the run before that step). `on_stats` hears the stats the run read
    and what it made of them: (stats, plan) once planned, (stats after the run, None) at the
    end (compactor.fleet keeps them to rank the table at its next tick). `claim` is the
    caller's claim on the table, which a catalog front takes as the right to remove snapshots
    (without one, a run in a REST catalog claims the table for those steps itself).

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

    pressure = _Backpressure(client, config, report, the_plan, claim, clock)
    try:
        done = _groups(
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
        )
    finally:
        pressure.let_go()
    if done and the_plan.unleased:
        done = _unleased(
            spark, client, config, the_plan, report, state, claim=claim, before_step=before_step
        )
    if done:
        _settle(report)
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
            spark, client, config, due, report, clock=clock, before_step=before_step
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
) -> None:
    budget_from = clock()
    # Spark resolves catalogs through the JVM thread's active session: in a thread of the
    # follower's, another session's, or none, unless set here
    spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)
    # the spec from the table's metadata over py4j: no Spark job before the lease
    spec = read_spec(spark, config.name)
    named: list[tuple[str, dict[str, Any]]] = []
    # (data, delete, equality delete files): a count of equality deletes may be left out
    counted = {name: (*files[:2], sum(files[2:])) for name, files in due.items()}
    for name in sorted(counted, key=lambda n: (-sum(counted[n][:2]), n)):
        data, deletes, equality = counted[name]
        try:
            named.append((name, partition_mapping(spec, name)))
        except ValueError as exc:
            log.warning("%s: %s left to the full plan: %s", config.name, name, exc)
            report.plan_reasons.append(f"{name}: left to the full plan ({exc})")
            continue
        of_them = f" ({equality} by equality)" if equality else ""
        report.plan_reasons.append(
            f"{name}: due, {data} data and {deletes} delete files{of_them} added since its last "
            "compaction (the service's counts)"
        )
    whole = config.lease.scope == "table"
    report.lease_scope = "table" if whole else "partitions"
    report.whole_table = "lease.scope is table" if whole else None
    size = config.follow.partitions_per_group
    groups = []
    for i in range(0, len(named), size):
        chunk = named[i : i + size]
        names = tuple(name for name, _ in chunk)
        steps = follow_steps(
            config,
            names,
            [values for _, values in chunk],
            deletes=any(counted[name][1] for name in names),
            equality=any(counted[name][2] for name in names),
        )
        if steps:
            groups.append(
                Group(None if whole else names, steps, hot=True, covers=names if whole else ())
            )
    if not groups:
        report.outcome, report.reason = Outcome.SKIPPED, "nothing_to_follow"
        return
    the_plan = Plan(
        config.name,
        run=True,
        mode=Mode.FOLLOW,
        reasons=tuple(report.plan_reasons),
        groups=tuple(groups),
        whole_table=report.whole_table,
    )
    done = _groups(
        spark,
        client,
        config,
        the_plan,
        report,
        clock=clock,
        before_step=before_step,
        budget_from=budget_from,
        before_group=_no_group_hook,
        skipped=_no_group_hook,
    )
    if done:
        _settle(report)
    if report.outcome is Outcome.COMPACTED and not changed_anything(report):
        report.outcome = Outcome.NO_CHANGE


def _no_group_hook(group: Group) -> None:
    pass


class _Backpressure:
    """The run's backpressure (docs/jobs.md §3): the partitions its plan found past the hard
    bound, which its groups rewrite, have their writers held from before the first group until
    the group that compacts each one is granted its lease; a group that is skipped lets its
    partitions go at once, what is left is let go when the groups end. The service keeps them
    held as long as the claim, so one ask suffices. Only under a claim (a live compactor), with
    `plan.backpressure`, and with partition scope (a whole-table lease holds every writer
    anyway); a service that refuses it is logged, the run goes on. The seconds each partition
    was held this way, until its group began, are in `partition_hold_s` beside its group's."""

    def __init__(
        self,
        client: LeaseClient,
        config: TableConfig,
        report: RunReport,
        the_plan: Plan,
        claim: Lease | None,
        clock: Callable[[], float],
    ) -> None:
        self.client, self.config, self.report, self.claim = client, config, report, claim
        self.clock = clock
        wanted = claim is not None and config.plan.backpressure and the_plan.whole_table is None
        self.over = dict(the_plan.over_bound) if wanted else {}
        self.asked = False
        self.unsure = False  # asked, and the answer was lost: let go in any case
        self.since = 0.0
        self.waiting: set[str] = set()  # held, their group not begun yet

    def hold(self, group: Group) -> None:
        """Before each group: the first time, ask the service to hold the partitions; then
        count each held partition's wait until its group begins."""
        if not self.asked and self.over and self.claim is not None:
            self._ask()
        self._count(set(group.partitions or ()) & self.waiting)

    def _ask(self) -> None:
        assert self.claim is not None
        self.asked = True
        reason = "; ".join(f"{name}: {why}" for name, why in self.over.items())
        try:
            got = self.client.hold_back(
                self.config.name,
                claim_id=self.claim.lease_id,
                holder=self.report.holder,
                partitions=list(self.over),
                reason=reason[:1024],
            )
        except LakelockError as exc:
            self.unsure = True
            log.warning("%s: backpressure not applied: %s", self.config.name, exc)
            return
        if got.off is not None:
            log.info("%s: %s is switched off: writers not held", self.config.name, got.off)
            return
        self.since = self.clock()
        self.report.backpressure = list(got.partitions)
        self.waiting = set(got.partitions)
        log.warning(
            "%s: backpressure: holding the writers of %s until compacted (%s)",
            self.config.name,
            ", ".join(got.partitions),
            reason,
        )

    def _count(self, names: set[str]) -> None:
        _add_hold(self.report, names, self.clock() - self.since)
        self.waiting -= names

    def skipped(self, group: Group) -> None:
        """A group that compacted nothing lets its held partitions go now, not at the run's
        end."""
        names = _backpressured(self.report, group)
        if names:
            self._withdraw(sorted(names))

    def let_go(self) -> None:
        """After the groups: what is still held (groups left for the next run, a failure)."""
        self._count(set(self.waiting))
        if self.report.backpressure or self.unsure:
            self._withdraw(None)

    def _withdraw(self, partitions: list[str] | None) -> None:
        try:
            self.client.let_go(self.config.name, holder=self.report.holder, partitions=partitions)
        except LakelockError as exc:
            # they end with the claim at the latest
            log.warning("%s: backpressure not let go: %s", self.config.name, exc)


def _settle(report: RunReport) -> None:
    """The outcome of a run whose groups all compacted or were skipped: compacted when any
    step ran, else the first group's reason for skipping (held, draining) stands."""
    ran = any(g["outcome"] != Outcome.SKIPPED for g in report.groups) or any(
        "lease_id" not in s for s in report.steps
    )
    if ran:
        report.outcome, report.reason, report.error = Outcome.COMPACTED, None, None
    else:
        first = report.groups[0]
        report.outcome, report.reason = Outcome.SKIPPED, first["reason"]
        report.error = first.get("error")


# a group skipped for these reasons leaves the next groups to try: their partitions may be free
_NEXT_GROUP = frozenset(("maintenance_held", "drain_timeout"))


def _groups(
    spark: SparkSession,
    client: LeaseClient,
    config: TableConfig,
    the_plan: Plan,
    report: RunReport,
    *,
    clock: Callable[[], float],
    before_step: Callable[[Step], None] | None,
    budget_from: float,
    before_group: Callable[[Group], None],
    skipped: Callable[[Group], None],
) -> bool:
    """Each group of the plan under its own lease, released before the next is asked for;
    True when the run may go on (every group compacted, was skipped, or was left for the next
    run because `plan.run_budget` ran out since `budget_from`)."""
    try:
        for i, group in enumerate(the_plan.groups):
            if _waits_for_next_run(config, report, the_plan.groups, i, clock() - budget_from):
                continue
            before_group(group)
            entry: dict[str, Any] = {
                "partitions": None if group.partitions is None else list(group.partitions),
                "hot": group.hot,
            }
            report.groups.append(entry)
            lease = _lease(client, config, report, group=group, number=i + 1, clock=clock)
            entry["lease_wait_s"] = waited = report.lease_wait_s or 0.0
            if lease is None:
                if report.reason == "drain_timeout":
                    _held(report, group, waited)  # its intent refused their commits meanwhile
                else:  # only those backpressure held were held through the wait
                    _add_hold(report, _backpressured(report, group), waited)
                skipped(group)
                entry.update(outcome=report.outcome, reason=report.reason, error=report.error)
                if report.outcome is Outcome.SKIPPED and report.reason in _NEXT_GROUP:
                    continue
                return False
            entry.update(lease_id=lease.lease_id, token=lease.token)
            if report.lease_id is None:
                report.lease_id, report.token = lease.lease_id, lease.token
            _under_lease(
                spark,
                client,
                config,
                group,
                str(the_plan.mode),
                lease,
                report,
                entry,
                waited=waited,
                clock=clock,
                before_step=before_step,
            )
            if report.outcome is not Outcome.COMPACTED:
                return False
        return True
    finally:
        # the report's wait is the run's: the sum over its groups
        report.lease_wait_s = sum(g.get("lease_wait_s", 0.0) for g in report.groups)


def _under_lease(
    spark: SparkSession,
    client: LeaseClient,
    config: TableConfig,
    group: Group,
    mode: str,
    lease: Lease,
    report: RunReport,
    entry: dict[str, Any],
    *,
    waited: float,
    clock: Callable[[], float],
    before_step: Callable[[Step], None] | None,
) -> None:
    """The steps of `group` under its `lease`, then the release, in every path: with the
    group's partitions compacted when every step ran (docs/jobs.md §3; else their counts on
    the service stand). `entry` is the group's line in the report."""
    held_at = clock()
    first = len(report.steps)
    ran = False
    try:
        ran = _steps(
            spark, client, config, group.steps, mode, lease, report, before_step=before_step
        )
    finally:
        compacted = group.rewrites if ran else ()
        if _release(client, lease, compacted=compacted):
            report.compacted += [n for n in compacted if n not in report.compacted]
        held = clock() - held_at
        report.hold_s = (report.hold_s or 0.0) + held
        entry["held_s"] = round(held, 3)
        _held(report, group, waited + held)
    steps = report.steps[first:]
    for step in steps:
        step["lease_id"] = lease.lease_id
    entry["steps"] = [{"procedure": s["procedure"], "outcome": _step_outcome(s)} for s in steps]
    outcome = report.outcome
    if outcome is Outcome.COMPACTED and not any(step_changed(s) for s in steps):
        outcome = Outcome.NO_CHANGE
    entry.update(outcome=outcome, error=report.error)


def _waits_for_next_run(
    config: TableConfig, report: RunReport, groups: Sequence[Group], i: int, spent: float
) -> bool:
    """True when `groups[i]` is left for the next run: a partition group once `spent` seconds
    reach `plan.run_budget` (the first group always runs). The manifests' rewrite, short and
    last, runs whatever the budget: else a run that always spends it would never rewrite them."""
    if _manifests_only(groups[i]):
        return False
    if report.left_for_next_run:
        return True  # listed when the budget ran out
    budget = config.plan.run_budget.total_seconds()
    if not (i and budget and spent >= budget):
        return False
    left = [g for g in groups[i:] if not _manifests_only(g)]
    report.left_for_next_run = [None if g.partitions is None else list(g.partitions) for g in left]
    log.info(
        "%s: run budget of %.0fs spent: %d groups left for the next run",
        config.name,
        budget,
        len(left),
    )
    return True


def _manifests_only(group: Group) -> bool:
    return group.partitions is None and all(
        step.procedure == "rewrite_manifests" for step in group.steps
    )


def _held(report: RunReport, group: Group, seconds: float) -> None:
    """Add to each of the group's partitions ("*": the whole table) the seconds its writers
    were held: the drain (the group's intent refuses new commits from its first ask) and the
    lease."""
    _add_hold(report, group.partitions or ("*",), seconds)


def _backpressured(report: RunReport, group: Group) -> set[str]:
    """The group's partitions whose writers the run's backpressure holds."""
    return set(group.partitions or ()) & set(report.backpressure)


def _add_hold(report: RunReport, names: Iterable[str], seconds: float) -> None:
    for name in names:
        report.partition_hold_s[name] = report.partition_hold_s.get(name, 0.0) + seconds


def _unleased(
    spark: SparkSession,
    client: LeaseClient,
    config: TableConfig,
    the_plan: Plan,
    report: RunReport,
    state: dict[str, Any],
    *,
    claim: Lease | None,
    before_step: Callable[[Step], None] | None,
) -> bool:
    """The steps that hold no writer (see compactor.plan), run without a lease; an operator's
    `maintenance: disabled` still stops them. True unless one failed."""
    if (state.get("switch") or {}).get("maintenance") == "disabled":
        log.warning(
            "%s: maintenance is disabled: no %s",
            config.name,
            "/".join(s.procedure for s in the_plan.unleased),
        )
        report.outcome, report.reason = Outcome.SKIPPED, "maintenance_off"
        return False
    properties = {"lakelock.run-uid": report.run_uid, "lakelock.mode": str(the_plan.mode)}
    if rest_catalog(spark, config.name) is None:
        return _unfenced(spark, config, the_plan, report, properties, before_step=before_step)
    # a catalog front fences snapshot removal by the table's claim (docs/catalog-front.md): the
    # fleet's own, else one taken for these steps (it holds no writer)
    if claim is not None:
        properties["lakelock.lease-id"] = claim.lease_id
        return _unfenced(spark, config, the_plan, report, properties, before_step=before_step)
    got = take(client, config.name, holder=report.holder, ttl_s=_OWN_CLAIM_TTL_S)
    if isinstance(got, Held):
        log.info(
            "%s: claimed by %s: no %s",
            config.name,
            got.holder,
            "/".join(s.procedure for s in the_plan.unleased),
        )
        return True
    with got:
        properties["lakelock.lease-id"] = got.lease.lease_id
        return _unfenced(spark, config, the_plan, report, properties, before_step=before_step)


# the claim a run without one takes for its steps without a lease, renewed while they run
_OWN_CLAIM_TTL_S = 60.0


def _unfenced(
    spark: SparkSession,
    config: TableConfig,
    the_plan: Plan,
    report: RunReport,
    properties: dict[str, str],
    *,
    before_step: Callable[[Step], None] | None,
) -> bool:
    for step in the_plan.unleased:
        if before_step is not None:
            before_step(step)
        started = time.monotonic()
        try:
            output = run_step(spark, table=config.name, step=step, properties=properties)
        except ProcedureFailed as exc:
            log.error("%s: %s", config.name, exc)
            report.outcome, report.error = Outcome.FAILED, exc.message
            report.steps.append({**step.as_dict(), "error": exc.message})
            return False
        report.steps.append(
            {**step.as_dict(), "output": output, "duration_s": round(time.monotonic() - started, 3)}
        )
        log.info("%s: %s done without a lease: %s", config.name, step.procedure, output)
    return True


def _step_outcome(step: dict[str, Any]) -> str:
    if "error" in step:
        return "failed"
    return "changed" if step_changed(step) else "no_change"


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


def _lease(
    client: LeaseClient,
    config: TableConfig,
    report: RunReport,
    *,
    group: Group,
    number: int,
    clock: Callable[[], float],
) -> Lease | None:
    """The maintenance lease for `group`, or None with the report saying why; `lease_wait_s`
    is set to the wait either way."""
    asked_at = clock()
    report.lease_wait_s = None
    try:
        lease, waited = acquire_maintenance(
            client,
            table=config.name,
            holder=report.holder,
            ttl_s=config.lease.ttl.total_seconds(),
            max_wait_s=config.lease.max_wait.total_seconds(),
            # one request id a group: the idempotent retry of one ask, never of another group's
            request_id=f"compactor-{report.run_uid}-{number}",
            partitions=group.partitions,
            clock=clock,
        )
    except (MaintenanceHeld, MaintenanceOff, DrainTimeout) as exc:
        reason = {
            MaintenanceHeld: "maintenance_held",
            MaintenanceOff: "maintenance_off",
            DrainTimeout: "drain_timeout",
        }[type(exc)]
        log.warning("%s: skipped (%s): %s", config.name, reason, exc)
        report.outcome, report.reason, report.error = Outcome.SKIPPED, reason, str(exc)
        report.lease_wait_s = clock() - asked_at
        return None
    except (Unavailable, OutcomeUnknown, ServerError) as exc:
        # no lease we can trust: do not compact (one granted unseen expires after its TTL)
        log.error("%s: lakelock service unavailable, not compacting: %s", config.name, exc)
        report.outcome, report.error = Outcome.UNAVAILABLE, f"{exc.slug}: {exc}"
        report.lease_wait_s = clock() - asked_at
        return None
    except LakelockError as exc:
        log.error("%s: maintenance lease refused: %s", config.name, exc)
        report.outcome, report.error = Outcome.FAILED, f"{exc.slug}: {exc}"
        report.lease_wait_s = clock() - asked_at
        return None
    report.lease_wait_s = waited
    return lease


def _steps(
    spark: SparkSession,
    client: LeaseClient,
    config: TableConfig,
    steps: Sequence[Step],
    mode: str,
    lease: Lease,
    report: RunReport,
    *,
    before_step: Callable[[Step], None] | None,
) -> bool:
    """`steps` under `lease`; True, and report.outcome COMPACTED, when all ran; else False and
    the report says why not."""
    groups = SparkJobGroups(spark.sparkContext)
    group = f"lakelock-compactor-{report.run_uid}"

    def cancel(reason: str) -> None:
        log.error("%s: lease lost (%s): cancelling Spark jobs of %s", config.name, reason, group)
        groups.cancel(group)

    deadline = config.lease.renew_deadline
    renewer = Renewer(
        client,
        lease,
        renew_deadline_s=None if deadline is None else deadline.total_seconds(),
        on_lost=cancel,
    )
    properties = {
        "lakelock.token": str(lease.token),
        "lakelock.lease-id": lease.lease_id,
        "lakelock.run-uid": report.run_uid,
        "lakelock.mode": mode,
    }
    # Iceberg's actions resolve helper catalogs through the JVM thread's active session, which
    # a thread other than the one that built the session does not have
    spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)
    # job group and tag are thread-local: set here, in the thread that runs the actions
    groups.set(group, f"lakelock compaction of {config.name}")
    try:
        for step in steps:
            if before_step is not None:
                before_step(step)
            _check(client, renewer, before=step.procedure)
            step_started = time.monotonic()
            try:
                output = run_step(spark, table=config.name, step=step, properties=properties)
            except ProcedureFailed as exc:
                if renewer.lost.is_set():
                    report.outcome = Outcome.LEASE_LOST
                    report.error = f"lease lost ({renewer.lost_reason}); {exc}"
                    log.error("%s: %s", config.name, report.error)
                    return False
                log.error("%s: %s", config.name, exc)
                report.outcome, report.error = Outcome.FAILED, exc.message
                report.steps.append({**step.as_dict(), "error": exc.message})
                return False
            entry = {
                **step.as_dict(),
                "output": output,
                "duration_s": round(time.monotonic() - step_started, 3),
            }
            report.steps.append(entry)
            log.info("%s: %s done: %s", config.name, step.procedure, output)
            if renewer.lost.is_set():
                # the action finished (and may have committed) after the lease was lost
                entry["after_lease_lost"] = True
                raise LeaseLost(renewer.lost_reason or "lost")
        report.outcome = Outcome.COMPACTED
        return True
    except LeaseLost as exc:
        report.outcome = Outcome.LEASE_LOST
        report.error = f"lease lost: {exc}"
        log.error("%s: %s; no further step runs", config.name, report.error)
        return False
    finally:
        renewer.stop()
        groups.clear()


def _check(client: LeaseClient, renewer: Renewer, *, before: str) -> None:
    """Raise LeaseLost unless the lease is still ours, asking the service itself: the renewer
    learns of a revoke only at its next renew, up to a third of the TTL later."""
    if not renewer.safe_to_commit():
        reason = renewer.lost_reason or "no renew within the renew deadline"
        raise LeaseLost(f"{reason} (before {before})")
    try:
        client.renew(renewer.lease)
    except (NotFound, LeaseExpired, NotOwner, StaleToken) as exc:
        raise LeaseLost(f"{exc.slug}: {exc.detail} (before {before})") from exc
    except (Unavailable, OutcomeUnknown, ServerError) as exc:
        # not a verdict: the renewer's deadline decides, as for any other failed renew
        log.warning("confirming lease %s before %s failed: %s", renewer.lease.lease_id, before, exc)


def _release(client: LeaseClient, lease: Lease, *, compacted: Sequence[str] = ()) -> bool:
    """Release `lease`, reporting `compacted` (the partitions its steps rewrote) to the
    service; True when the service took them. A service that refuses them gets a plain
    release: the lease must never outlive its steps because of what it reports."""
    try:
        if compacted:
            try:
                client.release(lease, compacted=list(compacted))
            except InvalidRequest as exc:
                log.warning(
                    "the service refused the partitions compacted under lease %s (%s); "
                    "releasing without them",
                    lease.lease_id,
                    exc,
                )
                client.release(lease)
                return False
        else:
            client.release(lease)
    except LakelockError as exc:
        # a revoked or expired lease may refuse the release; it is not live either way, and an
        # unreachable service lets it expire after its TTL
        log.warning("release of lease %s failed: %s", lease.lease_id, exc)
        return False
    log.info(
        "released lease %s on %s%s",
        lease.lease_id,
        lease.table,
        f" ({len(compacted)} partitions compacted)" if compacted else "",
    )
    return bool(compacted)
