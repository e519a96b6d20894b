"""Read-only views of the lock: a table's state, a lease, state versions. See service.lock.leases
and service.lock.intents.

Nothing here writes or locks: a view judges expiry by the clock it reads, leaves out what
expired, and leaves ending it to the next transition or sweep.

    table_state(conn, table=t)    TableState: switch, live leases, claims and intents, debt,
                                  due partitions, version
    list_tables(conn, limit=, after=)  a page of the known tables' TableStates, by name, and
                                  the name the next page starts after
    lease_state(conn, lease_id=i) Lease in any state (from the audit trail once pruned)
    table_version(conn, table=t)  the id of the table's newest event; table_versions for many
    tables_due_for_sweep(conn)    tables with something expired that is not marked ended
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.engine import Connection

from service.lock import debt, due, ingest, readers, store
from service.lock.db import events_t, intents_t, now
from service.lock.rows import IntentRow, LeaseRow, TableRow, seconds
from service.wire import Intent, Lease, Switch, TableState
from service.wire.errors import NotFound

__all__ = [
    "intent_view",
    "lease_state",
    "lease_view",
    "list_tables",
    "state_of",
    "table_state",
    "table_version",
    "table_versions",
    "tables_due_for_sweep",
]


def lease_view(lease: LeaseRow, at: datetime) -> Lease:
    """The lease as a client sees it at `at`."""
    live = lease.live(at)
    return Lease(
        lease_id=lease.id,
        table=lease.table,
        kind=lease.kind,
        holder=lease.holder,
        request_id=lease.request_id,
        token=lease.token,
        ttl_s=lease.ttl_s,
        remaining_s=max(0.0, seconds(lease.expires_at - at)) if live else 0.0,
        held_s=seconds((lease.ended_at or min(at, lease.expires_at)) - lease.acquired_at),
        state=lease.state(at),
        partitions=lease.partitions,
        principal=lease.principal,
        renewals=lease.renewals,
    )


def intent_view(intent: IntentRow, at: datetime) -> Intent:
    return Intent(
        holder=intent.holder,
        request_id=intent.request_id,
        partitions=intent.partitions,
        remaining_s=seconds(intent.expires_at - at),
        open_s=seconds(at - intent.opened_at),
        cause=intent.cause,
        principal=intent.principal,
    )


def state_of(conn: Connection, row: TableRow, at: datetime) -> TableState:
    """The state of the table whose row is `row`, at `at`."""
    leases, intents = ([], []) if row.holds_until is None else store.holds(conn, row.name)
    maintenance = tuple(lease_view(x, at) for x in leases if x.live(at))
    open_intents = tuple(intent_view(x, at) for x in intents if x.live(at))
    return TableState(
        table=row.name,
        version=table_version(conn, table=row.name),
        switch=Switch(
            ingest=row.ingest,
            maintenance=row.maintenance,
            backpressure=row.backpressure,
            reason=row.switch_reason,
            by=row.switch_by,
            changed_s_ago=seconds(at - row.switch_at) if row.switch_at else None,
        ),
        maintenance_leases=maintenance,
        intents=open_intents,
        maintenance_lease=next(iter(maintenance), None),
        intent=next(iter(open_intents), None),
        commit_leases=tuple(lease_view(x, at) for x in store.live_commits(conn, row.name, at)),
        next_token=row.next_token,
        claims=tuple(lease_view(x, at) for x in store.live_claims(conn, row.name, at)),
        debt=debt.of_table(conn, row.name, at),
        ingest_lag=ingest.lag_of(conn, row.name, at),
        readers=tuple(readers.live(conn, row.name, at)),
        due=due.of_table(conn, row.name, at),
    )


def table_state(conn: Connection, *, table: str) -> TableState:
    """The table's state now. Expired leases are left out here, and ended by the next sweep.

    Raises:
        NotFound: the table never had a lease, an intent or a switch (a typo looks like one).
    """
    at = now(conn)
    row = store.read_table(conn, table)
    if row is None:
        raise NotFound(
            f"no table {table} is known: it never had a lease, an intent or a switch. Check "
            "the name (GET /v1/tables lists the known ones); acquiring a lease or setting the "
            "switch on it makes it known",
            table=table,
        )
    return state_of(conn, row, at)


def list_tables(
    conn: Connection,
    *,
    limit: int | None = None,
    after: str | None = None,
    shown: Callable[[str], bool] | None = None,
) -> tuple[list[TableState], str | None]:
    """The states of the known tables ordered by name, those after `after` only, at most
    `limit` of them (None: all), and the name to ask `after` for the next page (None: this is
    the last). `shown` leaves out the names it is false for. Each state costs a few queries,
    rows are cheap: a page bounds what one call reads."""
    at = now(conn)
    page: list[TableRow] = []
    for row in store.tables_after(conn, after):
        if shown is not None and not shown(row.name):
            continue
        if limit is not None and len(page) == limit:
            return [state_of(conn, x, at) for x in page], page[-1].name  # one more follows
        page.append(row)
    return [state_of(conn, x, at) for x in page], None


def lease_state(conn: Connection, *, lease_id: str) -> Lease:
    """The lease as it is now, in any state; a lease pruned from its table as the audit trail
    last saw it.

    Raises:
        NotFound: no lease was ever granted with this id.
    """
    at = now(conn)
    lease = store.read_lease(conn, lease_id)
    if lease is None:
        raise NotFound(f"no lease {lease_id}; acquire a new one", lease_id=lease_id)
    return lease_view(lease, at)


def table_version(conn: Connection, *, table: str) -> int:
    """The table's state version: the id of its newest audit event (0 for a table never used).

    Every change of a table's state writes an event while holding the table's row lock, so on
    one table event ids grow in commit order, and a long-poll that saw version v misses no
    change by waiting for an id above v. One index lookup (table_name, id).
    """
    e = events_t.c
    version = conn.execute(select(func.max(e.id)).where(e.table_name == table)).scalar()
    return int(version or 0)


def table_versions(conn: Connection, tables: list[str]) -> dict[str, int]:
    """The state versions of `tables` in one query (0 for a table never used)."""
    e = events_t.c
    rows = conn.execute(
        select(e.table_name, func.max(e.id)).where(e.table_name.in_(tables)).group_by(e.table_name)
    )
    found = {name: int(version) for name, version in rows}
    return {table: found.get(table, 0) for table in tables}


def tables_due_for_sweep(conn: Connection) -> list[str]:
    """Tables with a lease, intent or reader hold whose expiry passed but which is not yet
    marked ended."""
    at = now(conn)
    due: set[str] = set()
    for leases_t in store.LEASE_TABLES.values():
        c = leases_t.c
        expired = select(c.table_name).where(c.ended_at.is_(None), c.expires_at <= at)
        due.update(conn.execute(expired.distinct()).scalars())
    i = intents_t.c
    due.update(conn.execute(select(i.table_name).where(i.expires_at <= at).distinct()).scalars())
    due.update(readers.due(conn, at))
    return sorted(due)
