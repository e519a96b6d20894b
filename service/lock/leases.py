"""Leases on Iceberg tables: the lock protocol's transitions, one function each, each in the
caller's transaction (docs/design.md §3 to §5, docs/jobs.md §3).

A transition locks the table's row and reads the database clock with it (`store.lock_table`),
loads the rows its decision needs (`service.lock.store`), asks `service.lock.rules`, then writes
and audits (`service.lock.audit`) what the answer says. A refusal is raised as a
`service.wire.errors` exception; `db.run_transaction` still commits what was recorded before it
(an expiry, a `lease.renew_failed` event). The table row's `holds_until` lets a commit grant skip
reading maintenance leases and intents while none can be live, so the commit path stays a few
statements (benchmarks/lease_throughput.py). Read-only views are `service.lock.state`.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Literal

from sqlalchemy.engine import Connection

from service.lock import audit, due, readers, rules, store
from service.lock.rows import SYSTEM, Caller, IntentRow, LeaseRow, Live, TableRow, seconds
from service.lock.rules import (
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
    WithdrawAsk,
)
from service.lock.state import lease_view, state_of
from service.wire import Backpressure, Draining, EventName, IntentRef, Lease, TableState
from service.wire.errors import NotFound

__all__ = [
    "acquire_claim",
    "acquire_commit",
    "acquire_maintenance",
    "end_turn",
    "hold_back",
    "let_go",
    "live_on",
    "open_turn",
    "release",
    "renew",
    "revoke",
    "set_switch",
    "sweep",
    "withdraw_intent",
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
    row, at = _locked_table(conn, table)
    row, live = _live(conn, row, at)
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
    row, at = _locked_table(conn, table)
    for expired in store.expired_commits(conn, table, at):
        _end_expired(conn, expired, at)
    row, live = _live(conn, row, at, commits=True)
    settled = _settle(conn, row, ask, at, rules.decide_maintenance(row, live, ask))
    if isinstance(settled, Drain):
        return _drain(conn, row, ask, at, settled, intent_ttl)
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
    row, at = _locked_table(conn, table)
    claims = store.unended_claims(conn, table)
    for claim in claims:
        if claim.expired_unended(at):
            _end_expired(conn, claim, at)
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
        raise rules.refused(decision, ask, at)
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
        _hold_until(conn, row.name, row.holds_until, lease.expires_at)
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
        partitions=_list(lease.partitions),
        ttl_s=lease.ttl_s,
    )
    for intent in grant.fulfils:
        # its drain is done; holds_until may stay later than needed until a sweep
        _end_intent(
            conn,
            intent,
            at,
            EventName.INTENT_FULFILLED,
            actor=principal,
            kind="maintenance",
            lease_id=lease.id,
            open_s=seconds(at - intent.opened_at),
        )


def _drain(
    conn: Connection, row: TableRow, ask: Ask, at: datetime, drain: Drain, intent_ttl: timedelta
) -> Draining:
    """Open the intent of the maintenance request, or keep it open, while the commit leases
    `drain.in_flight` end."""
    expires = at + intent_ttl
    intent = drain.intent
    if intent is not None:
        # asking again keeps the intent open; not a state change, so no version bump
        store.keep_intent(conn, intent, expires)
    else:
        intent = IntentRow(
            ask.table,
            ask.request_id,
            ask.holder,
            ask.partitions,
            at,
            expires,
            principal=ask.caller.principal,
        )
        store.insert_intent(conn, intent)
        audit.record(
            conn,
            at=at,
            table=ask.table,
            event=EventName.INTENT_OPENED,
            kind="maintenance",
            holder=ask.holder,
            actor=ask.caller.principal,
            request_id=ask.request_id,
            partitions=_list(ask.partitions),
            in_flight_commits=len(drain.in_flight),
        )
    _hold_until(conn, row.name, row.holds_until, expires)
    longest = max(lease.expires_at for lease in drain.in_flight)
    return Draining(
        table=ask.table,
        partitions=intent.partitions,
        intent=IntentRef(
            holder=ask.holder,
            request_id=ask.request_id,
            partitions=intent.partitions,
            remaining_s=intent_ttl.total_seconds(),
        ),
        in_flight_commits=len(drain.in_flight),
        retry_after_s=min(seconds(longest - at), intent_ttl.total_seconds() / 2),
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
        _hold_until(conn, lease.table, found.holds_until, decision.expires_at)
    if lease.kind == "claim" and found.holds_until is not None:
        # a compactor's backpressure lives as long as its claim (docs/jobs.md §3)
        _, intents = store.holds(conn, lease.table)
        pressed = [x for x in intents if x.cause == "backpressure" and x.live(at)]
        for intent in pressed:
            store.keep_intent(conn, intent, decision.expires_at)
        if pressed:
            _hold_until(conn, lease.table, found.holds_until, decision.expires_at)
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
        _end_expired(conn, lease, at)
        if lease.kind == "maintenance":
            _holds_ended(conn, lease.table)
    revoked = audit.last_for_lease(conn, lease.id) if refusal.reason == "revoked" else None
    error = rules.refused(
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
            **({"reason": refusal.reason} if refusal.reason == "other_principal" else {}),
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
    ask = ReleaseAsk(lease_id, holder, token, caller)
    found = _found(conn, lease_id)
    wrong = rules.counts_refusal(found.lease, holder, list(written or ()), compacted)
    if wrong is not None:
        raise wrong
    decision = rules.decide_release(found.lease, ask, found.at)
    if isinstance(decision, Refuse):
        raise rules.refused(decision, ask, found.at)
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
    _audit_end(conn, lease, at, _END_EVENTS[end], actor, **detail)
    if lease.kind == "maintenance":
        if found.holds_until is not None:
            # its turn of the head ends with it (docs/catalog-front.md §4)
            _, intents = store.holds(conn, lease.table)
            turn = rules.turn_of(Live((), tuple(intents)), lease.id)
            if turn is not None:
                _end_intent(
                    conn,
                    turn,
                    at,
                    EventName.INTENT_WITHDRAWN,
                    actor=actor,
                    kind="maintenance",
                    lease_id=lease.id,
                    open_s=seconds(at - turn.opened_at),
                )
        _holds_ended(conn, lease.table)
    if lease.kind == "claim" and found.holds_until is not None:
        # no compactor holds the table now: nothing may hold its writers back (an intent
        # already expired is left to the sweep, which says so)
        _, intents = store.holds(conn, lease.table)
        _end_backpressure(conn, lease.table, at, [x for x in intents if x.live(at)], actor=actor)
    return lease_view(lease, at)


def withdraw_intent(
    conn: Connection, *, table: str, request_id: str, holder: str, caller: Caller
) -> bool:
    """Close the open intent of maintenance request `request_id` (a compactor that gives up
    draining); True when one was open. Commit leases on its scope are granted again at once.

    Raises:
        NotOwner: the intent is another principal's (and `caller` no operator) or another
            holder's.
    """
    locked = store.lock_table(conn, table, create=False)
    if locked is None:
        return False
    row, at = locked
    row, live = _live(conn, row, at)
    intent = live.intent(request_id)
    if intent is None:
        return False
    ask = WithdrawAsk(table, request_id, holder, caller)
    refusal = rules.decide_withdraw(intent, ask)
    if refusal is not None:
        raise rules.refused(refusal, ask, at)
    _end_intent(
        conn,
        intent,
        at,
        EventName.INTENT_WITHDRAWN,
        actor=caller.principal,
        # a drain stands for a maintenance request; a backpressure intent is the claim's
        kind="maintenance" if intent.cause == "drain" else "intent",
        open_s=seconds(at - intent.opened_at),
    )
    _holds_ended(conn, table)
    return True


# -- the catalog front's turn of the head ----------------------------------------------------


def open_turn(
    conn: Connection,
    *,
    table: str,
    lease_id: str,
    token: int | None,
    principal: str,
    turn: timedelta,
) -> bool:
    """A commit naming maintenance lease `lease_id` with `token`, by `principal`, lost the
    table's head (answered 409: another commit moved it since its base): give the lease the
    next turn of the head, an intent of cause `turn` on the whole table, when it is the
    holder's commit and has none open (`rules.decide_turn`). While it is open, foreign data
    commits to the table are held (service.lock.fence); it ends when the lease's next commit
    lands (`end_turn`), when the lease ends, or after `turn`. True when one was opened.
    """
    row, at = _locked_table(conn, table)
    row, live = _live(conn, row, at)
    lease = store.read_lease(conn, lease_id)
    intent = rules.decide_turn(row, live, lease, token=token, principal=principal, at=at, turn=turn)
    if intent is None:
        return False
    assert lease is not None  # decide_turn opens a turn for a live lease only
    store.insert_intent(conn, intent)
    audit.record(
        conn,
        at=at,
        table=table,
        event=EventName.INTENT_OPENED,
        lease_id=lease.id,
        kind="maintenance",
        holder=intent.holder,
        token=lease.token,
        actor=principal,
        request_id=intent.request_id,
        partitions=None,
        cause="turn",
        turn_s=seconds(intent.expires_at - at),
    )
    _hold_until(conn, row.name, row.holds_until, intent.expires_at)
    return True


def end_turn(conn: Connection, turn: IntentRow, at: datetime, *, lease_id: str, actor: str) -> None:
    """The commit of `turn`'s lease landed (in this transaction, the table's row locked): its
    turn of the head is over, `intent.fulfilled` by the commit's `actor`."""
    _end_intent(
        conn,
        turn,
        at,
        EventName.INTENT_FULFILLED,
        actor=actor,
        kind="maintenance",
        lease_id=lease_id,
        open_s=seconds(at - turn.opened_at),
    )
    _holds_ended(conn, turn.table)


# -- backpressure ----------------------------------------------------------------------------


def hold_back(
    conn: Connection,
    *,
    table: str,
    claim_id: str,
    holder: str,
    partitions: Sequence[str],
    reason: str,
    caller: Caller,
) -> Backpressure:
    """Hold the commits that touch `partitions` of `table` until `holder` compacts them: one
    intent of cause `backpressure` per partition, opened or kept open (docs/jobs.md §3).

    Only a compactor alive on the table may (`rules.hold_back_refusal`): `claim_id` must be the
    table's live claim and `holder` its holder or a run under it (`<claim holder>/<run>`). The
    intents live as long as the claim: they expire with it, a renew of the claim extends them,
    its release or revoke ends them; so a compactor that dies holds no writer past its claim.
    Each also ends as a drain's does: fulfilled by `holder`'s maintenance grant covering its
    partition, or withdrawn (`let_go`). Nothing is opened while the table's backpressure or
    its maintenance is switched off (no grant could end it); the answer says which.

    Raises:
        NotFound: the table or the claim is unknown.
        LeaseExpired: the claim is no longer live.
        NotOwner: `caller` did not take the claim, or `holder` is not the claim's holder
            nor a run under it.
    """
    locked = store.lock_table(conn, table, create=False)
    if locked is None:
        raise NotFound(f"no table {table}; claim it before holding its writers", table=table)
    row, at = locked
    row, live = _live(conn, row, at)
    found = store.read_lease(conn, claim_id)
    claim = found if found is not None and found.kind == "claim" and found.table == table else None
    refusal = rules.hold_back_refusal(table, claim_id, claim, holder, caller, at)
    if refusal is not None:
        raise refusal
    assert claim is not None
    names = list(dict.fromkeys(partitions))
    if not rules.backpressure_holds(row):
        off: Literal["backpressure", "maintenance"] = (
            "backpressure" if row.backpressure == "disabled" else "maintenance"
        )
        return Backpressure(table=table, partitions=[], switch=row.backpressure, off=off)
    opened: dict[str, str] = {}  # partition: its intent's request id
    for name in names:
        request_id = f"backpressure-{uuid.uuid5(uuid.NAMESPACE_URL, holder + chr(0) + name)}"
        intent = live.intent(request_id)
        if intent is not None:
            store.keep_intent(conn, intent, claim.expires_at)
            continue
        store.insert_intent(
            conn,
            IntentRow(
                table,
                request_id,
                holder,
                (name,),
                at,
                claim.expires_at,
                "backpressure",
                principal=caller.principal,
            ),
        )
        opened[name] = request_id
    if opened:
        audit.record(
            conn,
            at=at,
            table=table,
            event=EventName.BACKPRESSURE_ON,
            kind="intent",
            holder=holder,
            actor=caller.principal,
            partitions=list(opened),
            request_ids=list(opened.values()),
            lease_id=claim_id,
            reason=reason,
        )
    _hold_until(conn, row.name, row.holds_until, claim.expires_at)
    return Backpressure(
        table=table,
        partitions=names,
        switch="enabled",
        remaining_s=seconds(claim.expires_at - at),
    )


def let_go(
    conn: Connection,
    *,
    table: str,
    holder: str,
    caller: Caller,
    partitions: Sequence[str] | None = None,
) -> Backpressure:
    """End `holder`'s backpressure on `table`, on `partitions` only when given (a group that
    was skipped, a run that ends without compacting every partition it held): each intent
    `intent.withdrawn`; answers the partitions let go.

    Raises:
        NotOwner: another principal opened them (and `caller` is no operator); none ends.
    """
    locked = store.lock_table(conn, table, create=False)
    if locked is None:
        return Backpressure(table=table, partitions=[], switch="enabled")
    row, at = locked
    row, live = _live(conn, row, at)
    wanted = None if partitions is None else set(partitions)
    pressed = [
        x
        for x in live.intents
        if x.cause == "backpressure"
        and x.holder == holder
        and (wanted is None or wanted.intersection(x.partitions or ()))
    ]
    theirs = next((x for x in pressed if not caller.may_end(x)), None)
    if theirs is not None:
        raise rules.other_principal(
            f"the backpressure of {holder} on {table}", theirs, caller, "let go of"
        )
    names = _end_backpressure(conn, table, at, pressed, actor=caller.principal)
    return Backpressure(table=table, partitions=names, switch=row.backpressure)


def _end_backpressure(
    conn: Connection, table: str, at: datetime, intents: Sequence[IntentRow], *, actor: str
) -> list[str]:
    """End the backpressure intents among `intents` (`intent.withdrawn` by `actor`); their
    partitions."""
    ended = [x for x in intents if x.cause == "backpressure"]
    for intent in ended:
        _end_intent(
            conn,
            intent,
            at,
            EventName.INTENT_WITHDRAWN,
            actor=actor,
            kind="intent",
            open_s=seconds(at - intent.opened_at),
        )
    if ended:
        _holds_ended(conn, table)
    return [name for x in ended for name in x.partitions or ()]


# -- switch, sweep ---------------------------------------------------------------------------


def set_switch(
    conn: Connection,
    *,
    table: str,
    reason: str,
    actor: str,
    ingest: Literal["running", "paused"] | None = None,
    maintenance: Literal["enabled", "disabled"] | None = None,
    backpressure: Literal["enabled", "disabled"] | None = None,
) -> TableState:
    """Set the operator switch; any field may be None (unchanged). Always audited."""
    row, at = _locked_table(conn, table)
    row, _ = _live(conn, row, at)
    changed = dataclasses.replace(
        row,
        ingest=ingest or row.ingest,
        maintenance=maintenance or row.maintenance,
        backpressure=backpressure or row.backpressure,
        switch_reason=reason,
        switch_by=actor,
        switch_at=at,
    )
    before = {"ingest": row.ingest, "maintenance": row.maintenance}
    after = {"ingest": changed.ingest, "maintenance": changed.maintenance}
    if backpressure is not None or row.backpressure != "enabled":
        before["backpressure"] = row.backpressure
        after["backpressure"] = changed.backpressure
    store.update_table(conn, table, **after, switch_reason=reason, switch_by=actor, switch_at=at)
    audit.record(
        conn,
        at=at,
        table=table,
        event=EventName.SWITCH_SET,
        actor=actor,
        reason=reason,
        before=before,
        after=after,
    )
    return state_of(conn, changed, at)


def sweep(conn: Connection, *, table: str) -> None:
    """Mark what expired on `table` as ended, with its audit events (one transaction)."""
    locked = store.lock_table(conn, table, create=False)
    if locked is not None:
        row, at = locked
        for expired in (
            *store.expired_commits(conn, table, at),
            *store.expired_claims(conn, table, at),
        ):
            _end_expired(conn, expired, at)
        readers.expire(conn, table=table, at=at)
        _live(conn, row, at)


def live_on(conn: Connection, table: str) -> tuple[TableRow, datetime, Live]:
    """The locked row of `table` (created on first use), the clock, and its live maintenance
    leases and intents (not its commit leases); what expired is ended and audited on the way,
    as in every transition. The catalog front's commit check reads this (service.lock.fence)."""
    row, at = _locked_table(conn, table)
    row, live = _live(conn, row, at)
    return row, at, live


# -- what every transition shares ------------------------------------------------------------


def _locked_table(conn: Connection, table: str) -> tuple[TableRow, datetime]:
    """The locked row of `table`, created on first use, and the clock."""
    locked = store.lock_table(conn, table)
    assert locked is not None  # created
    return locked


def _found(conn: Connection, lease_id: str) -> store.LockedLease:
    found = store.lock_lease(conn, lease_id)
    if found is None:
        raise NotFound(f"no lease {lease_id}; acquire a new one", lease_id=lease_id)
    return found


def _live(
    conn: Connection, row: TableRow, at: datetime, *, commits: bool = False
) -> tuple[TableRow, Live]:
    """What is live on the (locked) table: its maintenance leases and intents, and with
    `commits` its commit leases. Those maintenance leases and intents whose expiry passed are
    ended here, each audited, and `holds_until` follows the latest live one. No statement reads
    them while `holds_until` says none can be unended."""
    leases, intents = ([], []) if row.holds_until is None else store.holds(conn, row.name)
    for lease in leases:
        if not lease.live(at):
            _end_expired(conn, lease, at)
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


def _holds_ended(conn: Connection, table: str) -> None:
    """A maintenance lease or intent of the (locked) table ended: `holds_until` becomes the
    latest expiry of those left unended, so commit grants stop reading them when none is."""
    store.update_table(conn, table, holds_until=store.latest_hold(conn, table))


def _hold_until(
    conn: Connection, table: str, holds_until: datetime | None, until: datetime
) -> None:
    """A maintenance lease or intent of the (locked) table is live until `until`: commit
    grants read the holds until then."""
    if holds_until is None or until > holds_until:
        store.update_table(conn, table, holds_until=until)


def _list(partitions: tuple[str, ...] | None) -> list[str] | None:
    return None if partitions is None else list(partitions)


def _end_expired(conn: Connection, lease: LeaseRow, at: datetime) -> None:
    """Mark a lease whose expiry passed as ended, with its `lease.expired` event; a claim's
    backpressure ends with it (docs/jobs.md §3), in the same transaction."""
    store.end_lease(conn, lease, "expired", lease.expires_at)
    ended = dataclasses.replace(lease, ended_at=lease.expires_at)
    _audit_end(conn, ended, at, EventName.LEASE_EXPIRED, SYSTEM)
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
        _holds_ended(conn, table)
    _end_backpressure(conn, table, at, [x for x in pressed if x.live(at)], actor=SYSTEM)


def _audit_end(
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
        partitions=_list(lease.partitions),
        request_id=lease.request_id,
        ttl_s=lease.ttl_s,
        held_s=seconds((lease.ended_at or at) - lease.acquired_at),
        principal=lease.principal,
        renewals=lease.renewals,
        **detail,
    )


def _expire_intent(conn: Connection, intent: IntentRow, at: datetime) -> None:
    """An intent whose expiry passed, ended by the service itself."""
    _end_intent(
        conn,
        intent,
        at,
        EventName.INTENT_EXPIRED,
        actor=SYSTEM,
        expired_at=intent.expires_at.isoformat(),
    )


def _end_intent(
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
        partitions=_list(intent.partitions),
        **detail,
    )
