"""What a run did: one JSON log line, and a report in the service's run history.

    report = RunReport(table="local.db.events", run_uid="1f3a...", holder="compactor@host:42/1f3a")
    report.outcome = Outcome.COMPACTED
    publish(report, client=client)      # logs the line, POSTs /v1/tables/{table}/runs

Outcomes:

    compacted    the planned steps ran and changed the table
    no_change    the planned steps ran and every one changed nothing (the plan misjudged the
                 table: the lease was held for nothing, and a schedule should show none)
    skipped      nothing done: below thresholds (`reason` says which), maintenance held or off,
                 commit leases did not drain in time; no lease held, ingest untouched
    refused      a retention setting is below its floor; nothing ran
    unavailable  the service could not be reached or answered 5xx; nothing was compacted
    lease_lost   the lease was lost or revoked mid-run; Spark jobs cancelled, no further commit
    failed       a step or the planning failed; `error` holds the (Iceberg) message
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

from service.client import LeaseClient
from service.wire.errors import LakelockError

__all__ = [
    "EXIT_CODES",
    "Outcome",
    "RunReport",
    "changed_anything",
    "publish",
    "step_changed",
]

log = logging.getLogger("compactor.report")


class Outcome(StrEnum):
    """How a run ended (see the module docstring)."""

    COMPACTED = "compacted"
    NO_CHANGE = "no_change"
    SKIPPED = "skipped"
    REFUSED = "refused"
    UNAVAILABLE = "unavailable"
    LEASE_LOST = "lease_lost"
    FAILED = "failed"


# `run --once` exit status: 0 when the run did what it should, else non-zero
EXIT_CODES = {
    Outcome.COMPACTED: 0,
    Outcome.NO_CHANGE: 0,
    Outcome.SKIPPED: 0,
    Outcome.FAILED: 1,
    Outcome.LEASE_LOST: 1,
    Outcome.UNAVAILABLE: 1,
    Outcome.REFUSED: 2,
}


@dataclass
class RunReport:
    """Everything a run reports; `as_dict()` is the body sent to the service.

    `run_uid` is the compactor's name for the run (in its holder, request id, Spark job group
    and the `lakelock.run-uid` snapshot property); the service numbers stored reports `run_id`.
    """

    table: str
    run_uid: str
    holder: str
    outcome: Outcome = Outcome.FAILED
    reason: str | None = None
    error: str | None = None
    mode: str | None = None
    where: str | None = None
    plan_reasons: list[str] = field(default_factory=list)
    steps: list[dict[str, Any]] = field(default_factory=list)
    before: dict[str, Any] | None = None
    after: dict[str, Any] | None = None
    # "partitions" or "table"; whole_table says why every lease covered the whole table
    lease_scope: str | None = None
    whole_table: str | None = None
    # one entry a lease asked for, in order: partitions (None: whole table), hot, lease_id,
    # token, lease_wait_s, held_s, steps [{procedure, outcome}], outcome, reason, error
    groups: list[dict[str, Any]] = field(default_factory=list)
    # the run's first lease (every lease: `groups`); hold_s and lease_wait_s sum over groups
    lease_id: str | None = None
    token: int | None = None
    lease_wait_s: float | None = None
    hold_s: float | None = None
    duration_s: float | None = None
    started_at: str | None = None
    snapshot_before: int | None = None
    snapshot_after: int | None = None
    # seconds each partition's writers were held by this run: its group's drain (the intent
    # refuses new commits from the first ask) plus its lease, plus its backpressure before its
    # group began (a partition past the hard bound)
    partition_hold_s: dict[str, float] = field(default_factory=dict)
    # the partitions past the hard bound whose writers the run held back (backpressure), and
    # the groups left for the next run when `plan.run_budget` ran out
    backpressure: list[str] = field(default_factory=list)
    left_for_next_run: list[list[str] | None] = field(default_factory=list)
    # the partitions whose files the run's steps rewrote, as its leases' releases reported
    # them compacted to the service (which zeroes their counts: docs/jobs.md §3)
    compacted: list[str] = field(default_factory=list)

    def add_hold(self, partitions: Iterable[str], seconds: float) -> None:
        """Add `seconds` to the hold of each of `partitions` (`partition_hold_s`)."""
        for name in partitions:
            self.partition_hold_s[name] = self.partition_hold_s.get(name, 0.0) + seconds

    def backpressured(self, partitions: Iterable[str] | None) -> set[str]:
        """Those of `partitions` whose writers the run's backpressure holds."""
        return set(partitions or ()) & set(self.backpressure)

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["outcome"] = str(self.outcome)
        for key in ("lease_wait_s", "hold_s", "duration_s"):
            if out[key] is not None:
                out[key] = round(out[key], 3)
        out["partition_hold_s"] = {k: round(v, 3) for k, v in self.partition_hold_s.items()}
        for group in out["groups"]:
            for key in ("lease_wait_s", "held_s"):
                if group.get(key) is not None:
                    group[key] = round(group[key], 3)
            if group.get("outcome") is not None:
                group["outcome"] = str(group["outcome"])
        return out

    def totals(self) -> dict[str, int]:
        """Procedure outputs summed over the steps (`rewritten_data_files`, ...)."""
        sums: dict[str, int] = {}
        for step in self.steps:
            for key, value in (step.get("output") or {}).items():
                if isinstance(value, int):
                    sums[key] = sums.get(key, 0) + value
        return sums


def changed_anything(report: RunReport) -> bool:
    """Whether the steps of `report` changed the table: a new current snapshot, or any step
    output that counts rewritten, added, removed, deleted or expired things."""
    if report.snapshot_after is not None and report.snapshot_after != report.snapshot_before:
        return True
    return any(step_changed(step) for step in report.steps)


def step_changed(step: Mapping[str, Any]) -> bool:
    """Whether a step's output counts rewritten, added, removed, deleted or expired things:
    files that failed, files left as they were and file groups planned are not changes."""
    return any(
        value
        for key, value in (step.get("output") or {}).items()
        if isinstance(value, int)
        and not key.startswith(("failed_", "skipped_"))
        and key != "file_groups"
    )


def publish(report: RunReport, *, client: LeaseClient | None) -> int | None:
    """Log `report` as one JSON line and store it on the service; the run id, or None.

    A report the service cannot take is logged at error level and not retried (the JSON line
    remains the record); the run's outcome does not change because of it.
    """
    body = report.as_dict()
    body["summary"] = report.totals()
    log.info(json.dumps({"event": "compactor.run", **body}, sort_keys=True, default=str))
    if client is None:
        return None
    try:
        return client.report_run(report.table, body)
    except LakelockError as exc:
        log.error("could not store the report of run %s on the service: %s", report.run_uid, exc)
        return None
