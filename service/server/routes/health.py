"""Liveness, readiness and the Prometheus metrics."""

from __future__ import annotations

from typing import Any

import anyio.to_thread
from fastapi import APIRouter, Request, Response
from fastapi.responses import PlainTextResponse

from service.lock import migrate
from service.server.auth import ReaderDep
from service.server.routes.common import READ, RuntimeDep, problems
from service.wire.errors import Unavailable

__all__ = ["router"]

router = APIRouter(tags=["health"])


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """The process is up (liveness); says nothing about the database."""
    return {"status": "ok"}


@router.get("/readyz", responses=problems(503))
async def readyz(request: Request, rt: RuntimeDep) -> dict[str, Any]:
    """The database answers and its schema is at the migration head; where the catalog is
    served, its warehouse can be listed too (readiness)."""
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
    storage = getattr(request.app.state, "storage", None)
    if storage is None:
        return {"status": "ready", "migration": revision}
    # one LIST of the warehouse (S3) or a look at its folder, in the catalog's own threads,
    # at most every few seconds whoever probes (Storage.ready)
    await anyio.to_thread.run_sync(storage.ready, limiter=request.app.state.catalog_limiter)
    return {"status": "ready", "migration": revision, "warehouse": storage.warehouse}


@router.get(
    "/metrics",
    response_class=PlainTextResponse,
    responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}}, **READ},
)
async def metrics(rt: RuntimeDep, _: ReaderDep) -> Response:
    # the state gauges are read from the database: off the event loop
    body = await anyio.to_thread.run_sync(rt.metrics.render, limiter=rt.db_limiter)
    return PlainTextResponse(body, media_type="text/plain; version=0.0.4")
