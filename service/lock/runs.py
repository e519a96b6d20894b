"""Run reports: what a compactor did on a table, kept as it sent it, the newest few per table.

    report(conn, table=t, body=RunBody(...), by="compactor", keep=50)   the run's id
    recent(conn, table=t, limit=20)          [{run_id, reported_at, <the report's fields>}]

A report is audited (`run.reported`) under the table's row lock, so event ids on the table keep
following commit order (docs/design.md §3); reporting a run makes no table known.
"""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import delete, insert, select
from sqlalchemy.engine import Connection

from service.lock import audit, store
from service.lock.db import now, runs_t
from service.wire import EventName, RunBody

__all__ = ["recent", "report"]


def report(conn: Connection, *, table: str, body: RunBody, by: str, keep: int) -> int:
    """Store `body` as the table's newest run, reported by the token named `by` (the holder
    when the body names none); only the newest `keep` runs of the table stay. Its run id."""
    encoded = json.dumps(body.model_dump(mode="json"), sort_keys=True, default=str)
    locked = store.lock_table(conn, table, create=False)
    at = now(conn) if locked is None else locked[1]
    holder = body.holder or by
    inserted = conn.execute(
        insert(runs_t).values(
            table_name=table, reported_at=at, holder=holder, outcome=body.outcome, report=encoded
        )
    ).inserted_primary_key
    assert inserted is not None  # an insert of one row
    c = runs_t.c
    oldest = conn.execute(
        select(c.id).where(c.table_name == table).order_by(c.id.desc()).offset(keep - 1).limit(1)
    ).scalar()
    if oldest is not None:
        conn.execute(delete(runs_t).where(c.table_name == table, c.id < oldest))
    audit.record(
        conn,
        at=at,
        table=table,
        event=EventName.RUN_REPORTED,
        holder=holder,
        actor=by,
        outcome=body.outcome,
    )
    return int(inserted[0])


def recent(conn: Connection, *, table: str, limit: int) -> list[dict[str, Any]]:
    """The table's newest `limit` runs, newest first: each report's fields, with its `run_id`
    and `reported_at` (RFC 3339, UTC)."""
    c = runs_t.c
    rows = conn.execute(
        select(runs_t).where(c.table_name == table).order_by(c.id.desc()).limit(limit)
    )
    return [
        {
            "run_id": row.id,
            "reported_at": row.reported_at.isoformat() + "Z",
            **_decoded(row.report),
        }
        for row in rows
    ]


def _decoded(report: str) -> dict[str, Any]:
    try:
        decoded = json.loads(report)
    except (ValueError, RecursionError):
        # a report stored before the depth rule: one bad row must not hide the others
        return {"error": "this report cannot be decoded"}
    return decoded if isinstance(decoded, dict) else {"report": decoded}
