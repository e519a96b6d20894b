"""`LeaseClient`: the lakelock client both jobs use (with `service.client.renewer`): the protocol's
verbs, one method each, over `service.client.transport`.

Imports httpx, pydantic, tenacity and `service.wire` only, so a Spark job can use it without
FastAPI or SQLAlchemy. The protocol is docs/design.md §3, the client's rules §3.2; the wire
format is docs/api.md, its models are in service.wire (the service answers with the same `Lease`).

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

Failures come back as the `service.wire.errors` tree, after the retries of
`service.client.transport.RetryPolicy`.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from types import TracebackType
from typing import Any

import httpx
from pydantic import BaseModel

from service.client.transport import (
    DEFAULT_TIMEOUT,
    DEFAULT_URL,
    Backoff,
    RetryPolicy,
    Transport,
)
from service.client.waiting import STOP_SLICE_S, Acquired, Waited, ask_until
from service.wire import (
    Backpressure,
    DebtBody,
    Draining,
    Due,
    DuePartition,
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
from service.wire.errors import ClaimHeld, LakelockError

__all__ = [
    "DEFAULT_URL",
    "ClaimHeld",
    "DebtBody",
    "Draining",
    "DuePartition",
    "Lease",
    "LeaseClient",
    "TableDebt",
]

log = logging.getLogger(__name__)


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
        timeout: httpx.Timeout = DEFAULT_TIMEOUT,
    ) -> None:
        policy = RetryPolicy(retries, Backoff(first_s=backoff_s, max_s=max_backoff_s))
        self._transport = Transport(
            base_url, token=token, http=http, policy=policy, timeout=timeout
        )

    @property
    def retries(self) -> int:
        """How many more tries a failed call gets (`RetryPolicy`)."""
        return self._transport.policy.retries

    @property
    def backoff_s(self) -> float:
        """The first retry's backoff window (`Backoff`)."""
        return self._transport.policy.backoff.first_s

    @property
    def max_backoff_s(self) -> float:
        """The widest backoff window (`Backoff`)."""
        return self._transport.policy.backoff.max_s

    @property
    def timeout(self) -> httpx.Timeout:
        """A call's timeouts; a long poll's read timeout is longer by its wait."""
        return self._transport.timeout

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
        stop: threading.Event | None = None,
    ) -> Lease:
        """A shared commit lease on `table` (or on `partitions` of it, named as Iceberg names
        them, `dt=2024-06-20/hr=13`), waiting up to `wait_s` on the server for it. Once `stop`
        is set, a failed try is the last.

        Raises:
            Locked: ingest is paused, or a maintenance lease or intent is live (`reason`).
            NotOwner: `request_id` was used by another holder.
            OutcomeUnknown: timed out; retry with the same `request_id`.
            Unavailable, ServerError, InvalidRequest, Unauthorized, Forbidden.
        """
        body = self._acquire_body(
            holder=holder, ttl_s=ttl_s, wait_s=wait_s, request_id=request_id, partitions=partitions
        )
        answer = self._transport.call(
            "POST", f"/v1/tables/{table}/commit-leases", json=body, wait_s=wait_s, stop=stop
        )
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
        stop: threading.Event | None = None,
    ) -> Lease | Draining:
        """The exclusive maintenance lease on `table` (or on `partitions` of it), or `Draining`
        while the commits it conflicts with drain. Once `stop` is set, a failed try is the last.

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
        answer = self._transport.call(
            "POST",
            f"/v1/tables/{table}/maintenance-lease",
            json=body,
            wait_s=wait_s,
            stop=stop,
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
        answer = self._transport.call("POST", f"/v1/tables/{table}/claim", json=body)
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
        stop: threading.Event | None = None,
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
        not wait for it to expire. With `stop`, the wait ends soon after it is set (`Stopped`,
        the intent withdrawn): each long poll is asked in slices of STOP_SLICE_S, a pause
        between asks ends with it, and so do the retries of a failing ask.

        Raises:
            NotGranted: no lease within `within_s`.
            Stopped: `stop` was set before a grant.
            MaintenanceHeld, MaintenanceOff: a maintenance lease cannot be had now.
            NotOwner, LeaseExpired: `request_id` belongs to another holder or ended.
            Unavailable, OutcomeUnknown, ServerError: without `retry_unavailable`.
            InvalidRequest, Unauthorized, Forbidden: a configuration mistake.
        """
        if kind == "claim":
            raise ValueError("a claim is never waited for: ask with claim(), move on if held")
        request_id = request_id or uuid.uuid4().hex

        def ask(wait_s: float) -> Lease | Draining:
            return self._acquire(kind, table, holder, ttl_s, wait_s, request_id, partitions, stop)

        def withdraw() -> None:
            self._withdraw_quietly(table, request_id=request_id, holder=holder)

        return ask_until(
            ask,
            what=f"{kind} lease on {table}",
            within_s=within_s,
            poll_s=poll_s,
            retry_unavailable=retry_unavailable,
            on_wait=on_wait,
            clock=clock,
            sleep=sleep,
            withdraw=withdraw,
            stop=stop,
        )

    def _acquire(
        self,
        kind: LeaseKind,
        table: str,
        holder: str,
        ttl_s: float,
        wait_s: float,
        request_id: str,
        partitions: Sequence[str] | None,
        stop: threading.Event | None,
    ) -> Lease | Draining:
        acquire = self.acquire_commit if kind == "commit" else self.acquire_maintenance
        return acquire(
            table,
            holder=holder,
            ttl_s=ttl_s,
            wait_s=wait_s,
            request_id=request_id,
            partitions=partitions,
            stop=stop,
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
        answer = self._transport.call(
            "POST", f"/v1/leases/{lease.lease_id}/renew", json=body, within_s=within_s
        )
        return Renewed.model_validate_json(answer.content).lease

    def release(
        self,
        lease: Lease,
        *,
        written: Mapping[str, tuple[int, int]] | None = None,
        compacted: Sequence[str] | None = None,
    ) -> None:
        """Release `lease`; releasing it again is not an error.

        With what the lease did (docs/design.md §5.1): a commit lease the files its commit
        added, `written` = {partition name: (data files, delete files)}; a maintenance lease
        the partitions it compacted, `compacted`. Counted by the release that ends the lease
        only, so a retry after a lost answer counts nothing twice (retried like any release).

        Raises:
            NotFound: unknown lease id.
            NotOwner: the lease is another holder's.
            StaleToken: a maintenance lease released with another token.
            InvalidRequest: `written` on a lease other than a commit lease, `compacted` on one
                other than a maintenance lease or outside its scope (nothing changed).
            OutcomeUnknown, Unavailable, ServerError.
        """
        if written is None and compacted is None:
            params: dict[str, Any] = {"holder": lease.holder}
            if lease.token is not None:
                params["token"] = lease.token
            self._transport.call("DELETE", f"/v1/leases/{lease.lease_id}", params=params)
            return
        body: dict[str, Any] = {"holder": lease.holder}
        if lease.token is not None:
            body["token"] = lease.token
        if written is not None:
            body["written"] = {
                name: {"data_files": data, "delete_files": deletes}
                for name, (data, deletes) in written.items()
            }
        if compacted is not None:
            body["compacted"] = list(compacted)
        self._transport.call("POST", f"/v1/leases/{lease.lease_id}/release", json=body)

    def due(
        self,
        tables: Sequence[str],
        *,
        holder: str,
        wait_s: float = 30.0,
        limit: int = 100,
        stop: threading.Event | None = None,
    ) -> list[DuePartition]:
        """The partitions due for compaction on `tables` (names or globs, `lake.db.*`), most
        files first: at once when any is due, else as soon as one becomes due, else an empty
        list after `wait_s` (a long-poll, up to 60 s). Leaves out the tables another
        compactor holds the claim of (`holder`'s own claims, and its runs' `<holder>/<run>`,
        do not) and those whose maintenance is switched off. Retried like any read.

        With `stop`, the wait ends within STOP_SLICE_S of `stop` being set, with what the last
        slice answered: the long poll is asked in slices of that length (a sync HTTP call
        cannot be interrupted), and the retries end with it.

        Raises: InvalidRequest, OutcomeUnknown, Unavailable, ServerError.
        """
        if stop is None:
            return self._due(tables, holder, wait_s, limit, None)
        deadline = time.monotonic() + wait_s
        while True:
            left = max(deadline - time.monotonic(), 0.0)
            part = round(min(left, STOP_SLICE_S), 3)
            due = self._due(tables, holder, part, limit, stop)
            if due or part >= left or stop.is_set():
                return due

    def _due(
        self,
        tables: Sequence[str],
        holder: str,
        wait_s: float,
        limit: int,
        stop: threading.Event | None,
    ) -> list[DuePartition]:
        params: dict[str, Any] = {
            "table": list(tables),
            "holder": holder,
            "wait_s": wait_s,
            "limit": limit,
        }
        answer = self._transport.call("GET", "/v1/due", params=params, wait_s=wait_s, stop=stop)
        return list(Due.model_validate_json(answer.content).due)

    def withdraw_intent(self, table: str, *, request_id: str, holder: str) -> bool:
        """Withdraw the intent a maintenance request opened (give up draining); True when one
        was open. Commit leases are granted again at once.

        Raises:
            NotOwner: the intent is another holder's. OutcomeUnknown, Unavailable, ServerError.
        """
        answer = self._transport.call(
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
        answer = self._transport.call("POST", f"/v1/tables/{table}/backpressure", json=body)
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
        answer = self._transport.call("DELETE", f"/v1/tables/{table}/backpressure", params=params)
        return Backpressure.model_validate_json(answer.content).partitions

    def revoke(self, lease_id: str, *, reason: str) -> dict[str, Any]:
        """Force-release a lease (operator); its holder learns it at its next renew.

        Raises:
            NotFound, Forbidden, OutcomeUnknown, Unavailable, ServerError.
        """
        answer = self._transport.call(
            "POST", f"/v1/leases/{lease_id}/revoke", json={"reason": reason}
        )
        revoked: dict[str, Any] = answer.json()
        return revoked

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
        answer = self._transport.call("PUT", f"/v1/tables/{table}/switch", json=body)
        state: dict[str, Any] = answer.json()
        return state

    def state(self, table: str, *, wait_s: float = 0.0, since: int | None = None) -> dict[str, Any]:
        """The table's state; with `wait_s`, as soon as its version passes `since`.

        Raises: InvalidRequest, OutcomeUnknown, Unavailable, ServerError.
        """
        params: dict[str, Any] = {}
        if wait_s > 0:
            params["wait"] = wait_s
        if since is not None:
            params["since"] = since
        answer = self._transport.call("GET", f"/v1/tables/{table}", params=params, wait_s=wait_s)
        state: dict[str, Any] = answer.json()
        return state

    def tables(self) -> list[dict[str, Any]]:
        """The state of every known table, by name, read a page at a time (a service before
        paging answers them all in one, without `next`). Raises: OutcomeUnknown, Unavailable,
        ServerError."""
        found: list[dict[str, Any]] = []
        params: dict[str, Any] = {"limit": 1000}
        while True:
            page = self._transport.call("GET", "/v1/tables", params=params).json()
            found.extend(page["tables"])
            if not page.get("next"):
                return found
            params["after"] = page["next"]

    def events(self, *, table: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
        """Audit events, newest first. Raises: OutcomeUnknown, Unavailable, ServerError."""
        params: dict[str, Any] = {"limit": limit}
        if table is not None:
            params["table"] = table
        answer = self._transport.call("GET", "/v1/events", params=params)
        events: list[dict[str, Any]] = answer.json()["events"]
        return events

    def report_run(self, table: str, report: dict[str, Any]) -> int:
        """Store a maintenance run report; returns its run id.

        Not retried after a timeout (a retry could store the report twice).

        Raises: InvalidRequest, OutcomeUnknown, Unavailable, ServerError.
        """
        answer = self._transport.call(
            "POST", f"/v1/tables/{table}/runs", json=report, idempotent=False
        )
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
        answer = self._transport.call("PUT", f"/v1/tables/{table}/debt", json=body)
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
        answer = self._transport.call("PUT", f"/v1/tables/{table}/ingest-lag", json=body)
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
        answer = self._transport.call(
            "POST", f"/v1/tables/{table}/ingest-gaps", json=body, idempotent=False
        )
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
        answer = self._transport.call("PUT", f"/v1/tables/{table}/readers/{reader}", json=body)
        return ReaderHold.model_validate_json(answer.content)

    def release_reader(self, table: str, reader: str) -> bool:
        """End `reader`'s hold; False when it held nothing live (idempotent).

        Raises: OutcomeUnknown, Unavailable, ServerError.
        """
        answer = self._transport.call("DELETE", f"/v1/tables/{table}/readers/{reader}")
        return bool(answer.json()["released"])

    def runs(self, table: str, *, limit: int = 20) -> list[dict[str, Any]]:
        """Run reports, newest first. Raises: OutcomeUnknown, Unavailable, ServerError."""
        answer = self._transport.call("GET", f"/v1/tables/{table}/runs", params={"limit": limit})
        runs: list[dict[str, Any]] = answer.json()["runs"]
        return runs

    # -- plumbing -----------------------------------------------------------------------------

    def close(self) -> None:
        """Close the HTTP client if this object made it."""
        self._transport.close()

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


def _rfc3339(at: datetime) -> str:
    """`at` as RFC 3339; a naive datetime is taken as UTC."""
    return (at if at.tzinfo is not None else at.replace(tzinfo=UTC)).isoformat()
