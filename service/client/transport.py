"""`Transport`: one HTTP call to the lakelock service, retried by the client's one retry policy.

    transport = Transport("http://lakelock:8737", token=secret)
    answer = transport.call("POST", "/v1/tables/t/commit-leases", json=body, wait_s=10)

It owns the httpx client, the bearer token, the timeouts (a long poll's read timeout outlasts its
wait) and the mapping of a problem+json answer to the `service.wire.errors` tree. `RetryPolicy`
holds the retry rules of docs/design.md §3.2, run by tenacity: connection errors, timeouts and
5xx answers are retried with `Backoff`, a 4xx never is; out of tries on a timeout or a broken
connection a call raises `OutcomeUnknown` (it may have taken effect), on a 5xx the error its
answer stands for. A call that must not be repeated (`idempotent=False`) is not sent again once
it may have reached the service. A call given a `stop` event tries no more once it is set, and
its pauses between tries end with it (etcd's cancellable `Lock(ctx)`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NoReturn

import httpx
import tenacity

from service.wire.errors import LakelockError, OutcomeUnknown, from_problem

__all__ = ["DEFAULT_TIMEOUT", "DEFAULT_URL", "Backoff", "RetryPolicy", "Transport", "describe"]

log = logging.getLogger(__name__)

DEFAULT_URL = "http://127.0.0.1:8737"
DEFAULT_TIMEOUT = httpx.Timeout(5.0, connect=2.0)


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff with full jitter (tenacity's `wait_random_exponential`): retry n (1 for
    the first) waits a random time in [0, min(max_s, first_s * 2**(n - 1))], so clients that
    retry together spread out instead of asking a recovering service at once. A 5xx answer's
    `Retry-After`, when longer, wins."""

    first_s: float
    max_s: float

    def __call__(self, state: tenacity.RetryCallState) -> float:
        """The pause before the next try of a tenacity loop (its `wait`)."""
        jitter = tenacity.wait_random_exponential(multiplier=self.first_s, max=self.max_s)
        outcome = state.outcome
        answer = None if outcome is None or outcome.failed else outcome.result()
        after = _retry_after_s(answer) if isinstance(answer, httpx.Response) else None
        return max(jitter(state), after or 0.0)

    def delay_s(self, retry: int) -> float:
        """The pause before retry `retry` (1 for the first) of a loop of one's own."""
        state = tenacity.RetryCallState(_NO_LOOP, None, (), {})
        state.attempt_number = retry
        return self(state)


_NO_LOOP = tenacity.Retrying()  # the retry object a RetryCallState names; delay_s runs none


@dataclass(frozen=True)
class RetryPolicy:
    """What a call retries, and how: connection errors, timeouts and 5xx answers, up to `retries`
    more tries with `backoff` between them; within `within_s` when the call is bounded (no pause
    that would end past it)."""

    retries: int = 4
    backoff: Backoff = field(default_factory=lambda: Backoff(first_s=0.2, max_s=5.0))

    def __post_init__(self) -> None:
        if self.retries < 0:
            raise ValueError(f"retries must be >= 0, got {self.retries}")

    def retrying(
        self,
        what: str,
        *,
        within_s: float | None = None,
        cancel: threading.Event | None = None,
    ) -> tenacity.Retrying:
        """The tenacity loop for one call (`what`: its method and path, for the log); out of
        tries it raises what the last failure stands for. With `cancel`, no try starts once it
        is set, and a pause between tries ends when it is."""
        stop: tenacity.stop.stop_base = tenacity.stop_after_attempt(self.retries + 1)
        if within_s is not None:
            stop = stop | tenacity.stop_before_delay(within_s)
        sleep: Callable[[float], None] = time.sleep
        if cancel is not None:
            cancelled = _Cancelled(cancel)
            stop, sleep = stop | cancelled, cancelled.pause
        return tenacity.Retrying(
            retry=tenacity.retry_if_exception_type(httpx.TransportError)
            | tenacity.retry_if_result(_failed),
            wait=self.backoff,
            sleep=sleep,
            stop=stop,
            before_sleep=lambda state: _log_retry(what, state, self.retries),
            retry_error_callback=lambda state: _give_up(what, state),
        )


class Transport:
    """The HTTP side of a `LeaseClient`; thread-safe as its `httpx.Client` is.

    Transport()                                         # local service, no auth
    Transport("https://lakelock.internal", token="s3")  # bearer token
    Transport(http=TestClient(app))                     # an httpx.Client used as is, its base URL
    """

    def __init__(
        self,
        base_url: str = DEFAULT_URL,
        *,
        token: str | None = None,
        http: httpx.Client | None = None,
        policy: RetryPolicy | None = None,
        timeout: httpx.Timeout = DEFAULT_TIMEOUT,
    ) -> None:
        self._owns_http = http is None
        self._http = http if http is not None else httpx.Client(base_url=base_url)
        # a given client keeps its own base URL (TestClient has one); a bare one gets ours
        self._prefix = "" if str(self._http.base_url) else base_url.rstrip("/")
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.policy = policy if policy is not None else RetryPolicy()
        self.timeout = timeout

    def call(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: dict[str, Any] | None = None,
        wait_s: float = 0.0,
        within_s: float | None = None,
        idempotent: bool = True,
        stop: threading.Event | None = None,
    ) -> httpx.Response:
        """One call with retries: a 2xx answer, or the error its problem body stands for.

        `wait_s` is the long poll the service may hold the call for; `within_s` bounds the whole
        call, retries included; a call that is not `idempotent` is not sent again after a
        failure that may have reached the service; once `stop` is set, a failed try is the
        last (a try under way is not interrupted: its long poll is the caller's to bound).

        Raises:
            LakelockError: the answer's problem; `OutcomeUnknown` when no answer came.
        """
        what = f"{method} {path}"
        started = time.monotonic()
        tries = 0

        def attempt() -> httpx.Response:
            nonlocal tries
            tries += 1
            left = None if within_s is None else within_s - (time.monotonic() - started)
            request = self._http.build_request(
                method,
                self._prefix + path,
                json=json,
                params=params,
                headers=self._headers,
                timeout=self._timeout_for(wait_s=wait_s, left_s=left),
            )
            try:
                return self._http.send(request)
            except httpx.TransportError as exc:
                # a request never sent cannot have taken effect; one that was may have
                sent = not isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout)
                if sent and not idempotent:
                    raise _unknown(what, exc, tries) from exc
                raise

        response = self.policy.retrying(what, within_s=within_s, cancel=stop)(attempt)
        if response.is_success:
            return response
        raise _problem(response)

    def close(self) -> None:
        """Close the HTTP client if this object made it."""
        if self._owns_http:
            self._http.close()

    def _timeout_for(self, *, wait_s: float, left_s: float | None) -> httpx.Timeout:
        # a long poll is answered after up to wait_s: the read timeout must outlast it
        t = self.timeout
        read = None if t.read is None else t.read + max(wait_s, 0.0)
        parts = {"connect": t.connect, "read": read, "write": t.write, "pool": t.pool}
        if left_s is not None:
            cap = max(left_s, 0.05)
            parts = {k: cap if v is None else min(v, cap) for k, v in parts.items()}
        return httpx.Timeout(**parts)


def describe(failure: BaseException | httpx.Response) -> str:
    """A failure in a few words, for a log line or an error message."""
    if isinstance(failure, httpx.Response):
        return f"HTTP {failure.status_code}"
    return f"{type(failure).__name__}: {failure}" if str(failure) else type(failure).__name__


class _Cancelled(tenacity.stop.stop_base):
    """A tenacity stop once `event` is set, and a pause between tries that it ends."""

    def __init__(self, event: threading.Event) -> None:
        self.event = event

    def __call__(self, retry_state: tenacity.RetryCallState) -> bool:
        return self.event.is_set()

    def pause(self, seconds: float) -> None:
        self.event.wait(seconds)


def _failed(answer: httpx.Response) -> bool:
    """A 5xx answer: the service failed, asking again may cure it."""
    return answer.status_code >= 500


def _last(state: tenacity.RetryCallState) -> BaseException | httpx.Response:
    """The last try's failure: the exception it raised, or the 5xx answer."""
    outcome = state.outcome
    if outcome is None:
        raise RuntimeError("no try has ended yet")
    failure = outcome.exception()
    return failure if failure is not None else outcome.result()


def _log_retry(what: str, state: tenacity.RetryCallState, retries: int) -> None:
    log.warning(
        "lakelock %s failed (%s); retry %d/%d in %.2fs",
        what,
        describe(_last(state)),
        state.attempt_number,
        retries,
        state.upcoming_sleep,
    )


def _give_up(what: str, state: tenacity.RetryCallState) -> NoReturn:
    failure = _last(state)
    if isinstance(failure, httpx.Response):
        raise _problem(failure)
    raise _unknown(what, failure, state.attempt_number) from failure


def _unknown(what: str, exc: BaseException, attempts: int) -> OutcomeUnknown:
    return OutcomeUnknown(
        f"{what}: {describe(exc)} after {attempts} attempt(s); it may have taken "
        "effect, retry with the same request id",
        attempts=attempts,
    )


def _problem(response: httpx.Response) -> LakelockError:
    try:
        body: Any = response.json()
    except ValueError:
        body = {"detail": response.text[:500] or response.reason_phrase}
    return from_problem(body, response.status_code)


def _retry_after_s(response: httpx.Response) -> float | None:
    value = response.headers.get("Retry-After")
    if value is None:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        return None  # an HTTP date: rare from this service, and the backoff still applies
