"""`Renewer`: keeps a lease alive from a daemon thread and says when it can no longer be trusted.

    with Renewer(client, lease, on_lost=cancel_spark_jobs) as renewer:
        ...                                    # long work
        if not renewer.safe_to_commit():       # judged by the clock now
            raise LeaseLost(renewer.lost_reason, lease=renewer.lease)

The client rules it follows are in docs/design.md §3.2.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any

from service.wire import Lease
from service.wire.errors import (
    TRANSIENT,
    LakelockError,
    LeaseExpired,
    NotFound,
    NotOwner,
    StaleToken,
)

if TYPE_CHECKING:
    from service.client.lease_client import LeaseClient

__all__ = ["LeaseLost", "Renewer"]

log = logging.getLogger(__name__)


class LeaseLost(Exception):
    """The lease can no longer be trusted (revoked, expired, refused at a renew, or not renewed
    within its renew deadline): stop writing, do not commit. The jobs raise it from their own
    checks (the gate before a commit, the compactor between steps).

    raise LeaseLost(f"commit lease on {table} lost: {renewer.lost_reason}", lease=lease)
    exc.lease        # the lease lost, when the raiser knew it
    exc.gate_pass    # set by ingest_gate.gate: the pass whose batch must not commit
    """

    def __init__(self, message: str, *, lease: Lease | None = None, gate_pass: Any = None) -> None:
        super().__init__(message)
        self.lease = lease
        self.gate_pass = gate_pass


_DEFINITIVE = (NotFound, LeaseExpired, NotOwner, StaleToken)


class Renewer:
    """Keeps a lease alive from a daemon thread, and says when it can no longer be trusted.

    Renews every `ttl_s / 3` (two more chances before the lease expires). The lease is lost
    when the service refuses a renew (NotFound, LeaseExpired, NotOwner, StaleToken) or when no
    renew has succeeded for longer than `renew_deadline_s` (default 2/3 of the TTL, so the holder
    stops before the service can hand the table to someone else). Then `lost` is set,
    `lost_reason` says why, `on_lost(reason)` is called once, and the thread stops. Transient
    errors (Unavailable, OutcomeUnknown, ServerError) are logged and retried until the deadline.
    Like etcd's `Session.Done()`.

    renewer = Renewer(client, lease, on_lost=cancel)   # starts at once; start=False to defer
    renewer.safe_to_commit()                           # judged by the clock now
    renewer.lost.is_set(); renewer.lost_reason; renewer.lease   # the latest renewed lease
    renewer.stop()                                     # stop renewing (does not release)
    Renewer(client, lease, clock=fake.now, wait=fake.wait)      # time driven by a test

    `wait(seconds)` is how the thread waits between renews: True when it should stop (by
    default the stop event's `wait`, so `stop()` ends a wait at once).
    """

    def __init__(
        self,
        client: LeaseClient,
        lease: Lease,
        *,
        renew_deadline_s: float | None = None,
        on_lost: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        wait: Callable[[float], bool] | None = None,
        start: bool = True,
    ) -> None:
        if lease.ttl_s <= 0:
            raise ValueError(f"lease ttl_s must be > 0, got {lease.ttl_s}")
        self.client = client
        self.lease = lease
        self.interval_s = lease.ttl_s / 3
        self.renew_deadline_s = (
            lease.ttl_s * 2 / 3 if renew_deadline_s is None else float(renew_deadline_s)
        )
        self.on_lost = on_lost
        self.clock = clock
        # the grant counts as the first renew; time the service already spent on the lease is
        # taken off so the deadline is never later than the service's own expiry
        self.last_renewed_at = clock() - max(lease.ttl_s - lease.remaining_s, 0.0)
        self.renewals = 0
        self.lost = threading.Event()
        self.lost_reason: str | None = None
        self._stop = threading.Event()
        self._wait = wait if wait is not None else self._stop.wait
        self._lock = threading.Lock()
        self._thread = threading.Thread(
            target=self._run, name=f"lakelock-renewer-{lease.lease_id[:8]}", daemon=True
        )
        self._started = False
        if start:
            self.start()

    def start(self) -> Renewer:
        """Start the renewing thread (idempotent)."""
        with self._lock:
            if not self._started:
                self._started = True
                self._thread.start()
        return self

    def safe_to_commit(self) -> bool:
        """True while the lease is not lost and a renew succeeded within the deadline."""
        return not self.lost.is_set() and self._silent_s() <= self.renew_deadline_s

    def stop(self, timeout: float | None = None) -> None:
        """Stop renewing and wait for the thread (an in-flight renew ends within the deadline)."""
        self._stop.set()
        if self._started and threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    def __enter__(self) -> Renewer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _silent_s(self) -> float:
        return self.clock() - self.last_renewed_at

    def _run(self) -> None:
        failing = False
        while True:
            if failing:
                # retry a few times before the deadline, neither in a busy loop nor after it
                wait = min(self.interval_s / 3, self.renew_deadline_s - self._silent_s())
            else:
                wait = self.interval_s - self._silent_s()
            if self._wait(max(wait, 0.0)):
                return
            outcome = self._renew_once()
            if outcome is None:
                return
            failing = not outcome

    def _renew_once(self) -> bool | None:
        """True when renewed, False on a transient failure, None when the lease is lost."""
        left = self.renew_deadline_s - self._silent_s()
        if left <= 0:
            self._lose(self._deadline_reason())
            return None
        sent_at = self.clock()
        try:
            lease = self.client.renew(self.lease, within_s=left)
        except _DEFINITIVE as exc:
            if not self._stop.is_set():
                self._lose(f"{exc.slug}: {exc.detail}")
            return None
        except TRANSIENT as exc:
            log.warning("renew of lease %s failed: %s", self.lease.lease_id, exc)
            if self._silent_s() > self.renew_deadline_s and not self._stop.is_set():
                self._lose(self._deadline_reason())
                return None
            return False
        except LakelockError as exc:
            # Unauthorized, Forbidden, InvalidRequest: asking again cannot succeed
            self._lose(f"{exc.slug}: {exc.detail}")
            return None
        except Exception as exc:
            self._lose(f"renewer failed: {type(exc).__name__}: {exc}")
            raise
        # the service extended the lease no earlier than the request was sent
        self.last_renewed_at = sent_at
        self.lease = lease
        self.renewals += 1
        return True

    def _deadline_reason(self) -> str:
        return (
            f"renew-deadline: no renew succeeded for {self._silent_s():.1f}s "
            f"(deadline {self.renew_deadline_s:.1f}s)"
        )

    def _lose(self, reason: str) -> None:
        with self._lock:
            if self.lost.is_set():
                return
            self.lost_reason = reason
            self.lost.set()
        log.error("lease %s on %s lost: %s", self.lease.lease_id, self.lease.table, reason)
        if self.on_lost is not None:
            try:
                self.on_lost(reason)
            except Exception:
                log.exception("on_lost callback for lease %s failed", self.lease.lease_id)
                raise
