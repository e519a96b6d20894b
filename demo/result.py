"""What a demo pipeline run leaves to judge it by (demo.pipeline): the files written, the batches
seen, the compactor's runs, the table's rows and health, and the checks and figures of them.

    result.verify()    [] when every key holds its latest values (and each goal was met)
    result.summary()   the figures of demo-summary.json (its counts: demo.pipeline's docstring)
    warm_samples(...)  the health samples after the compactor's warm-up
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from compactor.report import RunReport
from demo.generate import EventGenerator
from demo.health import Health
from demo.options import TOPIC, PipelineOptions
from ingest_gate.job.record import BatchRecord
from service.ops.iceberg_audit import SnapshotRecord
from service.wire.figures import quantile

__all__ = ["BatchSeen", "FileWritten", "PipelineResult", "warm_samples"]


@dataclass(frozen=True)
class FileWritten:
    path: str
    records: int
    at: float  # time.time() when the file appeared in the landing folder


@dataclass(frozen=True)
class BatchSeen:
    """A batch's record; `ended_at` is when its MERGE committed (time.time()), `started_at`
    that minus the batch's duration (it includes the gate wait)."""

    record: BatchRecord
    started_at: float
    ended_at: float
    query_run: int  # which start of the query (restarts after failures count up)


@dataclass
class PipelineResult:
    options: PipelineOptions
    generator: EventGenerator
    files: list[FileWritten]
    batches: list[BatchSeen]
    failed_batches: list[dict[str, Any]]
    compactions: list[RunReport]
    compaction_windows: list[tuple[float, float]]
    rows: list[dict[str, Any]]
    data_files_now: int
    events: list[dict[str, Any]] = field(default_factory=list)
    # the table's snapshots at the end, read from its metadata file (on local files or S3)
    # before the run stopped its storage: what `lakelock audit` checks against `events`
    snapshots: list[SnapshotRecord] = field(default_factory=list)
    warehouse: str = ""  # the local folder, or the S3 warehouse's URI
    # the table read with pyiceberg every `health_every_s` while the stream ran (demo.health)
    health: list[Health] = field(default_factory=list)
    duration_s: float = 0.0
    goals_missed: list[str] = field(default_factory=list)

    def verify(self) -> list[str]:
        """What is wrong with the table, compared with what the generator wrote; [] if nothing."""
        expected = {_key(r): r for r in self.generator.expected_rows()}
        actual: dict[tuple[Any, ...], dict[str, Any]] = {}
        problems: list[str] = list(self.goals_missed)
        for row in self.rows:
            if _key(row) in actual:
                problems.append(f"key {_key(row)} appears more than once")
            actual[_key(row)] = row
        missing = expected.keys() - actual.keys()
        extra = actual.keys() - expected.keys()
        if missing:
            problems.append(f"{len(missing)} keys missing, e.g. {sorted(missing)[:3]}")
        if extra:
            problems.append(f"{len(extra)} unexpected keys, e.g. {sorted(extra)[:3]}")
        stale = [k for k in expected.keys() & actual.keys() if expected[k] != actual[k]]
        if stale:
            k = sorted(stale)[0]
            problems.append(
                f"{len(stale)} keys do not hold their latest values, e.g. {k}: "
                f"table {actual[k]} != expected {expected[k]}"
            )
        return problems

    def max_ingest_wait_s(self) -> float:
        return max((b.record.gate_wait_s for b in self.batches), default=0.0)

    def warm(self) -> list[Health]:
        """The samples after the compactor's warm-up (see warm_samples)."""
        return warm_samples(
            self.health, self.compactions, compactions_on=self.options.compactions_on
        )

    def ingest_held(self) -> dict[str, float]:
        """Seconds the gate held batches (all waits, and of them backpressure), and their share
        of the run."""
        waited = sum(b.record.gate_wait_s for b in self.batches)
        pressed = sum(b.record.backpressure_s for b in self.batches)
        run = self.duration_s or 1.0
        return {
            "ingest_wait_s": round(waited, 2),
            "ingest_wait_share": round(waited / run, 4),
            "backpressure_s": round(pressed, 2),
            "backpressure_share": round(pressed / run, 4),
        }

    def summary(self) -> dict[str, Any]:
        compacted = [r for r in self.compactions if r.outcome == "compacted"]
        failed = [r for r in self.compactions if r.outcome in ("failed", "lease_lost")]
        last = compacted[-1] if compacted else None
        follow = [r for r in self.compactions if r.mode == "follow"]
        durations = [r.duration_s or 0.0 for r in follow if r.outcome == "compacted"]
        return {
            "mode": "coordinated" if self.options.coordinated else "uncoordinated",
            "compactor": "follow" if self.options.follows else "timer",
            "format": self.options.format,
            "source": self.options.source,
            "storage": self.options.storage,
            "duration_s": round(self.duration_s, 1),
            "events_generated": sum(self.generator.by_kind.values()),
            "distinct_keys_generated": len(self.generator.expected_rows()),
            "bad_records": self.generator.by_kind.get("bad", 0),
            "bad_records_dead_lettered": sum(b.record.bad_rows for b in self.batches),
            "records_skipped": sum(sum(b.record.skipped.values()) for b in self.batches),
            "deletes": sum(b.record.deletes for b in self.batches),
            "rows_in_table": len(self.rows),
            "batches": len(self.batches),
            "batches_merged": sum(b.record.outcome != "empty" for b in self.batches),
            "lease_scope": self.options.lease_scope,
            "batches_scoped": sum(isinstance(b.record.scope, list) for b in self.batches),
            "failed_batches": len(self.failed_batches),
            "compactions": len(compacted),
            "compaction_runs": len(self.compactions),
            "follow_runs": len(follow),
            "follow_run_p50_s": quantile(durations, 0.5, ndigits=3),
            "follow_run_p95_s": quantile(durations, 0.95, ndigits=3),
            "failed_compactions": len(failed),
            "data_files_before_last_compaction": (last.before or {}).get("data_files")
            if last
            else None,
            "data_files_after_last_compaction": (last.after or {}).get("data_files")
            if last
            else None,
            "data_files_now": self.data_files_now,
            "max_ingest_wait_s": round(
                max((b.record.gate_wait_s for b in self.batches), default=0), 3
            ),
            **self.ingest_held(),
            "compactor_hold_s": round(sum(r.hold_s or 0.0 for r in self.compactions), 2),
            "compactor_max_partition_hold_s": round(
                max((v for r in self.compactions for v in r.partition_hold_s.values()), default=0),
                2,
            ),
            **_worst_after_warmup(self.warm()),
            "warehouse": self.warehouse,
            "table": self.options.table,
            **(
                {"topic": f"{TOPIC} ({self.options.kafka_partitions} partitions)"}
                if self.options.source == "kafka"
                else {"landing": str((self.options.workdir / "landing").resolve())}
            ),
        }


def warm_samples(
    health: list[Health], compactions: list[RunReport], *, compactions_on: bool
) -> list[Health]:
    """The samples after the second compactor run ended (all of them without a compactor or
    before a second run): what the compaction cycle holds the table to."""
    starts = [r.started_at for r in compactions if r.started_at is not None]
    if not compactions_on or len(starts) < 2:
        return list(health)
    after = datetime.fromisoformat(starts[1]).timestamp() + (compactions[1].duration_s or 0)
    return [h for h in health if h.at >= after]


def _worst_after_warmup(samples: list[Health]) -> dict[str, Any]:
    """The worst partition the samples saw (after the warm-up), and the table's peak."""
    if not samples:
        return {"worst_partition_after_warmup": None}
    worst = max(
        ((name, f) for h in samples for name, f in h.partitions.items()),
        key=lambda nf: (nf[1].total, nf[0]),
        default=None,
    )
    return {
        "worst_partition_after_warmup": None
        if worst is None
        else f"{worst[0]}: {worst[1].data} data + {worst[1].deletes} delete files",
        "table_files_peak_after_warmup": max(h.data_files + h.delete_files for h in samples),
    }


def _key(row: dict[str, Any]) -> tuple[Any, ...]:
    return (row["event_id"], row["dt"], row["hr"])
