"""Commit and maintenance leases, the intents of draining maintenance requests, and every
lease by its id: renew, release, revoke (docs/design.md §3)."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import JSONResponse

from service.lock import due, intents, leases, state
from service.server.auth import JobDep, OperatorDep, ReaderDep, caller, check_touch
from service.server.routes.common import (
    READ,
    WRITE,
    LeaseId,
    RuntimeDep,
    TableName,
    check_acquire,
    check_ttl,
    clock,
    problems,
    retry_header,
)
from service.server.runtime import ClientGone, Runtime
from service.server.settings import ApiToken
from service.wire import (
    HOLDER_PATTERN,
    MAX_TOKEN,
    REQUEST_ID_PATTERN,
    AcquireBody,
    Draining,
    Lease,
    ReleaseBody,
    Released,
    RenewBody,
    Renewed,
    RevokeBody,
    Withdrawn,
)
from service.wire.errors import InvalidRequest, Locked, Refused
from service.wire.scope import label

__all__ = ["router"]

router = APIRouter(tags=["leases"])


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
    rt: Runtime,
    lease_id: str,
    *,
    who: ApiToken,
    holder: str | None,
    token: int | None,
    body: ReleaseBody | None = None,
) -> Released:
    """A release (or an operator's revoke by release), with what the lease did to the table's
    partitions when `body` says it: one transaction."""
    written = None
    if body is not None and body.written:
        written = {n: due.Files.of(f) for n, f in body.written.items()}
    lease = await rt.transact(
        lambda conn: leases.release(
            conn,
            lease_id=lease_id,
            caller=caller(who),
            holder=holder,
            token=token,
            written=written,
            compacted=body.compacted if body is not None else None,
            trigger=rt.trigger,
        )
    )
    return Released(lease_id=lease_id, state=lease.state, lease=lease)


def _one(name: str, sent: int | str | None, given: int | str | None) -> int | str | None:
    """`holder` or `token` sent in the body or in the query, not two different ones."""
    if sent is not None and given is not None and sent != given:
        raise InvalidRequest(
            f"{name} is {given!r} in the query and {sent!r} in the body: send it once",
            field=name,
        )
    return sent if sent is not None else given


@router.post(
    "/v1/tables/{table}/commit-leases",
    status_code=201,
    responses={**WRITE, **problems(409, 410, 423)},
)
async def acquire_commit(
    table: TableName, body: AcquireBody, rt: RuntimeDep, who: JobDep, request: Request
) -> Lease:
    check_acquire(rt, body)
    ttl = timedelta(seconds=body.ttl_s)
    until = clock() + body.wait_s
    while True:
        # read before trying, so a change between the try and the wait is not missed; a call
        # that will not wait does not need it
        seen = await rt.version(table) if body.wait_s else 0
        try:
            return await try_commit(rt, table, body, ttl, who)
        except Locked as exc:
            if clock() >= until or rt.changes.closing.is_set():
                count_denial(rt, exc, body)
                raise
            retry = exc.retry_after_s
            try:
                await rt.changes.wait(
                    table,
                    seen=seen,
                    until=until if retry is None else min(until, clock() + retry),
                    is_disconnected=request.is_disconnected,
                )
            except ClientGone:
                raise exc from None


@router.post(
    "/v1/tables/{table}/maintenance-lease",
    status_code=201,
    response_model=Lease,
    responses={
        202: {
            "description": "draining: an intent is open; ask again with the same request_id",
            "model": Draining,
        },
        **WRITE,
        **problems(409, 410, 423),
    },
)
async def acquire_maintenance(
    table: TableName, body: AcquireBody, rt: RuntimeDep, who: JobDep, request: Request
) -> Lease | JSONResponse:
    check_acquire(rt, body)
    ttl = timedelta(seconds=body.ttl_s)
    intent_ttl = timedelta(seconds=rt.settings.intent_ttl_s)
    until = clock() + body.wait_s
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
            headers=retry_header(result.retry_after_s, rt),
        )
        if clock() >= until or rt.changes.closing.is_set():
            return answer
        # asking again before the intent expires keeps it open; once the client is gone the
        # intent is left to expire, so a compactor that died holds ingest no longer than that
        try:
            await rt.changes.wait(
                table,
                seen=seen,
                until=min(until, clock() + rt.settings.intent_ttl_s / 3),
                is_disconnected=request.is_disconnected,
            )
        except ClientGone:
            return answer


@router.delete(
    "/v1/tables/{table}/intents/{request_id}",
    responses={**READ, **problems(409)},
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
        lambda conn: intents.withdraw_intent(
            conn, table=table, request_id=request_id, holder=holder, caller=caller(who)
        )
    )
    return Withdrawn(table=table, request_id=request_id, withdrawn=withdrawn)


@router.get("/v1/leases/{lease_id}", responses={**READ, **problems(404)})
async def get_lease(lease_id: LeaseId, rt: RuntimeDep, who: ReaderDep) -> Lease:
    """The lease in any state; a token limited by LAKELOCK_TOKEN_TABLES sees only the leases
    of the tables it may touch (403 for another's)."""
    lease = await rt.read(lambda conn: state.lease_state(conn, lease_id=str(lease_id)))
    check_touch(who, lease.table)
    return lease


@router.post(
    "/v1/leases/{lease_id}/renew",
    responses={**WRITE, **problems(404, 409, 410, 412)},
)
async def renew(lease_id: LeaseId, body: RenewBody, rt: RuntimeDep, who: JobDep) -> Renewed:
    check_ttl(rt, body.ttl_s)
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
    responses={**READ, **problems(404, 409, 412)},
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
    "/v1/leases/{lease_id}/release",
    responses={**WRITE, **problems(404, 409, 412)},
)
async def release_with_counts(
    lease_id: LeaseId,
    rt: RuntimeDep,
    who: JobDep,
    body: ReleaseBody | None = None,
    holder: Annotated[
        str | None,
        Query(
            pattern=HOLDER_PATTERN,
            max_length=255,
            description="the lease's holder, if not in the body",
        ),
    ] = None,
    token: Annotated[
        int | None,
        Query(ge=1, le=MAX_TOKEN, description="a maintenance lease's token, if not in the body"),
    ] = None,
) -> Released:
    """The release of `DELETE /v1/leases/{lease_id}`, with what the lease did (docs/design.md
    §5.1): a commit lease the files its commit added per partition (`written`), a maintenance
    lease the partitions it compacted (`compacted`). Counted by the release that ends the lease
    only, so repeating it is safe. Without a body it is the `DELETE`."""
    sent = body or ReleaseBody()
    named = _one("holder", sent.holder, holder)
    given = _one("token", sent.token, token)
    return await end_lease(
        rt,
        str(lease_id),
        who=who,
        holder=named if isinstance(named, str) else None,
        token=given if isinstance(given, int) else None,
        body=sent,
    )


@router.post(
    "/v1/leases/{lease_id}/revoke",
    responses={**WRITE, **problems(404)},
)
async def revoke(lease_id: LeaseId, body: RevokeBody, rt: RuntimeDep, who: OperatorDep) -> Lease:
    return await rt.transact(
        lambda conn: leases.revoke(conn, lease_id=str(lease_id), reason=body.reason, actor=who.name)
    )
