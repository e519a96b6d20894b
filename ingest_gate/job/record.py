"""What one micro-batch of the ingest job did: its `BatchRecord` (the JSON log line of
ingest_gate.job.run's step 7), and the `BatchHooks` tests put around its MERGE.

    BatchRecord(query_id, batch_id)      filled in as the batch runs; as_dict() is the line
    note_gate(record, gate_pass)         what the gate pass tells the record
    BatchHooks(before_merge, after_merge)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["BatchHooks", "BatchRecord", "note_gate"]


@dataclass
class BatchRecord:
    """What one micro-batch did; `as_dict()` is the JSON log line.

    outcome: committed | proceeded_without_lease | proceeded_after_lease_lost | ungated (the
             MERGE ran) | empty (no valid rows) | replayed (committed before) | timed_out |
             lease_lost | failed (nothing committed, the batch raised) | interrupted (the run
             was stopped while the batch ran; the next start runs it again)
    scope:   the partitions its commit lease covered, or "table"
    merge_filter: how its MERGE was limited to its partitions: exact, superset (see
             ingest_gate.job.merge), or None (the whole table)
    sources: files (or Kafka topic-partitions) read, last_source the last of them by name;
             rows_read: records; skipped: records skipped by reason (tombstone, DDL); changes:
             what the good records asked for (deletes of them); duplicates_dropped: changes
             another change of the same key superseded within the batch
    lag:     source kafka: records behind per topic-partition after the batch (latest offset
             minus the batch's end), as reported to the service
    """

    query_id: str
    batch_id: int
    sources: int = 0
    last_source: str | None = None
    rows_read: int = 0
    bad_rows: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    unknown_fields: int = 0
    unknown_names: list[str] = field(default_factory=list)
    changes: int = 0
    deletes: int = 0
    duplicates_dropped: int = 0
    rows_in_merge: int = 0
    rows_merged: int | None = None
    gate_wait_s: float = 0.0
    wait_reasons: list[str] = field(default_factory=list)
    backpressure_s: float = 0.0
    lease_calls_s: float = 0.0
    lease_id: str | None = None
    scope: list[str] | str = "table"
    merge_filter: str | None = None
    commit_s: float = 0.0
    snapshot_id: int | None = None
    # partitions whose files the commit counted per partition (summary), None: no counts
    written_partitions: int | None = None
    dead_letter_path: str | None = None
    outcome: str = "failed"
    error: str | None = None
    duration_s: float = 0.0
    lag: dict[str, int] | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class BatchHooks:
    """Test seams around the MERGE of a batch; each gets the batch id and the gate pass.

    `before_merge` runs inside the gate, before `check()` and the MERGE; `after_merge` after the
    Iceberg commit and before the checkpoint commit (raising there simulates a crash).
    """

    before_merge: Callable[[int, Any], None] | None = None
    after_merge: Callable[[int, Any], None] | None = None


def note_gate(record: BatchRecord, gate_pass: Any) -> None:
    """What the gate pass of the batch tells its record: its scope, wait and outcome, its lease."""
    info = gate_pass.as_dict()
    record.scope = info.get("scope", "table")
    record.gate_wait_s = info.get("waited_s", 0.0)
    record.wait_reasons = list(info.get("wait_reasons", []))
    record.backpressure_s = info.get("backpressure_s", 0.0)
    record.lease_calls_s = info.get("lease_calls_s", 0.0)
    if info.get("outcome"):
        record.outcome = info["outcome"]
    lease = gate_pass.lease
    if lease is not None:
        record.lease_id = lease.lease_id
