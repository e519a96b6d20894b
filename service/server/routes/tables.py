"""A table's state and switch, and what compactors and ingest jobs report of it."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request

from service.lock import debt, ingest, state, switch
from service.server.auth import JobDep, OperatorDep, ReaderDep, caller, may_touch
from service.server.routes.common import (
    READ,
    WRITE,
    RuntimeDep,
    TableName,
    check_ttl,
    clock,
    problems,
)
from service.server.runtime import ClientGone
from service.wire import (
    MAX_TOKEN,
    TABLE_PATTERN,
    DebtBody,
    GapsBody,
    GapsRecorded,
    IngestLag,
    LagBody,
    SwitchBody,
    TableDebt,
    Tables,
    TableState,
)

__all__ = ["router"]

router = APIRouter(tags=["tables"])


@router.get("/v1/tables", responses=READ)
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


@router.get("/v1/tables/{table}", responses={**READ, **problems(404)})
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
    check_ttl(rt, None, wait)
    until = clock() + wait
    while True:
        current = await rt.read(lambda conn: state.table_state(conn, table=table))
        if since is None or current.version > since or clock() >= until:
            return current
        if rt.changes.closing.is_set():
            return current
        try:
            await rt.changes.wait(
                table, seen=current.version, until=until, is_disconnected=request.is_disconnected
            )
        except ClientGone:
            return current


@router.put("/v1/tables/{table}/switch", responses=WRITE)
async def set_switch(
    table: TableName, body: SwitchBody, rt: RuntimeDep, who: OperatorDep
) -> TableState:
    return await rt.transact(
        lambda conn: switch.set_switch(
            conn,
            table=table,
            reason=body.reason,
            actor=who.name,
            ingest=body.ingest,
            maintenance=body.maintenance,
            backpressure=body.backpressure,
        )
    )


@router.put("/v1/tables/{table}/debt", responses={**WRITE, **problems(409)})
async def report_debt(table: TableName, body: DebtBody, rt: RuntimeDep, who: JobDep) -> TableDebt:
    """Store the table's compaction debt as a compactor measured it; it replaces the one
    before. A table never seen before becomes known. Answers the debt as stored. Its
    `partitions`, when sent, replace the files counted per partition as commits landed."""
    return await rt.transact(
        lambda conn: debt.report(conn, table=table, body=body, by=caller(who), trigger=rt.trigger)
    )


@router.put("/v1/tables/{table}/ingest-lag", responses=WRITE)
async def report_ingest_lag(
    table: TableName, body: LagBody, rt: RuntimeDep, who: JobDep
) -> IngestLag:
    """Store how far the table's ingest query is behind its source (records per
    topic-partition, after a committed batch); it replaces the report before."""
    return await rt.transact(
        lambda conn: ingest.report_lag(conn, table=table, body=body, by=who.name)
    )


@router.post("/v1/tables/{table}/ingest-gaps", responses=WRITE)
async def record_ingest_gaps(
    table: TableName, body: GapsBody, rt: RuntimeDep, who: JobDep
) -> GapsRecorded:
    """Record offset ranges the source deleted before the ingest job read them, each as an
    `ingest.gap` event on the table's audit trail (the job skips them only when told to)."""
    return await rt.transact(
        lambda conn: ingest.record_gaps(conn, table=table, body=body, by=who.name)
    )
