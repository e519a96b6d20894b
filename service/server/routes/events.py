"""The audit trail, newest first."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from service.lock import audit
from service.server.auth import ReaderDep, check_touch, may_touch
from service.server.routes.common import READ, RuntimeDep
from service.wire import TABLE_PATTERN, Events

__all__ = ["router"]

router = APIRouter(tags=["events"])


@router.get("/v1/events", responses=READ)
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
