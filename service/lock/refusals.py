"""A refusal in words: the `service.wire.errors` exception a client gets, with what to do next
(docs/api.md lists them).

    refused(refusal, ask, at, revoked_by, revoke_reason) -> LakelockError
                        a `Refuse` decided by service.lock.rules, as the client hears it
    other_principal(what, row, caller, verb)             -> NotOwner
                        a token acting on what another token took (docs/design.md §6)
    other_principal_of(what, principal, caller, verb)    -> NotOwner   the same, by principal
    commit_refused(refusal, change, at, holds)           -> Fenced | CommitHeld
                        a catalog commit's `Refuse` (service.lock.fence), with the Retry-After
                        of a hold from the table's recent maintenance `holds`
    in_use(table, verb, live)                             -> InUse
                        a drop or rename of a table something live holds (service.lock.drops)

A refusal's `reason` is spelled once, as docs/api.md writes it.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from datetime import datetime

from service.lock.asks import (
    Ask,
    Change,
    HoldBackAsk,
    Reason,
    Refuse,
    ReleaseAsk,
    RenewAsk,
    WithdrawAsk,
)
from service.lock.rows import Caller, IntentRow, LeaseRow, TableRow, listed, seconds
from service.lock.rules import turn_lease
from service.wire.errors import (
    ClaimHeld,
    CommitHeld,
    Fenced,
    InUse,
    InvalidRequest,
    LakelockError,
    LeaseExpired,
    Locked,
    MaintenanceHeld,
    MaintenanceOff,
    NotFound,
    NotOwner,
    StaleToken,
)
from service.wire.scope import Scope
from service.wire.text import sample

__all__ = ["commit_refused", "in_use", "other_principal", "other_principal_of", "refused"]


def other_principal(what: str, row: LeaseRow | IntentRow, caller: Caller, verb: str) -> NotOwner:
    """The refusal of a token acting on what another token took (docs/design.md §6)."""
    return other_principal_of(what, row.principal, caller, verb)


def other_principal_of(what: str, principal: str | None, caller: Caller, verb: str) -> NotOwner:
    """`other_principal` for what `principal` took (None: taken before principals were kept)."""
    taken = (
        f"was taken by token {principal}"
        if principal is not None
        else "was taken before lakelock recorded who takes what"
    )
    return NotOwner(
        f"{what} {taken}, not by token {caller.principal}: only that token may {verb} it "
        "(an operator may end it); take your own",
        outcome="not_owner",
        reason="other-principal",
    )


def _where(partitions: tuple[str, ...] | None) -> str:
    return "" if partitions is None else f" (partitions {sample(partitions)})"


def refused(
    refusal: Refuse,
    ask: Ask | RenewAsk | ReleaseAsk | WithdrawAsk | HoldBackAsk,
    at: datetime,
    *,
    revoked_by: str | None = None,
    revoke_reason: str | None = None,
) -> LakelockError:
    """The exception that tells the client of `ask` about `refusal`, and what to do next.
    `revoked_by` and `revoke_reason` (from the audit trail) name who revoked a lease."""
    reason, blocking = refusal.reason, refusal.blocking
    if isinstance(blocking, TableRow):
        if reason == "paused":
            return Locked(
                f"ingest on {blocking.name} is paused by {blocking.switch_by}: "
                f"{blocking.switch_reason}",
                reason="paused",
                blocking_holder=blocking.switch_by,
                retry_after_s=None,
            )
        return MaintenanceOff(
            f"maintenance on {blocking.name} is disabled by {blocking.switch_by}: "
            f"{blocking.switch_reason}",
            blocking_holder=blocking.switch_by,
        )
    if isinstance(ask, Ask):
        return _acquire_refused(reason, blocking, ask, at)
    if isinstance(ask, HoldBackAsk):
        return _hold_back_refused(reason, blocking, ask, at)
    if reason == "other_principal":
        assert isinstance(blocking, LeaseRow | IntentRow)
        what = (
            f"the intent {ask.request_id!r} on {ask.table}"
            if isinstance(ask, WithdrawAsk)
            else f"lease {ask.lease_id}"
        )
        verb = {RenewAsk: "renew", ReleaseAsk: "release", WithdrawAsk: "withdraw"}[type(ask)]
        return other_principal(what, blocking, ask.caller, verb)
    if isinstance(ask, WithdrawAsk):
        assert isinstance(blocking, IntentRow)
        return NotOwner(
            f"the intent {ask.request_id!r} on {ask.table} is {blocking.holder}'s, "
            f"not {ask.holder}'s",
            outcome="not_owner",
        )
    assert isinstance(blocking, LeaseRow)
    if isinstance(ask, RenewAsk):
        return _renew_refused(reason, blocking, ask, revoked_by, revoke_reason)
    return _release_refused(reason, blocking, ask)


def _acquire_refused(
    reason: Reason, blocking: LeaseRow | IntentRow | None, ask: Ask, at: datetime
) -> LakelockError:
    assert blocking is not None
    where = f"{ask.table}{_where(blocking.partitions)}"
    partitions = listed(blocking.partitions)
    rid = ask.request_id
    match reason:
        case "maintenance":
            return Locked(
                f"{where} is held for maintenance by {blocking.holder}",
                reason="maintenance",
                blocking_holder=blocking.holder,
                blocking_partitions=partitions,
                retry_after_s=seconds(blocking.expires_at - at),
            )
        case "intent":
            return Locked(
                f"{where} is draining for maintenance by {blocking.holder}",
                reason="intent",
                blocking_holder=blocking.holder,
                blocking_partitions=partitions,
                retry_after_s=None,
            )
        case "backpressure":
            return Locked(
                f"{where} is over its compaction debt bound: {blocking.holder} compacts it "
                "before more commits land there",
                reason="backpressure",
                blocking_holder=blocking.holder,
                blocking_partitions=partitions,
                retry_after_s=seconds(blocking.expires_at - at),
            )
        case "maintenance_held":
            return MaintenanceHeld(
                f"{where} is held for maintenance by {blocking.holder}",
                blocking_holder=blocking.holder,
                blocking_partitions=partitions,
                retry_after_s=seconds(blocking.expires_at - at),
            )
        case "claim_held":
            assert isinstance(blocking, LeaseRow)
            left = seconds(blocking.expires_at - at)
            return ClaimHeld(
                f"{ask.table} is claimed by {blocking.holder} for {left:.1f}s more (unless "
                "renewed); move on to the next table",
                holder=blocking.holder,
                blocking_holder=blocking.holder,
                remaining_s=left,
                retry_after_s=left,
            )
        case "request_id_taken":
            # a conflict with what is stored, not a malformed request: 409, like any other
            # holder's lease
            return NotOwner(
                f"request_id {rid!r} was used by another holder or token; send a new request_id",
                field="request_id",
            )
        case "scope_changed":
            used = (
                "the whole table"
                if partitions is None
                else f"another set of {len(partitions)} partitions"
            )
            return NotOwner(
                f"request_id {rid!r} was used for {used}; "
                "send a new request_id for a different scope",
                field="request_id",
            )
        case "ended":
            assert isinstance(blocking, LeaseRow)
            state = blocking.state(at)
            return LeaseExpired(
                f"the lease granted to request_id {rid!r} is {state}; "
                "acquire again with a new request_id",
                lease_id=blocking.id,
                state=state,
            )
    raise AssertionError(f"no acquire refusal {reason}")


def _renew_refused(
    reason: Reason,
    lease: LeaseRow,
    ask: RenewAsk,
    revoked_by: str | None,
    revoke_reason: str | None,
) -> LakelockError:
    match reason:
        case "revoked":
            by = revoked_by or "an operator"
            why = f" ({revoke_reason})" if revoke_reason else ""
            return NotOwner(
                f"lease {ask.lease_id} was revoked by {by}{why}; stop writing, do not commit",
                outcome="not_owner",
                ended_by=by,
            )
        case "expired":
            return LeaseExpired(
                f"lease {ask.lease_id} is {lease.end or 'expired'}; acquire a new one",
                outcome="expired",
            )
        case "not_owner":
            return NotOwner(
                f"lease {ask.lease_id} is held by {lease.holder}, not {ask.holder}",
                outcome="not_owner",
            )
        case "token_missing":
            # a request that cannot be right whoever holds the lease: nothing is recorded
            return InvalidRequest(
                f"renewing a maintenance lease needs its token: POST /v1/leases/{ask.lease_id}"
                '/renew {"holder": ..., "token": <the token of the grant>}',
                field="token",
            )
        case "token_mismatch":
            return StaleToken(
                f"token {ask.token} is not lease {ask.lease_id}'s; a newer holder exists, "
                "stop writing",
                outcome="token_mismatch",
            )
    raise AssertionError(f"no renew refusal {reason}")


def _release_refused(reason: Reason, lease: LeaseRow, ask: ReleaseAsk) -> LakelockError:
    match reason:
        case "counts_kind" if ask.written and lease.kind != "commit":
            return InvalidRequest(
                f"written counts the files a commit lease's commit added; lease {lease.id} is "
                f"a {lease.kind}: release a maintenance lease with compacted (the partitions it "
                "rewrote), a claim with neither",
                field="written",
            )
        case "counts_kind":
            return InvalidRequest(
                f"compacted names the partitions a maintenance lease compacted; lease "
                f"{lease.id} is a {lease.kind}: release a commit lease with written (the files "
                "its commit added), a claim with neither",
                field="compacted",
            )
        case "counts_holder":
            return InvalidRequest(
                "written and compacted are reported by the lease's holder: send holder (and the "
                "token of a maintenance lease) with them",
                field="holder",
            )
        case "counts_outside":
            named = ask.outside(lease)
            assert named is not None
            reported, outside = named
            return InvalidRequest(
                f"{reported} names {sample(outside)}, outside the partitions of "
                f"lease {lease.id}: name only the partitions it covers",
                field=reported,
            )
        case "not_owner":
            how = "; an operator ends any lease by leaving holder and token out"
            return NotOwner(
                f"lease {ask.lease_id} is held by {lease.holder}, not {ask.holder}; not released"
                + (how if ask.operator else ""),
                outcome="not_owner",
            )
        case "holder_missing":
            return InvalidRequest(
                "releasing a lease needs its holder: "
                f"DELETE /v1/leases/{ask.lease_id}?holder=<holder>",
                field="holder",
            )
        case "token_missing":
            return InvalidRequest(
                "releasing a maintenance lease needs its token: "
                f"DELETE /v1/leases/{ask.lease_id}?holder=<holder>&token=<token>",
                field="token",
            )
        case "token_mismatch":
            return StaleToken(f"token {ask.token} is not lease {ask.lease_id}'s; not released")
    raise AssertionError(f"no release refusal {reason}")


def _hold_back_refused(
    reason: Reason, claim: LeaseRow | IntentRow | TableRow | None, ask: HoldBackAsk, at: datetime
) -> LakelockError:
    table, claim_id = ask.table, ask.claim_id
    if reason == "no_claim":
        return NotFound(
            f"no claim {claim_id} on {table}; claim the table before holding its writers",
            lease_id=claim_id,
        )
    assert isinstance(claim, LeaseRow)
    match reason:
        case "expired":
            state = claim.state(at)
            return LeaseExpired(
                f"the claim {claim_id} on {table} is {state}; claim the table again",
                lease_id=claim_id,
                state=state,
            )
        case "other_principal":
            return other_principal(
                f"the claim {claim_id} on {table}", claim, ask.caller, "hold back writers under"
            )
        case "not_owner":
            return NotOwner(
                f"holder {ask.holder!r} is neither the claim's holder {claim.holder!r} nor a run "
                f"under it ({claim.holder}/<run>); hold back writers as the compactor that "
                f"claimed {table}",
                field="holder",
            )
    raise AssertionError(f"no hold-back refusal {reason}")


# a commit's refusal as the fence answers it: the `reason` on the wire (docs/catalog-front.md)
_FENCED = {
    "maintenance_off": "maintenance-off",
    "no_lease": "no-lease",
    "unknown_lease": "unknown-lease",
    "other_table": "other-table",
    "other_principal": "other-principal",
    "token_mismatch": "stale-token",
    "out_of_scope": "out-of-scope",
}


def commit_refused(
    refusal: Refuse, change: Change, at: datetime, holds: list[float]
) -> Fenced | CommitHeld:
    """The answer to a catalog commit the fence refused (service.lock.rules.
    decide_catalog_commit): Fenced for a maintenance commit (403: the writer cleans up),
    CommitHeld for a held data commit (429, with the Retry-After `_expected_s` gives from the
    table's recent maintenance `holds`, in seconds)."""
    reason, blocking = refusal.reason, refusal.blocking
    if change.kind == "maintenance":
        return _fenced(change, reason, blocking)
    assert isinstance(blocking, LeaseRow | IntentRow)
    if reason == "turn":
        assert isinstance(blocking, IntentRow)
        left = seconds(blocking.expires_at - at)
        return CommitHeld(
            f"{change.table}: a rewrite of {blocking.holder} lost the table's head to another "
            "commit and commits next; retry shortly",
            reason="held",
            table=change.table,
            retry_after_s=max(1.0, round(left, 1)),
            turn={
                "lease_id": turn_lease(blocking),
                "holder": blocking.holder,
                "remaining_s": left,
            },
        )
    what, why = {
        "maintenance": ("held", f"a maintenance lease of {blocking.holder} holds"),
        "backpressure": ("backpressure", f"{blocking.holder} holds back the writers of"),
        "intent": ("draining", f"a maintenance lease of {blocking.holder} is draining"),
    }[reason]
    return CommitHeld(
        f"{change.table}: {why} partitions this commit touches; retry shortly",
        reason=what,
        table=change.table,
        retry_after_s=_expected_s(blocking, holds, at),
    )


def _fenced(change: Change, reason: Reason, blocking: object) -> Fenced:
    """A maintenance commit's refusal: the table is unchanged, and how to commit under a lease."""
    wire, detail = _FENCED.get(reason, reason), ""
    if isinstance(blocking, TableRow):
        detail = f"an operator disabled maintenance ({blocking.switch_reason})"
    elif reason == "no_lease":
        detail = "the commit names no lease"
    elif reason == "unknown_lease":
        what = (
            "maintenance lease or claim" if change.removes_snapshots_only else "maintenance lease"
        )
        detail = f"{change.lease_id} is no {what}"
    elif isinstance(blocking, LeaseRow):
        lease = blocking
        if reason == "expired":
            wire = lease.end or "expired"
        detail = {
            "other_table": f"lease {lease.id} is on {lease.table}",
            "other_principal": f"lease {lease.id} was not taken by token {change.principal}",
            "expired": f"lease {lease.id} is {wire}",
            "token_mismatch": f"token {change.token} is not lease {lease.id}'s ({lease.token})",
            "out_of_scope": f"the commit touches partitions lease {lease.id} does not cover "
            f"({_sample(change.partitions)})",
        }[reason]
    return Fenced(
        f"{change.table}: maintenance commit refused ({wire}): {detail}; the table is "
        "unchanged. Take a maintenance lease and commit with lakelock.lease-id and "
        "lakelock.token in the snapshot summary (or the X-Lakelock-Lease-Id and "
        "X-Lakelock-Token headers)",
        reason=wire,
        table=change.table,
    )


def _expected_s(hold: LeaseRow | IntentRow, holds: list[float], at: datetime) -> float:
    """How long `hold` is expected to last yet, for a held writer's Retry-After: the median of
    the table's recent maintenance holds (`holds`), less what a lease has held so far, and no
    later than the lease's expiry; at least 1 s, and 1 s without a history to go by."""
    if not holds:
        return 1.0
    left = statistics.median(holds)
    if isinstance(hold, LeaseRow):
        left -= (at - hold.acquired_at).total_seconds()
        left = min(left, (hold.expires_at - at).total_seconds())
    return max(1.0, round(left, 1))


def _sample(partitions: Scope) -> str:
    return "the whole table" if partitions is None else sample(sorted(partitions))


def in_use(table: str, verb: str, live: Sequence[LeaseRow | IntentRow]) -> InUse:
    """The refusal of a drop or rename of `table` while `live` (its live leases, claims and
    intents, not empty) hold it: each named, and how to end it."""
    named = [
        f"{x.cause} intent of {x.holder}"
        if isinstance(x, IntentRow)
        else f"{x.kind} lease {x.id} of {x.holder}"
        for x in live
    ]
    return InUse(
        f"table {table} is in use ({sample(named)}) and the {verb} changed nothing: stop the "
        "jobs that hold it (what they hold ends with them, at the latest with its TTL), or "
        "revoke their leases as an operator (`lakelock revoke LEASE_ID`; an intent ends with "
        f"its lease or its TTL), then {verb} it again",
        reason="in-use",
        live=[
            {"kind": "intent", "holder": x.holder, "cause": x.cause}
            if isinstance(x, IntentRow)
            else {"kind": x.kind, "holder": x.holder, "lease_id": x.id}
            for x in live
        ],
    )
