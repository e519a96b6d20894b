"""The claim a compactor holds on a table from before its plan to after its housekeeping
(docs/design.md §5; the protocol in service.lock.leases).

    got = take(client, "lake.db.events", holder="compactor@host:42", ttl_s=60)
    if isinstance(got, Held):
        print(f"left to {got.holder}")          # another compactor has it: move on, no wait
    else:
        with got:                                # renewed at a third of the TTL until released
            run_table(..., before_step=got.check)   # a lost claim stops the run before a step

A claim itself holds no writer: it keeps other compactor processes off the table, and under it
a run may hold back the writers of partitions past their hard bound (compactor.run,
backpressure), which end with the claim at the latest. Losing it (revoked, expired, not renewed
in time) stops the run at its next step; the maintenance leases of the steps keep their own
rules whatever happens to the claim.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from types import TracebackType

from compactor.plan import Step
from service.client import Lease, LeaseClient, LeaseLost, Renewer
from service.wire.errors import ClaimHeld, LakelockError

__all__ = ["Claim", "Held", "take"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Held:
    """The table is claimed by another compactor: `holder` (as the service names it)."""

    table: str
    holder: str | None
    detail: str


class Claim:
    """A claim on a table, renewed from a daemon thread until `release()` (or the `with`)."""

    def __init__(self, client: LeaseClient, lease: Lease) -> None:
        self.client = client
        self.table = lease.table
        self.renewer = Renewer(client, lease)

    @property
    def lease(self) -> Lease:
        return self.renewer.lease

    def check(self, step: Step) -> None:
        """Raise LeaseLost unless the claim is still held (run_table's `before_step`)."""
        if not self.renewer.safe_to_commit():
            reason = self.renewer.lost_reason or "no renew within the renew deadline"
            raise LeaseLost(
                f"claim on {self.table} lost: {reason} (before {step.procedure})", lease=self.lease
            )

    def release(self) -> None:
        """Stop renewing and release the claim (idempotent; a failure is logged: a claim
        that cannot be released expires after its TTL)."""
        self.renewer.stop()
        try:
            self.client.release(self.renewer.lease)
        except LakelockError as exc:
            log.warning("release of the claim on %s failed: %s", self.table, exc)

    def __enter__(self) -> Claim:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


def take(
    client: LeaseClient, table: str, *, holder: str, ttl_s: float, request_id: str | None = None
) -> Claim | Held:
    """Claim `table`, or learn who holds it; never waits.

    Raises:
        Unavailable, OutcomeUnknown, ServerError: no claim can be trusted now (one granted
            unseen expires after its TTL): do not plan the table.
        InvalidRequest, Unauthorized, Forbidden: a configuration mistake.
    """
    try:
        lease = client.claim(
            table, holder=holder, ttl_s=ttl_s, request_id=request_id or uuid.uuid4().hex
        )
    except ClaimHeld as exc:
        return Held(table, exc.extra.get("holder"), exc.detail)
    return Claim(client, lease)
