"""Take the maintenance lease, waiting through the drain. See service.leases for the protocol.

    lease, waited_s = acquire_maintenance(client, table="local.db.events", holder=h, ttl_s=60,
                                          max_wait_s=600, request_id="compactor-1f3a")
    acquire_maintenance(client, ..., partitions=["dt=2024-05-01", "dt=2024-05-02"])  # scoped

The first ask registers an intent when commit leases are live (the service answers
`Draining`); from then on no new commit lease is granted, and the in-flight ones finish. Asking
again with the same request id keeps the intent alive and is answered with the lease as soon as
the last commit lease is gone (each ask long-polls on the service for up to `poll_s`). With
`partitions`, only commit leases whose scope intersects them drain, and only those are held.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from service.client import Draining, Lease, LeaseClient
from service.errors import LakelockError

__all__ = ["DrainTimeout", "acquire_maintenance"]

log = logging.getLogger(__name__)

_MIN_POLL_S = 0.2


class DrainTimeout(Exception):
    """Commit leases did not drain within the configured wait; skip this run, try the next.

    The intent expires on the service shortly after the last ask.
    """

    def __init__(self, message: str, *, in_flight_commits: int) -> None:
        super().__init__(message)
        self.in_flight_commits = in_flight_commits


def acquire_maintenance(
    client: LeaseClient,
    *,
    table: str,
    holder: str,
    ttl_s: float,
    max_wait_s: float,
    request_id: str,
    partitions: Sequence[str] | None = None,
    poll_s: float = 10.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[Lease, float]:
    """The maintenance lease on `table` (on `partitions` of it; None: the whole table) and the
    seconds spent waiting for it.

    Raises:
        DrainTimeout: still draining after `max_wait_s`.
        MaintenanceHeld: a live maintenance lease intersects the scope (skip the run).
        MaintenanceOff: an operator disabled maintenance on the table (skip the run).
        Unavailable, OutcomeUnknown, ServerError: the service cannot be trusted now; do not
            compact (a lease granted unseen expires after its TTL).
        InvalidRequest, Unauthorized, Forbidden: a configuration mistake.
    """
    started = clock()
    wait_s = 0.0
    drained = False  # whether this request opened an intent that holds ingest
    try:
        while True:
            asked_at = clock()
            answer = client.acquire_maintenance(
                table,
                holder=holder,
                ttl_s=ttl_s,
                wait_s=wait_s,
                request_id=request_id,
                partitions=partitions,
            )
            waited = clock() - started
            if not isinstance(answer, Draining):
                drained = False
                log.info(
                    "maintenance lease %s on %s granted after %.1fs (token %s)",
                    answer.lease_id,
                    table,
                    waited,
                    answer.token,
                )
                return answer, waited
            drained = True
            left = max_wait_s - waited
            if left <= 0:
                raise DrainTimeout(
                    f"{table}: {answer.in_flight_commits} commit lease(s) still in flight after "
                    f"{waited:.1f}s (max wait {max_wait_s:g}s)",
                    in_flight_commits=answer.in_flight_commits,
                )
            log.info(
                "%s draining: %d commit lease(s) in flight, waited %.1fs",
                table,
                answer.in_flight_commits,
                waited,
            )
            # a long-poll answered early means the state changed (one commit left): ask again at
            # once; a quick answer to a long-poll that did not wait must not become a busy loop
            if wait_s > 0 and clock() - asked_at < _MIN_POLL_S:
                sleep(min(answer.retry_after_s, left, 1.0))
            wait_s = max(0.0, min(poll_s, max_wait_s - (clock() - started)))
    finally:
        if drained:
            # giving up (drain timeout, an error, Ctrl-C): ingest must not wait for our intent
            # to expire
            _withdraw(client, table=table, request_id=request_id, holder=holder)


def _withdraw(client: LeaseClient, *, table: str, request_id: str, holder: str) -> None:
    try:
        client.withdraw_intent(table, request_id=request_id, holder=holder)
    except LakelockError as exc:
        # the intent then expires by itself (LAKELOCK_INTENT_TTL_S); the run's own outcome
        # (raised on from the finally above) is what matters
        log.warning("could not withdraw the intent %s on %s: %s", request_id, table, exc)
