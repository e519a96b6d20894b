"""Take the maintenance lease, waiting through the drain. See service.lock.leases for the protocol.

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
import threading
import time
from collections.abc import Callable, Sequence

from service.client import Draining, Lease, LeaseClient, NotGranted, Waited

__all__ = ["DrainTimeout", "acquire_maintenance"]

log = logging.getLogger(__name__)


class DrainTimeout(Exception):
    """Commit leases did not drain within the configured wait; skip this run, try the next.

    The intent is withdrawn: ingest resumes at once.
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
    stop: threading.Event | None = None,
) -> tuple[Lease, float]:
    """The maintenance lease on `table` (on `partitions` of it; None: the whole table) and the
    seconds spent waiting for it; `stop` ends the wait (the compactor is stopping).

    Raises:
        DrainTimeout: still draining after `max_wait_s`.
        service.client.Stopped: `stop` was set first (the intent withdrawn).
        MaintenanceHeld: a live maintenance lease intersects the scope (skip the run).
        MaintenanceOff: an operator disabled maintenance on the table (skip the run).
        Unavailable, OutcomeUnknown, ServerError: the service cannot be trusted now; do not
            compact (a lease granted unseen expires after its TTL).
        InvalidRequest, Unauthorized, Forbidden: a configuration mistake.
    """

    def log_drain(waited: Waited) -> None:
        if isinstance(waited.answer, Draining):
            log.info(
                "%s draining: %d commit lease(s) in flight, waited %.1fs",
                table,
                waited.answer.in_flight_commits,
                waited.waited_s,
            )

    try:
        got = client.acquire_until(
            "maintenance",
            table,
            holder=holder,
            ttl_s=ttl_s,
            within_s=max_wait_s,
            request_id=request_id,
            partitions=partitions,
            poll_s=poll_s,
            on_wait=log_drain,
            clock=clock,
            sleep=sleep,
            stop=stop,
        )
    except NotGranted as exc:
        # the intent is withdrawn already: ingest does not wait for it to expire
        in_flight = exc.last.in_flight_commits if isinstance(exc.last, Draining) else 0
        raise DrainTimeout(
            f"{table}: {in_flight} commit lease(s) still in flight after "
            f"{exc.waited_s:.1f}s (max wait {max_wait_s:g}s)",
            in_flight_commits=in_flight,
        ) from None
    lease = got.lease
    log.info(
        "maintenance lease %s on %s granted after %.1fs (token %s)",
        lease.lease_id,
        table,
        got.waited_s,
        lease.token,
    )
    return lease, got.waited_s
