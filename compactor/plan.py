"""Decide whether a table needs maintenance, and which procedures to run: a pure function.

    p = plan(stats, table_config, now, leased={"dt=2024-05-10"})  # stats: collect_stats
    p.run                                  # False: skip, take no lease (ingest keeps going)
    p.reasons                              # why, with the numbers and the thresholds
    p.groups                               # Group(partitions, steps): one lease each, in order
    p.unleased                             # expire_snapshots, remove_orphan_files: no lease
    p.steps                                # every step, in order
    print(p.describe())

Leases (docs/design.md §4). With `lease.scope = "partitions"` (the default) the plan is made per
partition, named by `jobkit.partition.partition_name` (the gate's names, byte for byte):

    due              one of its triggers fired (docs/design.md §11): `plan.trigger_small_files`
                     small files, `plan.trigger_delete_files` delete files (dangling ones too),
                     `plan.trigger_deleted_rows` of its rows position-deleted, or
                     `plan.trigger_equality_deletes` equality delete files
    hot              a live commit lease covers it (`leased`), or a commit touched it within
                     `plan.hot_window` (`last_updated_at` of the `partitions` table)
    cold groups      when the cold partitions pay off (the thresholds below, over the cold
                     partitions), every cold partition a rewrite would change, and every due
                     cold one in any case, in groups of at most `plan.max_partitions_per_group`
    hot groups       every due hot partition, in groups of `plan.hot_partitions_per_group`: a
                     commit in flight is a reason to drain, not to skip; a hot partition that
                     is not due is left alone
    order            the groups of partitions past the hard bound first (their writers are held
                     until their group starts), then the group holding the most indebted
                     partition (small plus delete files), so a run cut short by
                     `plan.run_budget` leaves the least behind
    over_bound       the partitions at `plan.stop_small_files` or `plan.stop_delete_files`:
                     the run holds their writers until it compacts them (compactor.run)
    rewrite_manifests  rewrites the table's manifest list: a whole-table lease of its own, only
                     when the manifests pay off
    expire_snapshots, remove_orphan_files  no lease at all, after the groups: they hold no
                     writer. expire_snapshots commits new table metadata optimistically (a
                     concurrent commit makes Iceberg retry or fail it, never lose the other) and
                     removes only snapshots the floors let go, and the files only they reference;
                     remove_orphan_files deletes only files older than its floor (24 h) that no
                     snapshot references, which no writer in flight can still be committing

Every lease covers the whole table instead, and the plan says why (`whole_table`), when
`lease.scope = "table"` (one lease for every step, as before scopes: the comparison baseline),
the table is not partitioned, its live files use several partition specs (a partition of one
spec is no partition of the other), or a partition value cannot be named as Iceberg names it.

A run pays off when, within the scope (the recent partitions when `plan.recent_days` is set,
else the whole table; only the cold ones with partition scope):

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
    a due partition   any partition in scope, hot or cold (with `lease.scope = "table"` too)

Steps, in this order, each only when enabled and when it has work: rewrite_data_files,
rewrite_position_delete_files, rewrite_manifests, expire_snapshots, remove_orphan_files.

A run removes what it counted, so the plan after it says skip (on Iceberg 1.9.2, checked in
tests/spark/test_compactor_converges.py):

    equality deletes   rewrite_data_files with `delete-file-threshold` = 1 rewrites every data
                       file an equality delete applies to (all older files of its partition),
                       applying it; the remove_dangling_deletes step right after drops the
                       delete files (a table with 2 equality-delete files: 12 data files
                       rewritten, 2 delete files removed). It is Iceberg's RemoveDanglingDelete-
                       Files action, which rewrite_data_files' `remove-dangling-deletes` option
                       would run inside the rewrite, committing without the lease's properties;
                       as a step it carries them. It is planned when equality deletes are in
                       scope, or when the config sets that option to true
    position deletes   the same rewrite applies them but leaves the delete files behind: the
                       new data files keep the starting sequence number, which is not newer
                       than deletes committed by that snapshot (36 of 36 left).
                       rewrite_position_delete_files drops the rows that name a file that is
                       gone, limited to the group's partitions, but by default only in
                       partitions with `min-input-files` (5) delete files (4 per partition: 0 of
                       24 dropped); with `rewrite-all` = true it drops them all, so the step is
                       planned with it
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
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
    "REMOVE_DANGLING",
    "ExpiryPlan",
    "Group",
    "Mode",
    "PartitionPlan",
    "Plan",
    "Step",
    "full_rewrite_due",
    "over_bound",
    "plan",
    "recent_where",
    "scope_of",
    "snapshot_expiry",
]

_MIB = 1 << 20

REMOVE_DANGLING = "remove-dangling-deletes"
"""The rewrite_data_files option whose commit Iceberg makes without lakelock's properties: the
plan turns it into a remove_dangling_deletes step (compactor.procedure)."""


class Mode(StrEnum):
    """What a run rewrites: `incremental` (within thresholds and `where`) or `rewrite-all`."""

    INCREMENTAL = "incremental"
    REWRITE_ALL = "rewrite-all"


@dataclass(frozen=True)
class Step:
    """One procedure call, with everything it needs.

    Step("rewrite_data_files", "38 small files", options={...}, where="dt >= '2024-05-01'")
    Step("rewrite_data_files", "...", partitions=("dt=2024-05-01",),
         partition_values=({"dt": date(2024, 5, 1)},))   # limited to these partitions
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
    # the partitions the step is limited to (names, and their values by partition field name,
    # from which compactor.procedure builds the Iceberg filter); empty: no partition limit
    partitions: tuple[str, ...] = ()
    partition_values: tuple[Mapping[str, Any], ...] = ()

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
        if self.partitions:
            out["partitions"] = list(self.partitions)
        return out


@dataclass(frozen=True)
class Group:
    """Steps run under one maintenance lease on `partitions` (None: the whole table).

    Group(("dt=2024-05-01", "dt=2024-05-02"), (rewrite_data_files, ...))
    Group(("dt=2024-05-10",), (...), hot=True)      # due hot ones: hot_partitions_per_group
    Group(None, (Step("rewrite_manifests", ...),))
    """

    partitions: tuple[str, ...] | None
    steps: tuple[Step, ...]
    hot: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "partitions": None if self.partitions is None else list(self.partitions),
            "hot": self.hot,
            "steps": [s.as_dict() for s in self.steps],
        }

    def describe(self) -> str:
        if self.partitions is None:
            return "whole table"
        return f"{'hot' if self.hot else 'cold'}: {', '.join(self.partitions)}"


@dataclass(frozen=True)
class PartitionPlan:
    """One partition in scope: hot or cold, and the group that rewrites it (None: left alone)."""

    name: str
    hot: str | None  # why it is hot; None: cold
    group: int | None
    stats: PartitionStats
    due: tuple[str, ...] = ()  # the triggers it reached; empty: not due
    over_bound: str | None = None  # why it is past the hard bound; None: within it

    def as_dict(self) -> dict[str, Any]:
        p = self.stats
        at = p.last_updated_at
        return {
            "name": self.name,
            "hot": self.hot is not None,
            "why_hot": self.hot,
            "due": list(self.due),
            "over_bound": self.over_bound,
            "group": self.group,
            "data_files": p.data_files,
            "small_files": p.small_files,
            "delete_files": p.delete_files,
            "dangling_delete_files": p.dangling_delete_files,
            "last_updated_at": at.isoformat() if at else None,
        }

    def describe(self) -> str:
        p = self.stats
        state = f"hot ({self.hot})" if self.hot else "cold"
        where = f"group {self.group + 1}" if self.group is not None else "left alone"
        due = f", due: {'; '.join(self.due)}" if self.due else ""
        bound = f", OVER THE HARD BOUND ({self.over_bound})" if self.over_bound else ""
        return (
            f"{self.name}: {state}, {p.data_files} data files ({p.small_files} small), "
            f"{p.delete_files} delete files ({p.dangling_delete_files} dangling){due}{bound}: "
            f"{where}"
        )


@dataclass(frozen=True)
class Plan:
    """What a run would do to one table, and why.

    `groups` run one after another, each under its own maintenance lease; `unleased` steps run
    after them without one. `whole_table` says why every lease covers the whole table (None:
    partition scope); `scope` sums the partitions a data rewrite may pick from (the cold ones,
    within `where`).
    """

    table: str
    run: bool
    mode: Mode
    reasons: tuple[str, ...]
    groups: tuple[Group, ...] = ()
    where: str | None = None
    scope: Totals = Totals()
    total: Totals = Totals()
    whole_table: str | None = None
    unleased: tuple[Step, ...] = ()
    partitions: tuple[PartitionPlan, ...] = ()
    # the partitions past the hard bound, most debt first, with why: the run asks the service
    # to hold their writers until it compacts them (backpressure, when configured)
    over_bound: tuple[tuple[str, str], ...] = ()

    @property
    def steps(self) -> tuple[Step, ...]:
        """Every step, in the order the run takes them."""
        return tuple(s for g in self.groups for s in g.steps) + self.unleased

    def as_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "run": self.run,
            "mode": str(self.mode),
            "where": self.where,
            "lease_scope": "table" if self.whole_table else "partitions",
            "whole_table": self.whole_table,
            "reasons": list(self.reasons),
            "steps": [s.as_dict() for s in self.steps],
            "groups": [g.as_dict() for g in self.groups],
            "unleased": [s.as_dict() for s in self.unleased],
            "partitions": [p.as_dict() for p in self.partitions],
            "over_bound": [{"partition": n, "why": why} for n, why in self.over_bound],
            "scope": self.scope.as_dict(),
            "total": self.total.as_dict(),
        }

    def describe(self) -> str:
        """A few lines for a person: the decision, the reasons, the partitions, the groups."""
        verdict = f"run ({self.mode})" if self.run else "skip"
        lines = [f"{self.table}: {verdict}"]
        if self.where:
            lines.append(f"  where: {self.where}")
        if self.whole_table:
            lines.append(f"  leases: whole table, because {self.whole_table}")
        s = self.scope
        lines.append(
            f"  scope: {s.partitions} partitions, {s.data_files} data files "
            f"({s.small_files} small, avg {s.avg_file_bytes / _MIB:.2f} MiB), "
            f"{s.delete_files} delete files (ratio {s.delete_ratio:.2f}, "
            f"{s.dangling_delete_files} more dangling)"
        )
        lines += [f"  because: {r}" for r in self.reasons]
        lines += [f"  over the hard bound: {n} ({why})" for n, why in self.over_bound]
        lines += [f"  partition {p.describe()}" for p in self.partitions if _shown(p)]
        quiet = sum(1 for p in self.partitions if not _shown(p))
        if quiet:
            lines.append(f"  partitions: {quiet} more, cold, with nothing to rewrite")
        for i, group in enumerate(self.groups):
            lines.append(f"  group {i + 1} (lease on {group.describe()})")
            lines += [_step_line(step, "    ") for step in group.steps]
        if self.unleased:
            lines.append("  without a lease (behind the retention floors)")
            lines += [_step_line(step, "    ") for step in self.unleased]
        return "\n".join(lines)


def _shown(p: PartitionPlan) -> bool:
    return p.hot is not None or p.group is not None or bool(p.due)


def _step_line(step: Step, indent: str) -> str:
    extra = f" where {step.where}" if step.where else ""
    return f"{indent}step: {step.procedure}{extra}: {step.reason}"


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
    kept_for_readers: tuple[int, ...] = ()


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
    table_run, table_idle = _table_reasons(stats, config, now, readers)
    return _Frame(
        stats,
        config,
        mode,
        where,
        in_scope,
        reasons,
        table_run,
        table_idle,
        manifests=_manifest_steps(stats, config),
        unleased=_unleased_steps(stats, config, now, readers),
    )


def _whole_table_plan(frame: _Frame, whole_table: str) -> Plan:
    """One group under a lease on the whole table (`whole_table` says why)."""
    config = frame.config
    scope = Totals.of(frame.in_scope)
    data_run, data_idle = _data_reasons(scope, config, frame.stats.small_file_bytes)
    due = {_label(p): why for p in _by_debt(frame.in_scope) if (why := _due(p, config))}
    data_run += _due_text(due)
    reasons = frame.reasons + ([] if frame.everything else data_run + frame.table_run)
    if not reasons:
        idle = tuple(data_idle + frame.table_idle)
        return frame.made(run=False, reasons=idle, scope=scope, whole_table=whole_table)
    small_ok = (
        frame.everything
        or _small_files_pay_off(scope, config)
        or _small_input([p for p in frame.in_scope if _label(p) in due], config)
    )
    data = _data_steps(config, frame.mode, scope, small_ok=small_ok, where=frame.where)
    unleased = frame.unleased
    if config.lease.scope == "table":
        # everything under the one lease, as before scopes: the benchmark's baseline
        groups = _groups(Group(None, data + frame.manifests + unleased))
        unleased = ()
    else:
        groups = _groups(Group(None, data + frame.manifests))
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
    hot = {p.name: why for p in in_scope if (why := _why_hot(p, leased, cold_at, config))}
    due = {str(p.name): why for p in _by_debt(in_scope) if (why := _due(p, config))}
    cold = [p for p in in_scope if p.name not in hot]
    scope = Totals.of(cold)
    data_run, data_idle = _data_reasons(scope, config, frame.stats.small_file_bytes)
    due_run = _due_text(due, hot)
    waiting = [p for p in in_scope if p.name in hot and p.name not in due and p.debt]
    hot_idle = _hot_idle(len(waiting), config)
    reasons = frame.reasons + ([] if frame.everything else data_run) + due_run + frame.table_run
    if not reasons:
        idle = tuple(data_idle + hot_idle + frame.table_idle)
        parts = _partition_plans(in_scope, hot, due, (), config)
        return frame.made(run=False, reasons=idle, scope=scope, partitions=parts)
    sweep = frame.everything or bool(data_run)
    bound = {name for name, _ in over_bound(in_scope, config)}

    def urgent_first(p: PartitionStats) -> tuple[bool, int, datetime, str]:
        # past the hard bound first: the run holds those writers until their group (backpressure)
        return (str(p.name) not in bound, *_most_debt_first(p))

    picked_cold = sorted(
        (
            p
            for p in cold
            if p.name in due or (sweep and _has_debt(p, config, everything=frame.everything))
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
                _data_steps(
                    config,
                    frame.mode,
                    Totals.of(chunk),
                    small_ok=_small_input(chunk, config),
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


def _hot_idle(left: int, config: TableConfig) -> list[str]:
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


def _due(p: PartitionStats, config: TableConfig) -> tuple[str, ...]:
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


def _due_text(due: Mapping[str, Sequence[str]], hot: Mapping[Any, str] | None = None) -> list[str]:
    """One reason naming the due partitions (the first five), or nothing."""
    if not due:
        return []
    shown = [
        f"{name}{' (hot)' if hot and name in hot else ''}: {', '.join(why)}"
        for name, why in list(due.items())[:5]
    ]
    more = f"; and {len(due) - 5} more" if len(due) > 5 else ""
    return [f"{len(due)} partitions due: " + "; ".join(shown) + more]


def over_bound(
    partitions: Iterable[PartitionStats], config: TableConfig
) -> tuple[tuple[str, str], ...]:
    """(name, why) of the partitions at or past the hard bound (`plan.stop_small_files`,
    `plan.stop_delete_files`), most debt first: what the debt report counts, and, of those a
    run's groups rewrite, what the run holds back (named ones only: a partition lakelock cannot
    name is leased with the whole table)."""
    th = config.plan
    out: list[tuple[str, str]] = []
    for p in _by_debt(partitions):
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
            out.append((_label(p), ", ".join(why)))
    return tuple(out)


def _label(p: PartitionStats) -> str:
    """The partition's name; one Iceberg cannot name as lakelock does (an unpartitioned table,
    a transform without a name) by its values, so the debt still counts and shows it."""
    if p.name is not None:
        return str(p.name)
    return "/".join(f"{k}={v}" for k, v in p.partition.items()) or "the table"


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
    readers: Collection[int] = (),
) -> ExpiryPlan:
    """Which snapshots expire_snapshots may remove, and the arguments that remove just those.

    Kept: the last `retain_last`, those younger than `older_than`, the current one, the newest
    snapshot of each streaming query id (the replay guard reads it after a restart), and every
    snapshot at or after the oldest position in `readers` (live reader holds: snapshot ids; one
    the table no longer has holds nothing).
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
    positions = set(readers)
    oldest = next((i for i, s in enumerate(ordered) if s.snapshot_id in positions), len(ordered))
    for_readers = {s.snapshot_id for s in ordered[oldest:]}
    keep |= for_readers
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
        kept_for_readers=tuple(sorted(for_readers)),
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


def _data_reasons(
    scope: Totals, config: TableConfig, small_file_bytes: int
) -> tuple[list[str], list[str]]:
    """(reasons to rewrite data and delete files in `scope`, reasons not to)."""
    th = config.plan
    min_input = config.rewrite_data_files.min_input_files
    run: list[str] = []
    idle: list[str] = []
    small_ok = _small_files_pay_off(scope, config)
    small_text = (
        f"{scope.small_files} small files (< {small_file_bytes / _MIB:.1f} MiB), at most "
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


def _table_reasons(
    stats: TableStats, config: TableConfig, now: datetime, readers: Collection[int] = ()
) -> tuple[list[str], list[str]]:
    """(reasons to rewrite manifests or expire snapshots, reasons not to)."""
    run: list[str] = []
    idle: list[str] = []
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
        expirable = len(_expiry(stats, config, now, readers).expired)
        text = (
            f"{expirable} of {len(stats.snapshots)} snapshots can be expired "
            f"(threshold: {config.plan.max_snapshots})"
        )
        (run if expirable >= config.plan.max_snapshots else idle).append(text)
    return run, idle


def _why_hot(
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


def _has_debt(p: PartitionStats, config: TableConfig, *, everything: bool) -> bool:
    """Whether a data or delete rewrite would change partition `p`."""
    if p.delete_files > 0 or p.dangling_delete_files > 0:
        return True
    if everything:
        return p.data_files > 0
    return p.small_files >= config.rewrite_data_files.min_input_files


def _small_input(partitions: Sequence[PartitionStats], config: TableConfig) -> bool:
    """Whether rewrite_data_files would find a file group in one of `partitions`."""
    min_input = config.rewrite_data_files.min_input_files
    return any(p.small_files >= min_input for p in partitions)


_LONG_AGO = datetime.min.replace(tzinfo=UTC)


def _coldest_first(p: PartitionStats) -> tuple[datetime, str]:
    return (p.last_updated_at or _LONG_AGO, str(p.name))


def _most_debt_first(p: PartitionStats) -> tuple[int, datetime, str]:
    return (-p.debt, *_coldest_first(p))


def _by_debt(partitions: Iterable[PartitionStats]) -> list[PartitionStats]:
    return sorted(partitions, key=_most_debt_first)


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
        for p in sorted(parts, key=_coldest_first)
    )


def _small_files_pay_off(scope: Totals, config: TableConfig) -> bool:
    return (
        scope.max_small_files_in_partition >= config.rewrite_data_files.min_input_files
        and scope.small_files >= config.plan.min_small_files
    )


def _small_manifests(stats: TableStats, config: TableConfig) -> int:
    limit = config.rewrite_manifests.small_manifest_bytes
    return sum(1 for length in stats.manifest_bytes if length < limit)


def _expiry(
    stats: TableStats, config: TableConfig, now: datetime, readers: Collection[int] = ()
) -> ExpiryPlan:
    return snapshot_expiry(
        stats.snapshots,
        current_snapshot_id=stats.current_snapshot_id,
        config=config.expire_snapshots,
        now=now,
        readers=readers,
    )


def _data_steps(
    config: TableConfig,
    mode: Mode,
    scope: Totals,
    *,
    small_ok: bool,
    where: str | None = None,
    partitions: Sequence[PartitionStats] = (),
) -> tuple[Step, ...]:
    """rewrite_data_files and rewrite_position_delete_files over `scope`, each only when it has
    work; limited to `partitions` when given (else to `where`, else the whole table)."""
    steps: list[Step] = []
    everything = mode is Mode.REWRITE_ALL
    names = tuple(str(p.name) for p in partitions)
    values = tuple(p.partition for p in partitions)
    rdf = config.rewrite_data_files
    # only when it has work: a run for manifests or snapshots alone need not plan a rewrite
    rdf_work = (
        everything or small_ok or scope.delete_files > 0 or scope.dangling_equality_delete_files > 0
    )
    if rdf.enabled and rdf_work:
        options = dict(rdf.options)
        if everything:
            options["rewrite-all"] = "true"
        if scope.delete_files:
            # a data file with any delete applying to it is rewritten, the deletes applied
            options.setdefault("delete-file-threshold", "1")
        # the delete files the rewrite leaves applying to nothing (module docstring), dropped
        # by a step of their own, whose commit carries the lease (compactor.procedure)
        dangling = options.pop(REMOVE_DANGLING, None)
        if dangling is None:
            # equality deletes only: position deletes go with rewrite_position_delete_files,
            # limited to the partitions (module docstring)
            equality = scope.equality_delete_files + scope.dangling_equality_delete_files
            dangling = "true" if equality else "false"
        steps.append(
            Step(
                "rewrite_data_files",
                "rewrite every data file" if everything else "compact small files, apply deletes",
                options=options,
                where=where,
                strategy=rdf.strategy,
                sort_order=rdf.sort_order,
                partitions=names,
                partition_values=values,
            )
        )
        if dangling == "true":
            steps.append(
                Step(
                    "remove_dangling_deletes",
                    "drop the delete files that apply to no live data file any more (Iceberg "
                    "reads the whole table for them; it removes only such files, which no "
                    "writer relies on)",
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
                partitions=names,
                partition_values=values,
            )
        )
    return tuple(steps)


def _manifest_steps(stats: TableStats, config: TableConfig) -> tuple[Step, ...]:
    manifests = config.rewrite_manifests
    small = _small_manifests(stats, config)
    if not manifests.enabled or small < manifests.min_small_manifests:
        return ()
    return (
        Step("rewrite_manifests", f"{small} of {len(stats.manifest_bytes)} manifests are small"),
    )


def _unleased_steps(
    stats: TableStats, config: TableConfig, now: datetime, readers: Collection[int] = ()
) -> tuple[Step, ...]:
    """expire_snapshots and remove_orphan_files (see the module docstring on their lease)."""
    steps: list[Step] = []
    exp = config.expire_snapshots
    if exp.enabled:
        expiry = _expiry(stats, config, now, readers)
        if expiry.expired:
            kept = f", keeping {len(expiry.kept_for_queries)} for streaming queries"
            held = f", keeping {len(expiry.kept_for_readers)} for readers"
            steps.append(
                Step(
                    "expire_snapshots",
                    f"{len(expiry.expired)} of {len(stats.snapshots)} snapshots older than "
                    f"{format_duration(exp.older_than)} beyond the last {exp.retain_last}"
                    + (kept if expiry.kept_for_queries else "")
                    + (held if expiry.kept_for_readers else ""),
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
