"""Due partitions: the long-poll of the compactors that follow the stream (docs/design.md
§5.1)."""

from __future__ import annotations

from functools import partial
from typing import Annotated

from fastapi import APIRouter, Query, Request
from pydantic import AfterValidator, StringConstraints

from service.lock import due
from service.lock.db import Connection
from service.server.auth import JobDep
from service.server.routes.common import READ, RuntimeDep, check_ttl, clock
from service.server.runtime import ClientGone
from service.server.settings import ApiToken
from service.wire import HOLDER_PATTERN, TABLE_GLOB_PATTERN, Due

__all__ = ["router"]

router = APIRouter(tags=["due"])

MAX_TABLES = 100
"""Table names or globs one long-poll may name."""

DEFAULT_WAIT_S = 30.0

TableGlob = Annotated[str, StringConstraints(pattern=TABLE_GLOB_PATTERN), AfterValidator(str.lower)]


@router.get("/v1/due", responses=READ)
async def due_partitions(
    rt: RuntimeDep,
    who: JobDep,
    request: Request,
    table: Annotated[
        list[TableGlob],
        Query(
            min_length=1,
            max_length=MAX_TABLES,
            description="a table name or glob (`lake.db.*`; `*` and `?` match dots too), "
            "compared in lower case; repeat it, up to 100",
        ),
    ],
    holder: Annotated[
        str,
        Query(
            pattern=HOLDER_PATTERN,
            max_length=255,
            description="the compactor asking: its own claims do not hide a table from it",
        ),
    ],
    wait_s: Annotated[
        float | None,
        Query(
            ge=0,
            description="long-poll up to this many seconds (at most LAKELOCK_MAX_WAIT_S, 60); "
            "left out, 30 (or LAKELOCK_MAX_WAIT_S when shorter)",
        ),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=1000, description="most partitions answered")] = 100,
) -> Due:
    """The partitions due for compaction on the tables named, most files first: at once when
    any is due, else as soon as one becomes due, else empty after `wait_s`. Left out: the
    tables another compactor holds the claim of, those whose maintenance is switched off, and
    those outside the token's LAKELOCK_TOKEN_TABLES patterns. The caller is recorded as a
    follower of the tables (the status page, `lakelock status`)."""
    wait = min(DEFAULT_WAIT_S, rt.settings.max_wait_s) if wait_s is None else wait_s
    check_ttl(rt, None, wait)
    tables = sorted(set(table))
    started = clock()
    until = started + wait
    while True:
        closing = rt.changes.closing.is_set()
        left = 0.0 if closing else max(0.0, until - clock())
        polled = await rt.transact(partial(_poll, tables, holder, who, limit, left))
        if polled.due or left <= 0:
            return Due(due=tuple(polled.due), waited_s=clock() - started)
        rt.metrics.followers_waiting.inc()
        try:
            await rt.changes.wait(
                due.CHANNEL,
                seen=polled.marker,
                until=until,
                is_disconnected=request.is_disconnected,
            )
        except ClientGone:
            return Due(due=(), waited_s=clock() - started)  # no one reads it
        finally:
            rt.metrics.followers_waiting.dec()


def _poll(
    tables: list[str], holder: str, who: ApiToken, limit: int, parked_s: float, conn: Connection
) -> due.Polled:
    """One try of the long-poll: one transaction."""
    return due.poll(
        conn,
        tables=tables,
        holder=holder,
        principal=who.name,
        limit=limit,
        parked_s=parked_s,
        scope=who.tables,
    )
