"""A commit that a hold refuses, parked until the hold ends or the park's time runs out: held,
not failed (docs/catalog-front.md §4, "Why these statuses").

    Lot
        what the server lends a parked commit (a Protocol): its clock, its worker threads, a
        table's lock version and a wait for it to move, a place among the parked commits, and
        the metric of how parked commits were judged
    held_until_free(front, identifier, requirements, updates, *, principal, headers, key, lot)
        -> Loaded: Front.commit, parked while a hold refuses it (CommitHeld), judged again
        each time the table's lock state changes

The loop is awaited on the server's event loop and holds no thread while it waits; each call
into the front (a try, a look, the record of a refusal) runs on the lot's worker threads. The
tries share one `service.lock.fence.Park`, so the commit is one event whatever the number of
tries.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, ExitStack
from functools import partial
from typing import Protocol, TypeVar

from pyiceberg.table.update import TableRequirement, TableUpdate
from pyiceberg.typedef import Identifier

from service.catalog.front import Front, Loaded
from service.lock.fence import Park
from service.lock.idempotency import Key
from service.wire.errors import CommitHeld

__all__ = ["Lot", "held_until_free"]

T = TypeVar("T")


class Lot(Protocol):
    """What the server lends one parked commit (service.server.routes.catalog)."""

    wait_s: float  # how long a commit may be parked (LAKELOCK_CATALOG_HOLD_WAIT_S)

    def clock(self) -> float:
        """Now, on the clock `wait` takes its `until` in (the event loop's)."""
        ...

    def closing(self) -> bool:
        """Whether the service shuts down: a parked commit has its last try now."""
        ...

    async def call(self, fn: Callable[[], T], /) -> T:
        """`fn()` on a worker thread of the catalog."""
        ...

    async def version(self, table: str) -> object:
        """`table`'s lock version (it moves with every change of its leases)."""
        ...

    async def wait(self, table: str, *, seen: object, until: float) -> bool:
        """Wait until `table`'s version moves past `seen`, the clock passes `until` or the
        service shuts down; False when the client left meanwhile."""
        ...

    def full(self) -> str | None:
        """The setting a new parked commit of this client would exceed
        (LAKELOCK_CATALOG_MAX_PARKED, _PER_TOKEN), or None."""
        ...

    def parked(self) -> AbstractContextManager[None]:
        """A place among the parked commits, held while the commit waits."""
        ...

    def judged(self, how: str) -> None:
        """Count a parked commit judged again, by `how`: `look` or `try`."""
        ...


async def held_until_free(
    front: Front,
    identifier: Identifier,
    requirements: Sequence[TableRequirement],
    updates: Sequence[TableUpdate],
    *,
    principal: str,
    headers: Mapping[str, str],
    key: Key | None,
    lot: Lot,
) -> Loaded:
    """`front.commit`, parked while a hold refuses it (CommitHeld) and judged again each time
    the table's lock state changes, up to `lot.wait_s` (docs/catalog-front.md §4): held, not
    failed. A hold that ends lets it through, or answers 409 where the head moved meanwhile;
    one that outlasts the wait is the 429, with the hold's expected remaining time, after one
    last try. While parked it is judged by `Front.still_held` (the lock's state, against what
    its last try read), and tried whole only when the hold ends or the table's pointer moves: a
    parked commit costs about one commit. Past LAKELOCK_CATALOG_MAX_PARKED (or _PER_TOKEN)
    parked commits, a held one is answered 429 at once. The tries share one `Park`, so the
    commit is one event whatever the number of tries: the last try records the refusal, or the
    `catalog.commit` says how long it was held (and a client that left, or a commit with no
    room to park, has its refusal recorded here).

    Raises:
        CommitHeld: held past the wait, with no room to park, or its client left.
        As Front.commit otherwise.
    """
    table = front.table_name(identifier)
    until = lot.clock() + lot.wait_s
    park = Park()
    commit = partial(
        front.commit,
        identifier,
        requirements,
        updates,
        principal=principal,
        headers=headers,
        park=park,
        key=key,
    )
    held: CommitHeld | None = None  # the hold the last judgement met
    with ExitStack() as place:
        while True:
            # once held, the version is read before each judgement, so a change between one
            # and its wait is not missed; a commit that is never held reads none
            seen = await lot.version(table) if held is not None else None
            park.last = lot.clock() >= until or lot.closing()
            if held is not None and seen is not None and not park.last:
                still = await lot.call(partial(front.still_held, identifier, park))
                lot.judged("look" if still else "try")
                if still is not None:
                    held = still
                    await _until_change(front, lot, table, seen, held, until, park)
                    continue
            try:
                return await lot.call(commit)
            except CommitHeld as refusal:
                if park.last:
                    raise  # recorded by the try
                if held is None:
                    await _park(front, lot, place, park, refusal)
                held = refusal
                if seen is not None:
                    await _until_change(front, lot, table, seen, held, until, park)
                # else no version was read before this try: read it, judge once more


async def _park(front: Front, lot: Lot, place: ExitStack, park: Park, refusal: CommitHeld) -> None:
    """Take a place among the parked commits for the commit `refusal` held first.

    Raises:
        CommitHeld: no room (LAKELOCK_CATALOG_MAX_PARKED or _PER_TOKEN): a 429 at once, with
            the hold's Retry-After; its one refusal recorded.
    """
    setting = lot.full()
    if setting is None:
        place.enter_context(lot.parked())
        return
    full = CommitHeld(
        f"{refusal.detail}; not parked: {setting} commits are parked already, so it is "
        "answered now",
        **{**refusal.extra, "reason": "too-many-parked", "setting": setting},
    )
    await lot.call(partial(front.gave_up, park, full))
    raise full


async def _until_change(
    front: Front,
    lot: Lot,
    table: str,
    seen: object,
    held: CommitHeld,
    until: float,
    park: Park,
) -> None:
    """Wait until the table's lock state moves past `seen`, the hold's turn of the head ends
    (a known instant no event announces: docs/catalog-front.md §4) or `until`.

    Raises:
        CommitHeld: the client left; its one refusal is recorded.
    """
    turn = held.extra.get("turn")
    ends = until if turn is None else min(until, lot.clock() + float(turn["remaining_s"]))
    if not await lot.wait(table, seen=seen, until=ends):
        await lot.call(partial(front.gave_up, park, held))
        raise held from None
