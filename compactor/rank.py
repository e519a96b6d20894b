"""Which tables a tick plans, and in which order: pure functions over what costs no Spark job.

    summary = Summary.of("lake.db.events", snapshot_json, snapshots=12)  # compactor.catalog
    a = assess(summary, table_config, track, now, replan_after=timedelta(hours=6))
    a.debt        # why the table is planned this tick ("~40 small files ..."), or ()
    a.healthy     # why it is not, when it is not
    queue = [a for a in rank(assessments) if a.debt]     # most debt first
    track = advance(track, a, now)                        # what the next tick remembers
    track = replace(track, looked=Look.of_plan(stats, plan, now, hot_window=...))  # planned

A full plan (compactor.stats) reads the `entries`, `partitions`, `snapshots` and `manifests`
metadata tables: Spark jobs, seconds on a big table. A tick first reads each table's current
snapshot summary from the table metadata, which the catalog loads anyway (`total-data-files`,
`total-delete-files`, `total-records`, `total-files-size`, its timestamp) and the number of
snapshots kept, and plans only the tables where these show debt:

    delete files     any delete file (`total-delete-files` > 0): the planner's ratio threshold
                     may be met in a small scope, so nothing less is safe
    small files      an estimate of them reaches `plan.min_small_files` (and min-input-files):
                     every data file when the average file is under the small size, and the
                     small files the last plan counted plus every data file added since
    snapshots        at least `plan.max_snapshots` kept (only then can that many expire)
    rewrite-all      the daily full rewrite is due (`plan.full_rewrite_at`)
    hot left         the last plan left hot partitions alone and the hot window has passed
    not planned      `fleet.replan_after` passed since this process last planned the table
                     (or first saw it): what the summary cannot show (manifests, a few small
                     files among big ones) is found by a periodic full plan
    no totals        the summary has no totals (an old writer): only a plan can tell

A table whose current snapshot is the one its last plan saw, and that plan found nothing
worth doing, is not planned again for the first three (they are functions of the snapshot);
the time-bound reasons (rewrite-all, hot left, not planned) still plan it.

Order: `score` = (estimated small files + delete files + 1) x (1 + hours since this process
first saw the debt). More small files and more live deletes come first; debt that waits grows
without bound, so no table starves behind tables whose debt keeps coming back.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from compactor.config import TableConfig
from compactor.plan import Plan, full_rewrite_due
from compactor.stats import TableStats

__all__ = [
    "AGE_UNIT",
    "Assessment",
    "Look",
    "Summary",
    "Track",
    "advance",
    "assess",
    "rank",
    "score",
]

_MIB = 1 << 20

AGE_UNIT = timedelta(hours=1)
"""Debt that has waited this long counts double, twice as long triple, and so on."""

# a hot partition left alone is looked at again no sooner than this, when the hot window is 0
# (only a live commit lease made it hot)
_MIN_RECHECK = timedelta(minutes=1)


def _int(summary: Mapping[str, Any], key: str) -> int | None:
    value = summary.get(key)
    try:
        return None if value is None else int(value)
    except (TypeError, ValueError):
        return None


@dataclass(frozen=True)
class Summary:
    """A table's current snapshot as its metadata says, read without a Spark job.

    Summary("lake.db.t", snapshot_id=7, committed_at=t, data_files=40, delete_files=0,
            records=1000, files_bytes=4 << 20, snapshots=3)
    Summary.of("lake.db.t", {"snapshot-id": 7, "timestamp-ms": ..., "summary": {...}}, 3)
    Summary("lake.db.t")            # a table without a snapshot (created, never written)

    The totals are None when the snapshot's summary lacks them (some old writers).
    """

    table: str
    snapshot_id: int | None = None
    committed_at: datetime | None = None
    data_files: int | None = None
    delete_files: int | None = None
    records: int | None = None
    files_bytes: int | None = None
    snapshots: int = 0
    # `lakelock.mode` of the current snapshot's commit (rewrite-all: the daily full rewrite)
    mode: str | None = None

    @classmethod
    def of(cls, table: str, snapshot: Mapping[str, Any] | None, snapshots: int) -> Summary:
        """From the current snapshot as Iceberg's `SnapshotParser.toJson` writes it (None:
        the table has no snapshot)."""
        if snapshot is None:
            return cls(table, snapshots=snapshots)
        summary = snapshot.get("summary") or {}
        return cls(
            table,
            snapshot_id=int(snapshot["snapshot-id"]),
            committed_at=datetime.fromtimestamp(int(snapshot["timestamp-ms"]) / 1000, tz=UTC),
            data_files=_int(summary, "total-data-files"),
            delete_files=_int(summary, "total-delete-files"),
            records=_int(summary, "total-records"),
            files_bytes=_int(summary, "total-files-size"),
            snapshots=snapshots,
            mode=summary.get("lakelock.mode"),
        )

    @property
    def avg_file_bytes(self) -> float | None:
        """Bytes per file, data and delete files together (the summary does not split them;
        delete files are small, so this errs towards planning)."""
        files = (self.data_files or 0) + (self.delete_files or 0)
        if self.files_bytes is None or not files:
            return None
        return self.files_bytes / files

    def as_dict(self) -> dict[str, Any]:
        return {
            "snapshot_id": self.snapshot_id,
            "committed_at": self.committed_at.isoformat() if self.committed_at else None,
            "data_files": self.data_files,
            "delete_files": self.delete_files,
            "records": self.records,
            "files_bytes": self.files_bytes,
            "snapshots": self.snapshots,
        }


@dataclass(frozen=True)
class Look:
    """What a full plan (or the stats after a run) showed this process about a table.

    Look.of_plan(stats, plan, now, hot_window=config.plan.hot_window)   # after planning
    Look.after_run(look, stats, now, done=True)   # after a run that did all it planned
    """

    snapshot_id: int | None
    at: datetime
    # the plan said run (False: nothing worth doing at this snapshot)
    found_work: bool
    data_files: int = 0
    small_files: int = 0
    # hot partitions with debt were left alone: the verdict holds until then
    recheck_at: datetime | None = None
    last_full_rewrite_at: datetime | None = None

    @classmethod
    def of_plan(
        cls, stats: TableStats, plan: Plan, now: datetime, *, hot_window: timedelta
    ) -> Look:
        totals = stats.totals()
        left_hot = any(
            p.hot is not None
            and p.group is None
            and (p.stats.small_files or p.stats.delete_files or p.stats.dangling_delete_files)
            for p in plan.partitions
        )
        return cls(
            snapshot_id=stats.current_snapshot_id,
            at=now,
            found_work=plan.run,
            data_files=totals.data_files,
            small_files=totals.small_files,
            recheck_at=now + max(hot_window, _MIN_RECHECK) if left_hot else None,
            last_full_rewrite_at=stats.last_full_rewrite_at,
        )

    @classmethod
    def after_run(
        cls, before: Look | None, stats: TableStats, now: datetime, *, done: bool
    ) -> Look:
        """The table after a run. `done`: every planned step ran (no group was held or left
        draining, nothing failed), so the planner's convergence says the new snapshot has
        nothing left worth doing; otherwise the next tick plans it again."""
        totals = stats.totals()
        return cls(
            snapshot_id=stats.current_snapshot_id,
            at=now,
            found_work=not done,
            data_files=totals.data_files,
            small_files=totals.small_files,
            recheck_at=before.recheck_at if before else None,
            last_full_rewrite_at=stats.last_full_rewrite_at,
        )


@dataclass(frozen=True)
class Track:
    """What this process remembers of a table between ticks."""

    first_seen_at: datetime
    # since when the table's summary has shown debt (its age, for the order)
    debt_seen_at: datetime | None = None
    looked: Look | None = None


@dataclass(frozen=True)
class Assessment:
    """One table at one tick: plan it (`debt` says why) or not (`healthy` says why)."""

    table: str
    summary: Summary
    debt: tuple[str, ...] = ()
    healthy: str | None = None
    score: float = 0.0
    small_files: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "plan": bool(self.debt),
            "debt": list(self.debt),
            "healthy": self.healthy,
            "score": round(self.score, 2),
            "small_files_estimate": self.small_files,
            "summary": self.summary.as_dict(),
        }


def assess(
    summary: Summary,
    config: TableConfig,
    track: Track | None,
    now: datetime,
    *,
    replan_after: timedelta | None,
) -> Assessment:
    """Whether `summary` shows debt worth a full plan now (see the module docstring)."""
    if summary.snapshot_id is None:
        return Assessment(summary.table, summary, healthy="no snapshot: never written")
    looked = track.looked if track else None
    small = _small_estimate(summary, looked, config.small_file_bytes)
    timed = _timed_reasons(summary, config, track, now, replan_after)
    own = _snapshot_reasons(summary, config, small)
    if own and looked and looked.snapshot_id == summary.snapshot_id and not looked.found_work:
        # the plan already judged this very snapshot: what the summary shows is below the
        # planner's thresholds (or in hot partitions, which `timed` brings back in time)
        quiet = f"unchanged since its plan at {looked.at:%Y-%m-%d %H:%M:%S} found nothing to do"
        own = []
        if not timed:
            return Assessment(summary.table, summary, healthy=quiet, small_files=small)
    debt = tuple(timed + own)
    if not debt:
        return Assessment(summary.table, summary, healthy=_healthy_text(summary), small_files=small)
    seen = track.debt_seen_at if track and track.debt_seen_at else now
    the_score = score(small, summary.delete_files or 0, age=now - seen)
    return Assessment(summary.table, summary, debt=debt, score=the_score, small_files=small)


def score(small_files: int, delete_files: int, *, age: timedelta) -> float:
    """The order of debt: more small files and deletes first, and the longer debt waits the
    higher it goes (see the module docstring)."""
    waited = max(age, timedelta(0)) / AGE_UNIT
    return (small_files + delete_files + 1) * (1 + waited)


def rank(assessments: Iterable[Assessment]) -> list[Assessment]:
    """Tables with debt first, highest score first (then the oldest snapshot, then by name);
    the healthy after them, by name."""

    def key(a: Assessment) -> tuple[int, float, datetime, str]:
        at = a.summary.committed_at or datetime.max.replace(tzinfo=UTC)
        return (0 if a.debt else 1, -a.score, at, a.table)

    return sorted(assessments, key=key)


def advance(track: Track | None, assessment: Assessment, now: datetime) -> Track:
    """The table's track after `assessment` at `now`: first seen, and since when in debt."""
    if track is None:
        track = Track(first_seen_at=now)
    if not assessment.debt:
        return replace(track, debt_seen_at=None)
    return replace(track, debt_seen_at=track.debt_seen_at or now)


def _small_estimate(summary: Summary, looked: Look | None, small_bytes: int) -> int:
    """How many data files may be small: every one when the average file is under the small
    size, and at least what the last plan counted plus every data file added since."""
    files = summary.data_files or 0
    avg = summary.avg_file_bytes
    estimate = files if avg is not None and avg < small_bytes else 0
    if looked is not None:
        estimate = max(estimate, looked.small_files + max(files - looked.data_files, 0))
    return min(estimate, files)


def _snapshot_reasons(summary: Summary, config: TableConfig, small: int) -> list[str]:
    """Reasons to plan that are functions of the snapshot (a plan of it may rule them out)."""
    if summary.data_files is None:
        return ["the snapshot summary has no totals: only a plan can tell"]
    reasons = []
    if summary.delete_files:
        reasons.append(f"{summary.delete_files} delete files")
    rdf = config.rewrite_data_files
    # as many small files as one partition's trigger may all be in one partition: it is due
    # (compactor.plan) even when the table as a whole is below min_small_files
    th = config.plan
    floor = max(min(th.min_small_files, th.trigger_small_files), rdf.min_input_files)
    if rdf.enabled and small >= floor:
        reasons.append(_small_text(summary, small, floor, config.small_file_bytes))
    expire = config.expire_snapshots
    if expire.enabled and summary.snapshots >= config.plan.max_snapshots:
        reasons.append(
            f"{summary.snapshots} snapshots kept (max_snapshots {config.plan.max_snapshots})"
        )
    return reasons


def _small_text(summary: Summary, small: int, floor: int, small_bytes: int) -> str:
    avg = summary.avg_file_bytes or 0.0
    return (
        f"~{small} small files of {summary.data_files} (avg {avg / _MIB:.2f} MiB, small < "
        f"{small_bytes / _MIB:.1f} MiB; threshold {floor})"
    )


def _timed_reasons(
    summary: Summary,
    config: TableConfig,
    track: Track | None,
    now: datetime,
    replan_after: timedelta | None,
) -> list[str]:
    """Reasons to plan that time brings, whatever the snapshot."""
    looked = track.looked if track else None
    reasons = []
    last_full = looked.last_full_rewrite_at if looked else None
    if last_full is None and summary.mode == "rewrite-all":
        last_full = summary.committed_at
    if full_rewrite_due(config.plan, last=last_full, now=now):
        reasons.append(f"daily rewrite-all due at {config.plan.full_rewrite_at:%H:%M} UTC")
    if looked and looked.recheck_at is not None and now >= looked.recheck_at:
        reasons.append("hot partitions left alone at the last plan have had time to cool")
    since = looked.at if looked else (track.first_seen_at if track else now)
    if replan_after is not None and now - since >= replan_after:
        reasons.append(f"not planned for {_hours(now - since)} (replan_after)")
    return reasons


def _hours(delta: timedelta) -> str:
    hours = delta.total_seconds() / 3600
    return f"{hours:.1f}h" if hours >= 1 else f"{delta.total_seconds() / 60:.0f}m"


def _healthy_text(summary: Summary) -> str:
    avg = summary.avg_file_bytes or 0.0
    return (
        f"no debt in its summary: {summary.data_files} data files (avg {avg / _MIB:.2f} MiB), "
        f"{summary.delete_files or 0} delete files, {summary.snapshots} snapshots"
    )
