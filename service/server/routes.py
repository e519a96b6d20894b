"""The HTTP routes: parse, run one protocol call in one transaction, translate the answer.

Routes are `async`: each protocol call runs on a worker thread (`Runtime.transact`), and a
long-poll (`wait_s`, `wait`) loops "try once, then park until the table's version moves", so
each try is its own short transaction, no lock is held and no thread is taken while waiting.
The protocol is in service.lock.leases; which statuses each route answers is declared with it
(`responses=`), so openapi.json is the contract.
"""

from __future__ import annotations

import asyncio
import json
import math
import uuid
from datetime import timedelta
from typing import Annotated, Any

import anyio.to_thread
from fastapi import APIRouter, Depends, Path, Query, Request, Response
from fastapi.responses import JSONResponse, PlainTextResponse
from pydantic import AfterValidator
from sqlalchemy import delete, insert, select

from service.lock import audit, debt, ingest, leases, migrate, readers, state
from service.lock.db import now, runs_t
from service.server.auth import (
    JobDep,
    OperatorDep,
    ReaderDep,
    caller,
    check_touch,
    may_touch,
)
from service.server.runtime import ClientGone, Runtime
from service.server.settings import ApiToken
from service.wire import (
    HOLDER_PATTERN,
    MAX_TOKEN,
    READER_PATTERN,
    REQUEST_ID_PATTERN,
    TABLE_PATTERN,
    AcquireBody,
    Backpressure,
    BackpressureBody,
    ClaimBody,
    DebtBody,
    Draining,
    Events,
    GapsBody,
    GapsRecorded,
    IngestLag,
    LagBody,
    Lease,
    PartitionName,
    ReaderBody,
    ReaderHold,
    Released,
    RenewBody,
    Renewed,
    RevokeBody,
    RunBody,
    RunId,
    Runs,
    SwitchBody,
    TableDebt,
    Tables,
    TableState,
    Withdrawn,
    partition_name,
)
from service.wire.errors import InvalidRequest, Locked, Refused, Unavailable
from service.wire.scope import label

__all__ = ["LeaseId", "RuntimeDep", "TableName", "problems", "router"]

router = APIRouter()

TableName = Annotated[
    str,
    Path(
        pattern=TABLE_PATTERN,
        max_length=194,
        description="Iceberg identifier namespace.table or catalog.namespace.table; compared "
        "case-insensitively (Spark's default), answered in lower case",
        examples=["lake.db.events"],
    ),
    AfterValidator(str.lower),
]
"""`namespace.table` or `catalog.namespace.table`; each part an identifier of at most 64 chars.

Its canonical form is lower case, on every backend: Spark resolves Iceberg identifiers
case-insensitively, so `lake.db.Events` and `lake.db.events` are one table and one lock."""

LeaseId = Annotated[uuid.UUID, Path(description="a lease id as granted (a UUID)")]

PROBLEM = "application/problem+json"

_WHY = {
    400: "the body is not UTF-8 text",
    401: "no bearer token, or an unknown one",
    403: "the token's role may not do this",
    404: "no such lease or table",
    409: "refused by the protocol: another holder's lease or request_id, a maintenance lease "
    "is held, or the table is claimed",
    410: "the lease expired or was released; acquire again",
    412: "stale fencing token: a newer holder exists; stop writing",
    413: "the body is too large",
    415: "the body is not JSON (send content-type: application/json)",
    422: "a field broke a rule; the detail names it",
    423: "locked: ingest paused, maintenance held or draining, or maintenance disabled",
    503: "the lock database cannot be reached (Retry-After)",
}


def problems(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses` for problem+json answers with these statuses."""
    return {
        status: {
            "description": _WHY[status],
            "content": {PROBLEM: {"schema": {"$ref": "#/components/schemas/Problem"}}},
        }
        for status in statuses
    }


_READ = problems(401, 403, 422, 503)
_WRITE = problems(400, 401, 403, 413, 415, 422, 503)


async def _runtime(request: Request) -> Runtime:
    return request.app.state.runtime


RuntimeDep = Annotated[Runtime, Depends(_runtime)]


def check_acquire(rt: Runtime, body: AcquireBody) -> None:
    _check_ttl(rt, body.ttl_s, body.wait_s)
    _check_partitions(rt, body.partitions)


def _check_partitions(rt: Runtime, partitions: list[str] | None) -> None:
    most = rt.settings.max_partitions
    if partitions is not None and len(partitions) > most:
        raise InvalidRequest(
            f"partitions names {len(partitions)} partitions, more than the {most} this "
            "service takes (LAKELOCK_MAX_PARTITIONS); leave the field out for a lease on the "
            "whole table, or split the work into leases of at most that many",
            field="partitions",
        )


def _check_ttl(rt: Runtime, ttl_s: float | None, wait_s: float = 0.0) -> None:
    s = rt.settings
    if ttl_s is not None and not s.min_ttl_s <= ttl_s <= s.max_ttl_s:
        raise InvalidRequest(
            f"ttl_s must be between {s.min_ttl_s:g} and {s.max_ttl_s:g} seconds, got {ttl_s:g}",
            field="ttl_s",
        )
    if wait_s > s.max_wait_s:
        raise InvalidRequest(
            f"wait_s must be between 0 and {s.max_wait_s:g} seconds, got {wait_s:g}",
            field="wait_s",
        )


def _retry_header(seconds: float | None, rt: Runtime) -> dict[str, str]:
    value = seconds if seconds is not None else rt.settings.retry_after_s
    return {"Retry-After": str(max(1, math.ceil(value)))}


def _clock() -> float:
    return asyncio.get_running_loop().time()


# -- health ----------------------------------------------------------------------------------


@router.get("/healthz", tags=["health"])
async def healthz() -> dict[str, str]:
    """The process is up (liveness); says nothing about the database."""
    return {"status": "ok"}


@router.get("/readyz", tags=["health"], responses=problems(503))
async def readyz(rt: RuntimeDep) -> dict[str, Any]:
    """The database answers and its schema is at the migration head (readiness)."""
    if rt.changes.closing.is_set():
        raise Unavailable("shutting down", retry_after_s=rt.settings.retry_after_s)

    try:
        revision = await rt.read(migrate.revision_of)
    except Exception as exc:
        raise Unavailable(
            f"the lock database cannot be reached: {type(exc).__name__}",
            retry_after_s=rt.settings.retry_after_s,
        ) from exc
    if revision != migrate.head():
        raise Unavailable(
            f"the lock database is at migration {revision}, not {migrate.head()}: "
            "run `python -m service migrate`",
            retry_after_s=rt.settings.retry_after_s,
        )
    return {"status": "ready", "migration": revision}


@router.get(
    "/metrics",
    tags=["health"],
    response_class=PlainTextResponse,
    responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}}, **_READ},
)
async def metrics(rt: RuntimeDep, _: ReaderDep) -> Response:
    # the state gauges are read from the database: off the event loop
    body = await anyio.to_thread.run_sync(rt.metrics.render, limiter=rt.db_limiter)
    return PlainTextResponse(body, media_type="text/plain; version=0.0.4")


# -- tables ----------------------------------------------------------------------------------


@router.get("/v1/tables", tags=["tables"], responses=_READ)
async def list_tables(
    rt: RuntimeDep,
    who: ReaderDep,
    limit: Annotated[int, Query(ge=1, le=1000, description="most tables in this page")] = 100,
    after: Annotated[
        str | None,
        Query(
            pattern=TABLE_PATTERN,
            max_length=194,
            description="the tables after this name only: the `next` of the page before",
        ),
    ] = None,
) -> Tables:
    """The known tables by name, a page at a time: follow `next` (as `after`) until it is
    null. Each table's state costs the database a few queries, so a page bounds one call. A
    token limited by LAKELOCK_TOKEN_TABLES sees the tables it may touch only."""
    start = None if after is None else after.lower()
    tables, following = await rt.read(
        lambda conn: state.list_tables(
            conn, limit=limit, after=start, shown=lambda name: may_touch(who, name)
        )
    )
    return Tables(tables=tuple(tables), next=following)


@router.get("/v1/tables/{table}", tags=["tables"], responses={**_READ, **problems(404)})
async def get_table(
    table: TableName,
    rt: RuntimeDep,
    _: ReaderDep,
    request: Request,
    wait: Annotated[float, Query(ge=0, description="long-poll up to this many seconds")] = 0.0,
    since: Annotated[
        int | None, Query(ge=0, le=MAX_TOKEN, description="answer once version > since")
    ] = None,
) -> TableState:
    _check_ttl(rt, None, wait)
    until = _clock() + wait
    while True:
        current = await rt.read(lambda conn: state.table_state(conn, table=table))
        if since is None or current.version > since or _clock() >= until:
            return current
        if rt.changes.closing.is_set():
            return current
        try:
            await rt.changes.wait(
                table, seen=current.version, until=until, is_disconnected=request.is_disconnected
            )
        except ClientGone:
            return current


@router.put("/v1/tables/{table}/switch", tags=["tables"], responses=_WRITE)
async def set_switch(
    table: TableName, body: SwitchBody, rt: RuntimeDep, who: OperatorDep
) -> TableState:
    changed = await rt.transact(
        lambda conn: leases.set_switch(
            conn,
            table=table,
            reason=body.reason,
            actor=who.name,
            ingest=body.ingest,
            maintenance=body.maintenance,
            backpressure=body.backpressure,
        )
    )
    return changed


@router.put("/v1/tables/{table}/debt", tags=["tables"], responses=_WRITE)
async def report_debt(table: TableName, body: DebtBody, rt: RuntimeDep, who: JobDep) -> TableDebt:
    """Store the table's compaction debt as a compactor measured it; it replaces the one
    before. A table never seen before becomes known. Answers the debt as stored."""
    return await rt.transact(lambda conn: debt.report(conn, table=table, body=body, by=who.name))


@router.put("/v1/tables/{table}/ingest-lag", tags=["tables"], responses=_WRITE)
async def report_ingest_lag(
    table: TableName, body: LagBody, rt: RuntimeDep, who: JobDep
) -> IngestLag:
    """Store how far the table's ingest query is behind its source (records per
    topic-partition, after a committed batch); it replaces the report before."""
    return await rt.transact(
        lambda conn: ingest.report_lag(conn, table=table, body=body, by=who.name)
    )


@router.post("/v1/tables/{table}/ingest-gaps", tags=["tables"], responses=_WRITE)
async def record_ingest_gaps(
    table: TableName, body: GapsBody, rt: RuntimeDep, who: JobDep
) -> GapsRecorded:
    """Record offset ranges the source deleted before the ingest job read them, each as an
    `ingest.gap` event on the table's audit trail (the job skips them only when told to)."""
    return await rt.transact(
        lambda conn: ingest.record_gaps(conn, table=table, body=body, by=who.name)
    )


ReaderName = Annotated[str, Path(pattern=READER_PATTERN, description="the reader's name")]


@router.put("/v1/tables/{table}/readers/{reader}", tags=["readers"], responses=_WRITE)
async def hold_reader(
    table: TableName, reader: ReaderName, body: ReaderBody, rt: RuntimeDep, who: JobDep
) -> ReaderHold:
    """Start or renew a reader's hold at its position (a snapshot id): `expire_snapshots` keeps
    that snapshot and every later one while the hold is live. Put it again at a third of
    `ttl_s`, with the new position as the reader advances."""
    return await rt.transact(
        lambda conn: readers.hold(conn, table=table, reader=reader, body=body, by=caller(who))
    )


@router.delete("/v1/tables/{table}/readers/{reader}", tags=["readers"], responses=_WRITE)
async def release_reader(
    table: TableName, reader: ReaderName, rt: RuntimeDep, who: JobDep
) -> dict[str, bool]:
    """End a reader's hold (idempotent: `released` is false when it held nothing live)."""
    released = await rt.transact(
        lambda conn: readers.release(conn, table=table, reader=reader, by=caller(who))
    )
    return {"released": released}


def _decoded_report(report: str) -> dict[str, Any]:
    try:
        decoded = json.loads(report)
    except (ValueError, RecursionError):
        # a report stored before the depth rule: one bad row must not hide the others
        return {"error": "this report cannot be decoded"}
    return decoded if isinstance(decoded, dict) else {"report": decoded}


@router.get("/v1/tables/{table}/runs", tags=["runs"], responses=_READ)
async def list_runs(
    table: TableName,
    rt: RuntimeDep,
    _: ReaderDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 20,
) -> Runs:
    def read(conn: Any) -> list[dict[str, Any]]:
        rows = conn.execute(
            select(runs_t)
            .where(runs_t.c.table_name == table)
            .order_by(runs_t.c.id.desc())
            .limit(limit)
        )
        return [
            {
                "run_id": row.id,
                "reported_at": row.reported_at.isoformat() + "Z",
                **_decoded_report(row.report),
            }
            for row in rows
        ]

    return Runs(runs=tuple(await rt.read(read)), kept=rt.settings.runs_kept)


@router.post("/v1/tables/{table}/runs", status_code=201, tags=["runs"], responses=_WRITE)
async def report_run(table: TableName, body: RunBody, rt: RuntimeDep, who: JobDep) -> RunId:
    report = body.model_dump(mode="json")
    encoded = json.dumps(report, sort_keys=True, default=str)

    def store(conn: Any) -> int:
        leases.hold_table(conn, table=table)
        at = now(conn)
        run_id = conn.execute(
            insert(runs_t).values(
                table_name=table,
                reported_at=at,
                holder=body.holder or who.name,
                outcome=body.outcome,
                report=encoded,
            )
        ).inserted_primary_key[0]
        # keep the last runs per table only
        keep = rt.settings.runs_kept
        oldest = conn.execute(
            select(runs_t.c.id)
            .where(runs_t.c.table_name == table)
            .order_by(runs_t.c.id.desc())
            .offset(keep - 1)
            .limit(1)
        ).scalar()
        if oldest is not None:
            conn.execute(delete(runs_t).where(runs_t.c.table_name == table, runs_t.c.id < oldest))
        audit.record(
            conn,
            at=at,
            table=table,
            event="run.reported",
            holder=body.holder or who.name,
            actor=who.name,
            outcome=body.outcome,
        )
        return int(run_id)

    return RunId(run_id=await rt.transact(store))


# -- leases ----------------------------------------------------------------------------------


async def try_commit(
    rt: Runtime, table: str, body: AcquireBody, ttl: timedelta, who: ApiToken
) -> Lease:
    """One try for a commit lease: one transaction."""
    return await rt.transact(
        lambda conn: leases.acquire_commit(
            conn,
            table=table,
            holder=body.holder,
            ttl=ttl,
            request_id=body.request_id,
            caller=caller(who),
            partitions=body.partitions,
        )
    )


def count_denial(rt: Runtime, refusal: Locked, body: AcquireBody) -> None:
    """A commit request answered with its refusal (not one that waits on)."""
    rt.metrics.denials.labels(
        "commit", refusal.extra.get("reason", ""), label(body.partitions)
    ).inc()


async def end_lease(
    rt: Runtime, lease_id: str, *, who: ApiToken, holder: str | None, token: int | None
) -> Released:
    """A release (or an operator's revoke by release): one transaction."""
    lease = await rt.transact(
        lambda conn: leases.release(
            conn, lease_id=lease_id, caller=caller(who), holder=holder, token=token
        )
    )
    return Released(lease_id=lease_id, state=lease.state, lease=lease)


@router.post(
    "/v1/tables/{table}/commit-leases",
    status_code=201,
    tags=["leases"],
    responses={**_WRITE, **problems(409, 410, 423)},
)
async def acquire_commit(
    table: TableName, body: AcquireBody, rt: RuntimeDep, who: JobDep, request: Request
) -> Lease:
    check_acquire(rt, body)
    ttl = timedelta(seconds=body.ttl_s)
    until = _clock() + body.wait_s
    while True:
        # read before trying, so a change between the try and the wait is not missed; a call
        # that will not wait does not need it
        seen = await rt.version(table) if body.wait_s else 0
        try:
            return await try_commit(rt, table, body, ttl, who)
        except Locked as exc:
            if _clock() >= until or rt.changes.closing.is_set():
                count_denial(rt, exc, body)
                raise
            retry = exc.retry_after_s
            try:
                await rt.changes.wait(
                    table,
                    seen=seen,
                    until=until if retry is None else min(until, _clock() + retry),
                    is_disconnected=request.is_disconnected,
                )
            except ClientGone:
                raise exc from None


@router.post(
    "/v1/tables/{table}/maintenance-lease",
    status_code=201,
    tags=["leases"],
    responses={
        202: {
            "description": "draining: an intent is open; ask again with the same request_id",
            "model": Draining,
        },
        **_WRITE,
        **problems(409, 410, 423),
    },
)
async def acquire_maintenance(
    table: TableName, body: AcquireBody, rt: RuntimeDep, who: JobDep, request: Request
) -> Lease:
    check_acquire(rt, body)
    ttl = timedelta(seconds=body.ttl_s)
    intent_ttl = timedelta(seconds=rt.settings.intent_ttl_s)
    until = _clock() + body.wait_s
    while True:
        seen = await rt.version(table) if body.wait_s else 0
        try:
            result = await rt.transact(
                lambda conn: leases.acquire_maintenance(
                    conn,
                    table=table,
                    holder=body.holder,
                    ttl=ttl,
                    request_id=body.request_id,
                    intent_ttl=intent_ttl,
                    caller=caller(who),
                    partitions=body.partitions,
                )
            )
        except Refused as exc:
            rt.metrics.denials.labels("maintenance", exc.slug, label(body.partitions)).inc()
            raise
        if isinstance(result, Lease):
            return result
        answer = JSONResponse(
            result.model_dump(mode="json"),
            status_code=202,
            headers=_retry_header(result.retry_after_s, rt),
        )
        if _clock() >= until or rt.changes.closing.is_set():
            return answer
        # asking again before the intent expires keeps it open; once the client is gone the
        # intent is left to expire, so a compactor that died holds ingest no longer than that
        try:
            await rt.changes.wait(
                table,
                seen=seen,
                until=min(until, _clock() + rt.settings.intent_ttl_s / 3),
                is_disconnected=request.is_disconnected,
            )
        except ClientGone:
            return answer


@router.post(
    "/v1/tables/{table}/claim",
    status_code=201,
    tags=["leases"],
    responses={**_WRITE, **problems(409, 410)},
)
async def claim(table: TableName, body: ClaimBody, rt: RuntimeDep, who: JobDep) -> Lease:
    """Claim the table for one compactor process (docs/design.md §5): a lease of kind `claim`,
    exclusive among claims only, on the whole table. It never waits (`wait_s` is ignored): a
    claim another holder has is a 409 `claim-held` naming the holder and the seconds left.
    Renew, release and revoke it as any lease, at `/v1/leases/{lease_id}`."""
    _check_ttl(rt, body.ttl_s)
    try:
        return await rt.transact(
            lambda conn: leases.acquire_claim(
                conn,
                table=table,
                holder=body.holder,
                ttl=timedelta(seconds=body.ttl_s),
                request_id=body.request_id,
                caller=caller(who),
            )
        )
    except Refused as exc:
        rt.metrics.denials.labels("claim", exc.slug, "table").inc()
        raise


@router.delete(
    "/v1/tables/{table}/intents/{request_id}",
    tags=["leases"],
    responses={**_READ, **problems(409)},
)
async def withdraw_intent(
    table: TableName,
    request_id: Annotated[str, Path(pattern=REQUEST_ID_PATTERN)],
    holder: Annotated[
        str,
        Query(
            pattern=HOLDER_PATTERN, max_length=255, description="the holder that opened the intent"
        ),
    ],
    rt: RuntimeDep,
    who: JobDep,
) -> Withdrawn:
    """Withdraw the intent a maintenance request opened (a compactor giving up the drain):
    commit leases are granted again at once. Withdrawing one that is gone is not an error."""
    withdrawn = await rt.transact(
        lambda conn: leases.withdraw_intent(
            conn, table=table, request_id=request_id, holder=holder, caller=caller(who)
        )
    )
    return Withdrawn(table=table, request_id=request_id, withdrawn=withdrawn)


@router.post(
    "/v1/tables/{table}/backpressure",
    tags=["leases"],
    responses={**_WRITE, **problems(404, 409, 410)},
)
async def hold_back(
    table: TableName, body: BackpressureBody, rt: RuntimeDep, who: JobDep
) -> Backpressure:
    """Hold the commits that touch `partitions` until `holder` compacts them (docs/design.md
    §11): a compactor whose plan found them past their debt bound, under its live claim on the
    table (`holder`: the claim's holder or a run under it, `<claim holder>/<run>`). They stay
    held as long as the claim (each renew extends them); each ends with `holder`'s maintenance
    grant covering it, a `DELETE`, or the claim's release, revoke or expiry. With the table's
    `backpressure` or `maintenance` switched off, nothing is held (`off` says which)."""
    _check_partitions(rt, body.partitions)
    return await rt.transact(
        lambda conn: leases.hold_back(
            conn,
            table=table,
            claim_id=body.claim_id,
            holder=body.holder,
            partitions=body.partitions,
            reason=body.reason,
            caller=caller(who),
        )
    )


# a query string is text, so "-1.5e-9" is a string too: the name's rule, stated in openapi.json
# as for the bodies' partitions, is what refuses it
PartitionParam = Annotated[PartitionName, AfterValidator(partition_name)]


@router.delete("/v1/tables/{table}/backpressure", tags=["leases"], responses=_WRITE)
async def let_go(
    table: TableName,
    holder: Annotated[
        str,
        Query(pattern=HOLDER_PATTERN, max_length=255, description="the holder that asked for it"),
    ],
    rt: RuntimeDep,
    who: JobDep,
    partition: Annotated[
        list[PartitionParam] | None,
        Query(description="only these partitions (repeat it); without it, every one"),
    ] = None,
) -> Backpressure:
    """End `holder`'s backpressure on the table (a run that leaves a partition it held
    uncompacted: a group skipped, the run ended): its commits are granted again at once.
    Answers the partitions let go."""
    return await rt.transact(
        lambda conn: leases.let_go(
            conn, table=table, holder=holder, caller=caller(who), partitions=partition
        )
    )


@router.get("/v1/leases/{lease_id}", tags=["leases"], responses={**_READ, **problems(404)})
async def get_lease(lease_id: LeaseId, rt: RuntimeDep, who: ReaderDep) -> Lease:
    """The lease in any state; a token limited by LAKELOCK_TOKEN_TABLES sees only the leases
    of the tables it may touch (403 for another's)."""
    lease = await rt.read(lambda conn: state.lease_state(conn, lease_id=str(lease_id)))
    check_touch(who, lease.table)
    return lease


@router.post(
    "/v1/leases/{lease_id}/renew",
    tags=["leases"],
    responses={**_WRITE, **problems(404, 409, 410, 412)},
)
async def renew(lease_id: LeaseId, body: RenewBody, rt: RuntimeDep, who: JobDep) -> Renewed:
    _check_ttl(rt, body.ttl_s)
    ttl = None if body.ttl_s is None else timedelta(seconds=body.ttl_s)
    lease = await rt.transact(
        lambda conn: leases.renew(
            conn,
            lease_id=str(lease_id),
            holder=body.holder,
            caller=caller(who),
            ttl=ttl,
            token=body.token,
        )
    )
    rt.metrics.renewals.labels(lease.kind).inc()
    return Renewed(lease=lease)


@router.delete(
    "/v1/leases/{lease_id}",
    tags=["leases"],
    responses={**_READ, **problems(404, 409, 412)},
)
async def release(
    lease_id: LeaseId,
    rt: RuntimeDep,
    who: JobDep,
    holder: Annotated[
        str | None,
        Query(
            pattern=HOLDER_PATTERN,
            max_length=255,
            description="the lease's holder (operators may leave it out)",
        ),
    ] = None,
    token: Annotated[
        int | None, Query(ge=1, le=MAX_TOKEN, description="a maintenance lease's token")
    ] = None,
) -> Released:
    return await end_lease(rt, str(lease_id), who=who, holder=holder, token=token)


@router.post(
    "/v1/leases/{lease_id}/revoke",
    tags=["leases"],
    responses={**_WRITE, **problems(404)},
)
async def revoke(lease_id: LeaseId, body: RevokeBody, rt: RuntimeDep, who: OperatorDep) -> Lease:
    return await rt.transact(
        lambda conn: leases.revoke(conn, lease_id=str(lease_id), reason=body.reason, actor=who.name)
    )


# -- events ----------------------------------------------------------------------------------


@router.get("/v1/events", tags=["events"], responses=_READ)
async def events(
    rt: RuntimeDep,
    who: ReaderDep,
    table: Annotated[str | None, Query(pattern=TABLE_PATTERN, max_length=194)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> Events:
    """The newest events, of one table or of all. A token limited by LAKELOCK_TOKEN_TABLES
    reads the events of the tables it may touch only: another `table` is a 403, and without
    one the trail is filtered."""
    name = None if table is None else table.lower()
    if name is not None:
        check_touch(who, name)
    shown = None if who.tables is None else lambda t: may_touch(who, t)
    found = await rt.read(lambda c: audit.recent(c, table=name, limit=limit, shown=shown))
    return Events(events=tuple(found))
