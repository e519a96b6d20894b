"""The append-only audit trail: one row per grant, state-changing denial, renew failure, release,
expiry, revoke, intent and switch change.

`record()` runs in the caller's transaction, so an event exists exactly when its change does.
Each recorded event is also appended to `service.lock.db.recorded_events` when the caller
(`db.run_transaction`) set it, so metrics and logs follow the committed transitions without
another query.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, insert, select
from sqlalchemy.engine import Connection

from service.lock.db import Hot, events_t, keyset, recorded_events
from service.wire import Event, EventName

__all__ = ["committed_under", "last_for_lease", "recent", "record"]

_LIFECYCLE = (
    EventName.LEASE_ACQUIRED,
    EventName.LEASE_RELEASED,
    EventName.LEASE_EXPIRED,
    EventName.LEASE_REVOKED,
)

_COLUMNS = ("at", "table_name", "event", "lease_id", "kind", "holder", "token", "actor", "detail")
# every transition writes one: a statement of the hot path (db.Hot)
_INSERT = Hot(insert(events_t).values({c: bindparam(c) for c in _COLUMNS}))


def record(
    conn: Connection,
    *,
    at: datetime,
    table: str,
    event: EventName,
    lease_id: str | None = None,
    kind: str | None = None,
    holder: str | None = None,
    token: int | None = None,
    actor: str,
    **detail: Any,
) -> None:
    """Append one event; `actor` is the token (its name) whose call made it, or
    `rows.SYSTEM` for what the service does by itself (expiry): every event names one."""
    row = {
        "at": at,
        "table_name": table,
        "event": EventName(event).value,  # a name of no event is a ValueError
        "lease_id": lease_id,
        "kind": kind,
        "holder": holder,
        "token": token,
        "actor": actor,
        "detail": json.dumps(detail, sort_keys=True, default=str) if detail else None,
    }
    _INSERT.run(conn, **row)
    recorded = recorded_events.get()
    if recorded is not None:
        recorded.append({**row, "detail": detail})


def _event(row: Any) -> Event:
    return Event(
        id=row.id,
        at=row.at,
        table=row.table_name,
        event=row.event,
        lease_id=row.lease_id,
        kind=row.kind,
        holder=row.holder,
        token=row.token,
        actor=row.actor,
        detail=json.loads(row.detail) if row.detail else {},
    )


def recent(
    conn: Connection,
    *,
    table: str | None = None,
    limit: int = 100,
    shown: Callable[[str], bool] | None = None,
) -> list[Event]:
    """The newest `limit` events, newest first, of one table or of all; `shown` leaves out
    the events of the tables it is false for (read on in batches until `limit` are found or
    the trail ends)."""
    query = select(events_t)
    if table is not None:
        query = query.where(events_t.c.table_name == table)
    if shown is None:
        return [
            _event(row) for row in conn.execute(query.order_by(events_t.c.id.desc()).limit(limit))
        ]
    found: list[Event] = []
    for row in keyset(conn, query, events_t.c.id, descending=True, batch=_EVENTS_READ):
        if shown(row.table_name):
            found.append(_event(row))
            if len(found) == limit:
                break
    return found


# events read per query while filling a filtered page
_EVENTS_READ = 1000


def recent_holds(conn: Connection, table: str, *, limit: int = 20) -> list[float]:
    """How long the table's last `limit` released maintenance leases were held, in seconds,
    newest first (their end events' `held_s`)."""
    rows = conn.execute(
        select(events_t.c.detail)
        .where(
            events_t.c.table_name == table,
            events_t.c.event == EventName.LEASE_RELEASED,
            events_t.c.kind == "maintenance",
        )
        .order_by(events_t.c.id.desc())
        .limit(limit)
    )
    held = (json.loads(row.detail).get("held_s") if row.detail else None for row in rows)
    return [float(s) for s in held if isinstance(s, int | float)]


def last_for_lease(conn: Connection, lease_id: str) -> Event | None:
    """The newest grant or end event of `lease_id`, or None if the trail never saw it."""
    row = conn.execute(
        select(events_t)
        .where(events_t.c.lease_id == lease_id, events_t.c.event.in_(_LIFECYCLE))
        .order_by(events_t.c.id.desc())
        .limit(1)
    ).first()
    return None if row is None else _event(row)


def committed_under(conn: Connection, lease_id: str) -> bool:
    """Whether a commit through the catalog front named `lease_id` (its `catalog.commit`
    event): the front then counted the commit's files from its manifests."""
    row = conn.execute(
        select(events_t.c.id)
        .where(events_t.c.lease_id == lease_id, events_t.c.event == EventName.CATALOG_COMMIT)
        .limit(1)
    ).first()
    return row is not None
