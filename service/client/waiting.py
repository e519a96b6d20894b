"""Asking for a lease until a deadline: the loop behind `LeaseClient.acquire_until`.

    got = ask_until(ask, what="commit lease on cat.db.events", within_s=300, poll_s=10,
                    withdraw=withdraw_intent)     # an Acquired, or NotGranted

`ask(wait_s)` asks once, long-polling up to `wait_s` on the service; the first ask does not
wait. Refusals (`Locked`) and drains (`Draining`) are waited out, and so is a failing service
when `retry_unavailable` (with `transport.Backoff`); the gate's and the compactor's rules are
docs/design.md §3.2's. A `stop` event ends the wait (`Stopped`): each long poll is asked in
slices of STOP_SLICE_S, and a pause between asks is `stop.wait` (etcd's cancellable
`Lock(ctx)`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

import httpx

from service.client.transport import Backoff, describe
from service.wire import Draining, Lease
from service.wire.errors import TRANSIENT, LakelockError, Locked

__all__ = [
    "MAX_WAIT_S",
    "STOP_SLICE_S",
    "UNAVAILABLE",
    "Acquired",
    "NotGranted",
    "Stopped",
    "Waited",
    "ask_until",
]

log = logging.getLogger(__name__)

MAX_WAIT_S = 60.0  # the service bounds a long poll to [0, LAKELOCK_MAX_WAIT_S], 60 s by default
UNAVAILABLE = "unavailable"  # the wait reason while the service fails or cannot be reached
FAILED_FIRST_S = 0.5  # the backoff after the service failed: 0.5 s doubling, up to poll_s
STOP_SLICE_S = 2.0
"""A long poll given a stop event is asked in slices of this length: how long a stop may wait
(a sync HTTP call cannot be interrupted from another thread)."""


@dataclass(frozen=True)
class Waited:
    """One ask of `LeaseClient.acquire_until` that was not a grant: `reason` is the refusal's
    (`paused`, `maintenance`, `intent`), `draining` (a maintenance request's intent is open),
    or `unavailable` (the service failed; retried); `answer` is the refusal, the `Draining`
    answer or the failure."""

    reason: str
    answer: Draining | Exception
    waited_s: float


@dataclass(frozen=True)
class Acquired:
    """A lease `acquire_until` got, after `waited_s`, of which `calls_s` in calls."""

    lease: Lease
    waited_s: float
    calls_s: float


class NotGranted(Exception):
    """`acquire_until` ran out of time: no lease within its deadline. `last` is the last
    answer (a `Locked`, a `Draining`, or the service's failure), `reasons` what held the
    request, each once in the order first seen. A maintenance request's intent is already
    withdrawn."""

    def __init__(
        self,
        message: str,
        *,
        last: Draining | Exception | None,
        reasons: tuple[str, ...],
        waited_s: float,
        calls_s: float,
    ) -> None:
        super().__init__(message)
        self.last = last
        self.reasons = reasons
        self.waited_s = waited_s
        self.calls_s = calls_s


class Stopped(Exception):
    """The caller's stop event ended a wait before a lease was granted. A maintenance
    request's intent is already withdrawn; nothing is held."""


def ask_until(
    ask: Callable[[float], Lease | Draining],
    *,
    what: str,
    within_s: float,
    poll_s: float,
    retry_unavailable: bool,
    on_wait: Callable[[Waited], None] | None,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
    withdraw: Callable[[], None],
    stop: threading.Event | None = None,
) -> Acquired:
    """Ask until a lease is granted or `within_s` passed (at least once), or `stop` is set;
    `what` names the lease in messages. `withdraw` is called when an ask drained (an intent is
    open) and the loop ends without the lease, whatever ended it.

    Raises:
        NotGranted: no lease within `within_s`.
        Stopped: `stop` was set first.
        LakelockError: what `ask` raised and is not waited out.
    """
    started = clock()
    deadline = started + within_s
    longest_s, pause = (MAX_WAIT_S, sleep) if stop is None else (STOP_SLICE_S, stop.wait)
    calls_s = 0.0
    reasons: list[str] = []
    last: Draining | Exception | None = None
    failures = 0
    intent_open = False
    try:
        while True:
            _stopped(stop, what, clock() - started)
            # the first ask answers at once; later ones long-poll, within the deadline (and
            # in slices a stop can end)
            wait_s = 0.0 if last is None else min(poll_s, deadline - clock(), longest_s)
            asked = clock()
            try:
                answer = _asked(ask, max(wait_s, 0.0), retry_unavailable=retry_unavailable)
            finally:
                calls_s += clock() - asked
            if isinstance(answer, Lease):
                intent_open = False  # the grant fulfilled it
                return Acquired(answer, clock() - started, calls_s)
            last, reason = answer, _wait_reason(answer)
            intent_open = intent_open or isinstance(answer, Draining)
            failures = failures + 1 if reason == UNAVAILABLE else 0
            if reason not in reasons:
                reasons.append(reason)
            if on_wait is not None:
                on_wait(Waited(reason, answer, clock() - started))
            if clock() >= deadline:
                # a stop in the last slice is a stop, not a deadline (the gate's `proceed`
                # commits without a lease after a deadline, never after a stop)
                _stopped(stop, what, clock() - started)
                waited = clock() - started
                raise NotGranted(
                    f"no {what} after {waited:.1f}s (within {within_s:g}s);"
                    f" waited for: {', '.join(reasons)}",
                    last=last,
                    reasons=tuple(reasons),
                    waited_s=waited,
                    calls_s=calls_s,
                )
            if failures and isinstance(answer, Exception):
                log.warning("%s: service failed (%s); backing off", what, describe(answer))
            pause_s = _pause_s(
                answer, failures, poll_s=poll_s, wait_s=wait_s, asked_s=clock() - asked
            )
            pause_s = min(pause_s, deadline - clock())
            if pause_s > 0:
                pause(pause_s)
    finally:
        if intent_open:
            withdraw()


def _stopped(stop: threading.Event | None, what: str, waited_s: float) -> None:
    if stop is not None and stop.is_set():
        raise Stopped(f"stopped waiting for a {what} after {waited_s:.1f}s")


def _asked(
    ask: Callable[[float], Lease | Draining], wait_s: float, *, retry_unavailable: bool
) -> Lease | Draining | Exception:
    """One ask: the lease, the drain, or the refusal to wait out (a failing service too, with
    `retry_unavailable`)."""
    try:
        return ask(wait_s)
    except Locked as exc:
        return exc
    except (*TRANSIENT, httpx.TransportError) as exc:
        if not retry_unavailable:
            raise
        return exc


def _pause_s(
    answer: Draining | Exception, failures: int, *, poll_s: float, wait_s: float, asked_s: float
) -> float:
    """How long to sleep after `answer` (which took `asked_s`) before asking again (0: the next
    ask long-polls at once)."""
    if failures:
        # a recovering service is not asked by every job at once
        return Backoff(first_s=FAILED_FIRST_S, max_s=poll_s).delay_s(failures)
    if wait_s > 0 and isinstance(answer, Draining | LakelockError):
        # a long poll answered early (the state changed, or a service that does not hold
        # calls) waits out Retry-After: never a busy loop
        return min(answer.retry_after_s or 1.0, wait_s) - asked_s
    return 0.0


def _wait_reason(answer: Draining | Exception) -> str:
    if isinstance(answer, Draining):
        return "draining"
    if isinstance(answer, Locked):
        return str(answer.extra.get("reason") or "locked")
    return UNAVAILABLE
