"""Which snapshots expire_snapshots may remove, behind the retention floors, the streaming
queries' newest snapshots and the readers' holds (docs/jobs.md §2), and the arguments that
remove just those."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from compactor.config import TableConfig
from compactor.procedure_config import ExpireSnapshotsConfig
from compactor.stats import SnapshotStats, TableStats

__all__ = ["ExpiryPlan", "restart_points", "snapshot_expiry", "table_expiry"]


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
    kept_for_queries: tuple[int, ...]  # streaming writers' restart points: queries, Flink jobs
    kept_for_readers: tuple[int, ...] = ()


def snapshot_expiry(
    snapshots: Iterable[SnapshotStats],
    *,
    current_snapshot_id: int | None,
    config: ExpireSnapshotsConfig,
    now: datetime,
    readers: Collection[int] = (),
) -> ExpiryPlan:
    """Which snapshots expire_snapshots may remove, and the arguments that remove just those.

    Kept: the last `retain_last`, those younger than `older_than`, the current one, the
    committers' restart points (`restart_points`), and every snapshot at or after the oldest
    position in `readers` (live reader holds: snapshot ids; one the table no longer has holds
    nothing).
    """
    ordered = sorted(snapshots, key=lambda s: (s.committed_at, s.snapshot_id))
    cutoff = now - config.older_than
    keep = {s.snapshot_id for s in ordered[-config.retain_last :]} if config.retain_last else set()
    keep |= {s.snapshot_id for s in ordered if s.committed_at >= cutoff}
    if current_snapshot_id is not None:
        keep.add(current_snapshot_id)
    for_queries = restart_points(ordered, config=config, now=now)
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


def restart_points(
    ordered: Sequence[SnapshotStats], *, config: ExpireSnapshotsConfig, now: datetime
) -> set[int]:
    """The snapshots kept as restart points: the newest snapshot of each streaming query id
    (the replay guard reads it after a restart) and of each Flink job's committer (its restart
    reads `flink.max-committed-checkpoint-id` from it, and without it would commit a checkpoint
    twice), for the `restart_points` committers whose newest snapshots are newest, and only
    while younger than `restart_point_age`. `ordered`: oldest first."""
    newest: dict[tuple[str, str], SnapshotStats] = {}
    for snap in ordered:
        if snap.query_id:
            newest["query", snap.query_id] = snap
        if snap.flink_committer:
            newest["flink", snap.flink_committer] = snap
    cutoff = now - config.restart_point_age
    points = {s.snapshot_id: s for s in newest.values()}  # a snapshot may be both kinds'
    recent = sorted(
        (s for s in points.values() if s.committed_at >= cutoff),
        key=lambda s: (s.committed_at, s.snapshot_id),
        reverse=True,
    )
    return {s.snapshot_id for s in recent[: config.restart_points]}


def table_expiry(
    stats: TableStats, config: TableConfig, now: datetime, readers: Collection[int] = ()
) -> ExpiryPlan:
    return snapshot_expiry(
        stats.snapshots,
        current_snapshot_id=stats.current_snapshot_id,
        config=config.expire_snapshots,
        now=now,
        readers=readers,
    )
