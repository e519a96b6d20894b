"""The holds of jobs streaming out of a table, which keep `expire_snapshots` back."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path

from service.lock import readers
from service.server.auth import JobDep, caller
from service.server.routes.common import WRITE, RuntimeDep, TableName
from service.wire import READER_PATTERN, ReaderBody, ReaderHold

__all__ = ["router"]

router = APIRouter(tags=["readers"])

ReaderName = Annotated[str, Path(pattern=READER_PATTERN, description="the reader's name")]


@router.put("/v1/tables/{table}/readers/{reader}", responses=WRITE)
async def hold_reader(
    table: TableName, reader: ReaderName, body: ReaderBody, rt: RuntimeDep, who: JobDep
) -> ReaderHold:
    """Start or renew a reader's hold at its position (a snapshot id): `expire_snapshots` keeps
    that snapshot and every later one while the hold is live. Put it again at a third of
    `ttl_s`, with the new position as the reader advances."""
    return await rt.transact(
        lambda conn: readers.hold(conn, table=table, reader=reader, body=body, by=caller(who))
    )


@router.delete("/v1/tables/{table}/readers/{reader}", responses=WRITE)
async def release_reader(
    table: TableName, reader: ReaderName, rt: RuntimeDep, who: JobDep
) -> dict[str, bool]:
    """End a reader's hold (idempotent: `released` is false when it held nothing live)."""
    released = await rt.transact(
        lambda conn: readers.release(conn, table=table, reader=reader, by=caller(who))
    )
    return {"released": released}
