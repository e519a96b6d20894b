"""The lock's stored rows as typed values: what the store loads and the rules decide over.

    TableRow      one per table: the switch, next_token, holds_until
    LeaseRow      one per grant, of any kind (a kind is a table of its own in the database)
    IntentRow     one per open intent (writer preference: a drain, backpressure, a head turn)
    Live          what is live on a table now, oldest first: leases and intents
    Caller        who asks: the token's name (the principal) and whether it is an operator

Frozen and free of SQL: `service.lock.store` builds them from the database,
`service.lock.rules` reads them. Instants are naive UTC datetimes read from the database clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import ClassVar, Literal

from service.wire import IntentCause, LeaseKind, LeaseState
from service.wire.scope import Scope

__all__ = [
    "SYSTEM",
    "Caller",
    "IntentCause",
    "IntentRow",
    "LeaseEnd",
    "LeaseKind",
    "LeaseRow",
    "LeaseState",
    "Live",
    "TableRow",
    "listed",
    "seconds",
]

LeaseEnd = Literal["released", "expired", "revoked"]
"""How a lease ended: by its holder, by its TTL, by an operator."""


@dataclass(frozen=True, slots=True)
class Caller:
    """Who sends a request: `principal`, the name of its bearer token, and whether that token
    is an operator's. A lease, claim or intent belongs to the principal that took it; only
    that principal acts under it, and an operator may end any (docs/design.md §6).

        Caller("ingest")                     a job token
        Caller("alice", operator=True)       an operator
    """

    principal: str
    operator: bool = False

    def owns(self, row: LeaseRow | IntentRow) -> bool:
        """Whether `row` was taken by this caller's token (never one of unknown principal)."""
        return row.principal is not None and row.principal == self.principal

    def may_end(self, row: LeaseRow | IntentRow) -> bool:
        """Whether this caller may end `row`: its own, or any as an operator."""
        return self.operator or self.owns(row)


SYSTEM = "lakelock"
"""The actor of what the service does by itself: an expiry, a sweep, retention."""


def seconds(delta: timedelta) -> float:
    """A duration on the wire: seconds, to the microsecond."""
    return round(delta.total_seconds(), 6)


def listed(partitions: tuple[str, ...] | None) -> list[str] | None:
    """A scope as the wire and the trail spell it: a list of partition names, None the table."""
    return None if partitions is None else list(partitions)


def _scope(partitions: tuple[str, ...] | None) -> Scope:
    return None if partitions is None else frozenset(partitions)


@dataclass(frozen=True, slots=True)
class TableRow:
    name: str
    ingest: Literal["running", "paused"]
    maintenance: Literal["enabled", "disabled"]
    switch_reason: str | None
    switch_by: str | None
    switch_at: datetime | None
    # no maintenance lease nor intent of the table is unended after this instant (None: none)
    holds_until: datetime | None
    next_token: int
    backpressure: Literal["enabled", "disabled"] = "enabled"


@dataclass(frozen=True, slots=True)
class LeaseRow:
    id: str
    table: str
    kind: LeaseKind
    holder: str
    request_id: str
    partitions: tuple[str, ...] | None  # as the holder sent them; None: the whole table
    ttl_s: float
    acquired_at: datetime
    expires_at: datetime
    ended_at: datetime | None = None
    end: LeaseEnd | None = None
    token: int | None = None  # maintenance leases only
    # the token (its name) that took it; None: granted before principals were recorded
    principal: str | None = None
    renewals: int = 0

    @property
    def scope(self) -> Scope:
        return _scope(self.partitions)

    def live(self, at: datetime) -> bool:
        """Not ended, and its expiry not passed at `at`."""
        return self.ended_at is None and self.expires_at > at

    def state(self, at: datetime) -> LeaseState:
        if self.live(at):
            return "live"
        return self.end or "expired"

    def expired_unended(self, at: datetime) -> bool:
        """Its expiry passed, and no sweep has marked it ended yet."""
        return self.ended_at is None and self.expires_at <= at


@dataclass(frozen=True, slots=True)
class IntentRow:
    table: str
    request_id: str
    holder: str
    partitions: tuple[str, ...] | None
    opened_at: datetime
    expires_at: datetime
    # drain (a maintenance request's) | backpressure (a compactor's, on a partition in debt) |
    # turn (a maintenance lease's turn of the head at the catalog front: rules.head_turn)
    cause: IntentCause = "drain"
    principal: str | None = None  # as a lease's

    kind: ClassVar[Literal["intent"]] = "intent"  # for service.wire.scope.conflicts

    @property
    def scope(self) -> Scope:
        return _scope(self.partitions)

    def live(self, at: datetime) -> bool:
        return self.expires_at > at


@dataclass(frozen=True, slots=True)
class Live:
    """What is live on one table at one instant, oldest first. The store may leave out what
    cannot conflict with the request at hand (a commit grant loads no commit leases)."""

    leases: tuple[LeaseRow, ...] = ()
    intents: tuple[IntentRow, ...] = ()

    def of_kind(self, kind: LeaseKind) -> tuple[LeaseRow, ...]:
        return tuple(lease for lease in self.leases if lease.kind == kind)

    def intent(self, request_id: str) -> IntentRow | None:
        return next((x for x in self.intents if x.request_id == request_id), None)
