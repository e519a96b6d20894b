"""Run reports: what a compactor did on a table, the newest few kept per table."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from service.lock import runs
from service.server.auth import JobDep, ReaderDep
from service.server.routes.common import READ, WRITE, RuntimeDep, TableName
from service.wire import RunBody, RunId, Runs

__all__ = ["router"]

router = APIRouter(tags=["runs"])


@router.get("/v1/tables/{table}/runs", responses=READ)
async def list_runs(
    table: TableName,
    rt: RuntimeDep,
    _: ReaderDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 20,
) -> Runs:
    found = await rt.read(lambda conn: runs.recent(conn, table=table, limit=limit))
    return Runs(runs=tuple(found), kept=rt.settings.runs_kept)


@router.post("/v1/tables/{table}/runs", status_code=201, responses=WRITE)
async def report_run(table: TableName, body: RunBody, rt: RuntimeDep, who: JobDep) -> RunId:
    keep = rt.settings.runs_kept
    run_id = await rt.transact(
        lambda conn: runs.report(conn, table=table, body=body, by=who.name, keep=keep)
    )
    return RunId(run_id=run_id)
