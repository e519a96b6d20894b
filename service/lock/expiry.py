"""What is live on a table and how things end (docs/design.md §3, §3.1): the bookkeeping every
transition shares, under the table's row lock.

    locked_table(conn, table)           -> (TableRow, now)   the row locked, created on first use
    live_now(conn, row, at, commits)    -> (TableRow, Live)  what is live; what expired is ended
    live_on(conn, table)                -> (TableRow, now, Live)  both; the catalog fence reads it
    sweep(conn, table)                  -> None  ends what expired, with its events
    end_expired(conn, lease, at)        a lease past its expiry: `lease.expired`, its claim's
                                        backpressure with it
    end_intent(conn, intent, at, event, actor, ...)   an intent deleted, with its event
    end_backpressure(conn, table, at, intents, actor) -> partitions let go
    audit_end(conn, lease, at, event, actor, ...)     the event that ends a lease
    hold_until(conn, table, holds_until, until)       a hold is live until `until`
    holds_ended(conn, table)                          a hold ended: `holds_until` recomputed

`holds_until` on the table's row is the latest expiry of its maintenance leases and intents:
while it is None no statement reads them, so a commit grant stays a few statements.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy.engine import Connection

from service.lock import audit, readers, store
from service.lock.rows import SYSTEM, IntentRow, LeaseRow, Live, TableRow, listed, seconds
from service.wire import EventName

__all__ = [
    "audit_end",
    "end_backpressure",
    "end_expired",
    "end_intent",
    "hold_until",
    "holds_ended",
    "live_now",
    "live_on",
    "locked_table",
    "sweep",
]


def sweep(conn: Connection, *, table: str) -> None:
    """Mark what expired on `table` as ended, with its audit events (one transaction)."""
    locked = store.lock_table(conn, table, create=False)
    if locked is not None:
        row, at = locked
        for expired in (
            *store.expired_commits(conn, table, at),
            *store.expired_claims(conn, table, at),
        ):
            end_expired(conn, expired, at)
        readers.expire(conn, table=table, at=at)
        live_now(conn, row, at)


def live_on(conn: Connection, table: str) -> tuple[TableRow, datetime, Live]:
    """The locked row of `table` (created on first use), the clock, and its live maintenance
    leases and intents (not its commit leases); what expired is ended and audited on the way,
    as in every transition. The catalog front's commit check reads this (service.lock.fence)."""
    row, at = locked_table(conn, table)
    row, live = live_now(conn, row, at)
    return row, at, live


def locked_table(conn: Connection, table: str) -> tuple[TableRow, datetime]:
    """The locked row of `table`, created on first use, and the clock."""
    locked = store.lock_table(conn, table)
    assert locked is not None  # created
    return locked


def live_now(
    conn: Connection, row: TableRow, at: datetime, *, commits: bool = False
) -> tuple[TableRow, Live]:
    """What is live on the (locked) table: its maintenance leases and intents, and with
    `commits` its commit leases. Those maintenance leases and intents whose expiry passed are
    ended here, each audited, and `holds_until` follows the latest live one. No statement reads
    them while `holds_until` says none can be unended."""
    leases, intents = ([], []) if row.holds_until is None else store.holds(conn, row.name)
    for lease in leases:
        if not lease.live(at):
            end_expired(conn, lease, at)
    for intent in intents:
        if not intent.live(at):
            _expire_intent(conn, intent, at)
    live_leases = tuple(x for x in leases if x.live(at))
    live_intents = tuple(x for x in intents if x.live(at))
    expiries = [x.expires_at for x in live_leases] + [x.expires_at for x in live_intents]
    latest = max(expiries, default=None)
    if latest != row.holds_until:
        store.update_table(conn, row.name, holds_until=latest)
        row = dataclasses.replace(row, holds_until=latest)
    in_flight = tuple(store.live_commits(conn, row.name, at)) if commits else ()
    return row, Live(in_flight + live_leases, live_intents)


def holds_ended(conn: Connection, table: str) -> None:
    """A maintenance lease or intent of the (locked) table ended: `holds_until` becomes the
    latest expiry of those left unended, so commit grants stop reading them when none is."""
    store.update_table(conn, table, holds_until=store.latest_hold(conn, table))


def hold_until(conn: Connection, table: str, holds_until: datetime | None, until: datetime) -> None:
    """A maintenance lease or intent of the (locked) table is live until `until`: commit
    grants read the holds until then."""
    if holds_until is None or until > holds_until:
        store.update_table(conn, table, holds_until=until)


def end_expired(conn: Connection, lease: LeaseRow, at: datetime) -> None:
    """Mark a lease whose expiry passed as ended, with its `lease.expired` event; a claim's
    backpressure ends with it (docs/jobs.md §3), in the same transaction."""
    store.end_lease(conn, lease, "expired", lease.expires_at)
    ended = dataclasses.replace(lease, ended_at=lease.expires_at)
    audit_end(conn, ended, at, EventName.LEASE_EXPIRED, SYSTEM)
    if lease.kind == "claim":
        _end_claims_backpressure(conn, lease.table, at)


def _end_claims_backpressure(conn: Connection, table: str, at: datetime) -> None:
    """The table's claim expired: its backpressure intents share its expiry (every renew keeps
    them so), so they expired too; say so now, not at the table's next transition. One still
    live would hold writers without a live compactor: it is withdrawn."""
    _, intents = store.holds(conn, table)
    pressed = [x for x in intents if x.cause == "backpressure"]
    expired = [x for x in pressed if not x.live(at)]
    for intent in expired:
        _expire_intent(conn, intent, at)
    if expired:
        holds_ended(conn, table)
    end_backpressure(conn, table, at, [x for x in pressed if x.live(at)], actor=SYSTEM)


def audit_end(
    conn: Connection, lease: LeaseRow, at: datetime, event: EventName, actor: str, **detail: Any
) -> None:
    """The event that ends a lease, by `actor`. It says what the lease was (its principal,
    request id, TTL, how long it was held and how often renewed), so the trail still answers
    for it once retention pruned its row."""
    audit.record(
        conn,
        at=at,
        table=lease.table,
        event=event,
        lease_id=lease.id,
        kind=lease.kind,
        holder=lease.holder,
        token=lease.token,
        actor=actor,
        partitions=listed(lease.partitions),
        request_id=lease.request_id,
        ttl_s=lease.ttl_s,
        held_s=seconds((lease.ended_at or at) - lease.acquired_at),
        principal=lease.principal,
        renewals=lease.renewals,
        **detail,
    )


def _expire_intent(conn: Connection, intent: IntentRow, at: datetime) -> None:
    """An intent whose expiry passed, ended by the service itself."""
    end_intent(
        conn,
        intent,
        at,
        EventName.INTENT_EXPIRED,
        actor=SYSTEM,
        expired_at=intent.expires_at.isoformat(),
    )


def end_intent(
    conn: Connection,
    intent: IntentRow,
    at: datetime,
    event: EventName,
    *,
    actor: str,
    kind: str | None = None,
    lease_id: str | None = None,
    **detail: Any,
) -> None:
    """Delete an intent that ended, with its event by `actor` (which names a backpressure
    intent's cause)."""
    store.delete_intent(conn, intent)
    if intent.cause != "drain":
        detail["cause"] = intent.cause
    audit.record(
        conn,
        at=at,
        table=intent.table,
        event=event,
        lease_id=lease_id,
        kind=kind,
        holder=intent.holder,
        actor=actor,
        request_id=intent.request_id,
        partitions=listed(intent.partitions),
        **detail,
    )


def end_backpressure(
    conn: Connection, table: str, at: datetime, intents: Sequence[IntentRow], *, actor: str
) -> list[str]:
    """End the backpressure intents among `intents` (`intent.withdrawn` by `actor`); their
    partitions."""
    ended = [x for x in intents if x.cause == "backpressure"]
    for intent in ended:
        end_intent(
            conn,
            intent,
            at,
            EventName.INTENT_WITHDRAWN,
            actor=actor,
            kind="intent",
            open_s=seconds(at - intent.opened_at),
        )
    if ended:
        holds_ended(conn, table)
    return [name for x in ended for name in x.partitions or ()]
