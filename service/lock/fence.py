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
expiry cannot slip between the check and the swap that follows it in the same transaction. The
decision is service.lock.rules.decide_catalog_commit's, among the other decisions, a `Refuse`
worded by service.lock.refusals.commit_refused and raised here:

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

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, NoReturn

from sqlalchemy.engine import Connection

from service.lock import audit, debt, due, expiry, intents, store
from service.lock.asks import Change, ChangeKind
from service.lock.refusals import commit_refused
from service.lock.rows import LeaseRow, Live, seconds
from service.lock.rules import decide_catalog_commit, leased, turn_of
from service.wire import EventName
from service.wire.errors import CommitConflict, CommitHeld, Fenced

__all__ = [
    "MAX_LISTED",
    "Change",
    "ChangeKind",
    "Checked",
    "Park",
    "check",
    "gave_up",
    "held",
    "landed",
    "lost",
]

# an event lists at most this many partition names (and says how many there were)
MAX_LISTED = 100


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
    checked, error = _judged(conn, change, park)
    if error is not None:
        # a hold met by a parked commit's try that is not its last is recorded when the
        # commit ends (`Park`)
        if isinstance(error, CommitHeld) and park is not None and not park.last:
            park.since, park.held = park.since or checked.at, change
        else:
            _refused(conn, change, checked.at, error, park)
        raise error
    return checked


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
    foreign = not leased(change, lease, at)
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


def _judged(
    conn: Connection, change: Change, park: Park | None = None
) -> tuple[Checked, Fenced | CommitHeld | None]:
    """`change` judged on the table's state now (rules.decide_catalog_commit): what the check
    read, and the refusal as its client hears it (None: none); nothing of it recorded. A
    hold's Retry-After goes by the table's recent maintenance holds."""
    row, at, live = expiry.live_on(conn, change.table)
    lease = store.read_lease(conn, change.lease_id) if change.lease_id else None
    checked = Checked(change, at, live, lease, park)
    refusal = decide_catalog_commit(row, live, change, lease, at)
    if refusal is None:
        return checked, None
    holds = audit.recent_holds(conn, change.table) if refusal.reason in _BY_HISTORY else []
    return checked, commit_refused(refusal, change, at, holds)


# the holds whose expected end the table's recent maintenance holds tell (a turn's is its own)
_BY_HISTORY = ("maintenance", "intent", "backpressure")


def held(conn: Connection, change: Change) -> CommitHeld | None:
    """A parked commit judged again on what its last held try read (its files, partitions and kind,
    which stand while the table's pointer names the same base): the hold that refuses it
    now, or None when a new try may pass, or meets another refusal. Nothing of the commit is
    recorded (what expired meanwhile ends, as in every transition): the cheap look a parked
    commit takes each time the table's state moves, instead of a whole try
    (docs/catalog-front.md §4)."""
    _, error = _judged(conn, change)
    # a Fenced commit a whole try answers, recorded
    return error if isinstance(error, CommitHeld) else None


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
