"""Leases on Iceberg tables: the lock protocol, as plain functions over one transaction.

lakelock_tables has one row per table (the switch, next_token, holds_until);
lakelock_commit_leases and lakelock_maintenance_leases one row per grant, lakelock_intents one
row per open intent. Each function runs in the caller's transaction and first locks the table
row (`SELECT ... FOR UPDATE` on MySQL/MariaDB, reading the clock in the same statement;
`BEGIN IMMEDIATE` on SQLite), so two grants on one table never both see "nothing live".

Every lease and intent has a scope (`service.scope`): the whole table, or a set of partitions.
Two of them conflict when their kinds conflict and their scopes intersect (DESIGN.md §3b):

    commit       shared; granted while ingest is running and no live maintenance lease or open
                 intent intersects its scope. Commit leases never exclude each other.
    maintenance  exclusive on its scope; granted when no live maintenance lease and no live
                 commit lease intersects it. When only commit leases do, an intent is opened
                 (drain) and the caller is told how many of them are in flight.
    intent       writer preference: while it is live no commit lease intersecting its scope is
                 granted, so those in flight drain and compaction is not starved. It expires
                 `intent_ttl` after the last time its request asked; asking again (same request
                 id) keeps it open; its holder may withdraw it. It does not exclude another
                 maintenance request.
    switch       ingest running|paused (no commit grants), maintenance enabled|disabled (no
                 maintenance grants); leases already live are not cut short by a switch.
    token        next_token at each maintenance grant, whatever its scope, then bumped: strictly
                 increasing per table. Renew and release of a maintenance lease carry it;
                 another one is StaleToken.
    expiry       judged by the database clock, read once per transaction (`db.locked_clock`).
                 A lease whose expiry passed is never live again: renew refuses it
                 (LeaseExpired), and a sweep marks it ended and audits `lease.expired`
                 (maintenance leases and intents whenever a call reads them; expired commit
                 leases before a maintenance grant or by the background sweeper, since they
                 never block a commit grant).
    renew        extends a live lease only. Outcomes: ok | not_found | expired | not_owner
                 (another holder, or revoked, naming who) | token_mismatch.
    release      by the holder (and the token for maintenance); idempotent: releasing an ended
                 lease answers its state again. An operator's release is a revoke.
    request id   an acquire repeated with the same request id answers the same lease (or keeps
                 the same intent), so a client may retry after a timeout; the unique key
                 (table, request id) of each lease table catches the repeat at the insert.
    version      the id of the table's newest audit event: every change writes one under the
                 row lock, so it grows with each change; `GET ...?since=` long-polls on it.

The commit path is lean on purpose (benchmarks/lease_throughput.py counts it): a grant is the
locking read, the lease insert and its event; a release the locking read of lease and table
(one join), the update and its event. The table row's `holds_until` (no maintenance lease or
intent of the table is unended after it) lets a commit grant skip reading them while none is.

Refusals are raised as `service.errors` exceptions. `db.run_transaction` commits what a refused
call recorded (the sweep, a `lease.renew_failed` event) before re-raising, and nothing else is
written before a refusal is decided.
"""

from __future__ import annotations

import uuid
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from types import SimpleNamespace
from typing import Any, Literal

from sqlalchemy import Table, delete, func, insert, select, update
from sqlalchemy.dialects import mysql, sqlite
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from service import audit
from service.db import (
    commit_leases_t,
    events_t,
    intents_t,
    locked_clock,
    maintenance_leases_t,
    now,
    tables_t,
)
from service.errors import (
    InvalidRequest,
    LeaseExpired,
    Locked,
    MaintenanceHeld,
    MaintenanceOff,
    NotFound,
    NotOwner,
    StaleToken,
)
from service.scope import Scope, conflicts, decode, encode, scope_of

__all__ = [
    "LeaseKind",
    "Lease",
    "Intent",
    "Draining",
    "TableState",
    "acquire_commit",
    "acquire_maintenance",
    "renew",
    "release",
    "revoke",
    "set_switch",
    "lease_state",
    "table_state",
    "table_version",
    "table_versions",
    "hold_table",
    "withdraw_intent",
    "list_tables",
    "sweep",
    "tables_due_for_sweep",
]

LeaseKind = Literal["commit", "maintenance"]
"""`commit`: shared, one micro-batch write. `maintenance`: exclusive, one compaction run."""

LeaseEnd = Literal["live", "released", "expired", "revoked"]


@dataclass(frozen=True)
class Lease:
    lease_id: str
    table: str
    kind: LeaseKind
    holder: str
    request_id: str
    token: int | None
    ttl_s: float
    remaining_s: float
    held_s: float
    state: LeaseEnd = "live"
    partitions: list[str] | None = None  # None: the whole table

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Intent:
    """An open intent: maintenance request `request_id` is draining the commits on its scope."""

    holder: str
    request_id: str
    partitions: list[str] | None
    remaining_s: float
    open_s: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Draining:
    """Maintenance asked while intersecting commit leases are live: an intent is open, they
    drain."""

    table: str
    holder: str
    request_id: str
    partitions: list[str] | None
    in_flight_commits: int
    intent_remaining_s: float
    retry_after_s: float


@dataclass(frozen=True)
class TableState:
    table: str
    version: int
    ingest: str
    maintenance: str
    switch_reason: str | None
    switch_by: str | None
    switch_age_s: float | None
    maintenance_leases: list[Lease]
    intents: list[Intent]
    commit_leases: list[Lease]
    next_token: int
    # the oldest of each, for clients of the one-lease-per-table protocol
    maintenance_lease: Lease | None = field(init=False)
    intent: Intent | None = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "maintenance_lease", next(iter(self.maintenance_leases), None))
        object.__setattr__(self, "intent", next(iter(self.intents), None))


def _seconds(delta: timedelta) -> float:
    return round(delta.total_seconds(), 6)


def _ttl(seconds: float) -> timedelta:
    return timedelta(seconds=seconds)


_LEASES: dict[LeaseKind, Table] = {"commit": commit_leases_t, "maintenance": maintenance_leases_t}


# -- the table row ---------------------------------------------------------------------------


def _lock_table(
    conn: Connection, table: str, *, create: bool = True
) -> tuple[dict, datetime] | None:
    """The table's row, locked for this transaction, and the database clock read once the lock
    is ours, in one statement; the row is created on first use. None when it does not exist and
    `create` is false."""
    clock = locked_clock(conn)
    columns = [tables_t] if clock is None else [tables_t, clock.label("db_now")]
    query = select(*columns).where(tables_t.c.name == table).with_for_update()
    found = conn.execute(query).mappings().first()
    if found is None and create:
        values = {
            "name": table,
            "ingest": "running",
            "maintenance": "enabled",
            "next_token": 1,
            "created_at": now(conn),
        }
        # two first uses may race: the loser's insert is ignored and it locks the winner's row
        if conn.dialect.name == "sqlite":
            stmt = sqlite.insert(tables_t).values(**values).on_conflict_do_nothing()
        else:
            stmt = mysql.insert(tables_t).values(**values)
            stmt = stmt.on_duplicate_key_update(name=stmt.inserted.name)
        conn.execute(stmt)
        found = conn.execute(query).mappings().first()
    if found is None:
        return None
    row = dict(found)
    # the clock after the lock is ours: a call that waited for the lock must not judge expiry
    # (or stamp a grant) with an instant from before the previous holder committed
    at = row.pop("db_now") if clock is not None else now(conn)
    return row, at


def _locked_table(conn: Connection, table: str) -> tuple[dict, datetime]:
    """The locked row of `table`, created on first use, and the clock."""
    locked = _lock_table(conn, table)
    assert locked is not None  # created
    return locked


def _change(conn: Connection, row: dict, **values: Any) -> None:
    """Update the locked row. Every state change also writes an audit event, whose id is the
    table's new version (`table_version`): that is what long-polls wait on."""
    if values:
        conn.execute(update(tables_t).where(tables_t.c.name == row["name"]).values(**values))
        row.update(values)


def _live(lease: Any, at: datetime) -> bool:
    return lease.ended_at is None and lease.expires_at > at


def _scope(stored: Any) -> Scope:
    return scope_of(decode(stored.partitions))


# -- holds: the maintenance leases and intents of a table ------------------------------------


@dataclass
class _Holds:
    """The live maintenance leases and open intents of a table, oldest first."""

    leases: list[Any] = field(default_factory=list)
    intents: list[Any] = field(default_factory=list)

    def blocking_commits(self, scope: Scope) -> tuple[Any | None, Any | None]:
        """The first live maintenance lease and the first intent a commit on `scope` conflicts
        with."""
        lease = next(
            (x for x in self.leases if conflicts("commit", scope, "maintenance", _scope(x))), None
        )
        intent = next(
            (x for x in self.intents if conflicts("commit", scope, "intent", _scope(x))), None
        )
        return lease, intent


def _holds(conn: Connection, row: dict, at: datetime, *, sweep: bool) -> _Holds:
    """The table's live maintenance leases and intents. With `sweep`, those whose expiry passed
    are ended (each audited) and `holds_until` is brought down to the latest live expiry.
    No statement while `holds_until` says none can be unended."""
    if row["holds_until"] is None:
        return _Holds()
    m, i = maintenance_leases_t.c, intents_t.c
    leases = list(
        conn.execute(
            select(maintenance_leases_t)
            .where(m.table_name == row["name"], m.ended_at.is_(None))
            .order_by(m.acquired_at)
        )
    )
    intents = list(
        conn.execute(select(intents_t).where(i.table_name == row["name"]).order_by(i.opened_at))
    )
    holds = _Holds(
        [x for x in leases if x.expires_at > at], [x for x in intents if x.expires_at > at]
    )
    if not sweep:
        return holds
    for lease in leases:
        if lease.expires_at <= at:
            _end_expired(conn, "maintenance", lease, at)
    for intent in intents:
        if intent.expires_at <= at:
            conn.execute(delete(intents_t).where(_intent(intent.table_name, intent.request_id)))
            audit.record(
                conn,
                at=at,
                table=row["name"],
                event="intent.expired",
                holder=intent.holder,
                request_id=intent.request_id,
                partitions=decode(intent.partitions),
                expired_at=intent.expires_at.isoformat(),
            )
    latest = max((x.expires_at for x in [*holds.leases, *holds.intents]), default=None)
    if latest != row["holds_until"]:
        _change(conn, row, holds_until=latest)
    return holds


def _hold_until(conn: Connection, row: dict, until: datetime) -> None:
    """A maintenance lease or intent of the table is live until `until`: commit grants read
    the holds until then."""
    if row["holds_until"] is None or until > row["holds_until"]:
        _change(conn, row, holds_until=until)


def _end_expired(conn: Connection, kind: LeaseKind, lease: Any, at: datetime) -> None:
    """Mark a lease whose expiry passed as ended, with its `lease.expired` event."""
    leases_t = _LEASES[kind]
    conn.execute(
        update(leases_t)
        .where(leases_t.c.id == lease.id)
        .values(ended_at=lease.expires_at, end="expired")
    )
    audit.record(
        conn,
        at=at,
        table=lease.table_name,
        event="lease.expired",
        lease_id=lease.id,
        kind=kind,
        holder=lease.holder,
        token=getattr(lease, "token", None),
        partitions=decode(lease.partitions),
        held_s=_seconds(lease.expires_at - lease.acquired_at),
    )


def _live_commit_rows(conn: Connection, table: str, at: datetime) -> list[Any]:
    c = commit_leases_t.c
    query = (
        select(commit_leases_t)
        .where(c.table_name == table, c.ended_at.is_(None), c.expires_at > at)
        .order_by(c.acquired_at)
    )
    return list(conn.execute(query))


def _sweep_commits(conn: Connection, row: dict, at: datetime) -> None:
    """End the table's commit leases whose expiry passed, each with its `lease.expired` event."""
    c = commit_leases_t.c
    expired = conn.execute(
        select(commit_leases_t).where(
            c.table_name == row["name"], c.ended_at.is_(None), c.expires_at <= at
        )
    )
    for lease in list(expired):
        _end_expired(conn, "commit", lease, at)


# -- views -----------------------------------------------------------------------------------


def _lease_view(kind: LeaseKind, lease: Any, at: datetime) -> Lease:
    live = _live(lease, at)
    return Lease(
        lease_id=lease.id,
        table=lease.table_name,
        kind=kind,
        holder=lease.holder,
        request_id=lease.request_id,
        token=lease.token if kind == "maintenance" else None,
        ttl_s=lease.ttl_s,
        remaining_s=max(0.0, _seconds(lease.expires_at - at)) if live else 0.0,
        held_s=_seconds((lease.ended_at or min(at, lease.expires_at)) - lease.acquired_at),
        state="live" if live else (lease.end or "expired"),
        partitions=decode(lease.partitions),
    )


def _intent_view(intent: Any, at: datetime) -> Intent:
    return Intent(
        holder=intent.holder,
        request_id=intent.request_id,
        partitions=decode(intent.partitions),
        remaining_s=_seconds(intent.expires_at - at),
        open_s=_seconds(at - intent.opened_at),
    )


def _repeated(view: Lease, request_id: str, holder: str, scope: Scope) -> Lease:
    """The answer to an acquire repeated with `request_id`: its lease while live."""
    if view.holder != holder:
        # another holder's lease (and fencing token) must not be handed out by its id
        raise _request_id_taken(request_id)
    _same_scope(request_id, scope_of(view.partitions), scope)
    if view.state != "live":
        raise LeaseExpired(
            f"the lease granted to request_id {request_id!r} is {view.state}; "
            "acquire again with a new request_id",
            lease_id=view.lease_id,
            state=view.state,
        )
    return view


def _same_scope(request_id: str, earlier: Scope, asked: Scope) -> None:
    """A retry asks for what the first attempt asked for; other partitions under the same
    request id would get a lease (or an intent) that does not cover them."""
    if earlier != asked:
        used = "the whole table" if earlier is None else f"another set of {len(earlier)} partitions"
        raise NotOwner(
            f"request_id {request_id!r} was used for {used}; "
            "send a new request_id for a different scope",
            field="request_id",
        )


def _request_id_taken(request_id: str) -> NotOwner:
    # a conflict with what is stored, not a malformed request: 409, like any other holder's lease
    return NotOwner(
        f"request_id {request_id!r} was used by another holder; send a new request_id",
        field="request_id",
    )


def _by_request(conn: Connection, kind: LeaseKind, table: str, request_id: str) -> Any:
    leases_t = _LEASES[kind]
    query = select(leases_t).where(
        leases_t.c.table_name == table, leases_t.c.request_id == request_id
    )
    return conn.execute(query).first()


def _where(partitions: list[str] | None) -> str:
    return (
        ""
        if partitions is None
        else f" (partitions {', '.join(partitions[:3])}"
        + (f" and {len(partitions) - 3} more)" if len(partitions) > 3 else ")")
    )


# -- acquire ---------------------------------------------------------------------------------


def _commit_refusal(conn: Connection, row: dict, at: datetime, scope: Scope) -> Locked | None:
    """Why no commit lease on `scope` may be granted on the (locked) table now, or None."""
    table = row["name"]
    if row["ingest"] == "paused":
        return Locked(
            f"ingest on {table} is paused by {row['switch_by']}: {row['switch_reason']}",
            reason="paused",
            blocking_holder=row["switch_by"],
            retry_after_s=None,
        )
    lease, intent = _holds(conn, row, at, sweep=True).blocking_commits(scope)
    if lease is not None:
        partitions = decode(lease.partitions)
        return Locked(
            f"{table}{_where(partitions)} is held for maintenance by {lease.holder}",
            reason="maintenance",
            blocking_holder=lease.holder,
            blocking_partitions=partitions,
            retry_after_s=_seconds(lease.expires_at - at),
        )
    if intent is not None:
        partitions = decode(intent.partitions)
        return Locked(
            f"{table}{_where(partitions)} is draining for maintenance by {intent.holder}",
            reason="intent",
            blocking_holder=intent.holder,
            blocking_partitions=partitions,
            retry_after_s=None,
        )
    return None


def acquire_commit(
    conn: Connection,
    *,
    table: str,
    holder: str,
    ttl: timedelta,
    request_id: str,
    partitions: list[str] | None = None,
) -> Lease:
    """Grant a shared commit lease on `table`, or on `partitions` of it (None: the whole table).

    Raises:
        Locked: ingest is paused, or a maintenance lease or intent intersecting the scope is
            live (`reason` says which, `retry_after_s` when to ask again).
        LeaseExpired: this request id was granted a lease that has ended since.
        NotOwner: this request id belongs to another holder.
    """
    row, at = _locked_table(conn, table)
    scope = scope_of(partitions)
    refusal = _commit_refusal(conn, row, at, scope)
    if refusal is not None:
        # a retry of a request granted before the table became locked still gets its lease
        earlier = _by_request(conn, "commit", table, request_id)
        if earlier is None:
            raise refusal
        return _repeated(_lease_view("commit", earlier, at), request_id, holder, scope)
    values = _new_lease(table, holder, request_id, partitions, ttl, at)
    try:
        conn.execute(insert(commit_leases_t).values(**values))
    except IntegrityError:
        # the unique key (table, request id) says this request was granted before: a retry
        earlier = _by_request(conn, "commit", table, request_id)
        if earlier is None:
            raise
        return _repeated(_lease_view("commit", earlier, at), request_id, holder, scope)
    return _granted(conn, _lease_view("commit", _row(values), at), at)


def _new_lease(
    table: str,
    holder: str,
    request_id: str,
    partitions: list[str] | None,
    ttl: timedelta,
    at: datetime,
    **own: Any,
) -> dict[str, Any]:
    """The row of a lease granted now, of either kind (`own`: the kind's own columns)."""
    return {
        "id": str(uuid.uuid4()),
        "table_name": table,
        "holder": holder,
        "request_id": request_id,
        "partitions": encode(partitions),
        "ttl_s": ttl.total_seconds(),
        "acquired_at": at,
        "expires_at": at + ttl,
        "ended_at": None,
        "end": None,
        **own,
    }


def _intent(table: str, request_id: str) -> Any:
    """The where clause of one intent's row."""
    i = intents_t.c
    return (i.table_name == table) & (i.request_id == request_id)


def _row(values: dict[str, Any]) -> Any:
    """A lease row this transaction just wrote, as if read back."""
    return SimpleNamespace(**values)


def acquire_maintenance(
    conn: Connection,
    *,
    table: str,
    holder: str,
    ttl: timedelta,
    request_id: str,
    intent_ttl: timedelta,
    partitions: list[str] | None = None,
) -> Lease | Draining:
    """Grant an exclusive maintenance lease on `table` or on `partitions` of it, or open (keep)
    an intent on that scope while the commit leases it conflicts with drain.

    Raises:
        MaintenanceOff: an operator disabled maintenance on the table.
        MaintenanceHeld: a live maintenance lease intersects the scope.
        LeaseExpired: this request id was granted a lease that has ended since.
        NotOwner: this request id belongs to another holder.
    """
    scope = scope_of(partitions)
    row, at = _locked_table(conn, table)
    _sweep_commits(conn, row, at)
    holds = _holds(conn, row, at, sweep=True)
    earlier = _by_request(conn, "maintenance", table, request_id)
    if earlier is not None:
        return _repeated(_lease_view("maintenance", earlier, at), request_id, holder, scope)
    mine = next((x for x in holds.intents if x.request_id == request_id), None)
    if mine is not None:
        if mine.holder != holder:
            raise _request_id_taken(request_id)
        _same_scope(request_id, _scope(mine), scope)
    if row["maintenance"] == "disabled":
        raise MaintenanceOff(
            f"maintenance on {table} is disabled by {row['switch_by']}: {row['switch_reason']}",
            blocking_holder=row["switch_by"],
        )
    held = [x for x in holds.leases if conflicts("maintenance", scope, "maintenance", _scope(x))]
    if held:
        other = decode(held[0].partitions)
        raise MaintenanceHeld(
            f"{table}{_where(other)} is held for maintenance by {held[0].holder}",
            blocking_holder=held[0].holder,
            blocking_partitions=other,
            retry_after_s=_seconds(held[0].expires_at - at),
        )
    in_flight = [
        x
        for x in _live_commit_rows(conn, table, at)
        if conflicts("maintenance", scope, "commit", _scope(x))
    ]
    if in_flight:
        return _drain(conn, row, at, holder, request_id, partitions, in_flight, mine, intent_ttl)
    token = row["next_token"]
    values = _new_lease(table, holder, request_id, partitions, ttl, at, token=token)
    conn.execute(insert(maintenance_leases_t).values(**values))
    _change(conn, row, next_token=token + 1)
    _hold_until(conn, row, at + ttl)
    if mine is not None:
        # the intent has done its work; holds_until may stay later than needed until a sweep
        conn.execute(delete(intents_t).where(_intent(table, request_id)))
    return _granted(conn, _lease_view("maintenance", _row(values), at), at)


def _drain(
    conn: Connection,
    row: dict,
    at: datetime,
    holder: str,
    request_id: str,
    partitions: list[str] | None,
    in_flight: list[Any],
    mine: Any,
    intent_ttl: timedelta,
) -> Draining:
    """Open the intent of maintenance request `request_id`, or keep it open, while the commit
    leases `in_flight` drain."""
    table = row["name"]
    expires = at + intent_ttl
    if mine is not None:
        # asking again keeps the intent open; not a state change, so no version bump
        conn.execute(update(intents_t).where(_intent(table, request_id)).values(expires_at=expires))
        partitions = decode(mine.partitions)
    else:
        conn.execute(
            insert(intents_t).values(
                table_name=table,
                request_id=request_id,
                holder=holder,
                partitions=encode(partitions),
                opened_at=at,
                expires_at=expires,
            )
        )
        audit.record(
            conn,
            at=at,
            table=table,
            event="intent.opened",
            kind="maintenance",
            holder=holder,
            request_id=request_id,
            partitions=partitions,
            in_flight_commits=len(in_flight),
        )
    _hold_until(conn, row, expires)
    longest = max(lease.expires_at for lease in in_flight)
    return Draining(
        table=table,
        holder=holder,
        request_id=request_id,
        partitions=partitions,
        in_flight_commits=len(in_flight),
        intent_remaining_s=intent_ttl.total_seconds(),
        retry_after_s=min(_seconds(longest - at), intent_ttl.total_seconds() / 2),
    )


def _granted(conn: Connection, lease: Lease, at: datetime) -> Lease:
    """Audit a grant; every grant, of either kind, is one `lease.acquired` event."""
    audit.record(
        conn,
        at=at,
        table=lease.table,
        event="lease.acquired",
        lease_id=lease.lease_id,
        kind=lease.kind,
        holder=lease.holder,
        token=lease.token,
        request_id=lease.request_id,
        partitions=lease.partitions,
        ttl_s=lease.ttl_s,
    )
    return lease


# -- one lease by id -------------------------------------------------------------------------


@dataclass
class _Found:
    kind: LeaseKind
    lease: Any  # its row
    at: datetime

    @property
    def table(self) -> str:
        return self.lease.table_name

    @property
    def token(self) -> int | None:
        return self.lease.token if self.kind == "maintenance" else None

    def view(self) -> Lease:
        return _lease_view(self.kind, self.lease, self.at)


def _find(conn: Connection, lease_id: str) -> _Found | dict[str, Any]:
    """The lease, its table row locked; or, for a lease pruned from its table, its last audit
    event; raises NotFound for an id never granted."""
    for kind in _LEASES:
        found = _locked_lease(conn, kind, lease_id)
        if found is not None:
            return found
    event = audit.last_for_lease(conn, lease_id)
    if event is None:
        raise NotFound(f"no lease {lease_id}; acquire a new one", lease_id=lease_id)
    return event


def _locked_lease(conn: Connection, kind: LeaseKind, lease_id: str) -> _Found | None:
    """The `kind` lease `lease_id` with its table's row locked, and the clock, in one statement
    (the join locks both rows); None for another id. Ending or extending one lease changes
    nothing another grant depends on but the table's `holds_until`, read here too."""
    leases_t = _LEASES[kind]
    clock = locked_clock(conn)
    columns = [leases_t, tables_t.c.holds_until]
    if clock is not None:
        columns.append(clock.label("db_now"))
    query = (
        select(*columns)
        .join(tables_t, tables_t.c.name == leases_t.c.table_name)
        .where(leases_t.c.id == lease_id)
        .with_for_update()
    )
    lease = conn.execute(query).first()
    if lease is None:
        return None
    at = lease.db_now if clock is not None else now(conn)
    return _Found(kind, lease, at)


def _replaced_state(event: dict[str, Any]) -> LeaseEnd:
    return {"lease.revoked": "revoked", "lease.released": "released"}.get(event["event"], "expired")


def lease_state(conn: Connection, *, lease_id: str) -> Lease | dict[str, Any]:
    """The lease as it is now (any state), or a summary from the audit trail for a lease pruned
    from its table. Raises NotFound for an id never granted."""
    found = _find(conn, lease_id)
    if isinstance(found, dict):
        return {
            "lease_id": lease_id,
            "table": found["table"],
            "kind": found["kind"],
            "holder": found["holder"],
            "token": found["token"],
            "partitions": found["detail"].get("partitions"),
            "state": _replaced_state(found),
        }
    return found.view()


def renew(
    conn: Connection,
    *,
    lease_id: str,
    holder: str,
    ttl: timedelta | None = None,
    token: int | None = None,
) -> Lease:
    """Extend a live lease by `ttl` (default: its own TTL) from now. Never resurrects one.

    Raises:
        NotFound: no lease has this id.
        LeaseExpired: the lease expired or was released.
        NotOwner: the lease is another holder's, or an operator revoked it.
        StaleToken: a maintenance lease renewed with a token that is not its own.
        InvalidRequest: a live maintenance lease renewed without a token.
    """
    found = _find(conn, lease_id)
    if isinstance(found, dict):
        outcome = _replaced_state(found)
        if outcome == "revoked":
            raise _revoked(found)
        raise LeaseExpired(f"lease {lease_id} is {outcome}; acquire again", outcome="expired")
    view = found.view()
    failure: Exception | None = None
    if view.state == "revoked":
        failure = _revoked(audit.last_for_lease(conn, lease_id) or {"lease_id": lease_id})
    elif view.state != "live":
        if found.lease.ended_at is None:  # expired, not swept yet: end it now
            _end_expired(conn, found.kind, found.lease, found.at)
            if found.kind == "maintenance":
                _holds_ended(conn, found.table)
        failure = LeaseExpired(
            f"lease {lease_id} is {view.state}; acquire a new one", outcome="expired"
        )
    elif view.holder != holder:
        failure = NotOwner(
            f"lease {lease_id} is held by {view.holder}, not {holder}", outcome="not_owner"
        )
    elif found.kind == "maintenance" and token is None:
        # a request that cannot be right whoever holds the lease: refused, nothing recorded
        raise InvalidRequest(
            f"renewing a maintenance lease needs its token: POST /v1/leases/{lease_id}/renew "
            '{"holder": ..., "token": <the token of the grant>}',
            field="token",
        )
    elif found.kind == "maintenance" and token != found.token:
        failure = StaleToken(
            f"token {token} is not lease {lease_id}'s; a newer holder exists, stop writing",
            outcome="token_mismatch",
        )
    if failure is not None:
        audit.record(
            conn,
            at=found.at,
            table=found.table,
            event="lease.renew_failed",
            lease_id=lease_id,
            kind=found.kind,
            holder=holder,
            token=token,
            outcome=failure.extra["outcome"],
        )
        raise failure
    extend = ttl if ttl is not None else _ttl(view.ttl_s)
    expires = found.at + extend
    leases_t = _LEASES[found.kind]
    conn.execute(
        update(leases_t)
        .where(leases_t.c.id == lease_id)
        .values(expires_at=expires, ttl_s=extend.total_seconds())
    )
    if found.kind == "maintenance":
        _hold_until(conn, {"name": found.table, "holds_until": found.lease.holds_until}, expires)
    found.lease = _row(
        {**found.lease._asdict(), "expires_at": expires, "ttl_s": extend.total_seconds()}
    )
    return found.view()


def _revoked(event: dict[str, Any]) -> NotOwner:
    """The answer to a renew of a lease someone else ended, naming who and why."""
    by = event.get("actor") or "an operator"
    reason = (event.get("detail") or {}).get("reason")
    return NotOwner(
        f"lease {event['lease_id']} was revoked by {by}"
        + (f" ({reason})" if reason else "")
        + "; stop writing, do not commit",
        outcome="not_owner",
        ended_by=by,
    )


def _end(
    conn: Connection, found: _Found, end: LeaseEnd, *, actor: str | None = None, **detail: Any
) -> Lease:
    """End a live lease (`released` or `revoked`) and audit it."""
    at = found.at
    leases_t = _LEASES[found.kind]
    conn.execute(
        update(leases_t).where(leases_t.c.id == found.lease.id).values(ended_at=at, end=end)
    )
    # the row is ours under the table lock: its new state is known without reading it back
    found.lease = _row({**found.lease._asdict(), "ended_at": at, "end": end})
    if found.kind == "maintenance":
        _holds_ended(conn, found.table)
    view = found.view()
    audit.record(
        conn,
        at=at,
        table=found.table,
        event=f"lease.{end}",
        lease_id=view.lease_id,
        kind=view.kind,
        holder=view.holder,
        token=view.token,
        actor=actor,
        partitions=view.partitions,
        held_s=view.held_s,
        **detail,
    )
    return view


def _holds_ended(conn: Connection, table: str) -> None:
    """A maintenance lease or intent of the (locked) table ended: `holds_until` becomes the
    latest expiry of those left unended, so commit grants stop reading them when none is."""
    m, i = maintenance_leases_t.c, intents_t.c
    leases = select(func.max(m.expires_at)).where(m.table_name == table, m.ended_at.is_(None))
    intents = select(func.max(i.expires_at)).where(i.table_name == table)
    latest = max(
        (
            x
            for x in conn.execute(select(leases.scalar_subquery(), intents.scalar_subquery())).one()
            if x is not None
        ),
        default=None,
    )
    conn.execute(update(tables_t).where(tables_t.c.name == table).values(holds_until=latest))


def release(
    conn: Connection,
    *,
    lease_id: str,
    actor: str,
    holder: str | None = None,
    token: int | None = None,
    operator: bool = False,
) -> Lease | dict:
    """End a lease; releasing an ended lease answers its state again (idempotent).

    The holder releases its own lease: `holder` must be the lease's and, for a maintenance
    lease, `token` its token. An operator may end any lease by leaving both out; that is a
    revoke (audited as `lease.revoked` by `actor`), so the holder hears `not_owner` at its next
    renew. A holder that is not the lease's is refused whoever sends it: it names another lease.

    Raises:
        NotFound: no lease has this id.
        NotOwner: `holder` is not the lease's holder.
        StaleToken: a maintenance lease released with a token that is not its own.
        InvalidRequest: no holder sent (and not an operator), or no token for a maintenance lease.
    """
    found = _find(conn, lease_id)
    if isinstance(found, dict):
        return lease_state(conn, lease_id=lease_id)
    view = found.view()
    by_holder = holder is not None and holder == view.holder
    if holder is not None and not by_holder:
        how = "; an operator ends any lease by leaving holder and token out" if operator else ""
        raise NotOwner(
            f"lease {lease_id} is held by {view.holder}, not {holder}; not released{how}",
            outcome="not_owner",
        )
    if holder is None and not operator:
        raise InvalidRequest(
            f"releasing a lease needs its holder: DELETE /v1/leases/{lease_id}?holder=<holder>",
            field="holder",
        )
    if by_holder and found.kind == "maintenance":
        if token is None:
            raise InvalidRequest(
                "releasing a maintenance lease needs its token: "
                f"DELETE /v1/leases/{lease_id}?holder=<holder>&token=<token>",
                field="token",
            )
        if token != found.token:
            raise StaleToken(f"token {token} is not lease {lease_id}'s; not released")
    if view.state != "live":
        return view
    if by_holder:
        return _end(conn, found, "released", actor=actor)
    return _end(conn, found, "revoked", actor=actor, reason="released by an operator")


def revoke(conn: Connection, *, lease_id: str, reason: str, actor: str) -> Lease | dict:
    """Force-end any lease (operators). The holder learns it at its next renew (NotOwner).

    Raises:
        NotFound: no lease has this id.
    """
    found = _find(conn, lease_id)
    if isinstance(found, dict):
        return lease_state(conn, lease_id=lease_id)
    view = found.view()
    if view.state != "live":
        return view
    return _end(conn, found, "revoked", actor=actor, reason=reason)


# -- switch and state ------------------------------------------------------------------------


def set_switch(
    conn: Connection,
    *,
    table: str,
    reason: str,
    actor: str,
    ingest: str | None = None,
    maintenance: str | None = None,
) -> TableState:
    """Set the operator switch; either field may be None (unchanged). Always audited."""
    row, at = _locked_table(conn, table)
    _holds(conn, row, at, sweep=True)
    before = {"ingest": row["ingest"], "maintenance": row["maintenance"]}
    _change(
        conn,
        row,
        ingest=ingest or row["ingest"],
        maintenance=maintenance or row["maintenance"],
        switch_reason=reason,
        switch_by=actor,
        switch_at=at,
    )
    audit.record(
        conn,
        at=at,
        table=table,
        event="switch.set",
        actor=actor,
        reason=reason,
        before=before,
        after={"ingest": row["ingest"], "maintenance": row["maintenance"]},
    )
    return _state(conn, row, at)


def _state(conn: Connection, row: dict, at: datetime) -> TableState:
    holds = _holds(conn, row, at, sweep=False)
    return TableState(
        table=row["name"],
        version=table_version(conn, table=row["name"]),
        ingest=row["ingest"],
        maintenance=row["maintenance"],
        switch_reason=row["switch_reason"],
        switch_by=row["switch_by"],
        switch_age_s=_seconds(at - row["switch_at"]) if row["switch_at"] else None,
        maintenance_leases=[_lease_view("maintenance", x, at) for x in holds.leases],
        intents=[_intent_view(x, at) for x in holds.intents],
        commit_leases=[
            _lease_view("commit", x, at) for x in _live_commit_rows(conn, row["name"], at)
        ],
        next_token=row["next_token"],
    )


def table_state(conn: Connection, *, table: str) -> TableState:
    """The table's state now. Read-only: expired leases are left out here, and ended by the
    next sweep.

    Raises:
        NotFound: the table never had a lease, an intent or a switch (a typo looks like one).
    """
    at = now(conn)
    row = conn.execute(select(tables_t).where(tables_t.c.name == table)).mappings().first()
    if row is None:
        raise NotFound(
            f"no table {table} is known: it never had a lease, an intent or a switch. Check "
            "the name (GET /v1/tables lists the known ones); acquiring a lease or setting the "
            "switch on it makes it known",
            table=table,
        )
    return _state(conn, dict(row), at)


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


def hold_table(conn: Connection, *, table: str) -> None:
    """Lock a known table's row for a change that writes an event but no lease (a run report),
    so event ids on the table keep following commit order."""
    _lock_table(conn, table, create=False)


def withdraw_intent(conn: Connection, *, table: str, request_id: str, holder: str) -> bool:
    """Close the open intent of maintenance request `request_id` (a compactor that gives up
    draining); True when one was open. Commit leases on its scope are granted again at once.

    Raises:
        NotOwner: the intent is another holder's.
    """
    locked = _lock_table(conn, table, create=False)
    if locked is None:
        return False
    row, at = locked
    holds = _holds(conn, row, at, sweep=True)
    intent = next((x for x in holds.intents if x.request_id == request_id), None)
    if intent is None:
        return False
    if intent.holder != holder:
        raise NotOwner(
            f"the intent {request_id!r} on {table} is {intent.holder}'s, not {holder}'s",
            outcome="not_owner",
        )
    conn.execute(delete(intents_t).where(_intent(table, request_id)))
    _holds_ended(conn, table)
    audit.record(
        conn,
        at=at,
        table=table,
        event="intent.withdrawn",
        kind="maintenance",
        holder=holder,
        request_id=request_id,
        partitions=decode(intent.partitions),
        open_s=_seconds(at - intent.opened_at),
    )
    return True


def list_tables(conn: Connection) -> list[TableState]:
    at = now(conn)
    rows = conn.execute(select(tables_t).order_by(tables_t.c.name)).mappings().all()
    return [_state(conn, dict(row), at) for row in rows]


def tables_due_for_sweep(conn: Connection) -> list[str]:
    """Tables with a lease or intent whose expiry passed but which is not yet marked ended."""
    at = now(conn)
    due: set[str] = set()
    for leases_t in _LEASES.values():
        c = leases_t.c
        expired = select(c.table_name).where(c.ended_at.is_(None), c.expires_at <= at)
        due.update(conn.execute(expired.distinct()).scalars())
    i = intents_t.c
    due.update(conn.execute(select(i.table_name).where(i.expires_at <= at).distinct()).scalars())
    return sorted(due)


def sweep(conn: Connection, *, table: str) -> None:
    """Mark what expired on `table` as ended, with its audit events (one transaction)."""
    locked = _lock_table(conn, table, create=False)
    if locked is not None:
        row, at = locked
        _sweep_commits(conn, row, at)
        _holds(conn, row, at, sweep=True)
