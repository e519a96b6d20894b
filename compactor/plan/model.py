"""What a plan says: its groups of steps, each run under one maintenance lease, the steps run
without one, its partitions and its reasons; as JSON (`as_dict`) and for a person (`describe`).
What each step needs is docs/design.md §4; how partitions are grouped, docs/jobs.md §3."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from compactor.stats import PartitionStats, Totals

__all__ = ["DATA_STEPS", "MIB", "Group", "Mode", "PartitionPlan", "Plan", "Step"]

MIB = 1 << 20


class Mode(StrEnum):
    """What a run rewrites: `incremental` (within thresholds and `where`), `rewrite-all`, or
    `follow`: the partitions the service said are due, sized to the stream (compactor.follow)."""

    INCREMENTAL = "incremental"
    REWRITE_ALL = "rewrite-all"
    FOLLOW = "follow"


# the steps that rewrite a partition's data or delete files: a group with one compacts them
DATA_STEPS = frozenset(
    ("convert_equality_deletes", "rewrite_data_files", "rewrite_position_delete_files")
)


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
    Group(None, (rewrite_data_files, ...), covers=("dt=2024-05-01",))  # whole-table lease
    group.rewrites                                  # what its release reports compacted
    """

    partitions: tuple[str, ...] | None
    steps: tuple[Step, ...]
    hot: bool = False
    # under a whole-table lease, the named partitions its data steps rewrite
    covers: tuple[str, ...] = ()

    @property
    def rewrites(self) -> tuple[str, ...]:
        """The partitions whose data and delete files the group's steps rewrite: the lease's
        release reports them compacted once the steps ran (the service zeroes their counts)."""
        if not any(step.procedure in DATA_STEPS for step in self.steps):
            return ()
        return self.partitions if self.partitions is not None else self.covers

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
    scope: Totals = field(default_factory=Totals)
    total: Totals = field(default_factory=Totals)
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
            f"({s.small_files} small, avg {s.avg_file_bytes / MIB:.2f} MiB), "
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
