"""The follower's plan: the partitions the service says are due, grouped and sized to the stream,
without reading the table's stats (docs/jobs.md §3; compactor.follow runs it).

    follow_plan(config, spec, due) -> Plan      most debt first, `follow.partitions_per_group`
                                                partitions a group; run=False when none is left
    DueCounts                                   a due partition's (data, delete[, equality
                                                delete]) files, as the service counted them
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from compactor.config import TableConfig
from compactor.plan.model import Group, Mode, Plan
from compactor.plan.names import partition_mapping
from compactor.plan.steps import follow_steps

__all__ = ["DueCounts", "follow_plan"]

log = logging.getLogger(__name__)

DueCounts = tuple[int, int] | tuple[int, int, int]
"""A due partition's (data files, delete files[, equality delete files of them]), as the
service counted them (compactor.follow)."""


def follow_plan(config: TableConfig, spec: Any, due: Mapping[str, DueCounts]) -> Plan:
    """The groups that compact `due` (name: its counts) under `spec`, the table's partition
    spec: each group's steps sized to the stream (follow_steps), limited to its partitions by
    the filter a full plan's group gets, on exactly them (the whole table with `lease.scope =
    "table"`). A name that does not read back as a partition of `spec` is left to the full
    plan; the reasons say which, and why each other partition is due."""
    reasons: list[str] = []
    named: list[tuple[str, dict[str, Any]]] = []
    # (data, delete, equality delete files): a count of equality deletes may be left out
    counted = {name: (*files[:2], sum(files[2:])) for name, files in due.items()}
    for name in sorted(counted, key=lambda n: (-sum(counted[n][:2]), n)):
        data, deletes, equality = counted[name]
        try:
            named.append((name, partition_mapping(spec, name)))
        except ValueError as exc:
            log.warning("%s: %s left to the full plan: %s", config.name, name, exc)
            reasons.append(f"{name}: left to the full plan ({exc})")
            continue
        of_them = f" ({equality} by equality)" if equality else ""
        reasons.append(
            f"{name}: due, {data} data and {deletes} delete files{of_them} added since its last "
            "compaction (the service's counts)"
        )
    whole = config.lease.scope == "table"
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
    return Plan(
        config.name,
        run=bool(groups),
        mode=Mode.FOLLOW,
        reasons=tuple(reasons),
        groups=tuple(groups),
        whole_table="lease.scope is table" if whole else None,
    )
