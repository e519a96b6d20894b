"""Lease verbs: grant, extend and end the leases of a table, each in the caller's transaction
(docs/design.md §3 to §5, docs/jobs.md §3).

    acquire_commit(conn, table, holder, ttl, request_id, caller, partitions)
        -> Lease                a shared commit lease; raises Locked, LeaseExpired, NotOwner
    acquire_maintenance(conn, ..., intent_ttl, ...)
        -> Lease | Draining     the exclusive lease, or its drain intent kept open
                                (service.lock.intents); raises MaintenanceOff, MaintenanceHeld, ...
    acquire_claim(conn, table, holder, ttl, request_id, caller)
        -> Lease                a compactor's claim; raises ClaimHeld, LeaseExpired, NotOwner
    renew(conn, lease_id, holder, caller, ttl, token)
        -> Lease                extended from now; raises NotFound, LeaseExpired, NotOwner,
                                StaleToken
    release(conn, lease_id, caller, holder, token, written, compacted, trigger)
        -> Lease                ended (idempotent), with what it wrote or compacted counted
    revoke(conn, lease_id, reason, actor)
        -> Lease                ended by an operator

A verb locks the table's row and reads the database clock with it (`expiry.locked_table`), ends
what expired (`expiry.live_now`), asks `service.lock.rules`, then writes and audits what the
answer says. A refusal is raised as a `service.wire.errors` exception; `db.run_transaction`
still commits what was recorded before it (an expiry, a `lease.renew_failed` event). The table
row's `holds_until` lets a commit grant skip reading maintenance leases and intents while none
can be live, so the commit path stays a few statements (benchmarks/lease_throughput.py).
Intents are `service.lock.intents`, the switch `service.lock.switch`, read-only views
`service.lock.state`.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.engine import Connection

from service.lock import audit, due, expiry, intents, refusals, rules, store
from service.lock.asks import (
    Ask,
    Drain,
    End,
    Extend,
    Grant,
    Refuse,
    ReleaseAsk,
    RenewAsk,
    Repeat,
    Unchanged,
)
from service.lock.rows import Caller, LeaseRow, Live, TableRow, listed, seconds
from service.lock.state import lease_view
from service.wire import Draining, EventName, Lease
from service.wire.errors import NotFound

__all__ = [
    "acquire_claim",
    "acquire_commit",
    "acquire_maintenance",
    "release",
    "renew",
    "revoke",
]


def _names(partitions: list[str] | None) -> tuple[str, ...] | None:
    return None if partitions is None else tuple(partitions)


# -- acquire ---------------------------------------------------------------------------------


def acquire_commit(
    conn: Connection,
    *,
    table: str,
    holder: str,
    ttl: timedelta,
    request_id: str,
    caller: Caller,
    partitions: list[str] | None = None,
) -> Lease:
    """Grant a shared commit lease on `table`, or on `partitions` of it (None: the whole table),
    to `caller`'s principal.

    Raises:
        Locked: ingest is paused, or a maintenance lease or intent intersecting the scope is
            live (`reason` says which, `retry_after_s` when to ask again).
        LeaseExpired: this request id was granted a lease that has ended since.
        NotOwner: this request id belongs to another holder.
    """
    ask = Ask("commit", table, holder, request_id, _names(partitions), ttl, caller)
    row, at = expiry.locked_table(conn, table)
    row, live = expiry.live_now(conn, row, at)
    settled = _settle(conn, row, ask, at, rules.decide_commit(row, live, ask))
    assert isinstance(settled, LeaseRow)  # a commit request never drains
    return lease_view(settled, at)


def acquire_maintenance(
    conn: Connection,
    *,
    table: str,
    holder: str,
    ttl: timedelta,
    request_id: str,
    intent_ttl: timedelta,
    caller: Caller,
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
    ask = Ask("maintenance", table, holder, request_id, _names(partitions), ttl, caller)
    row, at = expiry.locked_table(conn, table)
    for expired in store.expired_commits(conn, table, at):
        expiry.end_expired(conn, expired, at)
    row, live = expiry.live_now(conn, row, at, commits=True)
    settled = _settle(conn, row, ask, at, rules.decide_maintenance(row, live, ask))
    if isinstance(settled, Drain):
        return intents.open_drain(conn, row, ask, at, settled, intent_ttl)
    return lease_view(settled, at)


def acquire_claim(
    conn: Connection, *, table: str, holder: str, ttl: timedelta, request_id: str, caller: Caller
) -> Lease:
    """Grant the claim on `table` (always the whole table), or refuse it at once.

    Not refused by the switch (docs/design.md §3), not held by commit or maintenance
    leases or intents. Expired claims of the table are ended first, each `lease.expired`.

    Raises:
        ClaimHeld: another claim on the table is live (`holder`, `remaining_s`).
        LeaseExpired: this request id was granted a claim that has ended since.
        NotOwner: this request id belongs to another holder.
    """
    ask = Ask("claim", table, holder, request_id, None, ttl, caller)
    row, at = expiry.locked_table(conn, table)
    claims = store.unended_claims(conn, table)
    for claim in claims:
        if claim.expired_unended(at):
            expiry.end_expired(conn, claim, at)
    live = Live(tuple(x for x in claims if x.live(at)))
    settled = _settle(conn, row, ask, at, rules.decide_claim(live, ask))
    assert isinstance(settled, LeaseRow)  # a claim never drains
    return lease_view(settled, at)


def _settle(
    conn: Connection, row: TableRow, ask: Ask, at: datetime, decision: Grant | Drain | Refuse
) -> LeaseRow | Drain:
    """Store a grant, or answer a request id granted before, or raise a refusal.

    A request id granted before is answered with its lease whatever the table's state now
    (`rules.decide_repeat`). It is looked up only when the decision is not a grant, or when the
    grant's insert finds the id taken (the unique key): a first grant costs no lookup.
    """
    if isinstance(decision, Grant):
        lease = LeaseRow(
            id=str(uuid.uuid4()),
            table=ask.table,
            kind=ask.kind,
            holder=ask.holder,
            request_id=ask.request_id,
            partitions=ask.partitions,
            ttl_s=ask.ttl.total_seconds(),
            acquired_at=at,
            expires_at=at + ask.ttl,
            token=decision.token,
            principal=ask.caller.principal,
        )
        if store.insert_lease(conn, lease):
            _granted(conn, row, lease, decision, at)
            return lease
    earlier = store.lease_by_request(conn, ask.kind, ask.table, ask.request_id)
    if earlier is not None:
        repeat = rules.decide_repeat(earlier, ask, at)
        if isinstance(repeat, Repeat):
            return repeat.lease
        decision = repeat
    if isinstance(decision, Refuse):
        raise refusals.refused(decision, ask, at)
    if isinstance(decision, Drain):
        return decision
    raise RuntimeError(f"the insert of a lease for request {ask.request_id} was refused")


def _granted(conn: Connection, row: TableRow, lease: LeaseRow, grant: Grant, at: datetime) -> None:
    """Write what a grant changes besides its row, and audit it: one `lease.acquired` event
    for every grant, of either kind."""
    principal = lease.principal
    assert principal is not None  # a grant is taken by the caller's token
    if lease.kind == "maintenance":
        store.update_table(conn, row.name, next_token=row.next_token + 1)
        expiry.hold_until(conn, row.name, row.holds_until, lease.expires_at)
    audit.record(
        conn,
        at=at,
        table=lease.table,
        event=EventName.LEASE_ACQUIRED,
        lease_id=lease.id,
        kind=lease.kind,
        holder=lease.holder,
        token=lease.token,
        actor=principal,
        request_id=lease.request_id,
        partitions=listed(lease.partitions),
        ttl_s=lease.ttl_s,
    )
    for intent in grant.fulfils:
        # its drain is done; holds_until may stay later than needed until a sweep
        expiry.end_intent(
            conn,
            intent,
            at,
            EventName.INTENT_FULFILLED,
            actor=principal,
            kind="maintenance",
            lease_id=lease.id,
            open_s=seconds(at - intent.opened_at),
        )


# -- renew, release, revoke, withdraw --------------------------------------------------------


def renew(
    conn: Connection,
    *,
    lease_id: str,
    holder: str,
    caller: Caller,
    ttl: timedelta | None = None,
    token: int | None = None,
) -> Lease:
    """Extend a live lease by `ttl` (default: its own TTL) from now. Never resurrects one.
    Only the principal that took it may; each renewal is counted on the lease.

    Raises:
        NotFound: no lease has this id.
        LeaseExpired: the lease expired or was released.
        NotOwner: the lease is another principal's or another holder's, or an operator
            revoked it.
        StaleToken: a maintenance lease renewed with a token that is not its own.
        InvalidRequest: a live maintenance lease renewed without a token.
    """
    ask = RenewAsk(lease_id, holder, token, ttl, caller)
    found = _found(conn, lease_id)
    lease, at = found.lease, found.at
    decision = rules.decide_renew(lease, ask, at)
    if isinstance(decision, Refuse):
        raise _renew_failed(conn, found, ask, decision)
    store.extend_lease(conn, lease, decision.expires_at, decision.ttl.total_seconds())
    if lease.kind == "maintenance":
        expiry.hold_until(conn, lease.table, found.holds_until, decision.expires_at)
    if lease.kind == "claim" and found.holds_until is not None:
        intents.keep_with(conn, lease, decision.expires_at, found.holds_until, at)
    return lease_view(_extended(lease, decision), at)


def _extended(lease: LeaseRow, extend: Extend) -> LeaseRow:
    # the row is ours under the table lock: its new state is known without reading it back
    return dataclasses.replace(
        lease,
        expires_at=extend.expires_at,
        ttl_s=extend.ttl.total_seconds(),
        renewals=lease.renewals + 1,
    )


def _renew_failed(
    conn: Connection, found: store.LockedLease, ask: RenewAsk, refusal: Refuse
) -> Exception:
    """Record a refused renew (a lease found expired is ended first) and say why. A lease
    known only from the trail (pruned) holds no lock to write under: nothing is recorded."""
    lease, at, locked = found.lease, found.at, found.locked
    if lease.expired_unended(at):
        expiry.end_expired(conn, lease, at)
        if lease.kind == "maintenance":
            expiry.holds_ended(conn, lease.table)
    revoked = audit.last_for_lease(conn, lease.id) if refusal.reason == "revoked" else None
    error = refusals.refused(
        refusal,
        ask,
        at,
        revoked_by=revoked.actor if revoked else None,
        revoke_reason=revoked.detail.get("reason") if revoked else None,
    )
    if locked and refusal.reason != "token_missing":  # a client mistake records nothing
        audit.record(
            conn,
            at=at,
            table=lease.table,
            event=EventName.LEASE_RENEW_FAILED,
            lease_id=lease.id,
            kind=lease.kind,
            holder=ask.holder,
            token=ask.token,
            actor=ask.caller.principal,
            outcome=error.extra["outcome"],
            **({"reason": "other-principal"} if refusal.reason == "other_principal" else {}),
        )
    return error


def release(
    conn: Connection,
    *,
    lease_id: str,
    caller: Caller,
    holder: str | None = None,
    token: int | None = None,
    written: Mapping[str, due.Files] | None = None,
    compacted: Sequence[str] | None = None,
    trigger: due.Trigger | None = None,
) -> Lease:
    """End a lease; releasing an ended lease answers its state again (idempotent).

    The principal that took it releases its own lease: `holder` must be the lease's and, for a
    maintenance lease, `token` its token. An operator may end any lease by leaving both out;
    that is a revoke (audited as `lease.revoked` with the operator as actor), so the holder
    hears `not_owner` at its next renew. A holder that is not the lease's is refused whoever
    sends it: it names another lease.

    The holder may say what the lease did (docs/design.md §5.1): a commit lease the files its
    commit added per partition (`written`: name -> its due.Files), counted toward
    the partitions' due threshold (`trigger`), unless a commit through the catalog front named
    the lease (the front counted them); a maintenance lease the partitions it compacted,
    whose counts go to zero. Counted only by the release that ends the lease, so a repeated
    release counts nothing twice.

    Raises:
        NotFound: no lease has this id.
        NotOwner: another principal took the lease, or `holder` is not its holder.
        StaleToken: a maintenance lease released with a token that is not its own.
        InvalidRequest: no holder sent (and not an operator), or no token for a maintenance
            lease; `written` for a lease other than a commit lease, `compacted` for one other
            than a maintenance lease, either outside the lease's scope (nothing changes).
    """
    ask = ReleaseAsk(lease_id, holder, token, caller, tuple(written or ()), tuple(compacted or ()))
    found = _found(conn, lease_id)
    decision = rules.decide_release(found.lease, ask, found.at)
    if isinstance(decision, Refuse):
        raise refusals.refused(decision, ask, found.at)
    ended = _ended(conn, found, decision, caller.principal)
    if isinstance(decision, End):
        lease, at = found.lease, found.at
        if written and not audit.committed_under(conn, lease.id):
            due.add_written(
                conn, table=lease.table, written=written, at=at, trigger=trigger or due.Trigger()
            )
        if compacted:
            due.compacted(conn, table=lease.table, partitions=compacted, at=at)
    return ended


def revoke(conn: Connection, *, lease_id: str, reason: str, actor: str) -> Lease:
    """Force-end any lease (operators). The holder learns it at its next renew (NotOwner).

    Raises:
        NotFound: no lease has this id.
    """
    found = _found(conn, lease_id)
    decision = End("revoked", reason) if found.lease.live(found.at) else Unchanged()
    return _ended(conn, found, decision, actor)


_END_EVENTS = {"released": EventName.LEASE_RELEASED, "revoked": EventName.LEASE_REVOKED}


def _ended(
    conn: Connection, found: store.LockedLease, decision: End | Unchanged, actor: str
) -> Lease:
    """End the lease as `decision` says (or leave it), audited; its state after."""
    lease, at = found.lease, found.at
    if isinstance(decision, Unchanged):
        return lease_view(lease, at)
    end = decision.end
    store.end_lease(conn, lease, end, at)
    # the row is ours under the table lock: its new state is known without reading it back
    lease = dataclasses.replace(lease, ended_at=at, end=end)
    detail: dict[str, Any] = {} if decision.reason is None else {"reason": decision.reason}
    expiry.audit_end(conn, lease, at, _END_EVENTS[end], actor, **detail)
    if lease.kind != "commit" and found.holds_until is not None:
        intents.end_with(conn, lease, at, actor)
    if lease.kind == "maintenance":
        expiry.holds_ended(conn, lease.table)
    return lease_view(lease, at)


def _found(conn: Connection, lease_id: str) -> store.LockedLease:
    found = store.lock_lease(conn, lease_id)
    if found is None:
        raise NotFound(f"no lease {lease_id}; acquire a new one", lease_id=lease_id)
    return found
