"""What the routes of the lease API share: path parameters, the runtime, the checks of the
service's bounds, and the problem+json statuses each route declares.

Routes are `async`: each protocol call runs on a worker thread (`Runtime.transact`), and a
long-poll (`wait_s`, `wait`) loops "try once, then park until the table's version moves", so
each try is its own short transaction, no lock is held and no thread is taken while waiting.
Which statuses a route answers is declared with it (`responses=`), so openapi.json is the
contract.
"""

from __future__ import annotations

import asyncio
import math
import uuid
from typing import Annotated, Any

from fastapi import Depends, Path, Request
from pydantic import AfterValidator

from service.server.problems import PROBLEM
from service.server.runtime import Runtime
from service.wire import TABLE_PATTERN, AcquireBody
from service.wire.errors import InvalidRequest

__all__ = [
    "READ",
    "WRITE",
    "LeaseId",
    "RuntimeDep",
    "TableName",
    "check_acquire",
    "check_partitions",
    "check_ttl",
    "clock",
    "problems",
    "retry_header",
]

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


READ = problems(401, 403, 422, 503)
WRITE = problems(400, 401, 403, 413, 415, 422, 503)


async def _runtime(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


RuntimeDep = Annotated[Runtime, Depends(_runtime)]


def check_acquire(rt: Runtime, body: AcquireBody) -> None:
    check_ttl(rt, body.ttl_s, body.wait_s)
    check_partitions(rt, body.partitions)


def check_partitions(rt: Runtime, partitions: list[str] | None) -> None:
    most = rt.settings.max_partitions
    if partitions is not None and len(partitions) > most:
        raise InvalidRequest(
            f"partitions names {len(partitions)} partitions, more than the {most} this "
            "service takes (LAKELOCK_MAX_PARTITIONS); leave the field out for a lease on the "
            "whole table, or split the work into leases of at most that many",
            field="partitions",
        )


def check_ttl(rt: Runtime, ttl_s: float | None, wait_s: float = 0.0) -> None:
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


def retry_header(seconds: float | None, rt: Runtime) -> dict[str, str]:
    value = seconds if seconds is not None else rt.settings.retry_after_s
    return {"Retry-After": str(max(1, math.ceil(value)))}


def clock() -> float:
    return asyncio.get_running_loop().time()
