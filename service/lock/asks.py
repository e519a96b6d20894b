"""What a transition is asked and what the rules answer: typed values, no database, no wording.

    Ask            an acquire: a lease of a kind on a table or partitions, by a caller
    RenewAsk       a renew of a lease, by its holder (with the token for a maintenance lease)
    ReleaseAsk     a release by the holder, or by an operator who may leave both out (a revoke),
                   with what the lease did (the partitions written or compacted)
    WithdrawAsk    a maintenance request's drain or a backpressure intent withdrawn
    HoldBackAsk    a compactor's request to hold back the writers of partitions under its claim
    Change         a catalog commit, as the front read it (what the fence judges)
    Grant          grant it (a maintenance lease's token; the intents the grant fulfils)
    Drain          not yet: these commit leases end first, under an intent
    Refuse         no: a `Reason`, and the row that blocks (the switch, a lease, an intent);
                   the one refusal value of every decision
    Repeat         an acquire repeated by request id: the lease granted to it
    Extend         a renew: live until then, with this TTL
    End            end a live lease (released or revoked)
    Unchanged      nothing to do: the lease already ended

`service.lock.rules` decides, `service.lock.refusals` says a refusal in words.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Literal

from service.lock.rows import Caller, IntentRow, LeaseKind, LeaseRow, TableRow
from service.wire.scope import Scope

if TYPE_CHECKING:
    from service.lock.due import Files

__all__ = [
    "Ask",
    "Blocking",
    "Change",
    "ChangeKind",
    "Drain",
    "End",
    "Extend",
    "Grant",
    "HoldBackAsk",
    "Reason",
    "Refuse",
    "ReleaseAsk",
    "RenewAsk",
    "Repeat",
    "Unchanged",
    "WithdrawAsk",
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
    written: tuple[str, ...] = ()  # the partitions a commit lease's commit wrote
    compacted: tuple[str, ...] = ()  # the partitions a maintenance lease compacted

    @property
    def operator(self) -> bool:
        return self.caller.operator

    def outside(self, lease: LeaseRow) -> tuple[str, list[str]] | None:
        """The first of `written` and `compacted` that names partitions outside `lease`'s
        scope, and those partitions; None when both keep within it."""
        if lease.partitions is None:
            return None
        for reported, named in (("written", self.written), ("compacted", self.compacted)):
            out = sorted(set(named) - set(lease.partitions))
            if out:
                return reported, out
        return None


@dataclass(frozen=True, slots=True)
class HoldBackAsk:
    """Hold back the writers of partitions of `table` for `holder`, under the claim
    `claim_id` (docs/jobs.md §3)."""

    table: str
    claim_id: str
    holder: str
    caller: Caller


ChangeKind = Literal["maintenance", "data", "table"]


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
    added: Mapping[str, Files] = field(default_factory=dict)
    rewritten: frozenset[str] = frozenset()

    @property
    def removes_snapshots_only(self) -> bool:
        """The commit only expires snapshots: it touches no partition and holds no writer."""
        return set(self.operations) == {"remove-snapshots"}


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
    # what a release reports of its lease (docs/design.md §5.1)
    "counts_kind",
    "counts_holder",
    "counts_outside",
    # a backpressure request
    "no_claim",
    # a catalog commit (the fence)
    "no_lease",
    "unknown_lease",
    "other_table",
    "out_of_scope",
    "turn",
]

Blocking = TableRow | LeaseRow | IntentRow
"""What a refusal names: the table row (its switch), a lease or an intent."""


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
