"""Fencing at the commit: a catalog commit checked against the leases in the transaction that
swaps the table's metadata pointer (docs/catalog-front.md).

    change = Change(table="lakelock.db.events", kind="maintenance", lease_id=..., token=7,
                    partitions=frozenset({"dt=2024-06-20"}), principal="compactor", ...)
    # one transaction, the caller's: check, swap, record
    checked = check(conn, change)                    # or raises the refusal, recorded
    if not pointers.swap(conn, ...):
        lost(conn, checked)                          # raises CommitConflict
    landed(conn, checked)

`check` locks the table's row (as every lease transition does), so a revoke, a grant or an
expiry cannot slip between the check and the swap that follows it in the same transaction; it
decides:

    maintenance  files replaced, delete files removed, snapshots removed: needs a live
                 maintenance lease of this table taken by the committing token (design §6), named
                 with its current token, whose scope covers the partitions the commit
                 touches, and maintenance enabled. A commit
                 that only removes snapshots may name the table's live claim instead (it
                 touches no partition; expiry then drains no writer). Else Fenced (403, not
                 retried by Iceberg clients: the writer cleans up).
    data         appends, overwrites, deletes: a commit naming a live commit lease of the
                 table, taken by the committing token, whose scope covers what it touched is
                 the protocol's own writer and passes. Any other (a foreign writer) that can
                 conflict with a rewrite (`Change.conflicts`) and touches partitions a live
                 maintenance lease or an open intent covers is held: CommitHeld (429 with a
                 Retry-After of the hold's expected remaining time, which the client retries
                 by itself; the catalog front parks it first, up to
                 LAKELOCK_CATALOG_HOLD_WAIT_S: service.catalog.park).
                 Backpressure holds every foreign data commit into its partitions, and a
                 maintenance lease's open turn of the head every foreign data commit to the
                 table. Else it passes.
    table        schema, properties, refs and the like: passes.

The turn of the head (docs/catalog-front.md §4): a commit of a maintenance lease's holder
that loses the head (its swap finds the pointer moved: `lost`; or the front found its base
stale) gives the lease the next turn (service.lock.intents.open_turn, the one entry point),
and while it is open every foreign data commit to the table is held too, whatever it
touched, since any commit moves the head (rules.head_turn); the lease's next commit that
lands ends it.

A refusal is recorded (`catalog.refused`) and nothing else changes; a held commit the route
parks (`Park`) is recorded once, by its last try or when the route gives up on it, not at each
try; while parked it is judged again by `held`, on what its last try read, which reads no file
and records nothing, until its hold ends or the table's pointer moves. A commit that passes is
recorded (`catalog.commit`: the principal, what it is, the lease it named or `foreign`, the
partitions it touched, and how long it was parked) and a data commit adds what it wrote to the
table's debt row, so operators see foreign writers and debt moves without a table scan, and to
its partitions' due counts (service.lock.due); a maintenance commit compacts the partitions
whose data files it replaced there (`landed`). A swap that finds the pointer moved since the
commit's base is CommitConflict (`lost`: 409, retried by Iceberg clients).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal, NoReturn

from sqlalchemy.engine import Connection

from service.lock import audit, debt, due, expiry, intents, store
from service.lock.rows import IntentRow, LeaseRow, Live, TableRow, seconds
from service.lock.rules import head_turn, holding, turn_lease, turn_of
from service.wire import EventName
from service.wire.errors import CommitConflict, CommitHeld, Fenced
from service.wire.scope import Scope, covers, intersects
from service.wire.text import sample

__all__ = ["MAX_LISTED", "Change", "Checked", "Park", "check", "gave_up", "held", "landed", "lost"]

ChangeKind = Literal["maintenance", "data", "table"]

# an event lists at most this many partition names (and says how many there were)
MAX_LISTED = 100


@dataclass(frozen=True)
class Change:
    """One catalog commit, as the front read it from the request and the new metadata."""

    table: str  # lakelock's name: <catalog>.<namespace>.<table>
    kind: ChangeKind
    principal: str
    operations: tuple[str, ...] = ()  # snapshot operations, and "remove-snapshots"
    snapshot_id: int | None = None
    lease_id: str | None = None
    token: int | None = None
    partitions: Scope = None  # touched; None: the whole table (unpartitioned or unknown)
    # what the commit's snapshots added and removed (their summaries' totals)
    counts: dict[str, int] = field(default_factory=dict)
    # a data commit that can conflict with a rewrite in flight (removes files, or adds position
    # deletes against files it did not add); one that cannot passes maintenance holds
    conflicts: bool = True
    # per partition, the data, delete and equality delete files its snapshots added, and the
    # partitions whose data files they deleted (docs/design.md §5.1)
    added: Mapping[str, due.Files] = field(default_factory=dict)
    rewritten: frozenset[str] = frozenset()


@dataclass
class Park:
    """One commit the catalog front parks while a hold refuses it (service.catalog.park,
    docs/catalog-front.md §4), across its tries: the parking loop says which try is its
    `last`; `check` keeps when a try first met the hold and what it read, so the commit is one
    event, not one per try: its `catalog.commit` with how long it was held, or one
    `catalog.refused` (by its last try, or `gave_up` when its client left)."""

    last: bool = True  # this try is the last: a hold met now is the answer, and recorded
    since: datetime | None = None  # when a try of it first met a hold (the database clock)
    held: Change | None = None  # the commit as the last held try read it
    base: str | None = None  # the metadata the last held try was read against (`held`)


@dataclass(frozen=True)
class Checked:
    """A commit `check` let through, and what it read under the table's row lock: what `lost`
    or `landed` records, later in the same transaction."""

    change: Change
    at: datetime  # the database clock at the check
    live: Live
    lease: LeaseRow | None  # the lease the commit named, as read
    park: Park | None


def check(conn: Connection, change: Change, *, park: Park | None = None) -> Checked:
    """Check `change` against the table's leases, intents and switch, the table's row locked
    first, in the caller's transaction, which swaps the pointer next. A commit the front parks
    carries its `park`: a hold met by a try that is not its last records nothing.

    Raises:
        Fenced: a maintenance commit without a live lease, token and scope for it.
        CommitHeld: a foreign data commit meets a draining or held maintenance lease, or a
            compactor's backpressure on a partition it touches, or a maintenance lease's
            turn of the table's head.
    """
    row, at, live = expiry.live_on(conn, change.table)
    lease = store.read_lease(conn, change.lease_id) if change.lease_id else None
    _check(conn, row, live, change, lease, at, park)
    return Checked(change, at, live, lease, park)


def lost(conn: Connection, checked: Checked, *, turn: timedelta = timedelta(0)) -> NoReturn:
    """The swap of a checked commit found the pointer moved since its base. A commit of a
    maintenance lease's holder gives the lease the next turn of the head, for `turn` at most
    (0: none; intents.open_turn); its next commit that lands ends the turn.

    Raises:
        CommitConflict: always (409: reload the table and commit again).
    """
    change, lease = checked.change, checked.lease
    if lease is not None and lease.kind == "maintenance":
        intents.open_turn(
            conn,
            table=change.table,
            lease_id=lease.id,
            token=change.token,
            principal=change.principal,
            turn=turn,
        )
    raise CommitConflict(
        f"{change.table} changed since this commit's base; reload the table and commit again"
    )


def landed(conn: Connection, checked: Checked, *, trigger: due.Trigger | None = None) -> None:
    """Record a checked commit whose swap landed: its `catalog.commit` (with how long it was
    parked); a data commit counts its files per partition toward their due threshold
    (`trigger`) and the table's debt, a maintenance commit compacts the partitions whose data
    files it replaced (docs/design.md §5.1); the lease's own commit ends its turn of the head."""
    change, at, lease, park = checked.change, checked.at, checked.lease, checked.park
    passed: dict[str, Any] = {"can_conflict": change.conflicts} if change.kind == "data" else {}
    if park is not None and park.since is not None:
        passed["held_s"] = seconds(at - park.since)
    foreign = not _leased(change, lease, at)
    _record(conn, change, at, EventName.CATALOG_COMMIT, foreign=foreign, **passed)
    if lease is not None and not foreign:
        mine = turn_of(checked.live, lease.id)
        if mine is not None and change.token == lease.token:
            intents.end_turn(conn, mine, at, lease_id=lease.id, actor=change.principal)
    if change.kind == "data":
        debt.add_commit(conn, change.table, change.counts, change.snapshot_id)
        due.add_written(
            conn, table=change.table, written=change.added, at=at, trigger=trigger or due.Trigger()
        )
    elif change.kind == "maintenance" and change.rewritten:
        due.compacted(conn, table=change.table, partitions=change.rewritten, at=at)


def _check(
    conn: Connection,
    row: TableRow,
    live: Live,
    change: Change,
    lease: LeaseRow | None,
    at: datetime,
    park: Park | None,
) -> None:
    """Raise the refusal of `change`, if any, recorded: a hold met by a parked commit's try
    that is not its last is recorded when the commit ends (`Park`)."""
    try:
        _decide(conn, row, live, change, lease, at)
    except CommitHeld as refusal:
        if park is not None and not park.last:
            park.since, park.held = park.since or at, change
        else:
            _refused(conn, change, at, refusal, park)
        raise
    except Fenced as refusal:
        _refused(conn, change, at, refusal, park)
        raise


def _decide(
    conn: Connection,
    row: TableRow,
    live: Live,
    change: Change,
    lease: LeaseRow | None,
    at: datetime,
) -> None:
    """Raise the refusal of `change`, if any; nothing recorded."""
    if change.kind == "maintenance":
        _check_maintenance(row, change, lease, at)
    elif change.kind == "data":
        _check_data(conn, row, live, change, lease, at)


def held(conn: Connection, change: Change) -> CommitHeld | None:
    """A parked commit judged again on what its last held try read (its files, partitions and kind,
    which stand while the table's pointer names the same base): the hold that refuses it
    now, or None when a new try may pass, or meets another refusal. Nothing of the commit is
    recorded (what expired meanwhile ends, as in every transition): the cheap look a parked
    commit takes each time the table's state moves, instead of a whole try
    (docs/catalog-front.md §4)."""
    row, at, live = expiry.live_on(conn, change.table)
    lease = store.read_lease(conn, change.lease_id) if change.lease_id else None
    try:
        _decide(conn, row, live, change, lease, at)
    except CommitHeld as refusal:
        return refusal
    except Fenced:
        return None  # a whole try answers it, recorded
    return None


def gave_up(conn: Connection, park: Park, refusal: CommitHeld) -> None:
    """The route stopped parking a held commit without a last try (its client left): its one
    `catalog.refused`, as its last try would have recorded it."""
    if park.held is None:
        return  # no try of it was held without being recorded
    _, at, _ = expiry.live_on(conn, park.held.table)
    _refused(conn, park.held, at, refusal, park)


def _refused(
    conn: Connection,
    change: Change,
    at: datetime,
    refusal: Fenced | CommitHeld,
    park: Park | None,
) -> None:
    """The one `catalog.refused` of a commit: its reason, the turn of the head that held it,
    and how long the route parked it."""
    detail: dict[str, Any] = {"reason": refusal.extra.get("reason")}
    if "turn" in refusal.extra:
        detail["turn"] = refusal.extra["turn"]
    if park is not None and park.since is not None:
        detail["held_s"] = seconds(at - park.since)
    _record(conn, change, at, EventName.CATALOG_REFUSED, **detail)


def _fenced(change: Change, reason: str, detail: str) -> Fenced:
    return Fenced(
        f"{change.table}: maintenance commit refused ({reason}): {detail}; the table is "
        "unchanged. Take a maintenance lease and commit with lakelock.lease-id and "
        "lakelock.token in the snapshot summary (or the X-Lakelock-Lease-Id and "
        "X-Lakelock-Token headers)",
        reason=reason,
        table=change.table,
    )


def _check_maintenance(row: TableRow, change: Change, lease: LeaseRow | None, at: datetime) -> None:
    if row.maintenance == "disabled":
        raise _fenced(
            change, "maintenance-off", f"an operator disabled maintenance ({row.switch_reason})"
        )
    if change.lease_id is None:
        raise _fenced(change, "no-lease", "the commit names no lease")
    # removing snapshots touches no partition and holds no writer: the table's claim (who is
    # its compactor now) is enough for it, so expiry never drains ingest
    removal = set(change.operations) == {"remove-snapshots"}
    kinds = ("maintenance", "claim") if removal else ("maintenance",)
    if lease is None or lease.kind not in kinds:
        what = "maintenance lease or claim" if removal else "maintenance lease"
        raise _fenced(change, "unknown-lease", f"{change.lease_id} is no {what}")
    if lease.table != change.table:
        raise _fenced(change, "other-table", f"lease {lease.id} is on {lease.table}")
    if lease.principal is None or lease.principal != change.principal:
        # a lease id and token are not secrets (snapshot summaries carry them): who took the
        # lease is what lets a commit use it
        raise _fenced(
            change,
            "other-principal",
            f"lease {lease.id} was not taken by token {change.principal}",
        )
    if not lease.live(at):
        raise _fenced(
            change, lease.end or "expired", f"lease {lease.id} is {lease.end or 'expired'}"
        )
    if lease.kind == "maintenance" and change.token != lease.token:
        raise _fenced(
            change, "stale-token", f"token {change.token} is not lease {lease.id}'s ({lease.token})"
        )
    if not covers(lease.scope, change.partitions):
        raise _fenced(
            change,
            "out-of-scope",
            f"the commit touches partitions lease {lease.id} does not cover "
            f"({_sample(change.partitions)})",
        )


def _live_here(change: Change, lease: LeaseRow | None, at: datetime) -> bool:
    """The commit names a live lease of its table that its own token took."""
    return (
        lease is not None
        and lease.live(at)
        and lease.table == change.table
        and lease.principal is not None
        and lease.principal == change.principal
    )


def _leased(change: Change, lease: LeaseRow | None, at: datetime) -> bool:
    """The commit names a live lease of its table that covers what it touched (a checked
    maintenance commit always does): not a foreign writer's."""
    return (
        lease is not None
        and _live_here(change, lease, at)
        and covers(lease.scope, change.partitions)
    )


def _check_data(
    conn: Connection,
    row: TableRow,
    live: Live,
    change: Change,
    lease: LeaseRow | None,
    at: datetime,
) -> None:
    if lease is not None and _leased(change, lease, at):
        if lease.kind == "commit":
            return  # the gate granted it before any drain began: the protocol's own writer
        if lease.kind == "maintenance" and change.token == lease.token:
            return  # the holder of the maintenance lease writes under it
    # what holds a gated commit holds a foreign one that can conflict with a rewrite: the same
    # leases and intents (rules.holding); one that cannot passes all but backpressure, which
    # holds writers for the debt they add, not for what they touch
    holds: tuple[LeaseRow | IntentRow, ...] = (*live.of_kind("maintenance"), *holding(row, live))
    if not change.conflicts:
        holds = tuple(h for h in holds if isinstance(h, IntentRow) and h.cause == "backpressure")
    blocking = [hold for hold in holds if intersects(hold.scope, change.partitions)]
    if blocking:
        first = blocking[0]
        if isinstance(first, LeaseRow):
            what, why = "held", f"a maintenance lease of {first.holder} holds"
        elif first.cause == "backpressure":
            what, why = "backpressure", f"{first.holder} holds back the writers of"
        else:
            what, why = "draining", f"a maintenance lease of {first.holder} is draining"
        raise CommitHeld(
            f"{change.table}: {why} partitions this commit touches; retry shortly",
            reason=what,
            table=change.table,
            retry_after_s=_expected_s(first, audit.recent_holds(conn, change.table), at),
        )
    # a maintenance commit that lost the head to another commit has the next turn: every
    # commit moves the head, so every foreign data commit waits for it, wherever it writes
    # (docs/catalog-front.md §4); the gate's writers and the leases' holders returned above
    turn = head_turn(row, live)
    if turn is not None:
        left = seconds(turn.expires_at - at)
        raise CommitHeld(
            f"{change.table}: a rewrite of {turn.holder} lost the table's head to another "
            "commit and commits next; retry shortly",
            reason="held",
            table=change.table,
            retry_after_s=max(1.0, round(left, 1)),
            turn={
                "lease_id": turn_lease(turn),
                "holder": turn.holder,
                "remaining_s": left,
            },
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


def _record(
    conn: Connection, change: Change, at: datetime, event: EventName, **detail: object
) -> None:
    names = None if change.partitions is None else sorted(change.partitions)
    counted: dict[str, Any] = {**change.counts, **detail}  # the snapshots' totals, the detail
    audit.record(
        conn,
        at=at,
        table=change.table,
        event=event,
        lease_id=change.lease_id,
        kind=change.kind,
        token=change.token,
        actor=change.principal,
        operations=list(change.operations),
        snapshot_id=change.snapshot_id,
        partitions=None if names is None else names[:MAX_LISTED],
        partition_count=len(names)
        if names is not None
        else change.counts.get("changed-partition-count"),
        **counted,
    )
