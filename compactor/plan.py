"""Decide whether a table needs maintenance, and which procedures to run: a pure function.

    p = plan(stats, table_config, now)     # stats from compactor.stats.collect_stats
    p.run                                  # False: skip, take no lease (ingest keeps going)
    p.reasons                              # why, with the numbers and the thresholds
    p.steps                                # Step("rewrite_data_files", ...), ... in order
    print(p.describe())

A run pays off when, within the scope (the recent partitions when `plan.recent_days` is set,
else the whole table):

    small files       some partition holds at least `min-input-files` small files (what
                      rewrite_data_files would pick up) and the scope at least `min_small_files`
    delete files      at least `min_delete_files`, or more than `max_delete_ratio` per data file,
                      counting only delete files that still apply to live data files
    dangling deletes  at least `min_delete_files` delete files that apply to nothing any more
    manifests         at least `rewrite_manifests.min_small_manifests` small manifests
    snapshots         at least `max_snapshots` that expire_snapshots would remove under the
                      floors (see `snapshot_expiry`), not all snapshots
    rewrite-all       the daily full rewrite is due: now is at or after `full_rewrite_at` (UTC)
                      and no rewrite-all snapshot was committed since that time today

Steps, in this order, each only when enabled and when it has work: rewrite_data_files,
rewrite_position_delete_files, rewrite_manifests, expire_snapshots, remove_orphan_files.

A run removes what it counted, so the plan after it says skip (on Iceberg 1.9.2, checked in
tests/spark/test_compactor_converges.py):

    equality deletes   rewrite_data_files with `delete-file-threshold` = 1 rewrites every data
                       file an equality delete applies to (all older files of its partition),
                       applying it; `remove-dangling-deletes` = true then drops the delete files
                       in the same commit (a table with 2 equality-delete files: 12 data files
                       rewritten, 2 delete files removed)
    position deletes   the same rewrite applies them but leaves the delete files behind, and
                       `remove-dangling-deletes` does not drop them: the new data files keep the
                       starting sequence number, which is not newer than the deletes (36 of 36
                       left). rewrite_position_delete_files drops the rows that name a file that
                       is gone, but by default only in partitions with `min-input-files` (5)
                       delete files (4 per partition: 0 of 24 dropped); with `rewrite-all` =
                       true it drops them all, so the step is planned with it
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from enum import StrEnum
from typing import Any

from compactor.config import (
    ExpireSnapshotsConfig,
    PlanConfig,
    TableConfig,
    check_floors,
    format_duration,
)
from compactor.stats import PartitionStats, SnapshotStats, TableStats, Totals

__all__ = [
    "Mode",
    "Step",
    "Plan",
    "ExpiryPlan",
    "plan",
    "recent_where",
    "full_rewrite_due",
    "snapshot_expiry",
]

_MIB = 1 << 20


class Mode(StrEnum):
    """What a run rewrites: `incremental` (within thresholds and `where`) or `rewrite-all`."""

    INCREMENTAL = "incremental"
    REWRITE_ALL = "rewrite-all"


@dataclass(frozen=True)
class Step:
    """One procedure call, with everything it needs.

    Step("rewrite_data_files", "38 small files", options={...}, where="dt >= '2024-05-01'")
    Step("expire_snapshots", "...", older_than=..., retain_last=10, snapshot_ids=(17, 18))
    """

    procedure: str
    reason: str
    options: Mapping[str, str] = field(default_factory=dict)
    where: str | None = None
    strategy: str | None = None
    sort_order: str | None = None
    older_than: datetime | None = None
    retain_last: int | None = None
    snapshot_ids: tuple[int, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"procedure": self.procedure, "reason": self.reason}
        if self.options:
            out["options"] = dict(self.options)
        for key in ("where", "strategy", "sort_order", "retain_last"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.older_than is not None:
            out["older_than"] = self.older_than.isoformat()
        if self.snapshot_ids:
            out["snapshot_ids"] = list(self.snapshot_ids)
        return out


@dataclass(frozen=True)
class Plan:
    """What a run would do to one table, and why."""

    table: str
    run: bool
    mode: Mode
    reasons: tuple[str, ...]
    steps: tuple[Step, ...] = ()
    where: str | None = None
    scope: Totals = Totals()
    total: Totals = Totals()

    def as_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "run": self.run,
            "mode": str(self.mode),
            "where": self.where,
            "reasons": list(self.reasons),
            "steps": [s.as_dict() for s in self.steps],
            "scope": self.scope.as_dict(),
            "total": self.total.as_dict(),
        }

    def describe(self) -> str:
        """A few lines for a person: the decision, the reasons, the steps."""
        verdict = f"run ({self.mode})" if self.run else "skip"
        lines = [f"{self.table}: {verdict}"]
        if self.where:
            lines.append(f"  where: {self.where}")
        s = self.scope
        lines.append(
            f"  scope: {s.partitions} partitions, {s.data_files} data files "
            f"({s.small_files} small, avg {s.avg_file_bytes / _MIB:.2f} MiB), "
            f"{s.delete_files} delete files (ratio {s.delete_ratio:.2f}, "
            f"{s.dangling_delete_files} more dangling)"
        )
        lines += [f"  because: {r}" for r in self.reasons]
        for step in self.steps:
            extra = f" where {step.where}" if step.where else ""
            lines.append(f"  step: {step.procedure}{extra}: {step.reason}")
        return "\n".join(lines)


@dataclass(frozen=True)
class ExpiryPlan:
    """How to call expire_snapshots so that exactly `expired` go.

    Iceberg expires (a) snapshots older than `older_than` beyond the last `retain_last` and
    (b) every id named explicitly; `snapshot_ids` are those in `expired` that (a) would keep.
    """

    older_than: datetime
    retain_last: int
    snapshot_ids: tuple[int, ...]
    expired: tuple[int, ...]
    kept_for_queries: tuple[int, ...]


def plan(stats: TableStats, config: TableConfig, now: datetime) -> Plan:
    """The plan for `stats` under `config` at `now` (an aware UTC datetime).

    Raises:
        RetentionRefused: a retention setting is below its floor (nothing may run).
        ValueError: `now` is naive, or `stats` counted small files with another size.
    """
    if now.tzinfo is None:
        raise ValueError("now must be an aware datetime (UTC)")
    check_floors(config)
    if stats.small_file_bytes != config.small_file_bytes:
        raise ValueError(
            f"stats counted small files under {stats.small_file_bytes} bytes, "
            f"the config says {config.small_file_bytes}"
        )
    total = stats.totals()
    if full_rewrite_due(config.plan, last=stats.last_full_rewrite_at, now=now):
        last = stats.last_full_rewrite_at
        reason = (
            f"daily rewrite-all due at {config.plan.full_rewrite_at:%H:%M} UTC "
            f"(last: {last.isoformat() if last else 'never'})"
        )
        if total.data_files == 0:
            return Plan(stats.table, False, Mode.REWRITE_ALL, (reason, "but the table is empty"))
        steps = _steps(stats, config, now, mode=Mode.REWRITE_ALL, where=None, scope=total)
        return Plan(stats.table, True, Mode.REWRITE_ALL, (reason,), steps, None, total, total)

    recent = recent_where(config.plan, now=now)
    where = recent[0] if recent else None
    scoped = _in_scope(stats.partitions, config.plan, recent[1] if recent else None)
    scope = Totals.of(scoped)
    reasons, idle = _pays_off(stats, scope, config, now)
    if not reasons:
        return Plan(stats.table, False, Mode.INCREMENTAL, tuple(idle), (), where, scope, total)
    steps = _steps(stats, config, now, mode=Mode.INCREMENTAL, where=where, scope=scope)
    return Plan(stats.table, True, Mode.INCREMENTAL, tuple(reasons), steps, where, scope, total)


def recent_where(config: PlanConfig, *, now: datetime) -> tuple[str, date] | None:
    """`("dt >= '2024-05-01'", date(2024, 5, 1))` for `recent_days = N`, else None.

    The cutoff is the UTC date N days before `now`; the literal is a string so the filter
    converts to an Iceberg expression on a date or a string column alike.
    """
    if config.recent_days is None:
        return None
    cutoff = now.astimezone(UTC).date() - timedelta(days=config.recent_days)
    return f"{config.recent_column} >= '{cutoff.isoformat()}'", cutoff


def full_rewrite_due(config: PlanConfig, *, last: datetime | None, now: datetime) -> bool:
    """True at or after today's `full_rewrite_at` (UTC) when no rewrite-all ran since then."""
    if config.full_rewrite_at is None:
        return False
    now = now.astimezone(UTC)
    due_at = datetime.combine(now.date(), config.full_rewrite_at, tzinfo=UTC)
    return now >= due_at and (last is None or last < due_at)


def snapshot_expiry(
    snapshots: Iterable[SnapshotStats],
    *,
    current_snapshot_id: int | None,
    config: ExpireSnapshotsConfig,
    now: datetime,
) -> ExpiryPlan:
    """Which snapshots expire_snapshots may remove, and the arguments that remove just those.

    Kept: the last `retain_last`, those younger than `older_than`, the current one, and the
    newest snapshot of each streaming query id (the replay guard reads it after a restart).
    """
    ordered = sorted(snapshots, key=lambda s: (s.committed_at, s.snapshot_id))
    cutoff = now - config.older_than
    keep = {s.snapshot_id for s in ordered[-config.retain_last :]} if config.retain_last else set()
    keep |= {s.snapshot_id for s in ordered if s.committed_at >= cutoff}
    if current_snapshot_id is not None:
        keep.add(current_snapshot_id)
    newest_per_query: dict[str, SnapshotStats] = {}
    for snap in ordered:
        if snap.query_id:
            newest_per_query[snap.query_id] = snap
    for_queries = {s.snapshot_id for s in newest_per_query.values()}
    keep |= for_queries
    kept = [s for s in ordered if s.snapshot_id in keep]
    # Iceberg keeps everything at or after this instant by itself; older ones we keep must
    # not be older than it, and expired ones younger than it must be named one by one
    bound = min([cutoff, *(s.committed_at for s in kept)])
    expired = [s for s in ordered if s.snapshot_id not in keep]
    return ExpiryPlan(
        older_than=bound,
        retain_last=max(config.retain_last, 1),
        snapshot_ids=tuple(s.snapshot_id for s in expired if s.committed_at >= bound),
        expired=tuple(s.snapshot_id for s in expired),
        kept_for_queries=tuple(sorted(for_queries - {s.snapshot_id for s in expired})),
    )


def _in_scope(
    partitions: Iterable[PartitionStats], config: PlanConfig, cutoff: date | None
) -> list[PartitionStats]:
    parts = list(partitions)
    if cutoff is None:
        return parts
    scoped = []
    for p in parts:
        value = p.partition.get(config.recent_column)
        if isinstance(value, datetime):
            value = value.date()
        if isinstance(value, date):
            value = value.isoformat()
        # a partition that cannot be compared stays in scope: better to look than to miss it
        if not isinstance(value, str) or value >= cutoff.isoformat():
            scoped.append(p)
    return scoped


def _pays_off(
    stats: TableStats, scope: Totals, config: TableConfig, now: datetime
) -> tuple[list[str], list[str]]:
    """(reasons to run, reasons not to); the run happens when the first list is not empty."""
    th = config.plan
    min_input = config.rewrite_data_files.min_input_files
    small_mib = stats.small_file_bytes / _MIB
    run: list[str] = []
    idle: list[str] = []
    small_ok = _small_files_pay_off(scope, config)
    small_text = (
        f"{scope.small_files} small files (< {small_mib:.1f} MiB), at most "
        f"{scope.max_small_files_in_partition} in one partition (thresholds: "
        f"{th.min_small_files} in scope, {min_input} in a partition)"
    )
    (run if small_ok and config.rewrite_data_files.enabled else idle).append(small_text)
    deletes_ok = scope.delete_files > 0 and (
        scope.delete_files >= th.min_delete_files or scope.delete_ratio >= th.max_delete_ratio
    )
    deletes_text = (
        f"{scope.delete_files} delete files, {scope.delete_ratio:.2f} per data file "
        f"(thresholds: {th.min_delete_files} files or ratio {th.max_delete_ratio})"
    )
    (run if deletes_ok else idle).append(deletes_text)
    if scope.dangling_delete_files:
        dangling_text = (
            f"{scope.dangling_delete_files} dangling delete files, applying to no live data "
            f"file (threshold: {th.min_delete_files})"
        )
        (run if scope.dangling_delete_files >= th.min_delete_files else idle).append(dangling_text)
    manifests = config.rewrite_manifests
    if manifests.enabled:
        small = _small_manifests(stats, config)
        text = (
            f"{small} of {len(stats.manifest_bytes)} manifests under "
            f"{manifests.small_manifest_bytes / _MIB:.1f} MiB "
            f"(threshold: {manifests.min_small_manifests})"
        )
        (run if small >= manifests.min_small_manifests else idle).append(text)
    if config.expire_snapshots.enabled:
        expirable = len(_expiry(stats, config, now).expired)
        text = (
            f"{expirable} of {len(stats.snapshots)} snapshots can be expired "
            f"(threshold: {th.max_snapshots})"
        )
        (run if expirable >= th.max_snapshots else idle).append(text)
    return run, idle


def _small_files_pay_off(scope: Totals, config: TableConfig) -> bool:
    return (
        scope.max_small_files_in_partition >= config.rewrite_data_files.min_input_files
        and scope.small_files >= config.plan.min_small_files
    )


def _small_manifests(stats: TableStats, config: TableConfig) -> int:
    limit = config.rewrite_manifests.small_manifest_bytes
    return sum(1 for length in stats.manifest_bytes if length < limit)


def _expiry(stats: TableStats, config: TableConfig, now: datetime) -> ExpiryPlan:
    return snapshot_expiry(
        stats.snapshots,
        current_snapshot_id=stats.current_snapshot_id,
        config=config.expire_snapshots,
        now=now,
    )


def _steps(
    stats: TableStats,
    config: TableConfig,
    now: datetime,
    *,
    mode: Mode,
    where: str | None,
    scope: Totals,
) -> tuple[Step, ...]:
    steps: list[Step] = []
    everything = mode is Mode.REWRITE_ALL
    rdf = config.rewrite_data_files
    # only when it has work: a run for manifests or snapshots alone need not plan a rewrite
    rdf_work = (
        everything
        or _small_files_pay_off(scope, config)
        or scope.delete_files > 0
        or scope.dangling_equality_delete_files > 0
    )
    if rdf.enabled and rdf_work:
        options = dict(rdf.options)
        if everything:
            options["rewrite-all"] = "true"
        if scope.delete_files:
            # a data file with any delete applying to it is rewritten, the deletes applied
            options.setdefault("delete-file-threshold", "1")
        if scope.delete_files or scope.dangling_delete_files:
            # drops the equality deletes the rewrite left applying to nothing (module docstring)
            options.setdefault("remove-dangling-deletes", "true")
        steps.append(
            Step(
                "rewrite_data_files",
                "rewrite every data file" if everything else "compact small files, apply deletes",
                options=options,
                where=where,
                strategy=rdf.strategy,
                sort_order=rdf.sort_order,
            )
        )
    rpd = config.rewrite_position_delete_files
    position = scope.position_delete_files + scope.dangling_position_delete_files
    if rpd.enabled and position:
        options = dict(rpd.options)
        # without it, partitions with fewer than min-input-files delete files keep their
        # dangling ones (module docstring)
        options.setdefault("rewrite-all", "true")
        steps.append(
            Step(
                "rewrite_position_delete_files",
                f"{position} position delete files before the run "
                f"({scope.dangling_position_delete_files} dangling): drop those that apply to "
                "no live data file",
                options=options,
                where=where,
            )
        )
    manifests = config.rewrite_manifests
    small = _small_manifests(stats, config)
    if manifests.enabled and small >= manifests.min_small_manifests:
        steps.append(
            Step(
                "rewrite_manifests",
                f"{small} of {len(stats.manifest_bytes)} manifests are small",
            )
        )
    exp = config.expire_snapshots
    if exp.enabled:
        expiry = _expiry(stats, config, now)
        if expiry.expired:
            kept = f", keeping {len(expiry.kept_for_queries)} for streaming queries"
            steps.append(
                Step(
                    "expire_snapshots",
                    f"{len(expiry.expired)} of {len(stats.snapshots)} snapshots older than "
                    f"{format_duration(exp.older_than)} beyond the last {exp.retain_last}"
                    + (kept if expiry.kept_for_queries else ""),
                    older_than=expiry.older_than,
                    retain_last=expiry.retain_last,
                    snapshot_ids=expiry.snapshot_ids,
                )
            )
    orphans = config.remove_orphan_files
    if orphans.enabled:
        steps.append(
            Step(
                "remove_orphan_files",
                f"files older than {format_duration(orphans.older_than)} that no snapshot uses",
                older_than=now - orphans.older_than,
            )
        )
    return tuple(steps)
