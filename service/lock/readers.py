"""Reader holds: jobs that stream out of a table keep `expire_snapshots` back from where they are.

    hold(conn, table=t, reader="summary@h1", body=ReaderBody(...), by=Caller("job"))  ReaderHold
    release(conn, table=t, reader="summary@h1", by=Caller("job"))            bool (was live)
    expire(conn, table=t, at=at)       the sweep: holds past their TTL deleted, each audited
    forget(conn, t)                    the table dropped or renamed: its holds deleted, how many
    live(conn, t, at)                  [ReaderHold], the oldest position first

A reader conflicts with no lease: it holds back expiry only, which the compactor reads from the
table's state before it plans `expire_snapshots` (every snapshot at or after the oldest live
position is kept). One row per (table, reader name); a PUT both starts and renews a hold, and
moves its position. Audited: `reader.held` when a hold starts (or starts again after it lapsed),
`reader.released`, `reader.expired` when the sweep finds it past its TTL. A renewal is not an
event, as a lease's renew is not. A live hold belongs to the token that put it (`holder`): only
that token moves, renews or releases it, an operator may release any (docs/design.md §6).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.engine import Connection

from service.lock import audit, store
from service.lock.db import readers_t
from service.lock.refusals import other_principal_of
from service.lock.rows import SYSTEM, Caller, seconds
from service.wire import EventName, ReaderBody, ReaderHold

__all__ = ["due", "expire", "forget", "hold", "live", "release"]


def hold(conn: Connection, *, table: str, reader: str, body: ReaderBody, by: Caller) -> ReaderHold:
    """Start or renew `reader`'s hold on `table` at `body.snapshot_id`, for `body.ttl_s`.

    Raises:
        NotOwner: another token holds `reader` on `table` live (an operator's too: moving a
            hold is its reader's).
    """
    locked = store.lock_table(conn, table)
    assert locked is not None  # created
    _, at = locked
    where, row = _hold_row(conn, table, reader)
    if row is not None and row.expires_at > at and row.holder != by.principal:
        raise other_principal_of(f"reader {reader!r} on {table}", row.holder, by, "move")
    values: dict[str, Any] = {
        "snapshot_id": body.snapshot_id,
        "snapshots_behind": body.snapshots_behind,
        "ttl_s": body.ttl_s,
        "expires_at": at + timedelta(seconds=body.ttl_s),
        "holder": by.principal,
    }
    if row is not None and row.expires_at > at:
        moved = row.snapshot_id != body.snapshot_id
        values["held_since"] = row.held_since
        values["advanced_at"] = at if moved else row.advanced_at
        conn.execute(readers_t.update().where(where).values(**values))
    else:
        if row is not None:  # lapsed, not swept yet: its end is on the trail first
            _expired(conn, row._asdict(), at)
            conn.execute(delete(readers_t).where(where))
        values.update(held_since=at, advanced_at=at)
        conn.execute(readers_t.insert().values(table_name=table, reader=reader, **values))
        audit.record(
            conn,
            at=at,
            table=table,
            event=EventName.READER_HELD,
            holder=reader,
            actor=by.principal,
            snapshot_id=body.snapshot_id,
            ttl_s=body.ttl_s,
        )
    return _view({"reader": reader, **values}, at)


def release(conn: Connection, *, table: str, reader: str, by: Caller) -> bool:
    """End `reader`'s hold; False (and nothing written) when it holds nothing live.

    Raises:
        NotOwner: another token holds `reader` on `table` live, and `by` is no operator.
    """
    locked = store.lock_table(conn, table, create=False)
    if locked is None:
        return False
    _, at = locked
    where, row = _hold_row(conn, table, reader)
    if row is None:
        return False
    if row.expires_at > at and row.holder != by.principal and not by.operator:
        raise other_principal_of(f"reader {reader!r} on {table}", row.holder, by, "release")
    conn.execute(delete(readers_t).where(where))
    if row.expires_at <= at:
        _expired(conn, row._asdict(), at)
        return False
    audit.record(
        conn,
        at=at,
        table=table,
        event=EventName.READER_RELEASED,
        holder=reader,
        actor=by.principal,
        snapshot_id=row.snapshot_id,
        held_s=seconds(at - row.held_since),
    )
    return True


def expire(conn: Connection, *, table: str, at: datetime) -> None:
    """Delete the holds on `table` past their TTL, each with a `reader.expired` event (the
    caller holds the table's row lock: the sweep)."""
    c = readers_t.c
    where = (c.table_name == table) & (c.expires_at <= at)
    rows = conn.execute(select(readers_t).where(where)).all()
    for row in rows:
        _expired(conn, row._asdict(), at)
    if rows:
        conn.execute(delete(readers_t).where(where))


def live(conn: Connection, table: str, at: datetime) -> list[ReaderHold]:
    """The live holds on `table`, the one that advanced longest ago first (snapshot ids do
    not sort by time: the compactor orders positions by the table's snapshot log)."""
    c = readers_t.c
    rows = conn.execute(
        select(readers_t)
        .where(c.table_name == table, c.expires_at > at)
        .order_by(c.advanced_at, c.reader)
    )
    return [_view(row._asdict(), at) for row in rows]


def due(conn: Connection, at: datetime) -> set[str]:
    """Tables with a hold past its TTL, for the sweep."""
    c = readers_t.c
    return set(conn.execute(select(c.table_name).where(c.expires_at <= at).distinct()).scalars())


def _hold_row(conn: Connection, table: str, reader: str) -> tuple[Any, Any]:
    """The WHERE clause of `reader`'s row on `table`, and the row (None when there is none)."""
    c = readers_t.c
    where = (c.table_name == table) & (c.reader == reader)
    return where, conn.execute(select(readers_t).where(where)).first()


def _expired(conn: Connection, row: dict[str, Any], at: datetime) -> None:
    audit.record(
        conn,
        at=row["expires_at"],
        table=row["table_name"],
        event=EventName.READER_EXPIRED,
        holder=row["reader"],
        actor=SYSTEM,
        snapshot_id=row["snapshot_id"],
        held_s=seconds(row["expires_at"] - row["held_since"]),
    )


def _view(row: dict[str, Any], at: datetime) -> ReaderHold:
    return ReaderHold(
        reader=row["reader"],
        snapshot_id=row["snapshot_id"],
        snapshots_behind=row["snapshots_behind"],
        remaining_s=max(0.0, seconds(row["expires_at"] - at)),
        held_s=max(0.0, seconds(at - row["held_since"])),
        advanced_s_ago=max(0.0, seconds(at - row["advanced_at"])),
    )


def forget(conn: Connection, table: str) -> int:
    """The table was dropped or renamed: the holds of the readers that named it are deleted
    (audited with the drop or rename, service.lock.drops); how many."""
    return store.forget_rows(conn, readers_t, table)
