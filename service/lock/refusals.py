"""A refusal in words: the `service.wire.errors` exception a client gets, with what to do next
(docs/api.md lists them).

    refused(refusal, ask, at, revoked_by, revoke_reason) -> LakelockError
                        a `Refuse` decided by service.lock.rules, as the client hears it
    other_principal(what, row, caller, verb)             -> NotOwner
                        a token acting on what another token took (docs/design.md §6)
    other_principal_of(what, principal, caller, verb)    -> NotOwner   the same, by principal
    hold_back_refusal(table, claim_id, claim, holder, caller, at) -> LakelockError | None
                        why a backpressure request may not hold writers

A refusal's `reason` is spelled once, as docs/api.md writes it.
"""

from __future__ import annotations

from datetime import datetime

from service.lock.asks import Ask, Reason, Refuse, ReleaseAsk, RenewAsk, WithdrawAsk
from service.lock.rows import Caller, IntentRow, LeaseRow, TableRow, listed, seconds
from service.wire.errors import (
    ClaimHeld,
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
from service.wire.holders import acts_under
from service.wire.text import sample

__all__ = ["hold_back_refusal", "other_principal", "other_principal_of", "refused"]


def hold_back_refusal(
    table: str, claim_id: str, claim: LeaseRow | None, holder: str, caller: Caller, at: datetime
) -> LakelockError | None:
    """Why a backpressure request may not hold writers, or None: only the holder of the
    table's live claim, or a run under it (`<claim holder>/<run>`), may (docs/jobs.md §3),
    and only with the token that took the claim (docs/design.md §6)."""
    if claim is None:
        return NotFound(
            f"no claim {claim_id} on {table}; claim the table before holding its writers",
            lease_id=claim_id,
        )
    if not claim.live(at):
        state = claim.state(at)
        return LeaseExpired(
            f"the claim {claim_id} on {table} is {state}; claim the table again",
            lease_id=claim_id,
            state=state,
        )
    if not caller.owns(claim):
        return other_principal(
            f"the claim {claim_id} on {table}", claim, caller, "hold back writers under"
        )
    if not acts_under(holder, claim.holder):
        return NotOwner(
            f"holder {holder!r} is neither the claim's holder {claim.holder!r} nor a run under "
            f"it ({claim.holder}/<run>); hold back writers as the compactor that claimed {table}",
            field="holder",
        )
    return None


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
    ask: Ask | RenewAsk | ReleaseAsk | WithdrawAsk,
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
