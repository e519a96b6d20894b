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
    decide_hold_back(claim, ask, at)       Refuse | None   (a compactor's backpressure)
    decide_catalog_commit(table, live, change, lease, at)
                                           Refuse | None   (a catalog commit: the fence)

Every refusal is a `Refuse`, worded by service.lock.refusals; the caller raises it.

A function checks in the order its docstring lists, and the first refusal wins, so a reader can
tell why a request waited from the function and the audit event alone. Which kinds exclude
which is `service.wire.scope.conflicts`; these functions only add the switch, the order and what
the answer is. The asks and answers are `service.lock.asks`; `service.lock.refusals.refused`
turns a `Refuse` into the exception the caller raises, with a detail that says what to do next.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TypeVar

from service.lock.asks import (
    Ask,
    Change,
    Drain,
    End,
    Extend,
    Grant,
    HoldBackAsk,
    Refuse,
    ReleaseAsk,
    RenewAsk,
    Repeat,
    Unchanged,
    WithdrawAsk,
)
from service.lock.rows import IntentRow, LeaseRow, Live, TableRow
from service.wire.holders import acts_under
from service.wire.scope import conflicts, covers, intersects

__all__ = [
    "backpressure_holds",
    "decide_catalog_commit",
    "decide_claim",
    "decide_commit",
    "decide_hold_back",
    "decide_maintenance",
    "decide_release",
    "decide_renew",
    "decide_repeat",
    "decide_turn",
    "decide_withdraw",
    "head_turn",
    "holding",
    "leased",
    "turn_lease",
    "turn_of",
    "turn_request",
]


Row = TypeVar("Row", LeaseRow, IntentRow)


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
    operator who left the holder out. Before all that, what the release reports of the lease
    (`_counts`)."""
    counts = _counts(lease, ask)
    if counts is not None:
        return counts
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


def _counts(lease: LeaseRow, ask: ReleaseAsk) -> Refuse | None:
    """What a release may report of the lease's partitions (docs/design.md §5.1): the
    partitions a commit wrote only on a commit lease, those compacted only on a maintenance
    lease (`counts_kind`), either only by the lease's holder (`counts_holder`: an operator's
    release without one is a revoke, nothing was done under it), each within the lease's
    scope (`counts_outside`)."""
    if (ask.written and lease.kind != "commit") or (ask.compacted and lease.kind != "maintenance"):
        return Refuse("counts_kind", lease)
    if (ask.written or ask.compacted) and ask.holder is None:
        return Refuse("counts_holder", lease)
    if ask.outside(lease) is not None:
        return Refuse("counts_outside", lease)
    return None


def decide_withdraw(intent: IntentRow, ask: WithdrawAsk) -> Refuse | None:
    """Only the principal that opened the intent (or an operator), naming its holder,
    withdraws it (None: withdraw it)."""
    if not ask.caller.may_end(intent):
        return Refuse("other_principal", intent)
    if intent.holder != ask.holder:
        return Refuse("not_owner", intent)
    return None


def decide_hold_back(claim: LeaseRow | None, ask: HoldBackAsk, at: datetime) -> Refuse | None:
    """Only a compactor alive on the table holds back its writers (docs/jobs.md §3): the
    table's live claim `claim_id` (`no_claim`, `expired`), taken by the caller's token
    (`other_principal`, docs/design.md §6), for its holder or a run under it (`not_owner`:
    `<claim holder>/<run>`). None: hold them back."""
    if claim is None:
        return Refuse("no_claim")
    if not claim.live(at):
        return Refuse("expired", claim)
    if not ask.caller.owns(claim):
        return Refuse("other_principal", claim)
    if not acts_under(ask.holder, claim.holder):
        return Refuse("not_owner", claim)
    return None


# -- a catalog commit (the fence, service.lock.fence) ----------------------------------------


def decide_catalog_commit(
    table: TableRow, live: Live, change: Change, lease: LeaseRow | None, at: datetime
) -> Refuse | None:
    """A maintenance commit needs its lease (`_maintenance_commit`); a data commit that is not
    the protocol's own writer waits for the holds on what it touches (`_data_commit`); any
    other commit passes (None)."""
    if change.kind == "maintenance":
        return _maintenance_commit(table, change, lease, at)
    if change.kind == "data":
        return _data_commit(table, live, change, lease, at)
    return None


def _maintenance_commit(
    table: TableRow, change: Change, lease: LeaseRow | None, at: datetime
) -> Refuse | None:
    """Maintenance enabled (`maintenance_off`); a lease named (`no_lease`) that is a
    maintenance lease, or the table's claim for a commit that only removes snapshots (it
    touches no partition and holds no writer, so expiry never drains ingest;
    `unknown_lease`), of this table (`other_table`), taken by the committing token
    (`other_principal`: a lease id and token are not secrets, snapshot summaries carry
    them), live (`expired`), named with its current token (`token_mismatch`), whose scope
    covers what the commit touched (`out_of_scope`)."""
    if table.maintenance == "disabled":
        return Refuse("maintenance_off", table)
    if change.lease_id is None:
        return Refuse("no_lease")
    kinds = ("maintenance", "claim") if change.removes_snapshots_only else ("maintenance",)
    if lease is None or lease.kind not in kinds:
        return Refuse("unknown_lease")
    if lease.table != change.table:
        return Refuse("other_table", lease)
    if lease.principal is None or lease.principal != change.principal:
        return Refuse("other_principal", lease)
    if not lease.live(at):
        return Refuse("expired", lease)
    if lease.kind == "maintenance" and change.token != lease.token:
        return Refuse("token_mismatch", lease)
    if not covers(lease.scope, change.partitions):
        return Refuse("out_of_scope", lease)
    return None


def leased(change: Change, lease: LeaseRow | None, at: datetime) -> bool:
    """The commit names a live lease of its table, taken by its own token, that covers what it
    touched (a maintenance commit that passed always does): not a foreign writer's."""
    return (
        lease is not None
        and lease.live(at)
        and lease.table == change.table
        and lease.principal is not None
        and lease.principal == change.principal
        and covers(lease.scope, change.partitions)
    )


def _data_commit(
    table: TableRow, live: Live, change: Change, lease: LeaseRow | None, at: datetime
) -> Refuse | None:
    """A commit under a commit lease (the gate granted it before any drain began), or under a
    maintenance lease by its holder with its token, passes. Any other is a foreign writer's:
    what holds a gated commit holds it when it can conflict with a rewrite (`maintenance`,
    `intent`, `backpressure`: the same leases and intents, `holding`); one that cannot passes
    all but backpressure, which holds writers for the debt they add, not for what they touch.
    Then a maintenance commit that lost the head has the next turn (`turn`): every commit
    moves the head, so every foreign data commit waits for it, wherever it writes
    (docs/catalog-front.md §4)."""
    if lease is not None and leased(change, lease, at):
        if lease.kind == "commit":
            return None
        if lease.kind == "maintenance" and change.token == lease.token:
            return None
    holds: tuple[LeaseRow | IntentRow, ...] = (*live.of_kind("maintenance"), *holding(table, live))
    if not change.conflicts:
        holds = tuple(h for h in holds if isinstance(h, IntentRow) and h.cause == "backpressure")
    first = next((h for h in holds if intersects(h.scope, change.partitions)), None)
    if isinstance(first, LeaseRow):
        return Refuse("maintenance", first)
    if first is not None:
        return Refuse("backpressure" if first.cause == "backpressure" else "intent", first)
    turn = head_turn(table, live)
    if turn is not None:
        return Refuse("turn", turn)
    return None
