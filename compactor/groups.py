"""A plan's groups, each under a maintenance lease of its own (docs/jobs.md §3), released
before the next group asks.

    run_groups(spark, client, config, plan, report, clock, before_step, budget_from,
               before_group, skipped) -> bool     True when the run may go on
    settle(report)                                the outcome of a run whose groups all ended
    stopped_before(config, report, left)          a stop before `left`: left for the next run
    no_group_hook(group)                          a `before_group`/`skipped` that does nothing

Under each lease: the lease asked for (compactor.lease waits through the drain), a renewer that
cancels the run's Spark jobs when the lease is lost, each step only after a renew confirms the
lease, and the release on every path with the partitions the steps rewrote (`compacted`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from compactor.config import TableConfig
from compactor.lease import DrainTimeout, acquire_maintenance
from compactor.plan import Group, Plan, Step
from compactor.procedure import ProcedureFailed, run_step
from compactor.report import Outcome, RunReport, step_changed
from jobkit.spark import SparkJobGroups
from service.client import Lease, LeaseClient, LeaseLost, Renewer, Stopped
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

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["no_group_hook", "run_groups", "settle", "stopped_before"]

log = logging.getLogger(__name__)


def no_group_hook(group: Group) -> None:
    pass


def settle(report: RunReport) -> None:
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


def run_groups(
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
    stop: threading.Event | None = None,
) -> bool:
    """Each group of the plan under its own lease, released before the next is asked for;
    True when the run may go on (every group compacted, was skipped, or was left for the next
    run because `plan.run_budget` ran out since `budget_from`, or `stop` was set: a stop also
    ends a group's wait for its lease)."""
    try:
        for i, group in enumerate(the_plan.groups):
            if stop is not None and stop.is_set():
                return stopped_before(config, report, the_plan.groups[i:])
            if _waits_for_next_run(config, report, the_plan.groups, i, clock() - budget_from):
                continue
            before_group(group)
            entry: dict[str, Any] = {
                "partitions": None if group.partitions is None else list(group.partitions),
                "hot": group.hot,
            }
            report.groups.append(entry)
            lease = _lease(
                client, config, report, group=group, number=i + 1, clock=clock, stop=stop
            )
            entry["lease_wait_s"] = waited = report.lease_wait_s or 0.0
            if lease is None and report.reason == "stopped":
                report.groups.pop()
                return stopped_before(config, report, the_plan.groups[i:])
            if lease is None:
                if report.reason == "drain_timeout":
                    _held(report, group, waited)  # its intent refused their commits meanwhile
                else:  # only those backpressure held were held through the wait
                    report.add_hold(report.backpressured(group.partitions), waited)
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
    log.info(
        "%s: run budget of %.0fs spent: %d groups left for the next run",
        config.name,
        budget,
        _leave_for_next_run(report, groups[i:]),
    )
    return True


def _leave_for_next_run(report: RunReport, groups: Sequence[Group]) -> int:
    """Name in the report the groups among `groups` that rewrite files (None: the whole
    table's); how many. A group that only rewrites manifests is not named: the budget runs it
    whatever, and after a stop the next run's plan has it again."""
    left = [g for g in groups if not _manifests_only(g)]
    report.left_for_next_run = [None if g.partitions is None else list(g.partitions) for g in left]
    return len(left)


def stopped_before(config: TableConfig, report: RunReport, left: Sequence[Group]) -> bool:
    """The run was stopped before the groups `left` (none: before its unleased steps): they
    are left for the next run, as when its budget runs out. True when an earlier group ran (the
    run settles as usual), else the run is skipped as `stopped`."""
    # a run out of budget named its groups left already (and runs the manifests' rewrite)
    if not report.left_for_next_run:
        _leave_for_next_run(report, left)
    log.info(
        "%s: stopped: %d groups left for the next run", config.name, len(report.left_for_next_run)
    )
    if report.groups:
        return True
    report.outcome, report.reason, report.error = Outcome.SKIPPED, "stopped", None
    return False


def _manifests_only(group: Group) -> bool:
    return group.partitions is None and all(
        step.procedure == "rewrite_manifests" for step in group.steps
    )


def _held(report: RunReport, group: Group, seconds: float) -> None:
    """Add to each of the group's partitions ("*": the whole table) the seconds its writers
    were held: the drain (the group's intent refuses new commits from its first ask) and the
    lease."""
    report.add_hold(group.partitions or ("*",), seconds)


def _step_outcome(step: dict[str, Any]) -> str:
    if "error" in step:
        return "failed"
    return "changed" if step_changed(step) else "no_change"


def _lease(
    client: LeaseClient,
    config: TableConfig,
    report: RunReport,
    *,
    group: Group,
    number: int,
    clock: Callable[[], float],
    stop: threading.Event | None,
) -> Lease | None:
    """The maintenance lease for `group`, or None with the report saying why (`stopped` when
    `stop` ended the wait, or came as the lease was granted: it is released unused);
    `lease_wait_s` is set to the wait either way."""
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
            stop=stop,
        )
    except Stopped:
        report.reason = "stopped"
        report.lease_wait_s = clock() - asked_at
        return None
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
    if stop is not None and stop.is_set():
        _release(client, lease)  # granted as the stop came: nothing runs under it
        report.reason = "stopped"
        return None
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
