"""The rules a plan applies: when a partition is due (its triggers), hot, or past the hard bound,
which partitions come first, and when a run pays off (docs/design.md §4, docs/jobs.md §2 and §3)."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from compactor.config import TableConfig, format_duration
from compactor.plan.expiry import table_expiry
from compactor.plan.model import MIB
from compactor.stats import PartitionStats, TableStats, Totals
from service.wire.text import sample

__all__ = [
    "by_debt",
    "coldest_first",
    "data_reasons",
    "due_text",
    "due_triggers",
    "has_debt",
    "hot_left_alone",
    "label",
    "most_debt_first",
    "over_bound",
    "small_files_pay_off",
    "small_input",
    "small_manifests",
    "table_reasons",
    "why_hot",
]


def hot_left_alone(left: int, config: TableConfig) -> list[str]:
    """Why `left` hot partitions with some debt are not compacted, or nothing."""
    if not left:
        return []
    return [
        f"{left} hot partitions with debt left alone: none is due yet (triggers: "
        f"{_triggers_text(config)})"
    ]


def _triggers_text(config: TableConfig) -> str:
    th = config.plan
    return (
        f"{th.trigger_small_files} small files, {th.trigger_delete_files} delete files, "
        f"{th.trigger_deleted_rows:.0%} of rows position-deleted, "
        f"{th.trigger_equality_deletes} equality delete files"
    )


def due_triggers(p: PartitionStats, config: TableConfig) -> tuple[str, ...]:
    """The triggers partition `p` reached (Amoro's minor and major triggers in kind): empty
    when it is not due."""
    th = config.plan
    why: list[str] = []
    if p.small_files >= th.trigger_small_files:
        why.append(f"{p.small_files} small files (trigger {th.trigger_small_files})")
    if p.all_delete_files >= th.trigger_delete_files:
        why.append(f"{p.all_delete_files} delete files (trigger {th.trigger_delete_files})")
    if p.position_delete_records and p.deleted_rows_share >= th.trigger_deleted_rows:
        why.append(
            f"{p.deleted_rows_share:.0%} of its rows position-deleted "
            f"(trigger {th.trigger_deleted_rows:.0%})"
        )
    equality = p.equality_delete_files + p.dangling_equality_delete_files
    if equality >= th.trigger_equality_deletes:
        why.append(f"{equality} equality delete files (trigger {th.trigger_equality_deletes})")
    return tuple(why)


def due_text(due: Mapping[str, Sequence[str]], hot: Mapping[Any, str] | None = None) -> list[str]:
    """One reason naming the due partitions (the first five), or nothing."""
    if not due:
        return []
    named = [
        f"{name}{' (hot)' if hot and name in hot else ''}: {', '.join(why)}"
        for name, why in due.items()
    ]
    return [f"{len(due)} partitions due: {sample(named, 5, sep='; ')}"]


def over_bound(
    partitions: Iterable[PartitionStats], config: TableConfig
) -> tuple[tuple[str, str], ...]:
    """(name, why) of the partitions at or past the hard bound (`plan.stop_small_files`,
    `plan.stop_delete_files`), most debt first: what the debt report counts, and, of those a
    run's groups rewrite, what the run holds back (named ones only: a partition lakelock cannot
    name is leased with the whole table)."""
    th = config.plan
    out: list[tuple[str, str]] = []
    for p in by_debt(partitions):
        why = [
            text
            for reached, text in (
                (
                    p.small_files >= th.stop_small_files,
                    f"{p.small_files} small files (bound {th.stop_small_files})",
                ),
                (
                    p.all_delete_files >= th.stop_delete_files,
                    f"{p.all_delete_files} delete files (bound {th.stop_delete_files})",
                ),
            )
            if reached
        ]
        if why:
            out.append((label(p), ", ".join(why)))
    return tuple(out)


def label(p: PartitionStats) -> str:
    """The partition's name; one Iceberg cannot name as lakelock does (an unpartitioned table,
    a transform without a name) by its values, so the debt still counts and shows it."""
    if p.name is not None:
        return str(p.name)
    return "/".join(f"{k}={v}" for k, v in p.partition.items()) or "the table"


def data_reasons(
    scope: Totals, config: TableConfig, small_file_bytes: int
) -> tuple[list[str], list[str]]:
    """(reasons to rewrite data and delete files in `scope`, reasons not to)."""
    th = config.plan
    min_input = config.rewrite_data_files.min_input_files
    run: list[str] = []
    idle: list[str] = []
    small_ok = small_files_pay_off(scope, config)
    small_text = (
        f"{scope.small_files} small files (< {small_file_bytes / MIB:.1f} MiB), at most "
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
    return run, idle


def table_reasons(
    stats: TableStats, config: TableConfig, now: datetime, readers: Collection[int] = ()
) -> tuple[list[str], list[str]]:
    """(reasons to rewrite manifests or expire snapshots, reasons not to)."""
    run: list[str] = []
    idle: list[str] = []
    manifests = config.rewrite_manifests
    if manifests.enabled:
        small = small_manifests(stats, config)
        text = (
            f"{small} of {len(stats.manifest_bytes)} manifests under "
            f"{manifests.small_manifest_bytes / MIB:.1f} MiB "
            f"(threshold: {manifests.min_small_manifests})"
        )
        (run if small >= manifests.min_small_manifests else idle).append(text)
    if config.expire_snapshots.enabled:
        expirable = len(table_expiry(stats, config, now, readers).expired)
        text = (
            f"{expirable} of {len(stats.snapshots)} snapshots can be expired "
            f"(threshold: {config.plan.max_snapshots})"
        )
        (run if expirable >= config.plan.max_snapshots else idle).append(text)
    return run, idle


def why_hot(
    p: PartitionStats, leased: Collection[str], cold_at: datetime, config: TableConfig
) -> str | None:
    """Why partition `p` is hot, or None when it is cold."""
    if p.name in leased:
        return "a live commit lease covers it"
    if p.last_updated_at is not None and p.last_updated_at > cold_at and config.plan.hot_window:
        return (
            f"updated at {p.last_updated_at:%Y-%m-%d %H:%M:%S}, within the hot window of "
            f"{format_duration(config.plan.hot_window)}"
        )
    return None


def has_debt(p: PartitionStats, config: TableConfig, *, everything: bool) -> bool:
    """Whether a data or delete rewrite would change partition `p`."""
    if p.delete_files > 0 or p.dangling_delete_files > 0:
        return True
    if everything:
        return p.data_files > 0
    return p.small_files >= config.rewrite_data_files.min_input_files


def small_input(partitions: Sequence[PartitionStats], config: TableConfig) -> bool:
    """Whether rewrite_data_files would find a file group in one of `partitions`."""
    min_input = config.rewrite_data_files.min_input_files
    return any(p.small_files >= min_input for p in partitions)


_LONG_AGO = datetime.min.replace(tzinfo=UTC)


def coldest_first(p: PartitionStats) -> tuple[datetime, str]:
    return (p.last_updated_at or _LONG_AGO, str(p.name))


def most_debt_first(p: PartitionStats) -> tuple[int, datetime, str]:
    return (-p.debt, *coldest_first(p))


def by_debt(partitions: Iterable[PartitionStats]) -> list[PartitionStats]:
    return sorted(partitions, key=most_debt_first)


def small_files_pay_off(scope: Totals, config: TableConfig) -> bool:
    return (
        scope.max_small_files_in_partition >= config.rewrite_data_files.min_input_files
        and scope.small_files >= config.plan.min_small_files
    )


def small_manifests(stats: TableStats, config: TableConfig) -> int:
    limit = config.rewrite_manifests.small_manifest_bytes
    return sum(1 for length in stats.manifest_bytes if length < limit)
