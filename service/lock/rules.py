"""The protocol's decisions: pure functions over typed rows, no database. See service.lock.leases
and service.lock.intents.

Each transition asks one question here and writes what the answer says:

    decide_commit(table, live, ask)        Grant | Refuse
    decide_maintenance(table, live, ask)   Grant | Drain | Refuse
    decide_claim(live, ask)                Grant | Refuse
    decide_repeat(earlier, ask, at)        Repeat | Refuse   (an acquire repeated by request id)
    decide_renew(lease, ask, at)           Extend | Refuse
    decide_release(lease, ask, at)         End | Unchanged | Refuse
    decide_withdraw(intent, ask)           Refuse | None
    decide_turn(table, live, lease, ...)   IntentRow | None  (a turn of the head to open)
    head_turn(table, live)                 IntentRow | None  (the turn that holds now)
    counts_refusal(lease, holder, ...)     InvalidRequest | None  (what a release reports)

A function checks in the order its docstring lists, and the first refusal wins, so a reader can
tell why a request waited from the function and the audit event alone. Which kinds exclude
which is `service.wire.scope.conflicts`; these functions only add the switch, the order and what
the answer is. `refused()` turns a `Refuse` into the `service.wire.errors` exception the caller
raises, with a detail that says what to do next.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal, TypeVar

from service.lock.rows import (
    Caller,
    IntentRow,
    LeaseKind,
    LeaseRow,
    Live,
    TableRow,
    listed,
    seconds,
)
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
from service.wire.scope import Scope, conflicts, covers
from service.wire.text import sample

__all__ = [
    "Ask",
    "Drain",
    "End",
    "Extend",
    "Grant",
    "Reason",
    "Refuse",
    "ReleaseAsk",
    "RenewAsk",
    "Repeat",
    "Unchanged",
    "WithdrawAsk",
    "backpressure_holds",
    "counts_refusal",
    "decide_claim",
    "decide_commit",
    "decide_maintenance",
    "decide_release",
    "decide_renew",
    "decide_repeat",
    "decide_turn",
    "decide_withdraw",
    "head_turn",
    "hold_back_refusal",
    "holding",
    "other_principal",
    "other_principal_of",
    "refused",
    "turn_lease",
    "turn_of",
    "turn_request",
]


# -- requests --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Ask:
    """An acquire: `kind` lease on `table` (or `partitions` of it) for `holder`, sent by
    `caller`, whose principal the lease will belong to."""

    kind: LeaseKind
    table: str
    holder: str
    request_id: str
    partitions: tuple[str, ...] | None
    ttl: timedelta
    caller: Caller

    @property
    def scope(self) -> Scope:
        return None if self.partitions is None else frozenset(self.partitions)


@dataclass(frozen=True, slots=True)
class RenewAsk:
    lease_id: str
    holder: str
    token: int | None
    ttl: timedelta | None  # None: the lease's own TTL
    caller: Caller


@dataclass(frozen=True, slots=True)
class WithdrawAsk:
    table: str
    request_id: str
    holder: str
    caller: Caller


@dataclass(frozen=True, slots=True)
class ReleaseAsk:
    """A release by `holder` (with the token for a maintenance lease), or by an operator who
    may leave both out (then it is a revoke)."""

    lease_id: str
    holder: str | None
    token: int | None
    caller: Caller

    @property
    def operator(self) -> bool:
        return self.caller.operator


# -- answers ---------------------------------------------------------------------------------

Reason = Literal[
    # no commit lease now (Locked)
    "paused",
    "maintenance",
    "intent",
    "backpressure",
    # no maintenance lease now
    "maintenance_off",
    "maintenance_held",
    # no claim now
    "claim_held",
    # a request id used before
    "request_id_taken",
    "scope_changed",
    "ended",
    # renew, release and withdraw of a lease or intent
    "expired",
    "revoked",
    "not_owner",
    "other_principal",
    "token_mismatch",
    "token_missing",
    "holder_missing",
]

Blocking = TableRow | LeaseRow | IntentRow
"""What a refusal names: the table row (its switch), a lease or an intent."""

Row = TypeVar("Row", LeaseRow, IntentRow)


@dataclass(frozen=True, slots=True)
class Grant:
    """Grant the lease asked for: with `token` (a maintenance lease's, the table's next one),
    ending the open intents in `fulfils` (the holder's own, which the grant covers)."""

    token: int | None = None
    fulfils: tuple[IntentRow, ...] = ()


@dataclass(frozen=True, slots=True)
class Drain:
    """Not yet: the commit leases `in_flight` must end first. Open an intent on the request's
    scope, or keep `intent`, the one it opened before, open."""

    in_flight: tuple[LeaseRow, ...]
    intent: IntentRow | None


@dataclass(frozen=True, slots=True)
class Refuse:
    reason: Reason
    blocking: Blocking | None = None


@dataclass(frozen=True, slots=True)
class Repeat:
    """An acquire repeated with its request id: answer the lease granted to it."""

    lease: LeaseRow


@dataclass(frozen=True, slots=True)
class Extend:
    """Renew: the lease is live until `expires_at`, with `ttl` from now on."""

    expires_at: datetime
    ttl: timedelta


@dataclass(frozen=True, slots=True)
class End:
    """End a live lease this way; `reason` goes into its audit event."""

    end: Literal["released", "revoked"]
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class Unchanged:
    """Nothing to do: the lease already ended (a release is idempotent)."""


# -- acquire ---------------------------------------------------------------------------------


def _first(ask: Ask, rows: tuple[Row, ...]) -> Row | None:
    return next((x for x in rows if conflicts(ask.kind, ask.scope, x.kind, x.scope)), None)


def backpressure_holds(table: TableRow) -> bool:
    """Whether the table's backpressure intents hold commits now: only while its backpressure
    switch and its maintenance switch are both on (docs/jobs.md §3). With maintenance off no
    grant could end them, so they would hold writers for nothing; with backpressure off the
    operator chose ingest first. The commit decision and the catalog front's fence ask this
    function (through `holding`), and so does the backpressure gauge
    (`service.lock.overview.backpressure`)."""
    return table.backpressure == "enabled" and table.maintenance == "enabled"


def holding(table: TableRow, live: Live) -> tuple[IntentRow, ...]:
    """The live intents that hold commits on their scopes: every drain, and the backpressure
    ones while `backpressure_holds(table)`; drains first (a refusal names one of those first)."""
    drains = tuple(x for x in live.intents if x.cause == "drain")
    if not backpressure_holds(table):
        return drains
    return drains + tuple(x for x in live.intents if x.cause == "backpressure")


def decide_commit(table: TableRow, live: Live, ask: Ask) -> Grant | Refuse:
    """A shared commit lease: refused while ingest is paused, then while a live maintenance lease
    intersects its scope, then while a draining intent does, then while a compactor's
    backpressure does (unless `backpressure_holds` says it does not now); else granted. Commit
    leases never exclude each other."""
    if table.ingest == "paused":
        return Refuse("paused", table)
    lease = _first(ask, live.of_kind("maintenance"))
    if lease is not None:
        return Refuse("maintenance", lease)
    intent = _first(ask, holding(table, live))
    if intent is not None:
        return Refuse("intent" if intent.cause == "drain" else "backpressure", intent)
    return Grant()


def decide_maintenance(table: TableRow, live: Live, ask: Ask) -> Grant | Drain | Refuse:
    """An exclusive maintenance lease: its request's own intent must be the same holder's on
    the same scope; then refused while maintenance is disabled, then while a live maintenance
    lease intersects its scope; drained while intersecting commit leases are live; else granted
    with the table's next token. Intents of other requests do not hold it.

    A grant fulfils the holder's open intents on the table that its scope covers: the request's
    own, and those of earlier requests of the same holder (a retry under a new request id, a
    restart) whose drain the grant now holds. Left open, they would keep refusing commit
    leases after the lease is released, until their TTL. An intent the grant does not cover,
    or another holder's, stays: it still stands for a request that may ask again."""
    mine = live.intent(ask.request_id)
    if mine is not None:
        if mine.holder != ask.holder or not ask.caller.owns(mine):
            return Refuse("request_id_taken", mine)
        if mine.scope != ask.scope:
            return Refuse("scope_changed", mine)
    if table.maintenance == "disabled":
        return Refuse("maintenance_off", table)
    lease = _first(ask, live.of_kind("maintenance"))
    if lease is not None:
        return Refuse("maintenance_held", lease)
    in_flight = tuple(
        x for x in live.of_kind("commit") if conflicts(ask.kind, ask.scope, x.kind, x.scope)
    )
    if in_flight:
        return Drain(in_flight, mine)
    fulfils = tuple(
        x
        for x in live.intents
        if x.cause != "turn"  # a turn is its lease's, and ends with it (decide_turn)
        and x.holder == ask.holder
        and ask.caller.owns(x)
        and covers(ask.scope, x.scope)
    )
    return Grant(token=table.next_token, fulfils=fulfils)


def decide_claim(live: Live, ask: Ask) -> Grant | Refuse:
    """A claim: refused while another claim on the table is live (whoever holds it, the
    asker too: a second claim under a new request id is a second compactor run); else
    granted. It never waits and never drains. Nothing else holds it: commit and maintenance
    leases, intents and the switch are not looked at (a claim writes nothing: it only says
    which compactor plans the table, and each maintenance lease it takes keeps its own rules).
    A request id granted before is answered by `decide_repeat`, not here."""
    held = _first(ask, live.of_kind("claim"))
    if held is not None:
        return Refuse("claim_held", held)
    return Grant()


def decide_repeat(earlier: LeaseRow, ask: Ask, at: datetime) -> Repeat | Refuse:
    """The answer to an acquire whose request id was granted `earlier`, whatever the table's
    state now: another holder's or another principal's request id is refused (its lease and
    token must not be handed out by id), so is another scope (the lease would not cover it),
    so is a lease that ended since; else the same lease again."""
    if earlier.holder != ask.holder or not ask.caller.owns(earlier):
        return Refuse("request_id_taken", earlier)
    if earlier.scope != ask.scope:
        return Refuse("scope_changed", earlier)
    if not earlier.live(at):
        return Refuse("ended", earlier)
    return Repeat(earlier)


# -- the catalog front's turn of the head ----------------------------------------------------


_TURN = "turn-"


def turn_request(lease_id: str) -> str:
    """The request id of the turn of maintenance lease `lease_id`: a lease has one turn at most."""
    return _TURN + lease_id


def turn_lease(turn: IntentRow) -> str:
    """The id of the maintenance lease whose turn `turn` is."""
    return turn.request_id.removeprefix(_TURN)


def turn_of(live: Live, lease_id: str) -> IntentRow | None:
    """The open turn of maintenance lease `lease_id`, or None."""
    intent = live.intent(turn_request(lease_id))
    return intent if intent is not None and intent.cause == "turn" else None


def decide_turn(
    table: TableRow,
    live: Live,
    lease: LeaseRow | None,
    *,
    token: int | None,
    principal: str,
    at: datetime,
    turn: timedelta,
) -> IntentRow | None:
    """The turn of the table's head to open for a commit naming `lease` that lost the head
    (docs/catalog-front.md §4), or None. Only the holder's commit gets one: `lease` a live
    maintenance lease of the table, taken by `principal`, named with its current `token`,
    while maintenance is enabled (else its next commit is refused anyway), and only when it
    has no open turn: a turn runs `turn` from the first loss at most, never extended by a later
    one, and never past the lease's expiry."""
    if turn <= timedelta(0) or lease is None or lease.kind != "maintenance":
        return None
    if lease.table != table.name or not lease.live(at) or table.maintenance != "enabled":
        return None
    if lease.principal is None or lease.principal != principal or lease.token != token:
        return None
    if turn_of(live, lease.id) is not None:
        return None
    return IntentRow(
        table.name,
        turn_request(lease.id),
        lease.holder,
        None,  # every foreign data commit moves the head, whatever partitions it touches
        at,
        min(at + turn, lease.expires_at),
        "turn",
        principal=lease.principal,
    )


def head_turn(table: TableRow, live: Live) -> IntentRow | None:
    """The turn that holds the table's foreign data commits now, or None: an open turn whose
    maintenance lease is live, while maintenance is enabled (with maintenance off, the lease
    cannot commit: the turn would hold writers for nothing). A turn holds no commit lease
    (`holding` leaves it out): the gate's writers never touch a maintenance lease's
    partitions, and their commits are paced by micro-batches."""
    if table.maintenance != "enabled":
        return None
    held = {turn_request(lease.id) for lease in live.of_kind("maintenance")}
    return next((x for x in live.intents if x.cause == "turn" and x.request_id in held), None)


# -- renew, release, withdraw ----------------------------------------------------------------


def decide_renew(lease: LeaseRow, ask: RenewAsk, at: datetime) -> Extend | Refuse:
    """Extend a live lease only: refused when an operator revoked it, when it ended or expired,
    when another principal took it (an operator's token too: renewing is the holder's), when
    it is another holder's, and for a maintenance lease without its token (a client mistake)
    or with another one; else live `ttl` (default its own) from now."""
    if lease.end == "revoked":
        return Refuse("revoked", lease)
    if not lease.live(at):
        return Refuse("expired", lease)
    if not ask.caller.owns(lease):
        return Refuse("other_principal", lease)
    if lease.holder != ask.holder:
        return Refuse("not_owner", lease)
    if lease.kind == "maintenance":
        if ask.token is None:
            return Refuse("token_missing", lease)
        if ask.token != lease.token:
            return Refuse("token_mismatch", lease)
    ttl = ask.ttl if ask.ttl is not None else timedelta(seconds=lease.ttl_s)
    return Extend(at + ttl, ttl)


def decide_release(lease: LeaseRow, ask: ReleaseAsk, at: datetime) -> End | Unchanged | Refuse:
    """Another principal's lease is refused unless an operator sends the release; a holder
    that is not the lease's is refused, whoever sends it (it names another lease); a release
    needs the holder unless an operator sends it, and a maintenance lease's holder its token.
    An ended lease is left as it is; a live one ends `released` by its holder, `revoked` by an
    operator who left the holder out."""
    if not ask.caller.may_end(lease):
        return Refuse("other_principal", lease)
    if ask.holder is not None and ask.holder != lease.holder:
        return Refuse("not_owner", lease)
    if ask.holder is None and not ask.operator:
        return Refuse("holder_missing", lease)
    if ask.holder is not None and lease.kind == "maintenance":
        if ask.token is None:
            return Refuse("token_missing", lease)
        if ask.token != lease.token:
            return Refuse("token_mismatch", lease)
    if not lease.live(at):
        return Unchanged()
    if ask.holder is not None:
        return End("released")
    return End("revoked", "released by an operator")


def counts_refusal(
    lease: LeaseRow,
    holder: str | None,
    written: Collection[str] | None,
    compacted: Sequence[str] | None,
) -> InvalidRequest | None:
    """What a release may report of the lease's partitions (docs/design.md §5.1), or None:
    the files a commit wrote (`written`: the partitions named) only on a commit lease, the
    partitions compacted only on a maintenance lease, each within the lease's scope, and
    either only by the lease's holder (an operator's release without one is a revoke: nothing
    was done under it)."""
    if written and lease.kind != "commit":
        return InvalidRequest(
            f"written counts the files a commit lease's commit added; lease {lease.id} is a "
            f"{lease.kind}: release a maintenance lease with compacted (the partitions it "
            "rewrote), a claim with neither",
            field="written",
        )
    if compacted and lease.kind != "maintenance":
        return InvalidRequest(
            f"compacted names the partitions a maintenance lease compacted; lease {lease.id} "
            f"is a {lease.kind}: release a commit lease with written (the files its commit "
            "added), a claim with neither",
            field="compacted",
        )
    if (written or compacted) and holder is None:
        return InvalidRequest(
            "written and compacted are reported by the lease's holder: send holder (and the "
            "token of a maintenance lease) with them",
            field="holder",
        )
    for field, named in (("written", written), ("compacted", compacted)):
        if not named or lease.partitions is None:
            continue
        outside = sorted(set(named) - set(lease.partitions))
        if outside:
            return InvalidRequest(
                f"{field} names {sample(outside)}, outside the partitions of "
                f"lease {lease.id}: name only the partitions it covers",
                field=field,
            )
    return None


def decide_withdraw(intent: IntentRow, ask: WithdrawAsk) -> Refuse | None:
    """Only the principal that opened the intent (or an operator), naming its holder,
    withdraws it (None: withdraw it)."""
    if not ask.caller.may_end(intent):
        return Refuse("other_principal", intent)
    if intent.holder != ask.holder:
        return Refuse("not_owner", intent)
    return None


# -- refusals as errors ----------------------------------------------------------------------


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
