"""What ingest jobs report about their source: how far behind they are, and what they lost.

    report_lag(conn, table=t, body=LagBody(...), by="ingest")   IngestLag; the table's row made
    lag_of(conn, t, at)                                           IngestLag | None
    forget_lag(conn, t)                                           the table dropped or renamed
    most_behind(conn, limit=100, at=at)                           [(table, IngestLag)], most first
    record_gaps(conn, table=t, body=GapsBody(...), by="ingest")  GapsRecorded

Lag is measured by the job after each committed batch: per topic-partition, the latest offset
minus the batch's end. One row per table (`lakelock_ingest_lag`); a report replaces the one
before it. Like debt, lag is not lock state: a report writes no audit event and leaves the
table's version alone.

A gap is a range of offsets the source deleted before the job read it, which the job was told
to skip (`on_data_loss = "skip"`): each is an `ingest.gap` event on the table's audit trail, so
the loss is found where every other change to the table is.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.engine import Connection

from service.lock import audit, store
from service.lock.db import lag_t
from service.lock.rows import seconds
from service.wire import EventName, GapsBody, GapsRecorded, IngestLag, LagBody

__all__ = ["forget_lag", "lag_of", "most_behind", "record_gaps", "report_lag"]


def report_lag(conn: Connection, *, table: str, body: LagBody, by: str) -> IngestLag:
    """Store `body` as the table's lag, stamped with the database clock; the table's row is
    created on first use. Under the table's row lock, so reports are stored in answer order."""
    locked = store.lock_table(conn, table)
    assert locked is not None  # created
    _, at = locked
    values: dict[str, Any] = {
        "query_id": body.query_id,
        "batch_id": body.batch_id,
        "partitions": json.dumps(body.partitions, sort_keys=True),
        "records": sum(body.partitions.values()),
        "reported_at": at,
        "reported_by": by,
    }
    store.put_row(conn, lag_t, {"table_name": table}, values)
    return _view(values, at)


def forget_lag(conn: Connection, table: str) -> bool:
    """The table was dropped or renamed: the lag of the job that named it is forgotten;
    whether there was one."""
    return store.forget_rows(conn, lag_t, table) > 0


def lag_of(conn: Connection, table: str, at: datetime) -> IngestLag | None:
    """The table's latest lag, as seen at `at`; None when none was reported."""
    row = conn.execute(select(lag_t).where(lag_t.c.table_name == table)).first()
    return None if row is None else _view(row._asdict(), at)


def most_behind(conn: Connection, *, limit: int, at: datetime) -> list[tuple[str, IngestLag]]:
    """The `limit` tables whose ingest is furthest behind, most first."""
    rows = conn.execute(
        select(lag_t).order_by(lag_t.c.records.desc(), lag_t.c.table_name).limit(limit)
    )
    return [(row.table_name, _view(row._asdict(), at)) for row in rows]


def record_gaps(conn: Connection, *, table: str, body: GapsBody, by: str) -> GapsRecorded:
    """One `ingest.gap` event per gap, in the transaction of the table's row lock."""
    locked = store.lock_table(conn, table)
    assert locked is not None  # created
    _, at = locked
    for gap in body.gaps:
        audit.record(
            conn,
            at=at,
            table=table,
            event=EventName.INGEST_GAP,
            holder=by,
            actor=by,
            query_id=body.query_id,
            topic=gap.topic,
            partition=gap.partition,
            start=gap.start,
            end=gap.start + gap.records,
            records=gap.records,
        )
    return GapsRecorded(recorded=len(body.gaps), records_lost=sum(g.records for g in body.gaps))


def _view(row: dict[str, Any], at: datetime) -> IngestLag:
    partitions = row["partitions"]
    return IngestLag(
        query_id=row["query_id"],
        batch_id=row["batch_id"],
        partitions=json.loads(partitions) if isinstance(partitions, str) else partitions,
        records=row["records"],
        reported_by=row["reported_by"],
        reported_s_ago=max(0.0, seconds(at - row["reported_at"])),
    )
