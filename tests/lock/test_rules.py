"""The protocol's decisions without a database: a table of cases per rule, and a hypothesis
model of the acquire rules against a brute-force reading of docs/design.md §3 and §4."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

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
from service.lock.refusals import commit_refused, refused
from service.lock.rows import Caller, IntentRow, LeaseRow, Live, TableRow
from service.lock.rules import (
    decide_catalog_commit,
    decide_claim,
    decide_commit,
    decide_hold_back,
    decide_maintenance,
    decide_release,
    decide_renew,
    decide_repeat,
    decide_turn,
    decide_withdraw,
    head_turn,
    holding,
    turn_lease,
    turn_of,
    turn_request,
)
from service.wire.errors import (
    ClaimHeld,
    CommitHeld,
    Fenced,
    InvalidRequest,
    LeaseExpired,
    Locked,
    MaintenanceHeld,
    MaintenanceOff,
    NotFound,
    NotOwner,
)
from service.wire.scope import covers

AT = datetime(2024, 6, 20, 12, 0, 0)
JOB = Caller("job-a")  # the principal of every lease and intent below
OTHER = Caller("job-b")
OP = Caller("ops", operator=True)
TTL = timedelta(seconds=30)
P1, P2, P3 = "dt=1", "dt=2", "dt=3"


def table(**changes: object) -> TableRow:
    values: dict[str, object] = {
        "name": "lake.db.t",
        "ingest": "running",
        "maintenance": "enabled",
        "switch_reason": None,
        "switch_by": None,
        "switch_at": None,
        "holds_until": None,
        "next_token": 7,
    }
    return TableRow(**{**values, **changes})  # type: ignore[arg-type]


def lease(kind: str = "commit", *parts: str, holder: str = "h", **changes: object) -> LeaseRow:
    values: dict[str, object] = {
        "id": f"{kind}-{holder}-{'-'.join(parts) or 'all'}",
        "table": "lake.db.t",
        "kind": kind,
        "holder": holder,
        "request_id": "r1",
        "partitions": tuple(parts) or None,
        "ttl_s": 30.0,
        "acquired_at": AT - timedelta(seconds=5),
        "expires_at": AT + timedelta(seconds=25),
        "token": 3 if kind == "maintenance" else None,
        "principal": JOB.principal,
    }
    return LeaseRow(**{**values, **changes})  # type: ignore[arg-type]


def intent(*parts: str, holder: str = "c", request_id: str = "m1") -> IntentRow:
    return IntentRow(
        "lake.db.t",
        request_id,
        holder,
        tuple(parts) or None,
        AT,
        AT + timedelta(seconds=5),
        principal=JOB.principal,
    )


def ask(
    kind: str = "commit",
    *parts: str,
    holder: str = "h",
    request_id: str = "r1",
    caller: Caller = JOB,
) -> Ask:
    return Ask(kind, "lake.db.t", holder, request_id, tuple(parts) or None, TTL, caller)  # type: ignore[arg-type]


# -- commit ----------------------------------------------------------------------------------

M_P1 = lease("maintenance", P1, holder="c")
I_P2 = intent(P2)


@pytest.mark.parametrize(
    ("row", "live", "asked", "reason"),
    [
        (table(), Live(), ask(), None),
        (table(ingest="paused"), Live(), ask(), "paused"),
        # the switch is checked first, then leases, then intents
        (table(ingest="paused"), Live((M_P1,), (I_P2,)), ask(), "paused"),
        (table(), Live((M_P1,), (I_P2,)), ask(), "maintenance"),
        (table(), Live((M_P1,), (I_P2,)), ask("commit", P2), "intent"),
        (table(), Live((M_P1,), (I_P2,)), ask("commit", P3), None),
        # commit leases never exclude each other
        (table(), Live((lease("commit", holder="other"),)), ask(), None),
        # disabled maintenance does not hold ingest
        (table(maintenance="disabled"), Live(), ask(), None),
    ],
)
def test_commit_rule(row, live, asked, reason):
    decision = decide_commit(row, live, asked)
    if reason is None:
        assert decision == Grant()
    else:
        assert isinstance(decision, Refuse) and decision.reason == reason


def test_a_commit_refusal_names_what_holds_it():
    decision = decide_commit(table(), Live((M_P1,), (I_P2,)), ask("commit", P1, P2))
    assert decision == Refuse("maintenance", M_P1)
    error = refused(decision, ask("commit", P1, P2), AT)
    assert isinstance(error, Locked)
    assert error.extra["blocking_holder"] == "c"
    assert error.extra["blocking_partitions"] == [P1]
    assert error.retry_after_s == 25.0


# -- maintenance -----------------------------------------------------------------------------


def test_maintenance_on_a_free_table_is_granted_the_next_token():
    assert decide_maintenance(table(), Live(), ask("maintenance")) == Grant(token=7)


def test_maintenance_drains_the_intersecting_commits_only():
    c1, c2 = lease("commit", P1, holder="i1"), lease("commit", P2, holder="i2")
    decision = decide_maintenance(table(), Live((c1, c2)), ask("maintenance", P1))
    assert decision == Drain((c1,), None)


def test_maintenance_keeps_its_own_intent_while_draining_and_ends_it_when_granted():
    mine = intent(P1, holder="h", request_id="r1")
    c1 = lease("commit", P1, holder="i1")
    assert decide_maintenance(table(), Live((c1,), (mine,)), ask("maintenance", P1)) == Drain(
        (c1,), mine
    )
    assert decide_maintenance(table(), Live((), (mine,)), ask("maintenance", P1)) == Grant(
        token=7, fulfils=(mine,)
    )


MINE = intent(P1, holder="h", request_id="r1")
THEIRS = intent(P1, holder="x", request_id="r1")


@pytest.mark.parametrize(
    ("row", "live", "asked", "reason"),
    [
        (table(maintenance="disabled"), Live(), ask("maintenance"), "maintenance_off"),
        # disabled is checked before a held lease
        (table(maintenance="disabled"), Live((M_P1,)), ask("maintenance"), "maintenance_off"),
        (table(), Live((M_P1,)), ask("maintenance"), "maintenance_held"),
        (table(), Live((M_P1,)), ask("maintenance", P1, P2), "maintenance_held"),
        # a held lease is checked before the commits it would drain
        (table(), Live((lease("commit", P1), M_P1)), ask("maintenance", P1), "maintenance_held"),
        # the request's own intent must be the same holder's, on the same scope; checked first
        (table(), Live((), (THEIRS,)), ask("maintenance", P1), "request_id_taken"),
        (table(), Live((), (MINE,)), ask("maintenance", P2), "scope_changed"),
        (
            table(maintenance="disabled"),
            Live((), (THEIRS,)),
            ask("maintenance"),
            "request_id_taken",
        ),
    ],
)
def test_maintenance_refusals(row, live, asked, reason):
    decision = decide_maintenance(row, live, asked)
    assert isinstance(decision, Refuse) and decision.reason == reason


def test_a_grant_fulfils_the_intents_of_its_holder_that_it_covers():
    earlier = intent(P1, holder="h", request_id="r0")
    whole = intent(holder="h", request_id="r9")
    wider = intent(P1, P2, holder="h", request_id="r8")
    theirs = intent(P1, holder="x", request_id="m1")
    live = Live((), (earlier, whole, wider, theirs))
    assert decide_maintenance(table(), live, ask("maintenance", P1)) == Grant(
        token=7, fulfils=(earlier,)
    )
    assert decide_maintenance(table(), live, ask("maintenance")) == Grant(
        token=7, fulfils=(earlier, whole, wider)
    )


# -- the catalog front's turn of the head ----------------------------------------------------

TURN = timedelta(seconds=10)


def opened_turn(held: LeaseRow) -> IntentRow:
    turn = decide_turn(
        table(), Live((held,)), held, token=held.token, principal=JOB.principal, at=AT, turn=TURN
    )
    assert turn is not None
    return turn


def test_the_holders_commit_that_lost_the_head_gets_one_bounded_turn():
    held = lease("maintenance", P1, holder="c")
    turn = opened_turn(held)
    assert (turn.cause, turn.holder, turn.principal) == ("turn", "c", JOB.principal)
    assert turn.partitions is None  # any commit moves the head
    assert turn.request_id == turn_request(held.id) and turn_lease(turn) == held.id
    assert turn.expires_at == AT + TURN
    # never past the lease's expiry
    short = lease("maintenance", P1, holder="c", expires_at=AT + timedelta(seconds=2))
    assert opened_turn(short).expires_at == AT + timedelta(seconds=2)
    # a second loss keeps the first turn: not extended
    assert (
        decide_turn(
            table(),
            Live((held,), (turn,)),
            held,
            token=3,
            principal=JOB.principal,
            at=AT + timedelta(seconds=5),
            turn=TURN,
        )
        is None
    )


@pytest.mark.parametrize(
    ("row", "held", "token", "principal", "turn"),
    [
        (table(), lease("maintenance", P1), 4, JOB.principal, TURN),  # a stale token
        (table(), lease("maintenance", P1), None, JOB.principal, TURN),  # no token
        (table(), lease("maintenance", P1), 3, OTHER.principal, TURN),  # not its taker
        (table(), lease("maintenance", P1, ended_at=AT, end="released"), 3, "job-a", TURN),
        (table(), lease("maintenance", P1, table="lake.db.u"), 3, JOB.principal, TURN),
        (table(maintenance="disabled"), lease("maintenance", P1), 3, JOB.principal, TURN),
        (table(), lease("commit", P1), None, JOB.principal, TURN),  # the gate's writer
        (table(), lease("claim"), None, JOB.principal, TURN),
        (table(), None, 3, JOB.principal, TURN),
        (table(), lease("maintenance", P1), 3, JOB.principal, timedelta(0)),  # turns off
    ],
)
def test_no_turn_but_for_the_holders_commit(row, held, token, principal, turn):
    live = Live(() if held is None else (held,))
    assert decide_turn(row, live, held, token=token, principal=principal, at=AT, turn=turn) is None


def test_a_turn_holds_while_its_lease_lives_and_maintenance_is_on_and_never_a_commit_lease():
    held = lease("maintenance", P1, holder="c")
    turn = opened_turn(held)
    live = Live((held,), (turn,))
    assert head_turn(table(), live) == turn_of(live, held.id) == turn
    assert head_turn(table(), Live((), (turn,))) is None  # its lease ended
    assert head_turn(table(maintenance="disabled"), live) is None
    # the gate's commit leases keep their rules: a turn refuses none, nor is it a drain
    assert holding(table(), live) == ()
    assert decide_commit(table(), live, ask("commit", P2)) == Grant()
    # nor is it fulfilled by another grant to its holder
    assert decide_maintenance(table(), Live((), (turn,)), ask("maintenance", holder="c")) == (
        Grant(token=7)
    )


def test_maintenance_is_not_held_by_other_requests_intents_nor_disjoint_leases():
    live = Live((M_P1,), (intent(P2, holder="other"), intent(holder="other", request_id="m2")))
    assert decide_maintenance(table(), live, ask("maintenance", P2)) == Grant(token=7)


def test_maintenance_refusals_as_errors():
    off = decide_maintenance(
        table(maintenance="disabled", switch_by="ops", switch_reason="quarter close"),
        Live(),
        ask("maintenance"),
    )
    error = refused(off, ask("maintenance"), AT)  # type: ignore[arg-type]
    assert isinstance(error, MaintenanceOff) and "quarter close" in error.detail
    held = decide_maintenance(table(), Live((M_P1,)), ask("maintenance", P1))
    error = refused(held, ask("maintenance", P1), AT)  # type: ignore[arg-type]
    assert isinstance(error, MaintenanceHeld) and error.extra["blocking_holder"] == "c"


# -- claim -----------------------------------------------------------------------------------

C = lease("claim", holder="compactor-1")


@pytest.mark.parametrize(
    ("live", "asked", "reason"),
    [
        (Live(), ask("claim"), None),
        (Live((C,)), ask("claim", holder="compactor-2"), "claim_held"),
        # its own holder too, under a new request id (a repeat is decide_repeat's)
        (Live((C,)), ask("claim", holder="compactor-1", request_id="r2"), "claim_held"),
        # commit and maintenance leases, whole table or not, and intents hold no claim
        (
            Live((lease("commit"), lease("maintenance", holder="c")), (intent(),)),
            ask("claim"),
            None,
        ),
        (Live((M_P1, lease("commit", P2))), ask("claim"), None),
    ],
)
def test_claim_rule(live, asked, reason):
    decision = decide_claim(live, asked)
    if reason is None:
        assert decision == Grant()
    else:
        assert decision == Refuse(reason, C)


def test_a_claim_holds_no_commit_or_maintenance_lease():
    live = Live((C,))
    assert decide_commit(table(), live, ask("commit")) == Grant()
    assert decide_maintenance(table(), live, ask("maintenance")) == Grant(token=7)


def test_a_held_claim_as_an_error_names_its_holder_and_the_time_left():
    asked = ask("claim", holder="compactor-2")
    error = refused(decide_claim(Live((C,)), asked), asked, AT)  # type: ignore[arg-type]
    assert isinstance(error, ClaimHeld) and error.status == 409
    assert error.extra["holder"] == "compactor-1" and "compactor-1" in error.detail
    assert error.extra["remaining_s"] == 25.0 == error.retry_after_s


def test_a_claim_is_renewed_and_released_without_a_token():
    assert decide_renew(C, RenewAsk("x", "compactor-1", None, None, JOB), AT) == Extend(
        AT + TTL, TTL
    )
    assert decide_release(C, ReleaseAsk("x", "compactor-1", None, JOB), AT) == End("released")
    refusal = decide_renew(C, RenewAsk("x", "compactor-2", None, None, JOB), AT)
    assert refusal == Refuse("not_owner", C)


# -- a repeated request id -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("earlier", "asked", "answer"),
    [
        (lease("commit", P1, P2), ask("commit", P2, P1), "repeat"),  # the same scope, any order
        (lease("commit", P1), ask("commit", P1, holder="other"), "request_id_taken"),
        (lease("commit", P1), ask("commit", P2), "scope_changed"),
        (lease("commit"), ask("commit", P1), "scope_changed"),
        (lease("commit", P1, ended_at=AT, end="released"), ask("commit", P1), "ended"),
        (lease("commit", P1, expires_at=AT), ask("commit", P1), "ended"),
    ],
)
def test_repeated_request_id(earlier, asked, answer):
    decision = decide_repeat(earlier, asked, AT)
    if answer == "repeat":
        assert decision == Repeat(earlier)
    else:
        assert isinstance(decision, Refuse) and decision.reason == answer


def test_an_ended_repeat_says_which_lease_and_how_it_ended():
    earlier = lease("commit", ended_at=AT, end="revoked")
    error = refused(decide_repeat(earlier, ask(), AT), ask(), AT)  # type: ignore[arg-type]
    assert isinstance(error, LeaseExpired)
    assert (error.extra["lease_id"], error.extra["state"]) == (earlier.id, "revoked")


# -- renew, release, withdraw ----------------------------------------------------------------

M = lease("maintenance", holder="c")


@pytest.mark.parametrize(
    ("row", "asked", "reason"),
    [
        (lease(end="revoked", ended_at=AT), RenewAsk("x", "h", None, None, JOB), "revoked"),
        (lease(end="released", ended_at=AT), RenewAsk("x", "h", None, None, JOB), "expired"),
        (lease(expires_at=AT), RenewAsk("x", "h", None, None, JOB), "expired"),
        # revoked and expired are said before the holder
        (lease(end="revoked", ended_at=AT), RenewAsk("x", "other", None, None, JOB), "revoked"),
        (lease(), RenewAsk("x", "other", None, None, JOB), "not_owner"),
        (M, RenewAsk("x", "c", None, None, JOB), "token_missing"),
        (M, RenewAsk("x", "c", 2, None, JOB), "token_mismatch"),
        (M, RenewAsk("x", "other", 2, None, JOB), "not_owner"),
    ],
)
def test_renew_refusals(row, asked, reason):
    decision = decide_renew(row, asked, AT)
    assert isinstance(decision, Refuse) and decision.reason == reason


def test_renew_extends_from_now_by_the_asked_or_the_lease_own_ttl():
    assert decide_renew(M, RenewAsk("x", "c", 3, None, JOB), AT) == Extend(AT + TTL, TTL)
    ten = timedelta(seconds=10)
    assert decide_renew(lease(), RenewAsk("x", "h", None, ten, JOB), AT) == Extend(AT + ten, ten)


@pytest.mark.parametrize(
    ("row", "asked", "answer"),
    [
        (lease(), ReleaseAsk("x", "h", None, JOB), End("released")),
        (lease(), ReleaseAsk("x", None, None, OP), End("revoked", "released by an operator")),
        (lease(), ReleaseAsk("x", "h", None, OP), End("released")),
        (M, ReleaseAsk("x", "c", 3, JOB), End("released")),
        # idempotent: an ended lease is answered as it is, by its holder
        (lease(end="released", ended_at=AT), ReleaseAsk("x", "h", None, JOB), Unchanged()),
        (lease(expires_at=AT), ReleaseAsk("x", None, None, OP), Unchanged()),
        # another holder names another lease, whoever sends it, live or not
        (lease(), ReleaseAsk("x", "other", None, OP), "not_owner"),
        (lease(end="released", ended_at=AT), ReleaseAsk("x", "other", None, JOB), "not_owner"),
        (lease(), ReleaseAsk("x", None, None, JOB), "holder_missing"),
        (M, ReleaseAsk("x", "c", None, JOB), "token_missing"),
        (M, ReleaseAsk("x", "c", 2, JOB), "token_mismatch"),
        (M, ReleaseAsk("x", None, None, OP), End("revoked", "released by an operator")),
        # what the release reports of the lease: the right kind, by its holder, in its scope
        (lease(), ReleaseAsk("x", "h", None, JOB, written=(P1,)), End("released")),
        (M, ReleaseAsk("x", "c", 3, JOB, compacted=(P1,)), End("released")),
        (M, ReleaseAsk("x", "c", 3, JOB, written=(P1,)), "counts_kind"),
        (lease(), ReleaseAsk("x", "h", None, JOB, compacted=(P1,)), "counts_kind"),
        (C, ReleaseAsk("x", "compactor-1", None, JOB, written=(P1,)), "counts_kind"),
        (lease(), ReleaseAsk("x", None, None, OP, written=(P1,)), "counts_holder"),
        (lease("commit", P1), ReleaseAsk("x", "h", None, JOB, written=(P1, P2)), "counts_outside"),
        # checked first: a report that cannot be right is refused before who sends it
        (lease(), ReleaseAsk("x", "h", None, OTHER, compacted=(P1,)), "counts_kind"),
    ],
)
def test_release_rule(row, asked, answer):
    decision = decide_release(row, asked, AT)
    if isinstance(answer, str):
        assert isinstance(decision, Refuse) and decision.reason == answer
    else:
        assert decision == answer


@pytest.mark.parametrize(
    ("row", "asked"),
    [
        # the right holder, token and TTL, sent by another job token: its id and token are
        # not secrets, who took it is what counts
        (lease(), RenewAsk("x", "h", None, None, OTHER)),
        (M, RenewAsk("x", "c", 3, None, OTHER)),
        (lease(), ReleaseAsk("x", "h", None, OTHER)),
        (M, ReleaseAsk("x", "c", 3, OTHER)),
        (lease(end="released", ended_at=AT), ReleaseAsk("x", "h", None, OTHER)),
        # renewing is the holder's: an operator ends a lease, it does not keep one alive
        (lease(), RenewAsk("x", "h", None, None, OP)),
        # a lease granted before principals were recorded: no job token may act on it
        (lease(principal=None), RenewAsk("x", "h", None, None, JOB)),
        (lease(principal=None), ReleaseAsk("x", "h", None, JOB)),
    ],
)
def test_another_principal_may_not_renew_or_release(row, asked):
    decide = decide_renew if isinstance(asked, RenewAsk) else decide_release
    decision = decide(row, asked, AT)
    assert decision == Refuse("other_principal", row)
    error = refused(decision, asked, AT)  # type: ignore[arg-type]
    assert isinstance(error, NotOwner) and error.extra["reason"] == "other-principal"
    assert f"not by token {asked.caller.principal}" in error.detail


def test_a_release_reporting_partitions_outside_its_lease_names_them():
    asked = ReleaseAsk("x", "h", None, JOB, written=(P1, P3, P2))
    decision = decide_release(lease("commit", P1), asked, AT)
    assert isinstance(decision, Refuse)
    error = refused(decision, asked, AT)
    assert isinstance(error, InvalidRequest) and error.extra["field"] == "written"
    assert "dt=2" in error.detail and "dt=3" in error.detail and "dt=1," not in error.detail


@pytest.mark.parametrize(
    ("claim", "asked", "reason"),
    [
        (C, HoldBackAsk("lake.db.t", "x", "compactor-1", JOB), None),
        (C, HoldBackAsk("lake.db.t", "x", "compactor-1/run-4", JOB), None),
        (None, HoldBackAsk("lake.db.t", "x", "compactor-1", JOB), "no_claim"),
        (
            lease("claim", holder="compactor-1", expires_at=AT),
            HoldBackAsk("lake.db.t", "x", "compactor-1", JOB),
            "expired",
        ),
        (C, HoldBackAsk("lake.db.t", "x", "compactor-1", OTHER), "other_principal"),
        # an operator holds no writers under a compactor's claim: it has no claim of its own
        (C, HoldBackAsk("lake.db.t", "x", "compactor-1", OP), "other_principal"),
        (C, HoldBackAsk("lake.db.t", "x", "compactor-2", JOB), "not_owner"),
        (C, HoldBackAsk("lake.db.t", "x", "compactor-10", JOB), "not_owner"),
    ],
)
def test_hold_back_rule(claim, asked, reason):
    decision = decide_hold_back(claim, asked, AT)
    assert (decision and decision.reason) == reason
    if decision is not None:
        error = refused(decision, asked, AT)
        assert (
            type(error)
            is {
                "no_claim": NotFound,
                "expired": LeaseExpired,
                "other_principal": NotOwner,
                "not_owner": NotOwner,
            }[reason]
        )


def test_an_operator_ends_a_lease_of_any_principal_or_of_none():
    assert decide_release(lease(principal=None), ReleaseAsk("x", None, None, OP), AT) == End(
        "revoked", "released by an operator"
    )
    assert decide_release(M, ReleaseAsk("x", "c", 3, OP), AT) == End("released")


def test_a_request_id_of_another_principal_is_not_handed_out():
    earlier = lease("maintenance", P1)
    decision = decide_repeat(earlier, ask("maintenance", P1, caller=OTHER), AT)
    assert decision == Refuse("request_id_taken", earlier)
    # nor is its open intent kept for another principal, nor fulfilled by its grant
    mine = intent(P1, holder="h", request_id="r1")
    live = Live((), (mine,))
    asked = ask("maintenance", P1, caller=OTHER)
    assert decide_maintenance(table(), live, asked) == Refuse("request_id_taken", mine)
    again = ask("maintenance", P1, request_id="r2", caller=OTHER)
    assert decide_maintenance(table(), live, again) == Grant(token=7)


def test_only_its_principal_or_an_operator_withdraws_an_intent():
    mine = intent(holder="c")
    assert decide_withdraw(mine, WithdrawAsk("lake.db.t", "m1", "c", OP)) is None
    other = decide_withdraw(mine, WithdrawAsk("lake.db.t", "m1", "c", OTHER))
    assert other == Refuse("other_principal", mine)
    assert isinstance(refused(other, WithdrawAsk("lake.db.t", "m1", "c", OTHER), AT), NotOwner)


def test_only_its_holder_withdraws_an_intent():
    mine = intent(holder="c")
    assert decide_withdraw(mine, WithdrawAsk("lake.db.t", "m1", "c", JOB)) is None
    other = decide_withdraw(mine, WithdrawAsk("lake.db.t", "m1", "x", JOB))
    assert other == Refuse("not_owner", mine)
    assert isinstance(refused(other, WithdrawAsk("lake.db.t", "m1", "x", JOB), AT), NotOwner)


# -- the acquire rules against a brute-force model -------------------------------------------

NAMES = ["p0", "p1", "p2", "p3"]
scopes = st.none() | st.frozensets(st.sampled_from(NAMES), min_size=1)


def _overlap(a: frozenset[str] | None, b: frozenset[str] | None) -> bool:
    return a is None or b is None or bool(a & b)


def _parts(scope: frozenset[str] | None) -> tuple[str, ...]:
    return () if scope is None else tuple(sorted(scope))


KINDS = ["commit", "maintenance", "claim"]


@st.composite
def situations(draw: st.DrawFn) -> tuple[TableRow, Live, Ask]:
    row = table(
        ingest=draw(st.sampled_from(["running", "paused"])),
        maintenance=draw(st.sampled_from(["enabled", "disabled"])),
    )
    leases = tuple(
        # a claim covers the whole table
        lease(kind, *(() if kind == "claim" else _parts(scope)), holder=f"h{n}", request_id=f"l{n}")
        for n, (kind, scope) in enumerate(
            draw(st.lists(st.tuples(st.sampled_from(KINDS), scopes), max_size=4))
        )
    )
    intents = tuple(
        intent(*_parts(scope), holder=f"c{n}", request_id=f"i{n}")
        for n, scope in enumerate(draw(st.lists(scopes, max_size=3)))
    )
    kind = draw(st.sampled_from(KINDS))
    parts = () if kind == "claim" else _parts(draw(scopes))
    return row, Live(leases, intents), ask(kind, *parts, request_id="new")


@given(scopes, scopes)
def test_covers_is_containment_with_the_whole_table_covering_all(a, b):
    # the whole table: every partition, also those no lease names
    everything = frozenset(NAMES) | {"beyond"}
    a_set, b_set = (everything if s is None else s for s in (a, b))
    assert covers(a, b) == (b_set <= a_set)


@given(situations())
def test_acquire_rules_match_the_model(situation):
    row, live, request = situation
    scope = request.scope
    maintenance = [x for x in live.leases if x.kind == "maintenance" and _overlap(scope, x.scope)]
    commits = [x for x in live.leases if x.kind == "commit" and _overlap(scope, x.scope)]
    intents = [x for x in live.intents if _overlap(scope, x.scope)]
    claims = [x for x in live.leases if x.kind == "claim"]
    if request.kind == "claim":
        # claims only: not the switch, not commit or maintenance leases, not intents
        decision = decide_claim(live, request)
        expected: object = Refuse("claim_held", claims[0]) if claims else Grant()
    elif request.kind == "commit":
        decision = decide_commit(row, live, request)
        if row.ingest == "paused":
            expected = Refuse("paused", row)
        elif maintenance:
            expected = Refuse("maintenance", maintenance[0])
        elif intents:
            expected = Refuse("intent", intents[0])
        else:
            expected = Grant()
    else:
        decision = decide_maintenance(row, live, request)
        if row.maintenance == "disabled":
            expected = Refuse("maintenance_off", row)
        elif maintenance:
            expected = Refuse("maintenance_held", maintenance[0])
        elif commits:
            expected = Drain(tuple(commits), None)
        else:
            expected = Grant(token=row.next_token)
    assert decision == expected


# -- a catalog commit (the fence) -----------------------------------------------------------


def change(kind: str = "data", *parts: str, lease_id: str | None = None, **more: object) -> Change:
    return Change(
        "lake.db.t",
        kind,  # type: ignore[arg-type]
        JOB.principal,
        lease_id=lease_id,
        partitions=frozenset(parts) or None,
        **more,  # type: ignore[arg-type]
    )


M_C = lease("maintenance", P1, holder="c")
LOST_HEAD = IntentRow(
    "lake.db.t",
    turn_request(M_C.id),
    "c",
    None,
    AT,
    AT + TTL,
    principal=JOB.principal,
    cause="turn",
)


@pytest.mark.parametrize(
    ("row", "live", "commit", "named", "reason"),
    [
        # a maintenance commit needs its live lease, token and scope
        (table(), Live((M_C,)), change("maintenance", P1, lease_id="m", token=3), M_C, None),
        (table(maintenance="disabled"), Live(), change("maintenance", P1), None, "maintenance_off"),
        (table(), Live(), change("maintenance", P1), None, "no_lease"),
        (table(), Live(), change("maintenance", P1, lease_id="m"), None, "unknown_lease"),
        (table(), Live(), change("maintenance", P1, lease_id="m"), lease(), "unknown_lease"),
        # a claim serves a commit that only removes snapshots, and no other
        (
            table(),
            Live(),
            change("maintenance", lease_id="m", operations=("remove-snapshots",)),
            C,
            None,
        ),
        (
            table(),
            Live(),
            change("maintenance", P1, lease_id="m", operations=("replace",)),
            C,
            "unknown_lease",
        ),
        (
            table(),
            Live(),
            change("maintenance", P1, lease_id="m", token=3),
            lease("maintenance", P1, table="lake.db.u"),
            "other_table",
        ),
        (
            table(),
            Live(),
            change("maintenance", P1, lease_id="m", token=3),
            lease("maintenance", P1, principal="job-b"),
            "other_principal",
        ),
        (
            table(),
            Live(),
            change("maintenance", P1, lease_id="m", token=3),
            lease("maintenance", P1, expires_at=AT),
            "expired",
        ),
        (table(), Live(), change("maintenance", P1, lease_id="m", token=2), M_C, "token_mismatch"),
        (
            table(),
            Live(),
            change("maintenance", P1, P2, lease_id="m", token=3),
            M_C,
            "out_of_scope",
        ),
        # a data commit: the gate's own writer passes, a foreign one waits for what holds it
        (table(), Live((M_C,)), change("data", P1, lease_id="c"), lease("commit", P1), None),
        (table(), Live((M_C,)), change("data", P1, lease_id="m", token=3), M_C, None),
        (table(), Live((M_C,)), change("data", P1), None, "maintenance"),
        (table(), Live((M_C,)), change("data", P1, lease_id="m", token=2), M_C, "maintenance"),
        (table(), Live((M_C,)), change("data", P2), None, None),
        (table(), Live((), (I_P2,)), change("data", P2), None, "intent"),
        # one that cannot conflict with a rewrite passes all holds but backpressure
        (table(), Live((M_C,), (I_P2,)), change("data", P1, P2, conflicts=False), None, None),
        # a lost head's turn holds every foreign data commit, wherever it writes
        (table(), Live((M_C,), (LOST_HEAD,)), change("data", P3), None, "turn"),
        (table(), Live((M_C,), (LOST_HEAD,)), change("data", P1, lease_id="m", token=3), M_C, None),
        # a table change (schema, properties) passes whatever holds the table
        (table(), Live((M_C,), (LOST_HEAD,)), change("table"), None, None),
    ],
)
def test_catalog_commit_rule(row, live, commit, named, reason):
    decision = decide_catalog_commit(row, live, commit, named, AT)
    assert (decision and decision.reason) == reason
    if decision is not None:
        error = commit_refused(decision, commit, AT, holds=[])
        assert isinstance(error, Fenced if commit.kind == "maintenance" else CommitHeld)


def test_a_commit_refusal_keeps_its_wire_spelling():
    commit = change("maintenance", P1, lease_id="m", token=2)
    error = commit_refused(Refuse("token_mismatch", M_C), commit, AT, holds=[])
    assert error.extra["reason"] == "stale-token"
    revoked = lease("maintenance", P1, end="revoked", ended_at=AT)
    error = commit_refused(Refuse("expired", revoked), commit, AT, holds=[])
    assert error.extra["reason"] == "revoked" and "is revoked" in error.detail
    held = commit_refused(Refuse("turn", LOST_HEAD), change("data", P3), AT, holds=[])
    assert held.extra["reason"] == "held" and held.extra["turn"]["lease_id"] == M_C.id
