"""`plan()`: one table's plan, under one lease per group of partitions, most urgent group first
(docs/design.md §4, docs/jobs.md §3). Every lease covers the whole table instead, and the plan
says why (`whole_table`), when `lease.scope = "table"`, or the stats name a reason
(`TableStats.scope_refusal`: no partitions, several partition specs in use, a partition value
lakelock cannot name as Iceberg does)."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from compactor.config import TableConfig
from compactor.plan.model import Group, Mode, PartitionPlan, Plan, Step
from compactor.plan.rules import (
    by_debt,
    coldest_first,
    data_reasons,
    due_text,
    due_triggers,
    has_debt,
    hot_left_alone,
    label,
    most_debt_first,
    over_bound,
    small_files_pay_off,
    small_input,
    table_reasons,
    why_hot,
)
from compactor.plan.scope import scope_of
from compactor.plan.steps import data_steps, manifest_steps, unleased_steps
from compactor.procedure_config import check_floors
from compactor.stats import PartitionStats, TableStats, Totals

__all__ = ["plan"]


@dataclass(frozen=True)
class _Frame:
    """What both plans share: the mode the clock chose, the partitions it puts in scope, the
    reasons found so far and the steps that do not depend on the scope."""

    stats: TableStats
    config: TableConfig
    mode: Mode
    where: str | None
    in_scope: list[PartitionStats]
    reasons: list[str]
    table_run: list[str]
    table_idle: list[str]
    manifests: tuple[Step, ...]
    unleased: tuple[Step, ...]

    @property
    def everything(self) -> bool:
        return self.mode is Mode.REWRITE_ALL

    def made(self, **fields: Any) -> Plan:
        return Plan(
            self.stats.table, mode=self.mode, where=self.where, total=self.stats.totals(), **fields
        )


def plan(
    stats: TableStats,
    config: TableConfig,
    now: datetime,
    *,
    leased: Collection[str] = (),
    readers: Collection[int] = (),
) -> Plan:
    """The plan for `stats` under `config` at `now` (an aware UTC datetime); `leased` names the
    partitions live commit leases cover (they are hot); `readers` the positions (snapshot ids)
    of live reader holds, which `expire_snapshots` keeps with every later snapshot.

    The whole table is one scope when the config says so or the stats name a reason
    (`_whole_table_plan`); otherwise every due partition, hot or cold, is picked, and every
    cold one with debt when the cold ones pay off (`_partition_plan`).

    Raises:
        RetentionRefused: a retention setting is below its floor (nothing may run).
        ValueError: `now` is naive, `stats` counted small files with another size, or its
            partitions have no names although it names no reason to lease the whole table.
    """
    if now.tzinfo is None:
        raise ValueError("now must be an aware datetime (UTC)")
    check_floors(config)
    if stats.small_file_bytes != config.small_file_bytes:
        raise ValueError(
            f"stats counted small files under {stats.small_file_bytes} bytes, "
            f"the config says {config.small_file_bytes}"
        )
    whole_table = "lease.scope is table" if config.lease.scope == "table" else stats.scope_refusal
    frame = _frame(stats, config, now, readers)
    if frame is None:
        last = stats.last_full_rewrite_at
        reasons = (
            f"daily rewrite-all due at {config.plan.full_rewrite_at:%H:%M} UTC "
            f"(last: {last.isoformat() if last else 'never'})",
            "but the table is empty",
        )
        return Plan(stats.table, False, Mode.REWRITE_ALL, reasons, whole_table=whole_table)
    if whole_table is not None:
        return _whole_table_plan(frame, whole_table)
    if any(p.name is None for p in frame.in_scope):
        raise ValueError("partitions without names need stats.scope_refusal (see collect_stats)")
    return _partition_plan(frame, now, leased)


def _frame(
    stats: TableStats, config: TableConfig, now: datetime, readers: Collection[int] = ()
) -> _Frame | None:
    """The mode and scope the clock chooses; None when a rewrite-all is due on an empty table."""
    reasons: list[str] = []
    mode, where, in_scope = scope_of(stats, config, now)
    if mode is Mode.REWRITE_ALL:
        if stats.totals().data_files == 0:
            return None
        last = stats.last_full_rewrite_at
        reasons.append(
            f"daily rewrite-all due at {config.plan.full_rewrite_at:%H:%M} UTC "
            f"(last: {last.isoformat() if last else 'never'})"
        )
    table_run, table_idle = table_reasons(stats, config, now, readers)
    return _Frame(
        stats,
        config,
        mode,
        where,
        in_scope,
        reasons,
        table_run,
        table_idle,
        manifests=manifest_steps(stats, config),
        unleased=unleased_steps(stats, config, now, readers),
    )


def _whole_table_plan(frame: _Frame, whole_table: str) -> Plan:
    """One group under a lease on the whole table (`whole_table` says why)."""
    config = frame.config
    scope = Totals.of(frame.in_scope)
    data_run, data_idle = data_reasons(scope, config, frame.stats.small_file_bytes)
    due = {label(p): why for p in by_debt(frame.in_scope) if (why := due_triggers(p, config))}
    data_run += due_text(due)
    reasons = frame.reasons + ([] if frame.everything else data_run + frame.table_run)
    if not reasons:
        idle = tuple(data_idle + frame.table_idle)
        return frame.made(run=False, reasons=idle, scope=scope, whole_table=whole_table)
    small_ok = (
        frame.everything
        or small_files_pay_off(scope, config)
        or small_input([p for p in frame.in_scope if label(p) in due], config)
    )
    data = data_steps(config, frame.mode, scope, small_ok=small_ok, where=frame.where)
    unleased = frame.unleased
    # the named partitions the rewrite may change: the release reports them compacted
    covers = tuple(
        str(p.name)
        for p in frame.in_scope
        if p.name is not None and has_debt(p, config, everything=frame.everything)
    )
    if config.lease.scope == "table":
        # everything under the one lease, as before scopes: the benchmark's baseline
        groups = _groups(Group(None, data + frame.manifests + unleased, covers=covers))
        unleased = ()
    else:
        groups = _groups(Group(None, data + frame.manifests, covers=covers))
    return frame.made(
        run=True,
        reasons=tuple(reasons),
        groups=groups,
        scope=scope,
        whole_table=whole_table,
        unleased=unleased,
        over_bound=over_bound(frame.in_scope, config) if data else (),
    )


def _partition_plan(frame: _Frame, now: datetime, leased: Collection[str]) -> Plan:
    """Every due partition, hot or cold, and, when the cold scope pays off, every cold one with
    debt; most debt first, in groups of `hot_partitions_per_group` (hot) or
    `max_partitions_per_group` (cold), each group under a lease on its partitions."""
    config, in_scope = frame.config, frame.in_scope
    cold_at = now - config.plan.hot_window
    hot = {p.name: why for p in in_scope if (why := why_hot(p, leased, cold_at, config))}
    due = {str(p.name): why for p in by_debt(in_scope) if (why := due_triggers(p, config))}
    cold = [p for p in in_scope if p.name not in hot]
    scope = Totals.of(cold)
    data_run, data_idle = data_reasons(scope, config, frame.stats.small_file_bytes)
    due_run = due_text(due, hot)
    waiting = [p for p in in_scope if p.name in hot and p.name not in due and p.debt]
    hot_idle = hot_left_alone(len(waiting), config)
    reasons = frame.reasons + ([] if frame.everything else data_run) + due_run + frame.table_run
    if not reasons:
        idle = tuple(data_idle + hot_idle + frame.table_idle)
        parts = _partition_plans(in_scope, hot, due, (), config)
        return frame.made(run=False, reasons=idle, scope=scope, partitions=parts)
    sweep = frame.everything or bool(data_run)
    bound = {name for name, _ in over_bound(in_scope, config)}

    def urgent_first(p: PartitionStats) -> tuple[bool, int, datetime, str]:
        # past the hard bound first: the run holds those writers until their group (backpressure)
        return (str(p.name) not in bound, *most_debt_first(p))

    picked_cold = sorted(
        (
            p
            for p in cold
            if p.name in due or (sweep and has_debt(p, config, everything=frame.everything))
        ),
        key=urgent_first,
    )
    picked_hot = sorted((p for p in in_scope if p.name in hot and p.name in due), key=urgent_first)
    chunks = _chunks(picked_cold, config.plan.max_partitions_per_group) + _chunks(
        picked_hot, config.plan.hot_partitions_per_group
    )
    # the groups of partitions past the hard bound first, then the one holding the most
    # indebted partition, so a time budget leaves the least behind
    chunks.sort(key=lambda chunk: urgent_first(chunk[0]))
    groups = _groups(
        *(
            Group(
                tuple(str(p.name) for p in chunk),
                data_steps(
                    config,
                    frame.mode,
                    Totals.of(chunk),
                    small_ok=small_input(chunk, config),
                    partitions=chunk,
                ),
                hot=chunk[0].name in hot,
            )
            for chunk in chunks
        ),
        Group(None, frame.manifests),
    )
    return frame.made(
        run=True,
        reasons=tuple(reasons + hot_idle),
        groups=groups,
        scope=scope,
        unleased=frame.unleased,
        partitions=_partition_plans(in_scope, hot, due, groups, config),
        # only what a group rewrites: holding writers of a partition no step changes would
        # hold them for nothing
        over_bound=tuple(
            (name, why)
            for name, why in over_bound(in_scope, config)
            if any(name in (g.partitions or ()) and g.steps for g in groups)
        ),
    )


def _chunks(parts: list[PartitionStats], size: int) -> list[list[PartitionStats]]:
    return [parts[i : i + size] for i in range(0, len(parts), size)]


def _groups(*groups: Group) -> tuple[Group, ...]:
    """The groups that have a step: a lease without work would hold ingest for nothing."""
    return tuple(g for g in groups if g.steps)


def _partition_plans(
    partitions: Iterable[PartitionStats],
    hot: Mapping[Any, str],
    due: Mapping[str, tuple[str, ...]],
    groups: Sequence[Group],
    config: TableConfig,
) -> tuple[PartitionPlan, ...]:
    group_of = {name: i for i, g in enumerate(groups) for name in g.partitions or ()}
    parts = list(partitions)
    over = dict(over_bound(parts, config))
    return tuple(
        PartitionPlan(
            str(p.name),
            hot.get(p.name),
            group_of.get(str(p.name)),
            p,
            due=due.get(str(p.name), ()),
            over_bound=over.get(str(p.name)),
        )
        for p in sorted(parts, key=coldest_first)
    )
