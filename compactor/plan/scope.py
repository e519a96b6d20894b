"""What a plan looks at: every partition when the daily rewrite-all is due, else the recent ones
(`plan.recent_days`, with their `where`), or all of them (docs/jobs.md §2)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, date, datetime, timedelta

from compactor.config import PlanConfig, TableConfig
from compactor.plan.model import Mode
from compactor.stats import PartitionStats, TableStats

__all__ = ["full_rewrite_due", "recent_where", "scope_of"]


def scope_of(
    stats: TableStats, config: TableConfig, now: datetime
) -> tuple[Mode, str | None, list[PartitionStats]]:
    """What a plan made at `now` looks at: every partition when the daily rewrite-all is due,
    else the recent ones (`plan.recent_days`, with their `where`), or all without it; the
    mode, the `where` and the partitions in scope."""
    if full_rewrite_due(config.plan, last=stats.last_full_rewrite_at, now=now):
        return Mode.REWRITE_ALL, None, list(stats.partitions)
    recent = recent_where(config.plan, now=now)
    in_scope = _in_scope(stats.partitions, config.plan, recent[1] if recent else None)
    return Mode.INCREMENTAL, recent[0] if recent else None, in_scope


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
