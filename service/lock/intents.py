"""Intents: what holds a table's commit leases back, by its three causes (docs/design.md §3,
docs/jobs.md §3, docs/catalog-front.md §4), each in the caller's transaction.

    open_drain(conn, row, ask, at, drain, intent_ttl)
        -> Draining     a maintenance request's drain, opened or kept open while commits end
    withdraw_intent(conn, table, request_id, holder, caller)
        -> bool         a drain or a backpressure intent closed by its holder; raises NotOwner
    open_turn(conn, table, lease_id, token, principal, turn)
        -> bool         a maintenance lease's turn of the head, after its commit lost the head
    end_turn(conn, turn, at, lease_id, actor)
        -> None         that turn fulfilled: the lease's commit landed
    hold_back(conn, table, claim_id, holder, partitions, reason, caller)
        -> Backpressure a compactor's backpressure on partitions, as long as its claim;
                        raises NotFound, LeaseExpired, NotOwner
    let_go(conn, table, holder, caller, partitions)
        -> Backpressure that backpressure ended; raises NotOwner
    keep_with(conn, claim, until, holds_until, at)
        -> None         a claim renewed: its backpressure kept as long
    end_with(conn, lease, at, actor)
        -> None         a lease released or revoked: its turn or its backpressure withdrawn

An intent also ends when a maintenance grant fulfils it (service.lock.leases), when its lease
or claim ends, or when it expires (service.lock.expiry).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Literal

from sqlalchemy.engine import Connection

from service.lock import audit, expiry, refusals, rules, store
from service.lock.asks import Ask, Drain, HoldBackAsk, WithdrawAsk
from service.lock.rows import Caller, IntentRow, LeaseRow, Live, TableRow, listed, seconds
from service.wire import Backpressure, Draining, EventName, IntentRef
from service.wire.errors import NotFound

__all__ = [
    "end_turn",
    "end_with",
    "hold_back",
    "keep_with",
    "let_go",
    "open_drain",
    "open_turn",
    "withdraw_intent",
]


# -- drain -----------------------------------------------------------------------------------


def open_drain(
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
            partitions=listed(ask.partitions),
            in_flight_commits=len(drain.in_flight),
        )
    expiry.hold_until(conn, row.name, row.holds_until, expires)
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
    row, live = expiry.live_now(conn, row, at)
    intent = live.intent(request_id)
    if intent is None:
        return False
    ask = WithdrawAsk(table, request_id, holder, caller)
    refusal = rules.decide_withdraw(intent, ask)
    if refusal is not None:
        raise refusals.refused(refusal, ask, at)
    expiry.end_intent(
        conn,
        intent,
        at,
        EventName.INTENT_WITHDRAWN,
        actor=caller.principal,
        # a drain stands for a maintenance request; a backpressure intent is the claim's
        kind="maintenance" if intent.cause == "drain" else "intent",
        open_s=seconds(at - intent.opened_at),
    )
    expiry.holds_ended(conn, table)
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
    row, at = expiry.locked_table(conn, table)
    row, live = expiry.live_now(conn, row, at)
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
    expiry.hold_until(conn, row.name, row.holds_until, intent.expires_at)
    return True


def end_turn(conn: Connection, turn: IntentRow, at: datetime, *, lease_id: str, actor: str) -> None:
    """The commit of `turn`'s lease landed (in this transaction, the table's row locked): its
    turn of the head is over, `intent.fulfilled` by the commit's `actor`."""
    expiry.end_intent(
        conn,
        turn,
        at,
        EventName.INTENT_FULFILLED,
        actor=actor,
        kind="maintenance",
        lease_id=lease_id,
        open_s=seconds(at - turn.opened_at),
    )
    expiry.holds_ended(conn, turn.table)


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

    Only a compactor alive on the table may (`rules.decide_hold_back`): `claim_id` must be the
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
    row, live = expiry.live_now(conn, row, at)
    found = store.read_lease(conn, claim_id)
    claim = found if found is not None and found.kind == "claim" and found.table == table else None
    ask = HoldBackAsk(table, claim_id, holder, caller)
    refusal = rules.decide_hold_back(claim, ask, at)
    if refusal is not None:
        raise refusals.refused(refusal, ask, at)
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
    expiry.hold_until(conn, row.name, row.holds_until, claim.expires_at)
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
    row, live = expiry.live_now(conn, row, at)
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
        raise refusals.other_principal(
            f"the backpressure of {holder} on {table}", theirs, caller, "let go of"
        )
    names = expiry.end_backpressure(conn, table, at, pressed, actor=caller.principal)
    return Backpressure(table=table, partitions=names, switch=row.backpressure)


# -- what a lease's end or renew does to them ------------------------------------------------


def keep_with(
    conn: Connection, claim: LeaseRow, until: datetime, holds_until: datetime | None, at: datetime
) -> None:
    """A renew extended `claim` to `until`: its backpressure lives as long (docs/jobs.md §3)."""
    _, held = store.holds(conn, claim.table)
    pressed = [x for x in held if x.cause == "backpressure" and x.live(at)]
    for intent in pressed:
        store.keep_intent(conn, intent, until)
    if pressed:
        expiry.hold_until(conn, claim.table, holds_until, until)


def end_with(conn: Connection, lease: LeaseRow, at: datetime, actor: str) -> None:
    """`lease` was released or revoked by `actor`: what it held back ends with it. A maintenance
    lease's turn of the head is withdrawn (docs/catalog-front.md §4); a claim's backpressure is,
    since no compactor holds the table now (an intent already expired is left to the sweep,
    which says so)."""
    _, held = store.holds(conn, lease.table)
    if lease.kind == "claim":
        expiry.end_backpressure(conn, lease.table, at, [x for x in held if x.live(at)], actor=actor)
        return
    turn = rules.turn_of(Live((), tuple(held)), lease.id)
    if turn is not None:
        expiry.end_intent(
            conn,
            turn,
            at,
            EventName.INTENT_WITHDRAWN,
            actor=actor,
            kind="maintenance",
            lease_id=lease.id,
            open_s=seconds(at - turn.opened_at),
        )
