"""A table's lock state when the catalog front drops or renames the table (docs/catalog-front.md
§7, "Drop and rename").

    dropped(conn, table=t, actor="alice")                      before the pointer goes
    renamed(conn, source=t, destination=u, actor="alice")      before the pointer moves

Both run in the transaction that drops or moves the table's pointer, after the pointer's own
checks and before its write, and lock the rows of the names they touch first (in name order,
made if new, as every lease transition locks its table's row), so no grant slips in between. A
name with a live lease of any kind (commit, maintenance, claim) or an open intent refuses both
(InUse, 409) before anything is written.

What describes the table's files goes with them: a drop forgets its due partitions and debt, a
rename moves them to the new name. What belongs to the jobs that named the table goes either
way: its reader holds and its ingest lag (those jobs name a table that is no more), and what
such jobs left on the new name. The old name's row stays: its switch (an operator's word on the
name, not on the files) and its next fencing token, so tokens never repeat for a name; its trail
stays too. Audited: `catalog.dropped` on the table, `catalog.renamed` on the old name naming the
new one, each with what it forgot or moved.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy.engine import Connection

from service.lock import audit, debt, due, expiry, ingest, readers, store
from service.lock.refusals import in_use
from service.lock.rows import IntentRow, LeaseRow
from service.wire import EventName

__all__ = ["dropped", "renamed"]


def dropped(conn: Connection, *, table: str, actor: str) -> None:
    """Forget `table`'s due partitions, debt, reader holds and lag, in the transaction that
    drops its pointer.

    Raises:
        InUse: a lease, claim or intent of the table is live; nothing was written.
    """
    at = _unheld(conn, [table], verb="drop")
    audit.record(
        conn,
        at=at,
        table=table,
        event=EventName.CATALOG_DROPPED,
        actor=actor,
        due_partitions=due.forget(conn, table),
        debt=debt.forget(conn, table),
        reader_holds=readers.forget(conn, table),
        ingest_lag=ingest.forget_lag(conn, table),
    )


def renamed(conn: Connection, *, source: str | None, destination: str, actor: str) -> None:
    """Move `source`'s due partitions and debt to `destination` and forget the reader holds and
    lag of both names, in the transaction that renames the pointer. `source` None: a table
    lakelock leases nothing under (service.catalog.front), which brings no state; names equal
    in lakelock's lower case (a rename of letter case only): one table, nothing moves. Audited
    on `source` (else `destination`).

    Raises:
        InUse: a lease, claim or intent of either name is live; nothing was written.
    """
    names = sorted({destination} | ({source} if source is not None else set()))
    at = _unheld(conn, names, verb="rename")
    due_moved, debt_moved = 0, False
    if source is None:
        due.forget(conn, destination)
        debt.forget(conn, destination)
    elif source != destination:
        due_moved = due.move(conn, source=source, destination=destination)
        debt_moved = debt.move(conn, source=source, destination=destination)
    holds, lag = 0, False
    for name in names if source != destination else ():
        holds += readers.forget(conn, name)
        lag = ingest.forget_lag(conn, name) or lag
    audit.record(
        conn,
        at=at,
        table=source or destination,
        event=EventName.CATALOG_RENAMED,
        actor=actor,
        destination=destination,
        due_partitions=due_moved,
        debt=debt_moved,
        reader_holds=holds,
        ingest_lag=lag,
    )


def _unheld(conn: Connection, names: list[str], *, verb: str) -> datetime:
    """Lock each name's row, made if new (so a grant on a name no row had yet waits for this
    transaction); the database clock.

    Raises:
        InUse: something live holds one of them.
    """
    for name in names:
        locked = store.lock_table(conn, name)
        assert locked is not None  # created
        row, at = locked
        _, live = expiry.live_now(conn, row, at, commits=True)
        claims = store.live_claims(conn, name, at)
        holding: list[LeaseRow | IntentRow] = [*live.leases, *claims, *live.intents]
        if holding:
            raise in_use(name, verb, holding)
    return at
