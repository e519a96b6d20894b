"""A table's lock state when the catalog front drops or renames the table (docs/catalog-front.md
§7, "Drop and rename").

    dropped(conn, table=t, actor="alice")                      before the pointer goes
    renamed(conn, source=t, destination=u, actor="alice")      before the pointer moves

Both run in the transaction that drops or moves the table's pointer, after locking the rows of
the names they touch (in name order, as every lease transition locks its table's row), so no
grant slips in between. A name with a live lease of any kind (commit, maintenance, claim) or an
open intent refuses both (InUse, 409, nothing changed): the jobs that hold it stop first, or an
operator revokes what they hold.

What describes the table's files goes with them: a drop forgets its due partitions and its
debt, a rename moves them to the new name. What belongs to the jobs that named the table goes
either way: its reader holds and its ingest lag (those jobs name a table that is no more). The
name's row stays: its switch (an operator's word on the name, not on the files) and its next
fencing token, so tokens never repeat for a name; its trail stays too. A rename makes the new
name's row when it has none. Audited:
`catalog.dropped` on the table, `catalog.renamed` on the source naming the destination, each
with what it forgot or moved.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy.engine import Connection

from service.lock import audit, debt, due, expiry, ingest, readers, store
from service.lock.db import now
from service.lock.refusals import in_use
from service.lock.rows import IntentRow, LeaseRow
from service.wire import EventName

__all__ = ["dropped", "renamed"]


def dropped(conn: Connection, *, table: str, actor: str) -> None:
    """Forget `table`'s due partitions, debt, reader holds and lag, in the transaction that
    drops its pointer.

    Raises:
        InUse: a lease, claim or intent of the table is live.
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


def renamed(conn: Connection, *, source: str, destination: str, actor: str) -> None:
    """Move `source`'s due partitions and debt to `destination` and forget its reader holds and
    lag, in the transaction that renames its pointer. Names equal in lakelock's lower case (a
    rename that changes letter case only) are one table: nothing changes.

    Raises:
        InUse: a lease, claim or intent of either name is live.
    """
    if source == destination:
        return
    at = _unheld(conn, sorted((source, destination)), verb="rename")
    store.lock_table(conn, destination)  # the new name's row, for its state: made if new
    audit.record(
        conn,
        at=at,
        table=source,
        event=EventName.CATALOG_RENAMED,
        actor=actor,
        destination=destination,
        due_partitions=due.move(conn, source=source, destination=destination),
        debt=debt.move(conn, source=source, destination=destination),
        reader_holds=readers.forget(conn, source),
        ingest_lag=ingest.forget_lag(conn, source),
    )


def _unheld(conn: Connection, names: list[str], *, verb: str) -> datetime:
    """Lock each name's row (a name never leased has none, and nothing live); the database
    clock.

    Raises:
        InUse: something live holds one of them.
    """
    at = now(conn)
    for name in names:
        locked = store.lock_table(conn, name, create=False)
        if locked is None:
            continue
        row, at = locked
        _, live = expiry.live_now(conn, row, at, commits=True)
        claims = [c for c in store.unended_claims(conn, name) if c.live(at)]
        holding: list[LeaseRow | IntentRow] = [*live.leases, *claims, *live.intents]
        if holding:
            raise in_use(name, verb, holding)
    return at
