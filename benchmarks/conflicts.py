"""Conflicts with and without lakelock: the same workload run twice, then compared.

    python -m benchmarks.conflicts                      # ~3 min per mode
    python -m benchmarks.conflicts --duration-s 40 --compact-every-s 3 --out var/conflicts-small

Each mode runs demo.pipeline.Pipeline: continuous upserts with a short trigger interval and the
compactor on a short schedule over the same (hot) partitions. `uncoordinated` first: the ingest
gate grants at once and the compactor's lease always says yes, so both go straight to Iceberg;
then `coordinated`: both through a lakelock service. For each mode:

    failed streaming batches (and their Iceberg messages), failed compactions, compaction
    success rate, data files at the end, ingest stall per compaction (p50/max), resume latency
    (maintenance release -> next commit lease), end-to-end freshness (p50/p99), maintenance
    leases taken, how many of them changed nothing (the goal is 0: a lease holds ingest) and
    the total seconds ingest was held

Definitions, chosen to mean the same in both modes:
- ingest stall of a compaction run: the longest gap between two successive ingest commits that
  overlaps the run's window (so it counts a gate wait and a failed-and-restarted batch alike),
  next to the run's own duration;
- freshness of a landing file: from the file's appearance to the commit of the first
  successful batch that started after it (the file source lists files when a batch starts);
- resume latency: from the service's audit trail (database clock), coordinated mode only;
- maintenance leases: runs that held the lease (in `uncoordinated`, the lease that always says
  yes); one changed nothing when no step rewrote, removed or expired anything;
- ingest held: from the audit trail, the sum over maintenance leases of the time from the
  intent (or the grant, when no commit had to drain) to the release; coordinated mode only.

Writes `report.md` (a table per mode and the failure messages), `conflicts.png` (a timeline:
commits, failed batches and compaction runs on a time axis) and `results.json` into `--out`.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from benchmarks.modes import (
    add_workload_arguments,
    compare,
    run_pipeline,
    side_by_side,
)
from compactor.report import changed_anything
from demo.result import PipelineResult
from service.wire import EventName
from service.wire.figures import quantile

__all__ = [
    "ModeFigures",
    "figures",
    "ingest_held_s",
    "main",
    "render_markdown",
    "render_timeline",
]

ModeFigures = dict[str, Any]


def _stalls(result: PipelineResult) -> list[float]:
    commits = sorted(b.ended_at for b in result.batches)
    stalls = []
    for start, end in result.compaction_windows:
        gaps = [
            b - a
            for a, b in itertools.pairwise(commits)
            if a < end and b > start  # the gap overlaps the run
        ]
        stalls.append(max(gaps, default=end - start))
    return stalls


def _resume_latencies(result: PipelineResult) -> list[float]:
    events = sorted(result.events, key=lambda e: e["id"])
    latencies = []
    released_at: datetime | None = None
    for event in events:
        at = datetime.fromisoformat(event["at"].removesuffix("Z"))
        if event["kind"] == "maintenance" and event["event"] in (
            EventName.LEASE_RELEASED,
            EventName.LEASE_EXPIRED,
            EventName.LEASE_REVOKED,
        ):
            released_at = at
        elif (
            event["event"] == EventName.LEASE_ACQUIRED and event["kind"] == "commit" and released_at
        ):
            latencies.append((at - released_at).total_seconds())
            released_at = None
    return latencies


_MAINTENANCE_ENDS = (EventName.LEASE_RELEASED, EventName.LEASE_EXPIRED, EventName.LEASE_REVOKED)


def ingest_held_s(events: Sequence[dict[str, Any]]) -> float | None:
    """Seconds during which the maintenance side held ingest, from the service's audit events:
    from an intent (or a grant, when no commit had to drain) to the lease's end."""
    if not events:
        return None
    total = 0.0
    held_from: datetime | None = None
    leased = False
    for event in sorted(events, key=lambda e: e["id"]):
        if event["kind"] != "maintenance" and event["event"] != EventName.INTENT_EXPIRED:
            continue
        at = datetime.fromisoformat(event["at"].removesuffix("Z"))
        if event["event"] in (EventName.INTENT_OPENED, EventName.LEASE_ACQUIRED):
            held_from = held_from or at
            leased = leased or event["event"] == EventName.LEASE_ACQUIRED
        elif held_from and (
            event["event"] in _MAINTENANCE_ENDS
            or (event["event"] == EventName.INTENT_EXPIRED and not leased)
        ):
            total += (at - held_from).total_seconds()
            held_from, leased = None, False
    return round(total, 3)


def _freshness(result: PipelineResult) -> list[float]:
    batches = sorted(result.batches, key=lambda b: b.started_at)
    out = []
    for written in result.files:
        visible = next((b.ended_at for b in batches if b.started_at >= written.at), None)
        if visible is not None:
            out.append(visible - written.at)
    return out


def figures(result: PipelineResult) -> ModeFigures:
    """The compared figures of one mode."""
    runs = [r for r in result.compactions if r.outcome != "skipped"]
    # a run that changed nothing did not fail: it is counted apart (no_change_leases)
    compacted = [r for r in runs if r.outcome in ("compacted", "no_change")]
    failed = [r for r in runs if r.outcome not in ("compacted", "no_change")]
    stalls = _stalls(result)
    durations = [end - start for start, end in result.compaction_windows]
    resume = _resume_latencies(result)
    fresh = _freshness(result)
    leased = [r for r in result.compactions if r.lease_id is not None]
    return {
        "mode": "coordinated" if result.options.coordinated else "uncoordinated",
        "ran_s": round(result.duration_s, 1),
        "batches": len(result.batches),
        "failed_batches": len(result.failed_batches),
        "failed_batch_messages": sorted({f["error"][:200] for f in result.failed_batches}),
        "compaction_runs": len(runs),
        "failed_compactions": len(failed),
        "failed_compaction_messages": sorted({(r.error or r.outcome)[:200] for r in failed}),
        "compaction_success_rate": round(len(compacted) / len(runs), 3) if runs else None,
        "data_files_at_end": result.data_files_now,
        "stall_p50_s": quantile(stalls, 0.5, ndigits=3),
        "stall_max_s": round(max(stalls), 3) if stalls else None,
        "compaction_duration_p50_s": quantile(durations, 0.5, ndigits=3),
        "resume_latency_p50_s": quantile(resume, 0.5, ndigits=3),
        "resume_latency_max_s": round(max(resume), 3) if resume else None,
        "freshness_p50_s": quantile(fresh, 0.5, ndigits=3),
        "freshness_p99_s": quantile(fresh, 0.99, ndigits=3),
        "maintenance_leases": len(leased),
        "no_change_leases": sum(1 for r in leased if not changed_anything(r)),
        "ingest_held_s": ingest_held_s(result.events),
        "rows_correct": not result.verify(),
        "timeline": {
            "commits": [b.ended_at for b in result.batches],
            "failed_batches": [f["at"] for f in result.failed_batches],
            "compactions": [
                [start, end, r.outcome]
                for (start, end), r in zip(result.compaction_windows, runs, strict=False)
            ],
        },
    }


_ROWS = [
    ("failed streaming batches", "failed_batches"),
    ("failed compactions", "failed_compactions"),
    ("compaction runs", "compaction_runs"),
    ("compaction success rate", "compaction_success_rate"),
    ("data files at the end", "data_files_at_end"),
    ("ingest stall per compaction p50 (s)", "stall_p50_s"),
    ("ingest stall per compaction max (s)", "stall_max_s"),
    ("compaction duration p50 (s)", "compaction_duration_p50_s"),
    ("resume latency p50 (s)", "resume_latency_p50_s"),
    ("resume latency max (s)", "resume_latency_max_s"),
    ("freshness p50 (s)", "freshness_p50_s"),
    ("freshness p99 (s)", "freshness_p99_s"),
    ("maintenance leases taken", "maintenance_leases"),
    ("leases that changed nothing (goal 0)", "no_change_leases"),
    ("ingest held by maintenance, total (s)", "ingest_held_s"),
    ("micro-batches committed", "batches"),
    ("table correct at the end", "rows_correct"),
]


def render_markdown(modes: list[ModeFigures], *, command: str) -> str:
    return side_by_side("# Conflicts with and without lakelock", command, modes, _ROWS)


def render_timeline(modes: list[ModeFigures], path: Path) -> None:
    """A PNG: per mode, ingest commits, failed batches and compaction runs on a time axis."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(modes), 1, figsize=(11, 2.4 * len(modes)), squeeze=False)
    for ax, mode in zip(axes[:, 0], modes, strict=True):
        t = mode["timeline"]
        points = t["commits"] + t["failed_batches"] + [c[0] for c in t["compactions"]]
        origin = min(points, default=0.0)
        ax.scatter(
            [c - origin for c in t["commits"]],
            [1] * len(t["commits"]),
            marker="|",
            s=120,
            color="tab:blue",
            label="ingest commit",
        )
        ax.scatter(
            [f - origin for f in t["failed_batches"]],
            [1] * len(t["failed_batches"]),
            marker="x",
            s=60,
            color="tab:red",
            label="failed batch",
        )
        for start, end, outcome in t["compactions"]:
            ok = outcome in ("compacted", "no_change")
            ax.barh(
                0,
                end - start,
                left=start - origin,
                height=0.5,
                color="tab:green" if ok else "tab:red",
                alpha=0.7,
            )
        ax.set_yticks([0, 1], ["compaction", "ingest"])
        ax.set_ylim(-0.6, 1.6)
        ax.set_title(
            f"{mode['mode']}: {mode['failed_batches']} failed batches, "
            f"{mode['failed_compactions']}/{mode['compaction_runs']} failed compactions"
        )
        ax.set_xlabel("seconds")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


MODES = ("uncoordinated", "coordinated")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.conflicts", description=__doc__)
    add_workload_arguments(
        parser, duration_s=180.0, compact_every_s=8.0, out=Path("var/conflicts"), modes=MODES
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)

    def run(mode: str) -> ModeFigures:
        # whole-table leases, as these figures were first measured; benchmarks/scopes.py
        # compares them with partition scopes
        result = run_pipeline(args, mode, coordinated=mode == "coordinated", lease_scope="table")
        return figures(result)

    return compare("conflicts", args, argv, MODES, run, render_markdown, render_timeline)


if __name__ == "__main__":
    sys.exit(main())
