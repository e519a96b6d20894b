"""Leases on Iceberg tables: the lock protocol, as plain functions over one transaction.

lakelock_tables has one row per table (switch, the maintenance lease, the open intent,
next_token); lakelock_commit_leases one row per commit grant. Each function runs in the caller's
transaction and first locks the table row (`SELECT ... FOR UPDATE` on MySQL/MariaDB, reading
the clock in the same statement; `BEGIN IMMEDIATE` on SQLite), so two grants on one table never
both see "nothing live".

    commit       shared; granted while ingest is running, no maintenance lease is live and no
                 intent is open. Many may be live at once.
    maintenance  exclusive; granted when no commit lease is live, else an intent is opened
                 (drain) and the caller is told how many commits are in flight.
    intent       writer preference: while it is live no commit lease is granted, so in-flight
                 commits drain and compaction is not starved. It expires `intent_ttl` after the
                 last time its holder asked; asking again (same request id) keeps it open; its
                 holder may withdraw it.
    switch       ingest running|paused (no commit grants), maintenance enabled|disabled (no
                 maintenance grants); leases already live are not cut short by a switch.
    token        next_token at a maintenance grant, then bumped: strictly increasing per table.
                 Renew and release of a maintenance lease carry it; another one is StaleToken.
    expiry       judged by the database clock, read once per transaction (`db.locked_clock`).
                 A lease whose expiry passed is never live again: renew refuses it
                 (LeaseExpired), and a sweep marks it ended and audits `lease.expired` (the
                 maintenance lease and intent before any grant; expired commit leases before a
                 maintenance grant or by the background sweeper, since they never block a
                 commit grant).
    renew        extends a live lease only. Outcomes: ok | not_found | expired | not_owner
                 (another holder, or revoked, naming who) | token_mismatch.
    release      by the holder (and the token for maintenance); idempotent: releasing an ended
                 lease answers its state again. An operator's release is a revoke.
    request id   an acquire repeated with the same request id answers the same lease (or keeps
                 the same intent), so a client may retry after a timeout; for commit leases the
                 unique key (table, request id) catches the repeat at the insert.
    version      the id of the table's newest audit event: every change writes one under the
                 row lock, so it grows with each change; `GET ...?since=` long-polls on it.

The commit path is lean on purpose (benchmarks/lease_throughput.py counts it): a grant is the
locking read, the lease insert and its event; a release the locking read of lease and table
(one join), the update and its event.

Refusals are raised as `service.errors` exceptions. `db.run_transaction` commits what a refused
call recorded (the sweep, a `lease.renew_failed` event) before re-raising, and nothing else is
written before a refusal is decided.
"""

from __future__ import annotations

import uuid
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from types import SimpleNamespace
from typing import Any, Literal

from sqlalchemy import and_, func, insert, select, update
from sqlalchemy.dialects import mysql, sqlite
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from service import audit
from service.db import commit_leases_t, events_t, locked_clock, now, tables_t
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

__all__ = [
    "LeaseKind",
    "Lease",
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

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Draining:
    """Maintenance asked while commit leases are live: an intent is open, commits drain."""

    table: str
    holder: str
    request_id: str
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
    maintenance_lease: Lease | None
    intent: dict[str, Any] | None
    commit_leases: list[Lease]
    next_token: int


def _seconds(delta: timedelta) -> float:
    return round(delta.total_seconds(), 6)


def _ttl(seconds: float) -> timedelta:
    return timedelta(seconds=seconds)


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


def _change(conn: Connection, row: dict, **values: Any) -> None:
    """Update the locked row. Every state change also writes an audit event, whose id is the
    table's new version (`table_version`): that is what long-polls wait on."""
    if values:
        conn.execute(update(tables_t).where(tables_t.c.name == row["name"]).values(**values))
        row.update(values)


def _maintenance_live(row: dict, at: datetime) -> bool:
    return (
        row["maint_lease_id"] is not None
        and row["maint_ended_at"] is None
        and row["maint_expires_at"] > at
    )


def _intent_live(row: dict, at: datetime) -> bool:
    return row["intent_holder"] is not None and row["intent_expires_at"] > at


def _live_commit_rows(conn: Connection, table: str, at: datetime) -> list[Any]:
    c = commit_leases_t.c
    query = (
        select(commit_leases_t)
        .where(c.table_name == table, c.ended_at.is_(None), c.expires_at > at)
        .order_by(c.acquired_at)
    )
    return list(conn.execute(query))


def _sweep_row(conn: Connection, row: dict, at: datetime) -> None:
    """End what expired on this table (locked): commit leases, the maintenance lease, the intent."""
    _sweep_commits(conn, row, at)
    _sweep_holds(conn, row, at)


def _sweep_commits(conn: Connection, row: dict, at: datetime) -> None:
    """End the table's commit leases whose expiry passed, each with its `lease.expired` event."""
    c = commit_leases_t.c
    expired = list(
        conn.execute(
            select(commit_leases_t).where(
                c.table_name == row["name"], c.ended_at.is_(None), c.expires_at <= at
            )
        )
    )
    for lease in expired:
        conn.execute(
            update(commit_leases_t)
            .where(c.id == lease.id)
            .values(ended_at=lease.expires_at, end="expired")
        )
        audit.record(
            conn,
            at=at,
            table=row["name"],
            event="lease.expired",
            lease_id=lease.id,
            kind="commit",
            holder=lease.holder,
            held_s=_seconds(lease.expires_at - lease.acquired_at),
        )


def _sweep_holds(conn: Connection, row: dict, at: datetime) -> None:
    """End the maintenance lease and the intent of the row if their expiry passed; no statement
    unless one did (both live in the row already read)."""
    changes: dict[str, Any] = {}
    if (
        row["maint_lease_id"] is not None
        and row["maint_ended_at"] is None
        and row["maint_expires_at"] <= at
    ):
        changes.update(maint_ended_at=row["maint_expires_at"], maint_end="expired")
        audit.record(
            conn,
            at=at,
            table=row["name"],
            event="lease.expired",
            lease_id=row["maint_lease_id"],
            kind="maintenance",
            holder=row["maint_holder"],
            token=row["maint_token"],
            held_s=_seconds(row["maint_expires_at"] - row["maint_acquired_at"]),
        )
    if row["intent_holder"] is not None and row["intent_expires_at"] <= at:
        audit.record(
            conn,
            at=at,
            table=row["name"],
            event="intent.expired",
            holder=row["intent_holder"],
            expired_at=row["intent_expires_at"].isoformat(),
        )
        changes.update(_NO_INTENT)
    _change(conn, row, **changes)


_NO_INTENT = {
    "intent_holder": None,
    "intent_request_id": None,
    "intent_opened_at": None,
    "intent_expires_at": None,
}


def _locked_table(
    conn: Connection, table: str, *, sweep_commits: bool = True
) -> tuple[dict, datetime]:
    """The locked row (created on first use) and the clock, with what expired on it ended.

    `sweep_commits=False` for a commit grant: commit leases never exclude each other, so ending
    expired ones can wait for the sweeper (or the next maintenance request); liveness is judged
    by expiry everywhere, so a lease past its expiry is never taken for live meanwhile.
    """
    locked = _lock_table(conn, table)
    assert locked is not None
    row, at = locked
    if sweep_commits:
        _sweep_commits(conn, row, at)
    _sweep_holds(conn, row, at)
    return row, at


# -- views -----------------------------------------------------------------------------------


def _commit_view(lease: Any, at: datetime) -> Lease:
    return Lease(
        lease_id=lease.id,
        table=lease.table_name,
        kind="commit",
        holder=lease.holder,
        request_id=lease.request_id,
        token=None,
        ttl_s=lease.ttl_s,
        remaining_s=max(0.0, _seconds(lease.expires_at - at)),
        held_s=_seconds((lease.ended_at or at) - lease.acquired_at),
        state=lease.end or ("live" if lease.expires_at > at else "expired"),
    )


def _maintenance_view(row: dict, at: datetime) -> Lease:
    ended = row["maint_ended_at"]
    live = ended is None and row["maint_expires_at"] > at
    return Lease(
        lease_id=row["maint_lease_id"],
        table=row["name"],
        kind="maintenance",
        holder=row["maint_holder"],
        request_id=row["maint_request_id"],
        token=row["maint_token"],
        ttl_s=row["maint_ttl_s"],
        remaining_s=max(0.0, _seconds(row["maint_expires_at"] - at)) if live else 0.0,
        held_s=_seconds((ended or min(at, row["maint_expires_at"])) - row["maint_acquired_at"]),
        state="live" if live else (row["maint_end"] or "expired"),
    )


def _repeated(view: Lease, request_id: str) -> Lease:
    """The answer to an acquire repeated with `request_id`: its lease while live."""
    if view.state != "live":
        raise LeaseExpired(
            f"the lease granted to request_id {request_id!r} is {view.state}; "
            "acquire again with a new request_id",
            lease_id=view.lease_id,
            state=view.state,
        )
    return view


# -- acquire ---------------------------------------------------------------------------------


def _commit_refusal(row: dict, at: datetime) -> Locked | None:
    """Why no commit lease may be granted on the (locked, swept) table now, or None."""
    table = row["name"]
    if row["ingest"] == "paused":
        return Locked(
            f"ingest on {table} is paused by {row['switch_by']}: {row['switch_reason']}",
            reason="paused",
            blocking_holder=row["switch_by"],
            retry_after_s=None,
        )
    if _maintenance_live(row, at):
        return Locked(
            f"{table} is held for maintenance by {row['maint_holder']}",
            reason="maintenance",
            blocking_holder=row["maint_holder"],
            retry_after_s=_seconds(row["maint_expires_at"] - at),
        )
    if _intent_live(row, at):
        return Locked(
            f"{table} is draining for maintenance by {row['intent_holder']}",
            reason="intent",
            blocking_holder=row["intent_holder"],
            retry_after_s=None,
        )
    return None


def _commit_by_request(conn: Connection, table: str, request_id: str) -> Any:
    c = commit_leases_t.c
    query = select(commit_leases_t).where(c.table_name == table, c.request_id == request_id)
    return conn.execute(query).first()


def _repeated_commit(earlier: Any, *, holder: str, request_id: str, at: datetime) -> Lease:
    if earlier.holder != holder:
        raise _request_id_taken(request_id)
    return _repeated(_commit_view(earlier, at), request_id)


def _request_id_taken(request_id: str) -> NotOwner:
    # a conflict with what is stored, not a malformed request: 409, like any other holder's lease
    return NotOwner(
        f"request_id {request_id!r} was used by another holder; send a new request_id",
        field="request_id",
    )


def acquire_commit(
    conn: Connection, *, table: str, holder: str, ttl: timedelta, request_id: str
) -> Lease:
    """Grant a shared commit lease on `table`.

    Raises:
        Locked: ingest is paused, a maintenance lease is live, or an intent is open
            (`reason` says which, `retry_after_s` when to ask again).
        LeaseExpired: this request id was granted a lease that has ended since.
        NotOwner: this request id belongs to another holder.
    """
    row, at = _locked_table(conn, table, sweep_commits=False)
    refusal = _commit_refusal(row, at)
    if refusal is not None:
        # a retry of a request granted before the table became locked still gets its lease
        earlier = _commit_by_request(conn, table, request_id)
        if earlier is None:
            raise refusal
        return _repeated_commit(earlier, holder=holder, request_id=request_id, at=at)
    lease_id = str(uuid.uuid4())
    values = {
        "id": lease_id,
        "table_name": table,
        "holder": holder,
        "request_id": request_id,
        "ttl_s": ttl.total_seconds(),
        "acquired_at": at,
        "expires_at": at + ttl,
    }
    try:
        conn.execute(insert(commit_leases_t).values(**values))
    except IntegrityError:
        # the unique key (table, request id) says this request was granted before: a retry
        earlier = _commit_by_request(conn, table, request_id)
        if earlier is None:
            raise
        return _repeated_commit(earlier, holder=holder, request_id=request_id, at=at)
    return _granted(
        conn,
        Lease(
            lease_id=lease_id,
            table=table,
            kind="commit",
            holder=holder,
            request_id=request_id,
            token=None,
            ttl_s=ttl.total_seconds(),
            remaining_s=ttl.total_seconds(),
            held_s=0.0,
        ),
        at,
    )


def acquire_maintenance(
    conn: Connection,
    *,
    table: str,
    holder: str,
    ttl: timedelta,
    request_id: str,
    intent_ttl: timedelta,
) -> Lease | Draining:
    """Grant the exclusive maintenance lease on `table`, or open (keep) an intent and drain.

    Raises:
        MaintenanceOff: an operator disabled maintenance on the table.
        MaintenanceHeld: another maintenance lease or another holder's intent is live.
        LeaseExpired: this request id was granted a lease that has ended since.
        NotOwner: this request id belongs to another holder.
    """
    row, at = _locked_table(conn, table)
    if request_id in (row["maint_request_id"], row["intent_request_id"]):
        owner = row["maint_holder" if row["maint_request_id"] == request_id else "intent_holder"]
        if owner != holder:
            # another holder's lease (and fencing token) must not be handed out by its id
            raise _request_id_taken(request_id)
    if row["maint_request_id"] == request_id and row["maint_lease_id"] is not None:
        return _repeated(_maintenance_view(row, at), request_id)
    if row["maintenance"] == "disabled":
        raise MaintenanceOff(
            f"maintenance on {table} is disabled by {row['switch_by']}: {row['switch_reason']}",
            blocking_holder=row["switch_by"],
        )
    if _maintenance_live(row, at):
        raise MaintenanceHeld(
            f"{table} is held for maintenance by {row['maint_holder']}",
            blocking_holder=row["maint_holder"],
            retry_after_s=_seconds(row["maint_expires_at"] - at),
        )
    if _intent_live(row, at) and row["intent_holder"] != holder:
        raise MaintenanceHeld(
            f"{row['intent_holder']} is already draining {table} for maintenance",
            blocking_holder=row["intent_holder"],
            retry_after_s=_seconds(row["intent_expires_at"] - at),
        )
    in_flight = _live_commit_rows(conn, table, at)
    if in_flight:
        expires = at + intent_ttl
        if _intent_live(row, at):
            # asking again keeps the intent open; not a state change, so no version bump
            conn.execute(
                update(tables_t)
                .where(tables_t.c.name == table)
                .values(intent_expires_at=expires, intent_request_id=request_id)
            )
        else:
            _change(
                conn,
                row,
                intent_holder=holder,
                intent_request_id=request_id,
                intent_opened_at=at,
                intent_expires_at=expires,
            )
            audit.record(
                conn,
                at=at,
                table=table,
                event="intent.opened",
                kind="maintenance",
                holder=holder,
                request_id=request_id,
                in_flight_commits=len(in_flight),
            )
        longest = max(lease.expires_at for lease in in_flight)
        return Draining(
            table=table,
            holder=holder,
            request_id=request_id,
            in_flight_commits=len(in_flight),
            intent_remaining_s=intent_ttl.total_seconds(),
            retry_after_s=min(_seconds(longest - at), intent_ttl.total_seconds() / 2),
        )
    token = row["next_token"]
    lease_id = str(uuid.uuid4())
    _change(
        conn,
        row,
        maint_lease_id=lease_id,
        maint_holder=holder,
        maint_request_id=request_id,
        maint_token=token,
        maint_ttl_s=ttl.total_seconds(),
        maint_acquired_at=at,
        maint_expires_at=at + ttl,
        maint_ended_at=None,
        maint_end=None,
        next_token=token + 1,
        **_NO_INTENT,
    )
    return _granted(conn, _maintenance_view(row, at), at)


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
        ttl_s=lease.ttl_s,
    )
    return lease


# -- one lease by id -------------------------------------------------------------------------


@dataclass
class _Found:
    kind: LeaseKind
    table: str
    row: dict
    at: datetime
    commit: Any = None  # the commit lease row, for kind == "commit"

    def view(self) -> Lease:
        if self.kind == "commit":
            return _commit_view(self.commit, self.at)
        return _maintenance_view(self.row, self.at)

    @property
    def token(self) -> int | None:
        return self.row["maint_token"] if self.kind == "maintenance" else None


def _find(conn: Connection, lease_id: str) -> _Found | dict[str, Any]:
    """The lease, its table row locked; or, for a maintenance lease that a later grant has
    replaced, its last audit event; raises NotFound for an id never granted."""
    commit = _locked_commit(conn, lease_id)
    if commit is not None:
        lease, at = commit
        return _Found("commit", lease.table_name, {}, at, lease)
    table = conn.execute(
        select(tables_t.c.name).where(tables_t.c.maint_lease_id == lease_id)
    ).scalar()
    if table is None:
        event = audit.last_for_lease(conn, lease_id)
        if event is None:
            raise NotFound(f"no lease {lease_id}; acquire a new one", lease_id=lease_id)
        return event
    row, at = _locked_table(conn, table)
    if row["maint_lease_id"] != lease_id:  # replaced between the lookup and the lock
        return _find(conn, lease_id)
    return _Found("maintenance", table, row, at)


def _locked_commit(conn: Connection, lease_id: str) -> tuple[Any, datetime] | None:
    """The commit lease `lease_id` with its table's row locked, and the clock, in one statement
    (the join locks both rows); None for another id. Ending or extending one commit lease
    changes nothing another grant depends on, so nothing else is read or swept here."""
    c = commit_leases_t.c
    clock = locked_clock(conn)
    columns = [commit_leases_t] if clock is None else [commit_leases_t, clock.label("db_now")]
    query = (
        select(*columns)
        .join(tables_t, tables_t.c.name == c.table_name)
        .where(c.id == lease_id)
        .with_for_update()
    )
    lease = conn.execute(query).first()
    if lease is None:
        return None
    at = lease.db_now if clock is not None else now(conn)
    return lease, at


def _replaced_state(event: dict[str, Any]) -> LeaseEnd:
    return {"lease.revoked": "revoked", "lease.released": "released"}.get(event["event"], "expired")


def lease_state(conn: Connection, *, lease_id: str) -> Lease | dict[str, Any]:
    """The lease as it is now (any state), or a summary from the audit trail for a maintenance
    lease a later grant replaced. Raises NotFound for an id never granted."""
    found = _find(conn, lease_id)
    if isinstance(found, dict):
        return {
            "lease_id": lease_id,
            "table": found["table"],
            "kind": found["kind"],
            "holder": found["holder"],
            "token": found["token"],
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
        failure = LeaseExpired(
            f"lease {lease_id} is {view.state}; acquire a new one", outcome="expired"
        )
    elif view.holder != holder:
        failure = NotOwner(
            f"lease {lease_id} is held by {view.holder}, not {holder}", outcome="not_owner"
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
    if found.kind == "commit":
        c = commit_leases_t.c
        conn.execute(
            update(commit_leases_t)
            .where(c.id == lease_id, c.ended_at.is_(None), c.expires_at > found.at)
            .values(expires_at=expires, ttl_s=extend.total_seconds())
        )
        found.commit = conn.execute(select(commit_leases_t).where(c.id == lease_id)).one()
    else:
        conn.execute(
            update(tables_t)
            .where(tables_t.c.name == found.table, tables_t.c.maint_lease_id == lease_id)
            .values(maint_expires_at=expires, maint_ttl_s=extend.total_seconds())
        )
        found.row.update(maint_expires_at=expires, maint_ttl_s=extend.total_seconds())
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
    if found.kind == "commit":
        conn.execute(
            update(commit_leases_t)
            .where(commit_leases_t.c.id == found.commit.id)
            .values(ended_at=at, end=end)
        )
        # the row is ours under the table lock: its new state is known without reading it back
        found.commit = SimpleNamespace(**{**found.commit._asdict(), "ended_at": at, "end": end})
    else:
        _change(conn, found.row, maint_ended_at=at, maint_end=end)
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
        held_s=view.held_s,
        **detail,
    )
    return view


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
    lease, `token` its token. An operator may end any lease without them; that is a revoke
    (audited as `lease.revoked` by `actor`), so the holder hears `not_owner` at its next renew.

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
    if not by_holder and not operator:
        if holder is None:
            raise InvalidRequest(
                f"releasing a lease needs its holder: DELETE /v1/leases/{lease_id}?holder=<holder>",
                field="holder",
            )
        raise NotOwner(
            f"lease {lease_id} is held by {view.holder}, not {holder}; not released",
            outcome="not_owner",
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
    intent = None
    if _intent_live(row, at):
        intent = {
            "holder": row["intent_holder"],
            "request_id": row["intent_request_id"],
            "remaining_s": _seconds(row["intent_expires_at"] - at),
            "open_s": _seconds(at - row["intent_opened_at"]),
        }
    return TableState(
        table=row["name"],
        version=table_version(conn, table=row["name"]),
        ingest=row["ingest"],
        maintenance=row["maintenance"],
        switch_reason=row["switch_reason"],
        switch_by=row["switch_by"],
        switch_age_s=_seconds(at - row["switch_at"]) if row["switch_at"] else None,
        maintenance_lease=_maintenance_view(row, at) if _maintenance_live(row, at) else None,
        intent=intent,
        commit_leases=[_commit_view(x, at) for x in _live_commit_rows(conn, row["name"], at)],
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
    draining); True when one was open. Commit leases are granted again at once.

    Raises:
        NotOwner: the intent is another holder's.
    """
    locked = _lock_table(conn, table, create=False)
    if locked is None:
        return False
    row, at = locked
    _sweep_row(conn, row, at)
    if row["intent_request_id"] != request_id or not _intent_live(row, at):
        return False
    if row["intent_holder"] != holder:
        raise NotOwner(
            f"the intent {request_id!r} on {table} is {row['intent_holder']}'s, not {holder}'s",
            outcome="not_owner",
        )
    opened = row["intent_opened_at"]
    _change(conn, row, **_NO_INTENT)
    audit.record(
        conn,
        at=at,
        table=table,
        event="intent.withdrawn",
        kind="maintenance",
        holder=holder,
        request_id=request_id,
        open_s=_seconds(at - opened),
    )
    return True


def list_tables(conn: Connection) -> list[TableState]:
    at = now(conn)
    rows = conn.execute(select(tables_t).order_by(tables_t.c.name)).mappings().all()
    return [_state(conn, dict(row), at) for row in rows]


def tables_due_for_sweep(conn: Connection) -> list[str]:
    """Tables with a lease or intent whose expiry passed but which is not yet marked ended."""
    at = now(conn)
    t, c = tables_t.c, commit_leases_t.c
    due = set(
        conn.execute(
            select(c.table_name).where(c.ended_at.is_(None), c.expires_at <= at).distinct()
        ).scalars()
    )
    due.update(
        conn.execute(
            select(t.name).where(
                (
                    and_(
                        t.maint_lease_id.is_not(None),
                        t.maint_ended_at.is_(None),
                        t.maint_expires_at <= at,
                    )
                )
                | (and_(t.intent_holder.is_not(None), t.intent_expires_at <= at))
            )
        ).scalars()
    )
    return sorted(due)


def sweep(conn: Connection, *, table: str) -> None:
    """Mark what expired on `table` as ended, with its audit events (one transaction)."""
    locked = _lock_table(conn, table, create=False)
    if locked is not None:
        _sweep_row(conn, *locked)
