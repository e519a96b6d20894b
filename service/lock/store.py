"""The lock's rows in the database: read as `service.lock.rows` values, written as the rules
decided.

Plain SQL statements over a connection, one per function, in the caller's transaction; no rule
is decided here. `lock_table` and `lock_lease` take the table row's lock and read the database
clock in the same statement (`db.LockingRead`), so every later read in the transaction sees
what the previous holder of the lock committed, and judges expiry by an instant after it.
The statements of a commit lease's grant and release are `db.Hot`: compiled once, sent
through the DBAPI cursor on MySQL/MariaDB.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import Table, bindparam, delete, func, insert, select, update
from sqlalchemy.dialects import mysql, sqlite
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from service.lock import audit
from service.lock.db import (
    Hot,
    LockingRead,
    claims_t,
    commit_leases_t,
    intents_t,
    keyset,
    maintenance_leases_t,
    now,
    tables_t,
)
from service.lock.rows import IntentRow, LeaseEnd, LeaseKind, LeaseRow, TableRow
from service.wire import Event, EventName
from service.wire.scope import decode, encode

__all__ = [
    "LEASE_TABLES",
    "LockedLease",
    "delete_intent",
    "end_lease",
    "expired_claims",
    "expired_commits",
    "extend_lease",
    "holds",
    "insert_intent",
    "insert_lease",
    "keep_intent",
    "latest_hold",
    "lease_by_request",
    "live_claims",
    "live_commits",
    "lock_lease",
    "lock_table",
    "put_row",
    "read_lease",
    "read_table",
    "tables_after",
    "tables_named",
    "unended_claims",
    "update_table",
]

LEASE_TABLES: dict[LeaseKind, Table] = {
    "commit": commit_leases_t,
    "maintenance": maintenance_leases_t,
    "claim": claims_t,
}
"""Each kind's table, in the order a lease id is looked for (the commit path's first)."""


# -- rows as values --------------------------------------------------------------------------


def _partitions(stored: str | None) -> tuple[str, ...] | None:
    names = decode(stored)
    return None if names is None else tuple(names)


def _table(row: Any) -> TableRow:
    return TableRow(
        name=row.name,
        ingest=row.ingest,
        maintenance=row.maintenance,
        switch_reason=row.switch_reason,
        switch_by=row.switch_by,
        switch_at=row.switch_at,
        holds_until=row.holds_until,
        next_token=row.next_token,
        backpressure=row.backpressure,
    )


def _lease(kind: LeaseKind, row: Any) -> LeaseRow:
    return LeaseRow(
        id=row.id,
        table=row.table_name,
        kind=kind,
        holder=row.holder,
        request_id=row.request_id,
        # a claim's table has no partitions column: it covers the whole table
        partitions=None if kind == "claim" else _partitions(row.partitions),
        ttl_s=row.ttl_s,
        acquired_at=row.acquired_at,
        expires_at=row.expires_at,
        ended_at=row.ended_at,
        end=row.end,
        token=row.token if kind == "maintenance" else None,
        principal=row.principal,
        renewals=row.renewals,
    )


def _intent(row: Any) -> IntentRow:
    return IntentRow(
        table=row.table_name,
        request_id=row.request_id,
        holder=row.holder,
        partitions=_partitions(row.partitions),
        opened_at=row.opened_at,
        expires_at=row.expires_at,
        cause=row.cause,
        principal=row.principal,
    )


# -- the table row ---------------------------------------------------------------------------

_LOCK_TABLE = LockingRead(select(tables_t).where(tables_t.c.name == bindparam("name")))


def lock_table(
    conn: Connection, name: str, *, create: bool = True
) -> tuple[TableRow, datetime] | None:
    """The table's row, locked for this transaction, and the database clock read once the lock
    is ours, in one statement; the row is created on first use. None when it does not exist
    and `create` is false."""
    found = _LOCK_TABLE.first(conn, name=name)
    if found is None and create:
        values = {
            "name": name,
            "ingest": "running",
            "maintenance": "enabled",
            "next_token": 1,
            "created_at": now(conn),
        }
        # two first uses may race: the loser's insert is ignored and it locks the winner's row
        if conn.dialect.name == "sqlite":
            conn.execute(sqlite.insert(tables_t).values(**values).on_conflict_do_nothing())
        else:
            upsert = mysql.insert(tables_t).values(**values)
            conn.execute(upsert.on_duplicate_key_update(name=upsert.inserted.name))
        found = _LOCK_TABLE.first(conn, name=name)
    if found is None:
        return None
    # the clock after the lock is ours: a call that waited for the lock must not judge expiry
    # (or stamp a grant) with an instant from before the previous holder committed
    row, at = found
    return _table(row), at


def read_table(conn: Connection, name: str) -> TableRow | None:
    """The table's row, unlocked (a view)."""
    found = conn.execute(select(tables_t).where(tables_t.c.name == name)).first()
    return None if found is None else _table(found)


def tables_named(conn: Connection, names: Iterable[str]) -> list[TableRow]:
    """The rows of the tables named (those that exist), unlocked (a view), by name."""
    wanted = sorted(set(names))
    if not wanted:
        return []
    query = select(tables_t).where(tables_t.c.name.in_(wanted)).order_by(tables_t.c.name)
    return [_table(row) for row in conn.execute(query)]


def tables_after(
    conn: Connection, after: str | None = None, *, batch: int = 1000
) -> Iterator[TableRow]:
    """The table rows by name, those after `after` only, read `batch` at a time (db.keyset)."""
    for row in keyset(conn, select(tables_t), tables_t.c.name, after=after, batch=batch):
        yield _table(row)


def update_table(conn: Connection, name: str, **values: object) -> None:
    """Set columns of the (locked) table row."""
    conn.execute(update(tables_t).where(tables_t.c.name == name).values(**values))


# -- leases ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LockedLease:
    """A lease with its table's row locked, the table's `holds_until`, and the clock.
    `locked` is False for a lease read from the audit trail (pruned: no row to lock)."""

    lease: LeaseRow
    holds_until: datetime | None
    at: datetime
    locked: bool = True


_ENDS: dict[str, LeaseEnd] = {
    EventName.LEASE_REVOKED: "revoked",
    EventName.LEASE_RELEASED: "released",
}


def _from_trail(event: Event) -> LeaseRow:
    """A lease pruned from its table, as its last grant or end event tells it (retention keeps
    a table's newest event): ended when the trail saw it end, after the `held_s` it was live."""
    detail = event.detail
    names = detail.get("partitions")
    return LeaseRow(
        id=str(event.lease_id),
        table=event.table,
        kind=cast(LeaseKind, event.kind),
        holder=event.holder or "",
        request_id=detail.get("request_id", ""),
        partitions=None if names is None else tuple(names),
        ttl_s=float(detail.get("ttl_s", 0.0)),
        acquired_at=event.at - timedelta(seconds=float(detail.get("held_s", 0.0))),
        expires_at=event.at,
        ended_at=event.at,
        end=_ENDS.get(event.event, "expired"),
        token=event.token,
        principal=detail.get("principal"),
        renewals=int(detail.get("renewals", 0)),
    )


def lock_lease(conn: Connection, lease_id: str) -> LockedLease | None:
    """The lease `lease_id`, of whichever kind, with its table's row locked and the clock. A
    lease pruned from its table is read from the audit trail (ended: nothing to lock); None for
    an id never granted. Ending or extending one lease changes nothing another grant depends on
    but the table's `holds_until`, read here too."""
    found = _lock_lease(conn, lease_id)
    if found is not None:
        return found
    event = audit.last_for_lease(conn, lease_id)
    if event is None:
        return None
    return LockedLease(_from_trail(event), None, now(conn), locked=False)


# the table's row locked, found by the lease's (a lease never changes table), then the lease's:
# every transition locks the table's row before any lease of it (a grant ends the expired
# leases it finds), so two calls never wait on each other in a cycle (a deadlock; docs/design.md
# §3). The subquery is a plain read: under READ COMMITTED it locks nothing.
_LOCK_LEASES_TABLE = {
    kind: LockingRead(
        select(tables_t.c.holds_until).where(
            tables_t.c.name
            == select(leases_t.c.table_name)
            .where(leases_t.c.id == bindparam("id"))
            .scalar_subquery()
        )
    )
    for kind, leases_t in LEASE_TABLES.items()
}
_LOCK_LEASE = {
    kind: Hot(select(leases_t).where(leases_t.c.id == bindparam("id")).with_for_update())
    for kind, leases_t in LEASE_TABLES.items()
}


def _lock_lease(conn: Connection, lease_id: str) -> LockedLease | None:
    for kind, lock in _LOCK_LEASES_TABLE.items():
        locked = lock.first(conn, id=lease_id)
        if locked is None:
            continue
        leases = _LOCK_LEASE[kind].rows(conn, id=lease_id)
        if not leases:
            return None  # pruned meanwhile: the audit trail has it
        table, at = locked
        return LockedLease(_lease(kind, leases[0]), table.holds_until, at)
    return None


def read_lease(conn: Connection, lease_id: str) -> LeaseRow | None:
    """The lease `lease_id`, unlocked (a view), or from the audit trail when pruned (as
    `lock_lease`); None for an id never granted."""
    for kind, leases_t in LEASE_TABLES.items():
        found = conn.execute(select(leases_t).where(leases_t.c.id == lease_id)).first()
        if found is not None:
            return _lease(kind, found)
    event = audit.last_for_lease(conn, lease_id)
    return None if event is None else _from_trail(event)


def lease_by_request(
    conn: Connection, kind: LeaseKind, table: str, request_id: str
) -> LeaseRow | None:
    leases_t = LEASE_TABLES[kind]
    c = leases_t.c
    query = select(leases_t).where(c.table_name == table, c.request_id == request_id)
    found = conn.execute(query).first()
    return None if found is None else _lease(kind, found)


def holds(conn: Connection, table: str) -> tuple[list[LeaseRow], list[IntentRow]]:
    """The table's unended maintenance leases and its intents, oldest first, expired or not."""
    m, i = maintenance_leases_t.c, intents_t.c
    leases = conn.execute(
        select(maintenance_leases_t)
        .where(m.table_name == table, m.ended_at.is_(None))
        .order_by(m.acquired_at)
    )
    intents = conn.execute(select(intents_t).where(i.table_name == table).order_by(i.opened_at))
    return [_lease("maintenance", x) for x in leases], [_intent(x) for x in intents]


def live_commits(conn: Connection, table: str, at: datetime) -> list[LeaseRow]:
    c = commit_leases_t.c
    query = (
        select(commit_leases_t)
        .where(c.table_name == table, c.ended_at.is_(None), c.expires_at > at)
        .order_by(c.acquired_at)
    )
    return [_lease("commit", row) for row in conn.execute(query)]


def expired_commits(conn: Connection, table: str, at: datetime) -> list[LeaseRow]:
    """The table's commit leases whose expiry passed and that no sweep has ended yet."""
    c = commit_leases_t.c
    query = select(commit_leases_t).where(
        c.table_name == table, c.ended_at.is_(None), c.expires_at <= at
    )
    return [_lease("commit", row) for row in conn.execute(query)]


def unended_claims(conn: Connection, table: str) -> list[LeaseRow]:
    """The table's claims no one has ended yet, expired or not (at most one is live)."""
    c = claims_t.c
    query = select(claims_t).where(c.table_name == table, c.ended_at.is_(None))
    return [_lease("claim", row) for row in conn.execute(query.order_by(c.acquired_at))]


def live_claims(conn: Connection, table: str, at: datetime) -> list[LeaseRow]:
    """The table's claims live at `at` (at most one)."""
    return [x for x in unended_claims(conn, table) if x.live(at)]


def expired_claims(conn: Connection, table: str, at: datetime) -> list[LeaseRow]:
    """The table's claims whose expiry passed and that no sweep has ended yet."""
    return [x for x in unended_claims(conn, table) if x.expired_unended(at)]


def latest_hold(conn: Connection, table: str) -> datetime | None:
    """The latest expiry of the table's unended maintenance leases and intents, or None."""
    m, i = maintenance_leases_t.c, intents_t.c
    leases = select(func.max(m.expires_at)).where(m.table_name == table, m.ended_at.is_(None))
    intents = select(func.max(i.expires_at)).where(i.table_name == table)
    both = conn.execute(select(leases.scalar_subquery(), intents.scalar_subquery())).one()
    return max((x for x in both if x is not None), default=None)


_LEASE_COLUMNS = (
    "id",
    "table_name",
    "holder",
    "principal",
    "request_id",
    "partitions",
    "ttl_s",
    "acquired_at",
    "expires_at",
)
_INSERT_LEASE = {
    kind: Hot(
        insert(leases_t).values(
            {c: bindparam(c) for c in (*_LEASE_COLUMNS, "token") if c in leases_t.c}
        )
    )
    for kind, leases_t in LEASE_TABLES.items()
}
_END_LEASE = {
    kind: Hot(
        update(leases_t)
        .where(leases_t.c.id == bindparam("lease_id"))
        .values(ended_at=bindparam("ended_at"), end=bindparam("end_as"))
    )
    for kind, leases_t in LEASE_TABLES.items()
}


def insert_lease(conn: Connection, lease: LeaseRow) -> bool:
    """Store a grant; False when the table already has a lease of this kind with its request id
    (the unique key catches a repeated acquire at the insert)."""
    values: dict[str, Any] = {
        "id": lease.id,
        "table_name": lease.table,
        "holder": lease.holder,
        "principal": lease.principal,
        "request_id": lease.request_id,
        "ttl_s": lease.ttl_s,
        "acquired_at": lease.acquired_at,
        "expires_at": lease.expires_at,
    }
    columns = LEASE_TABLES[lease.kind].c
    if "partitions" in columns:
        values["partitions"] = encode(None if lease.partitions is None else list(lease.partitions))
    if "token" in columns:
        values["token"] = lease.token
    try:
        _INSERT_LEASE[lease.kind].run(conn, **values)
    except IntegrityError:
        return False
    return True


def extend_lease(conn: Connection, lease: LeaseRow, expires_at: datetime, ttl_s: float) -> None:
    """A renewal: the new expiry and TTL, and one more renewal counted."""
    leases_t = LEASE_TABLES[lease.kind]
    conn.execute(
        update(leases_t)
        .where(leases_t.c.id == lease.id)
        .values(expires_at=expires_at, ttl_s=ttl_s, renewals=leases_t.c.renewals + 1)
    )


def end_lease(conn: Connection, lease: LeaseRow, end: LeaseEnd, at: datetime) -> None:
    _END_LEASE[lease.kind].run(conn, lease_id=lease.id, ended_at=at, end_as=end)


# -- intents ---------------------------------------------------------------------------------


def put_row(conn: Connection, rows: Table, key: dict[str, Any], values: dict[str, Any]) -> None:
    """Insert the row of `rows` at `key` with `values`, or update it there: the one-row-per-table
    reports (debt, lag) are replaced whole."""
    if conn.dialect.name == "sqlite":
        insert_sqlite = sqlite.insert(rows).values(**key, **values)
        conn.execute(insert_sqlite.on_conflict_do_update(index_elements=list(key), set_=values))
    else:
        insert_mysql = mysql.insert(rows).values(**key, **values)
        conn.execute(insert_mysql.on_duplicate_key_update(**values))


def forget_rows(conn: Connection, rows: Table, table: str) -> int:
    """Delete the rows of `rows` that name `table` (a dropped table's); how many went."""
    return conn.execute(delete(rows).where(rows.c.table_name == table)).rowcount or 0


def move_rows(conn: Connection, rows: Table, source: str, destination: str) -> int:
    """Give the rows of `rows` that name `source` to `destination` (a renamed table's), any
    that named `destination` before deleted first; how many moved."""
    forget_rows(conn, rows, destination)
    moved = update(rows).where(rows.c.table_name == source).values(table_name=destination)
    return conn.execute(moved).rowcount or 0


def _one_intent(intent: IntentRow) -> Any:
    i = intents_t.c
    return (i.table_name == intent.table) & (i.request_id == intent.request_id)


def insert_intent(conn: Connection, intent: IntentRow) -> None:
    conn.execute(
        insert(intents_t).values(
            table_name=intent.table,
            request_id=intent.request_id,
            holder=intent.holder,
            principal=intent.principal,
            partitions=encode(None if intent.partitions is None else list(intent.partitions)),
            opened_at=intent.opened_at,
            expires_at=intent.expires_at,
            cause=intent.cause,
        )
    )


def keep_intent(conn: Connection, intent: IntentRow, expires_at: datetime) -> None:
    conn.execute(update(intents_t).where(_one_intent(intent)).values(expires_at=expires_at))


def delete_intent(conn: Connection, intent: IntentRow) -> None:
    conn.execute(delete(intents_t).where(_one_intent(intent)))
