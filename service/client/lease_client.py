"""`LeaseClient`: the lakelock HTTP client both jobs use (with `service.client.renewer`).

Imports httpx, pydantic and `service.wire` only, so a Spark job can use it
without FastAPI or SQLAlchemy. The protocol itself is described in service.lock.leases; the wire
format in docs/api.md, its models in service.wire (the service answers with the same `Lease`).

    client = LeaseClient("http://lakelock:8737", token=secret)
    lease = client.acquire_commit("cat.db.events", holder="ingest:run-7", ttl_s=30, wait_s=10)
    with Renewer(client, lease, on_lost=cancel_spark_jobs) as renewer:
        ...                                    # long work
        if not renewer.safe_to_commit(): ...   # do not commit: raise LeaseLost
    client.release(lease)

    got = client.acquire_until("maintenance", "cat.db.events", holder="compactor:7",
                               ttl_s=600, within_s=300)   # asks until granted or NotGranted

    claim = client.claim("cat.db.events", holder="compactor:7", ttl_s=60)  # or ClaimHeld
    with Renewer(client, claim): ...           # plan, maintenance leases, housekeeping
    client.release(claim)

Failures come back as the `service.wire.errors` tree. Connection errors, timeouts and 5xx answers
are retried with exponential backoff and full jitter (a `Retry-After` longer than the backoff wins);
4xx answers never are. When the retries run out on a timeout or a broken connection the call
raises `OutcomeUnknown` (it may have taken effect: an acquire repeated with the same request id
returns the same lease); on repeated 5xx it raises the mapped error (`Unavailable`,
`ServerError`).
"""

from __future__ import annotations

import logging
import random
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from types import TracebackType
from typing import Any

import httpx
from pydantic import BaseModel

from service.wire import (
    Backpressure,
    DebtBody,
    Draining,
    GapsRecorded,
    IngestLag,
    Lease,
    LeaseKind,
    ReaderHold,
    Renewed,
    RunId,
    TableDebt,
    Withdrawn,
)
from service.wire.errors import (
    TRANSIENT,
    ClaimHeld,
    LakelockError,
    Locked,
    OutcomeUnknown,
    from_problem,
)

__all__ = [
    "DEFAULT_URL",
    "MAX_WAIT_S",
    "UNAVAILABLE",
    "Acquired",
    "ClaimHeld",
    "DebtBody",
    "Draining",
    "Lease",
    "LeaseClient",
    "NotGranted",
    "TableDebt",
    "Waited",
]

log = logging.getLogger(__name__)

DEFAULT_URL = "http://127.0.0.1:8737"
MAX_WAIT_S = 60.0  # the service bounds a long poll to [0, LAKELOCK_MAX_WAIT_S], 60 s by default
UNAVAILABLE = "unavailable"  # the wait reason while the service fails or cannot be reached


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


class LeaseClient:
    """A client of the lakelock service; thread-safe as its `httpx.Client` is.

    LeaseClient()                                              # local service, no auth
    LeaseClient("https://lakelock.internal", token="s3cret")   # bearer token
    LeaseClient(http=TestClient(app))                          # an httpx.Client used as is
    LeaseClient(http=httpx.Client(transport=httpx.MockTransport(handler)), retries=0)

    The lease calls answer `service.wire` models (`Lease`, `Draining`); the views
    and operator calls (`state`, `tables`, `events`, `runs`, `set_switch`, `revoke`) answer the
    API's JSON as it came, for scripts and the `lakelock` command to print.
    """

    def __init__(
        self,
        base_url: str = DEFAULT_URL,
        *,
        token: str | None = None,
        http: httpx.Client | None = None,
        retries: int = 4,
        backoff_s: float = 0.2,
        max_backoff_s: float = 5.0,
        timeout: httpx.Timeout = httpx.Timeout(5.0, connect=2.0),  # noqa: B008 (immutable)
    ) -> None:
        if retries < 0:
            raise ValueError(f"retries must be >= 0, got {retries}")
        self._owns_http = http is None
        self._http = http if http is not None else httpx.Client(base_url=base_url)
        # a given client keeps its own base URL (TestClient has one); a bare one gets ours
        self._prefix = "" if str(self._http.base_url) else base_url.rstrip("/")
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.retries = retries
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.timeout = timeout

    # -- leases -------------------------------------------------------------------------------

    def acquire_commit(
        self,
        table: str,
        *,
        holder: str,
        ttl_s: float,
        wait_s: float = 0.0,
        request_id: str | None = None,
        partitions: Sequence[str] | None = None,
    ) -> Lease:
        """A shared commit lease on `table` (or on `partitions` of it, named as Iceberg names
        them, `dt=2024-06-20/hr=13`), waiting up to `wait_s` on the server for it.

        Raises:
            Locked: ingest is paused, or a maintenance lease or intent is live (`reason`).
            NotOwner: `request_id` was used by another holder.
            OutcomeUnknown: timed out; retry with the same `request_id`.
            Unavailable, ServerError, InvalidRequest, Unauthorized, Forbidden.
        """
        body = self._acquire_body(
            holder=holder, ttl_s=ttl_s, wait_s=wait_s, request_id=request_id, partitions=partitions
        )
        answer = self._call("POST", f"/v1/tables/{table}/commit-leases", json=body, wait_s=wait_s)
        return Lease.model_validate_json(answer.content)

    def acquire_maintenance(
        self,
        table: str,
        *,
        holder: str,
        ttl_s: float,
        wait_s: float = 0.0,
        request_id: str | None = None,
        partitions: Sequence[str] | None = None,
    ) -> Lease | Draining:
        """The exclusive maintenance lease on `table` (or on `partitions` of it), or `Draining`
        while the commits it conflicts with drain.

        Raises:
            MaintenanceHeld: another maintenance lease or intent is live.
            MaintenanceOff: an operator disabled maintenance on the table.
            NotOwner: `request_id` was used by another holder.
            OutcomeUnknown: timed out; retry with the same `request_id`.
            Unavailable, ServerError, InvalidRequest, Unauthorized, Forbidden.
        """
        body = self._acquire_body(
            holder=holder, ttl_s=ttl_s, wait_s=wait_s, request_id=request_id, partitions=partitions
        )
        answer = self._call(
            "POST", f"/v1/tables/{table}/maintenance-lease", json=body, wait_s=wait_s
        )
        if answer.status_code == 202:
            return Draining.model_validate_json(answer.content)
        return Lease.model_validate_json(answer.content)

    def claim(
        self, table: str, *, holder: str, ttl_s: float, request_id: str | None = None
    ) -> Lease:
        """Claim `table` for this compactor (a lease of kind `claim`, whole table, no token):
        granted or refused at once, never waited for. Renew it with `renew` or a `Renewer`,
        end it with `release`. A retry after a lost answer sends the same request id, so it
        gets the same claim back.

        Raises:
            ClaimHeld: another holder has the table (`exc.extra["holder"]`, `["remaining_s"]`):
                move on to the next table.
            LeaseExpired: `request_id` was granted a claim that has ended since.
            NotOwner: `request_id` was used by another holder.
            OutcomeUnknown: timed out; retry with the same `request_id`.
            Unavailable, ServerError, InvalidRequest, Unauthorized, Forbidden.
        """
        body = {"holder": holder, "ttl_s": ttl_s, "request_id": request_id or uuid.uuid4().hex}
        answer = self._call("POST", f"/v1/tables/{table}/claim", json=body)
        return Lease.model_validate_json(answer.content)

    def acquire_until(
        self,
        kind: LeaseKind,
        table: str,
        *,
        holder: str,
        ttl_s: float,
        within_s: float,
        request_id: str | None = None,
        partitions: Sequence[str] | None = None,
        poll_s: float = 10.0,
        retry_unavailable: bool = False,
        on_wait: Callable[[Waited], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> Acquired:
        """Ask for a `kind` lease until it is granted or `within_s` seconds passed (at least
        once). The first ask answers at once, so a grant says nothing held it up; after a
        refusal (`Locked`) or a drain (`Draining`) each ask long-polls on the service for up to
        `poll_s`. One request id for the whole wait: a grant whose answer was lost is answered
        again. `on_wait` hears each ask that was not a grant.

        With `retry_unavailable` a failing or unreachable service is asked again with backoff
        until the deadline (the ingest gate: a stalled stream is worse than a failed
        compaction); without it the failure is raised (the compactor: no trusted lease, no
        compaction). A maintenance request that opened an intent and ends without its lease
        (the deadline, a refusal, an error, an interrupt) withdraws the intent, so ingest does
        not wait for it to expire.

        Raises:
            NotGranted: no lease within `within_s`.
            MaintenanceHeld, MaintenanceOff: a maintenance lease cannot be had now.
            NotOwner, LeaseExpired: `request_id` belongs to another holder or ended.
            Unavailable, OutcomeUnknown, ServerError: without `retry_unavailable`.
            InvalidRequest, Unauthorized, Forbidden: a configuration mistake.
        """
        if kind == "claim":
            raise ValueError("a claim is never waited for: ask with claim(), move on if held")
        request_id = request_id or uuid.uuid4().hex
        started = clock()
        deadline = started + within_s
        calls_s = 0.0
        reasons: list[str] = []
        last: Draining | Exception | None = None
        failures = 0
        intent_open = False
        try:
            while True:
                # the first ask answers at once; later ones long-poll, within the deadline
                wait_s = 0.0 if last is None else min(poll_s, deadline - clock(), MAX_WAIT_S)
                asked = clock()
                try:
                    answer = self._ask(
                        kind,
                        table,
                        holder,
                        ttl_s,
                        max(wait_s, 0.0),
                        request_id,
                        partitions,
                        retry_unavailable=retry_unavailable,
                    )
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
                    waited = clock() - started
                    raise NotGranted(
                        f"no {kind} lease on {table} after {waited:.1f}s (within {within_s:g}s);"
                        f" waited for: {', '.join(reasons)}",
                        last=last,
                        reasons=tuple(reasons),
                        waited_s=waited,
                        calls_s=calls_s,
                    )
                if failures:
                    log.warning(
                        "%s lease on %s: service failed (%s); backing off",
                        kind,
                        table,
                        _describe(answer),
                    )
                pause = _pause_s(
                    answer, failures, poll_s=poll_s, wait_s=wait_s, asked_s=clock() - asked
                )
                pause = min(pause, deadline - clock())
                if pause > 0:
                    sleep(pause)
        finally:
            if intent_open:
                self._withdraw_quietly(table, request_id=request_id, holder=holder)

    def _ask(
        self,
        kind: LeaseKind,
        table: str,
        holder: str,
        ttl_s: float,
        wait_s: float,
        request_id: str,
        partitions: Sequence[str] | None,
        *,
        retry_unavailable: bool,
    ) -> Lease | Draining | Exception:
        """One ask of `acquire_until`: the lease, the drain, or the refusal to wait out (a
        failing service too, with `retry_unavailable`)."""
        try:
            return self._acquire(kind, table, holder, ttl_s, wait_s, request_id, partitions)
        except Locked as exc:
            return exc
        except (*TRANSIENT, httpx.TransportError) as exc:
            if not retry_unavailable:
                raise
            return exc

    def _acquire(
        self,
        kind: LeaseKind,
        table: str,
        holder: str,
        ttl_s: float,
        wait_s: float,
        request_id: str,
        partitions: Sequence[str] | None,
    ) -> Lease | Draining:
        acquire = self.acquire_commit if kind == "commit" else self.acquire_maintenance
        return acquire(
            table,
            holder=holder,
            ttl_s=ttl_s,
            wait_s=wait_s,
            request_id=request_id,
            partitions=partitions,
        )

    def _withdraw_quietly(self, table: str, *, request_id: str, holder: str) -> None:
        try:
            self.withdraw_intent(table, request_id=request_id, holder=holder)
        except LakelockError as exc:
            # the intent then expires by itself (LAKELOCK_INTENT_TTL_S); what ended the wait
            # (raised on from acquire_until's finally) is what matters
            log.warning("could not withdraw the intent %s on %s: %s", request_id, table, exc)

    def renew(
        self, lease: Lease, *, ttl_s: float | None = None, within_s: float | None = None
    ) -> Lease:
        """Extend a live lease (never an expired one); sends the holder, and the token if any.

        `within_s` bounds the whole call, retries included (the renewer passes the time left
        before its deadline).

        Raises:
            NotFound, LeaseExpired, NotOwner, StaleToken: the lease is gone; stop writing.
            OutcomeUnknown, Unavailable, ServerError: transient; retry before the deadline.
        """
        body: dict[str, Any] = {"holder": lease.holder}
        if ttl_s is not None:
            body["ttl_s"] = ttl_s
        if lease.token is not None:
            body["token"] = lease.token
        answer = self._call(
            "POST", f"/v1/leases/{lease.lease_id}/renew", json=body, within_s=within_s
        )
        return Renewed.model_validate_json(answer.content).lease

    def release(self, lease: Lease) -> None:
        """Release `lease`; releasing it again is not an error.

        Raises:
            NotFound: unknown lease id.
            NotOwner: the lease is another holder's.
            StaleToken: a maintenance lease released with another token.
            OutcomeUnknown, Unavailable, ServerError.
        """
        params: dict[str, Any] = {"holder": lease.holder}
        if lease.token is not None:
            params["token"] = lease.token
        self._call("DELETE", f"/v1/leases/{lease.lease_id}", params=params)

    def withdraw_intent(self, table: str, *, request_id: str, holder: str) -> bool:
        """Withdraw the intent a maintenance request opened (give up draining); True when one
        was open. Commit leases are granted again at once.

        Raises:
            NotOwner: the intent is another holder's. OutcomeUnknown, Unavailable, ServerError.
        """
        answer = self._call(
            "DELETE", f"/v1/tables/{table}/intents/{request_id}", params={"holder": holder}
        )
        return Withdrawn.model_validate_json(answer.content).withdrawn

    def hold_back(
        self, table: str, *, claim_id: str, holder: str, partitions: Sequence[str], reason: str
    ) -> Backpressure:
        """Hold the commits that touch `partitions` of `table` until `holder` compacts them
        (backpressure, under the live claim `claim_id`); asking again keeps them held.

        Raises:
            NotFound: `claim_id` is no claim of the table. LeaseExpired: it is not live.
            InvalidRequest, OutcomeUnknown, Unavailable, ServerError.
        """
        body = {
            "claim_id": claim_id,
            "holder": holder,
            "partitions": list(partitions),
            "reason": reason,
        }
        answer = self._call("POST", f"/v1/tables/{table}/backpressure", json=body)
        return Backpressure.model_validate_json(answer.content)

    def let_go(
        self, table: str, *, holder: str, partitions: Sequence[str] | None = None
    ) -> list[str]:
        """End `holder`'s backpressure on `table` (on `partitions` only, when given); the
        partitions let go.

        Raises: OutcomeUnknown, Unavailable, ServerError.
        """
        params: dict[str, Any] = {"holder": holder}
        if partitions is not None:
            params["partition"] = list(partitions)
        answer = self._call("DELETE", f"/v1/tables/{table}/backpressure", params=params)
        return Backpressure.model_validate_json(answer.content).partitions

    def revoke(self, lease_id: str, *, reason: str) -> dict[str, Any]:
        """Force-release a lease (operator); its holder learns it at its next renew.

        Raises:
            NotFound, Forbidden, OutcomeUnknown, Unavailable, ServerError.
        """
        answer = self._call("POST", f"/v1/leases/{lease_id}/revoke", json={"reason": reason})
        return answer.json()

    # -- tables -------------------------------------------------------------------------------

    def set_switch(
        self,
        table: str,
        *,
        reason: str,
        ingest: str | None = None,
        maintenance: str | None = None,
        backpressure: str | None = None,
    ) -> dict[str, Any]:
        """Set the operator switch (`ingest` running|paused, `maintenance` enabled|disabled,
        `backpressure` enabled|disabled).

        Returns the table state. Raises: InvalidRequest, Forbidden, OutcomeUnknown,
        Unavailable, ServerError.
        """
        body: dict[str, Any] = {"reason": reason}
        if ingest is not None:
            body["ingest"] = ingest
        if maintenance is not None:
            body["maintenance"] = maintenance
        if backpressure is not None:
            body["backpressure"] = backpressure
        return self._call("PUT", f"/v1/tables/{table}/switch", json=body).json()

    def state(self, table: str, *, wait_s: float = 0.0, since: int | None = None) -> dict[str, Any]:
        """The table's state; with `wait_s`, as soon as its version passes `since`.

        Raises: InvalidRequest, OutcomeUnknown, Unavailable, ServerError.
        """
        params: dict[str, Any] = {}
        if wait_s > 0:
            params["wait"] = wait_s
        if since is not None:
            params["since"] = since
        return self._call("GET", f"/v1/tables/{table}", params=params, wait_s=wait_s).json()

    def tables(self) -> list[dict[str, Any]]:
        """The state of every known table, by name, read a page at a time (a service before
        paging answers them all in one, without `next`). Raises: OutcomeUnknown, Unavailable,
        ServerError."""
        found: list[dict[str, Any]] = []
        params: dict[str, Any] = {"limit": 1000}
        while True:
            page = self._call("GET", "/v1/tables", params=params).json()
            found.extend(page["tables"])
            if not page.get("next"):
                return found
            params["after"] = page["next"]

    def events(self, *, table: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
        """Audit events, newest first. Raises: OutcomeUnknown, Unavailable, ServerError."""
        params: dict[str, Any] = {"limit": limit}
        if table is not None:
            params["table"] = table
        return self._call("GET", "/v1/events", params=params).json()["events"]

    def report_run(self, table: str, report: dict[str, Any]) -> int:
        """Store a maintenance run report; returns its run id.

        Not retried after a timeout (a retry could store the report twice).

        Raises: InvalidRequest, OutcomeUnknown, Unavailable, ServerError.
        """
        answer = self._call("POST", f"/v1/tables/{table}/runs", json=report, idempotent=False)
        return RunId.model_validate_json(answer.content).run_id

    def report_debt(self, table: str, debt: dict[str, Any] | BaseModel) -> TableDebt:
        """Store the table's compaction debt (`DebtBody`'s fields: snapshot_id, data_files,
        small_files, delete_files, partitions_over_target, records, measured_at); it replaces
        the one reported before. A model is sent with the fields `DebtBody` knows. Retried like
        any call: a repeated report stores the same debt.

        Raises: InvalidRequest, OutcomeUnknown, Unavailable, ServerError.
        """
        if isinstance(debt, BaseModel):
            fields = debt.model_dump(mode="json")
            body = {k: v for k, v in fields.items() if k in DebtBody.model_fields}
        else:
            # sent as given, so the service's 422 names a wrong field; a datetime as RFC 3339
            body = {k: _rfc3339(v) if isinstance(v, datetime) else v for k, v in debt.items()}
        answer = self._call("PUT", f"/v1/tables/{table}/debt", json=body)
        return TableDebt.model_validate_json(answer.content)

    def report_ingest_lag(
        self, table: str, *, query_id: str, batch_id: int, partitions: Mapping[str, int]
    ) -> IngestLag:
        """Store how far the table's ingest query is behind (records per `topic:partition`,
        after batch `batch_id` committed); it replaces the report before. Retried like any
        call: a repeated report stores the same lag.

        Raises: InvalidRequest, OutcomeUnknown, Unavailable, ServerError.
        """
        body = {"query_id": query_id, "batch_id": batch_id, "partitions": dict(partitions)}
        answer = self._call("PUT", f"/v1/tables/{table}/ingest-lag", json=body)
        return IngestLag.model_validate_json(answer.content)

    def record_ingest_gaps(
        self, table: str, *, query_id: str, gaps: Sequence[Mapping[str, Any]]
    ) -> GapsRecorded:
        """Record offset ranges (`topic`, `partition`, `start`, `records`) the source deleted
        before the job read them, one `ingest.gap` audit event each. Not retried after a
        timeout (a retry could record a gap twice).

        Raises: InvalidRequest, OutcomeUnknown, Unavailable, ServerError.
        """
        body = {"query_id": query_id, "gaps": [dict(g) for g in gaps]}
        answer = self._call("POST", f"/v1/tables/{table}/ingest-gaps", json=body, idempotent=False)
        return GapsRecorded.model_validate_json(answer.content)

    def hold_reader(
        self,
        table: str,
        reader: str,
        *,
        snapshot_id: int,
        ttl_s: float,
        snapshots_behind: int | None = None,
    ) -> ReaderHold:
        """Start or renew `reader`'s hold on snapshot expiry at `snapshot_id` (see
        service.client.reader.ReaderLease, which keeps it up from a thread). Retried like any
        call: a repeated put stores the same hold.

        Raises: InvalidRequest, OutcomeUnknown, Unavailable, ServerError.
        """
        body: dict[str, Any] = {"snapshot_id": snapshot_id, "ttl_s": ttl_s}
        if snapshots_behind is not None:
            body["snapshots_behind"] = snapshots_behind
        answer = self._call("PUT", f"/v1/tables/{table}/readers/{reader}", json=body)
        return ReaderHold.model_validate_json(answer.content)

    def release_reader(self, table: str, reader: str) -> bool:
        """End `reader`'s hold; False when it held nothing live (idempotent).

        Raises: OutcomeUnknown, Unavailable, ServerError.
        """
        answer = self._call("DELETE", f"/v1/tables/{table}/readers/{reader}")
        return bool(answer.json()["released"])

    def runs(self, table: str, *, limit: int = 20) -> list[dict[str, Any]]:
        """Run reports, newest first. Raises: OutcomeUnknown, Unavailable, ServerError."""
        return self._call("GET", f"/v1/tables/{table}/runs", params={"limit": limit}).json()["runs"]

    # -- plumbing -----------------------------------------------------------------------------

    def close(self) -> None:
        """Close the HTTP client if this object made it."""
        if self._owns_http:
            self._http.close()

    def __enter__(self) -> LeaseClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @staticmethod
    def _acquire_body(
        *,
        holder: str,
        ttl_s: float,
        wait_s: float,
        request_id: str | None,
        partitions: Sequence[str] | None,
    ) -> dict[str, Any]:
        # one id per acquire call, sent on every retry: a retry after a lost answer then gets
        # the lease the first attempt was granted instead of a second one
        body: dict[str, Any] = {
            "holder": holder,
            "ttl_s": ttl_s,
            "request_id": request_id or uuid.uuid4().hex,
            "wait_s": wait_s,
        }
        if partitions is not None:
            body["partitions"] = list(partitions)
        return body

    def _call(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: dict[str, Any] | None = None,
        wait_s: float = 0.0,
        within_s: float | None = None,
        idempotent: bool = True,
    ) -> httpx.Response:
        """One call with retries; a 2xx answer, or the error its problem body stands for."""
        started = time.monotonic()
        attempt = 0
        while True:
            left = None if within_s is None else within_s - (time.monotonic() - started)
            request = self._http.build_request(
                method,
                self._prefix + path,
                json=json,
                params=params,
                headers=self._headers,
                timeout=self._timeout_for(wait_s=wait_s, left_s=left),
            )
            retry_after: float | None = None
            try:
                response = self._http.send(request)
            except httpx.TransportError as exc:
                failure: httpx.TransportError | httpx.Response = exc
                # a request never sent cannot have taken effect; one that was may have
                sent = not isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout)
                if sent and not idempotent:
                    raise self._unknown(method, path, exc, attempt + 1) from exc
            else:
                if response.status_code < 500:
                    return self._checked(response)
                failure = response
                retry_after = _retry_after_s(response)

            delay = self._backoff_s(attempt, retry_after)
            elapsed = time.monotonic() - started
            out_of_time = within_s is not None and elapsed + delay >= within_s
            if attempt >= self.retries or out_of_time:
                if isinstance(failure, httpx.Response):
                    raise _problem(failure)
                raise self._unknown(method, path, failure, attempt + 1) from failure
            log.warning(
                "lakelock %s %s failed (%s); retry %d/%d in %.2fs",
                method,
                path,
                _describe(failure),
                attempt + 1,
                self.retries,
                delay,
            )
            time.sleep(delay)
            attempt += 1

    def _timeout_for(self, *, wait_s: float, left_s: float | None) -> httpx.Timeout:
        # a long poll is answered after up to wait_s: the read timeout must outlast it
        t = self.timeout
        read = None if t.read is None else t.read + max(wait_s, 0.0)
        parts = {"connect": t.connect, "read": read, "write": t.write, "pool": t.pool}
        if left_s is not None:
            cap = max(left_s, 0.05)
            parts = {k: cap if v is None else min(v, cap) for k, v in parts.items()}
        return httpx.Timeout(**parts)

    def _backoff_s(self, attempt: int, retry_after: float | None) -> float:
        # full jitter: retrying clients spread out instead of hitting a recovering service at once
        delay = random.uniform(0.0, min(self.max_backoff_s, self.backoff_s * 2**attempt))
        return max(delay, retry_after or 0.0)

    @staticmethod
    def _checked(response: httpx.Response) -> httpx.Response:
        if response.is_success:
            return response
        raise _problem(response)

    @staticmethod
    def _unknown(method: str, path: str, exc: Exception, attempts: int) -> OutcomeUnknown:
        return OutcomeUnknown(
            f"{method} {path}: {_describe(exc)} after {attempts} attempt(s); it may have taken "
            "effect, retry with the same request id",
            attempts=attempts,
        )


def _rfc3339(at: datetime) -> str:
    """`at` as RFC 3339; a naive datetime is taken as UTC."""
    return (at if at.tzinfo is not None else at.replace(tzinfo=UTC)).isoformat()


def _pause_s(
    answer: Draining | Exception, failures: int, *, poll_s: float, wait_s: float, asked_s: float
) -> float:
    """How long `acquire_until` sleeps after `answer` (which took `asked_s`) before it asks
    again (0: the next ask long-polls at once)."""
    if failures:
        # full jitter: a recovering service is not asked by every job at once
        return random.uniform(0.0, min(poll_s, 0.5 * 2 ** (failures - 1)))
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


def _describe(failure: Exception | httpx.Response) -> str:
    if isinstance(failure, httpx.Response):
        return f"HTTP {failure.status_code}"
    return f"{type(failure).__name__}: {failure}" if str(failure) else type(failure).__name__
