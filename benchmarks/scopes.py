"""Whole-table leases against partition-scoped ones: the same workload run in both modes.

    python -m benchmarks.scopes                         # 4 min per mode
    python -m benchmarks.scopes --duration-s 60 --out var/scopes-small

The workload is the one scopes are for: streaming upserts into the newest hour partitions
(updates and late updates only to keys of the last `--update-window-h` event hours, so older
partitions go cold) and the compactor on a short schedule, preferring partitions no commit
touched within `--hot-window-s`. Both modes run demo.pipeline.Pipeline through a lakelock
service; they differ only in the lease scope of both jobs:

    table        every commit lease and every maintenance lease covers the whole table
    partitions   the gate leases each micro-batch's partitions; the compactor one lease per
                 group of partitions it rewrites (docs/design.md §4)

For each mode:

    ingest held       seconds micro-batches waited at the gate for a maintenance lease or an
                      intent (the gate's own measure, `gate_wait_s` of the batches whose wait
                      reasons were maintenance or intent): in total, and per maintenance lease
                      (one per compaction group; p50 / max), a batch's wait counted for every
                      lease it overlapped in time and intersected in scope; and the most any
                      lease on cold partitions held ingest (a scoped lease none of whose
                      partitions a batch committed to within the hot window around it)
    failed batches, compaction runs and success rate, maintenance leases taken
    data files per partition at the end (read with pyiceberg from the metadata, not Spark)
    rows correct      the table holds exactly the distinct keys with their latest values

Writes `report.md`, `scopes.png` (per mode: which partitions were leased when, and when ingest
waited) and `results.json` into `--out`.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from benchmarks.conflicts import figures as conflict_figures
from benchmarks.modes import (
    add_workload_arguments,
    compare,
    run_pipeline,
    side_by_side,
)
from demo.result import PipelineResult
from service.ops.iceberg_audit import metadata_file
from service.wire import EventName
from service.wire.figures import quantile

__all__ = ["LeaseSpan", "figures", "files_per_partition", "ingest_held", "lease_spans", "main"]

MODES = ("table", "partitions")
_BLOCKED_BY = {"maintenance", "intent"}
_ENDS = (EventName.LEASE_RELEASED, EventName.LEASE_EXPIRED, EventName.LEASE_REVOKED)


@dataclass(frozen=True)
class LeaseSpan:
    """A maintenance lease from its intent (or grant) to its end, in seconds since the epoch."""

    lease_id: str
    start: float
    granted: float
    end: float
    partitions: frozenset[str] | None  # None: the whole table


def _epoch(at: str) -> float:
    return datetime.fromisoformat(at.removesuffix("Z")).replace(tzinfo=UTC).timestamp()


def lease_spans(events: Sequence[dict[str, Any]], *, until: float) -> list[LeaseSpan]:
    """Every maintenance lease of the audit trail; one still live at the end ends at `until`."""
    intents: dict[str, float] = {}
    granted: dict[str, tuple[float, dict[str, Any]]] = {}
    spans = []
    for event in sorted(events, key=lambda e: e["id"]):
        at, detail = _epoch(event["at"]), event.get("detail") or {}
        if event["event"] == EventName.INTENT_OPENED:
            intents.setdefault(detail["request_id"], at)
        elif event["event"] == EventName.LEASE_ACQUIRED and event["kind"] == "maintenance":
            granted[event["lease_id"]] = (at, event)
        elif event["event"] in _ENDS and event["lease_id"] in granted:
            at_grant, grant = granted.pop(event["lease_id"])
            spans.append(_span(grant, at_grant, at, intents))
    spans += [_span(grant, at, until, intents) for at, grant in granted.values()]
    return sorted(spans, key=lambda s: s.start)


def _span(grant: dict[str, Any], at: float, end: float, intents: dict[str, float]) -> LeaseSpan:
    detail = grant.get("detail") or {}
    partitions = detail.get("partitions")
    return LeaseSpan(
        lease_id=grant["lease_id"],
        start=min(intents.pop(detail.get("request_id"), at), at),
        granted=at,
        end=end,
        partitions=None if partitions is None else frozenset(partitions),
    )


def _waited(batch: Any) -> bool:
    return batch.record.gate_wait_s > 0 and bool(_BLOCKED_BY & set(batch.record.wait_reasons))


def _wait(batch: Any) -> tuple[float, float]:
    """When the batch waited at the gate: right before its MERGE, which ended at `ended_at`."""
    granted = batch.ended_at - batch.record.commit_s
    return granted - batch.record.gate_wait_s, granted


def _scope(record: Any) -> frozenset[str] | None:
    return None if record.scope == "table" else frozenset(record.scope)


def _meets(a: frozenset[str] | None, b: frozenset[str] | None) -> bool:
    return a is None or b is None or bool(a & b)


def ingest_held(result: PipelineResult, spans: list[LeaseSpan]) -> dict[str, Any]:
    """How long ingest waited for maintenance: in total, per lease, and for cold leases (on
    partitions no batch committed to within the hot window before, during or after the lease;
    a whole-table lease is never cold)."""
    hot_window_s = result.options.hot_window.total_seconds()
    waits = [(*_wait(batch), batch.record) for batch in result.batches if _waited(batch)]
    per_lease, cold = [], []
    for span in spans:
        held = sum(
            min(end, span.end) - max(start, span.start)
            for start, end, record in waits
            if start < span.end and span.start < end and _meets(_scope(record), span.partitions)
        )
        per_lease.append(held)
        if span.partitions is not None and not any(
            span.start - hot_window_s < b.ended_at < span.end + hot_window_s
            and _meets(_scope(b.record), span.partitions)
            for b in result.batches
            if b.record.outcome != "empty"
        ):
            cold.append(held)
    return {
        "ingest_held_total_s": round(sum(r.gate_wait_s for _, _, r in waits), 3),
        "ingest_held_per_lease_p50_s": quantile(per_lease, 0.5, ndigits=3),
        "ingest_held_per_lease_max_s": round(max(per_lease), 3) if spans else None,
        "cold_leases": len(cold),
        "cold_lease_ingest_held_max_s": round(max(cold), 3) if cold else None,
        "batches_that_waited": len(waits),
    }


def files_per_partition(warehouse: Path, table: str) -> dict[str, int]:
    """Live data files per partition path, from the table's current metadata (pyiceberg)."""
    from pyiceberg.table import StaticTable

    iceberg = StaticTable.from_metadata(str(metadata_file(warehouse, table)))
    spec, schema = iceberg.spec(), iceberg.schema()
    counts: Counter[str] = Counter()
    for task in iceberg.scan().plan_files():
        counts[spec.partition_to_path(task.file.partition, schema)] += 1
    return dict(sorted(counts.items()))


def figures(mode: str, result: PipelineResult) -> dict[str, Any]:
    base = conflict_figures(result)
    spans = lease_spans(result.events, until=result.batches[-1].ended_at if result.batches else 0)
    files = files_per_partition(result.options.workdir / "warehouse", result.options.table)
    origin = min([b.started_at for b in result.batches] + [s.start for s in spans], default=0.0)
    return {
        "mode": mode,
        "ran_s": base["ran_s"],
        "batches": base["batches"],
        "failed_batches": base["failed_batches"],
        "failed_batch_messages": base["failed_batch_messages"],
        "compaction_runs": base["compaction_runs"],
        "compaction_success_rate": base["compaction_success_rate"],
        "failed_compaction_messages": base["failed_compaction_messages"],
        "maintenance_leases": len(spans),
        **ingest_held(result, spans),
        "partitions": len(files),
        "data_files": sum(files.values()),
        "data_files_per_partition_median": statistics.median(files.values()) if files else None,
        "data_files_per_partition_max": max(files.values(), default=None),
        "data_files_per_partition": files,
        "rows_correct": not result.verify(),
        "timeline": {
            "leases": [
                [s.start - origin, s.granted - origin, s.end - origin, _names(s.partitions)]
                for s in spans
            ],
            "commits": [
                [b.ended_at - origin, _names(_scope(b.record))]
                for b in result.batches
                if b.record.outcome != "empty"
            ],
            "waits": [
                [_wait(b)[0] - origin, b.record.gate_wait_s] for b in result.batches if _waited(b)
            ],
        },
    }


def _names(scope: frozenset[str] | None) -> list[str] | None:
    return None if scope is None else sorted(scope)


_ROWS = [
    ("ingest held by maintenance, total (s)", "ingest_held_total_s"),
    ("ingest held per maintenance lease, p50 (s)", "ingest_held_per_lease_p50_s"),
    ("ingest held per maintenance lease, max (s)", "ingest_held_per_lease_max_s"),
    ("leases on cold partitions", "cold_leases"),
    ("ingest held by a cold lease, max (s)", "cold_lease_ingest_held_max_s"),
    ("micro-batches that waited for maintenance", "batches_that_waited"),
    ("micro-batches committed", "batches"),
    ("failed streaming batches", "failed_batches"),
    ("maintenance leases taken", "maintenance_leases"),
    ("compaction runs", "compaction_runs"),
    ("compaction success rate", "compaction_success_rate"),
    ("partitions at the end", "partitions"),
    ("data files per partition, median", "data_files_per_partition_median"),
    ("data files per partition, max", "data_files_per_partition_max"),
    ("rows = distinct keys with latest values", "rows_correct"),
]


def render_markdown(modes: list[dict[str, Any]], *, command: str) -> str:
    lines = [side_by_side("# Whole-table leases against partition scopes", command, modes, _ROWS)]
    for mode in modes:
        lines += [f"{mode['mode']}, data files per partition at the end:", ""]
        lines += [f"- `{name}`: {n}" for name, n in mode["data_files_per_partition"].items()]
        lines.append("")
    return "\n".join(lines)


def render_timeline(modes: list[dict[str, Any]], path: Path) -> None:
    """A PNG, one panel per mode: a row per partition with its maintenance leases (the drain
    lighter, the lease darker; whole-table leases across every row) and ingest commits, and a
    row of ingest waits."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = sorted(
        {n for m in modes for lease in m["timeline"]["leases"] for n in lease[3] or []}
        | {n for m in modes for commit in m["timeline"]["commits"] for n in commit[1] or []}
    )
    rows = {name: i + 1 for i, name in enumerate(names)}
    height = max(3.0, 0.28 * (len(names) + 2))
    fig, axes = plt.subplots(len(modes), 1, figsize=(12, height * len(modes)), squeeze=False)
    for ax, mode in zip(axes[:, 0], modes, strict=True):
        t = mode["timeline"]
        for start, granted, end, partitions in t["leases"]:
            targets = [rows[n] for n in partitions] if partitions else list(rows.values())
            for y in targets:
                ax.barh(y, granted - start, left=start, height=0.7, color="tab:olive", alpha=0.4)
                ax.barh(y, end - granted, left=granted, height=0.7, color="tab:green", alpha=0.7)
        for at, partitions in t["commits"]:
            targets = [rows[n] for n in partitions] if partitions else [0]
            ax.scatter([at] * len(targets), targets, marker="|", s=40, color="tab:blue")
        for at, waited in t["waits"]:
            ax.barh(0, waited, left=at, height=0.7, color="tab:red")
        ax.set_yticks([0, *rows.values()], ["ingest waits / table", *names], fontsize=7)
        ax.set_title(
            f"{mode['mode']} leases: ingest held {mode['ingest_held_total_s']} s in total, "
            f"{mode['failed_batches']} failed batches, "
            f"{mode['maintenance_leases']} maintenance leases"
        )
        ax.set_xlabel(
            "seconds (blue: a commit to the partition; green: its maintenance lease, "
            "olive: draining; red: ingest waiting for maintenance)"
        )
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.scopes", description=__doc__)
    add_workload_arguments(
        parser, duration_s=240.0, compact_every_s=10.0, out=Path("var/scopes"), modes=MODES
    )
    parser.add_argument("--update-window-h", type=float, default=2.0, help="in event time")
    parser.add_argument("--hot-window-s", type=float, default=20.0, help="in real time")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)

    def run(mode: str) -> dict[str, Any]:
        result = run_pipeline(
            args,
            mode,
            lease_scope=mode,
            update_window=timedelta(hours=args.update_window_h),
            hot_window=timedelta(seconds=args.hot_window_s),
        )
        return figures(mode, result)

    return compare("scopes", args, argv, MODES, run, render_markdown, render_timeline)


if __name__ == "__main__":
    sys.exit(main())
