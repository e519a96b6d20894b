"""The FastAPI application: `create_app(settings)`.

The engine is made in the lifespan, not at import, so one test run can serve the app from
SQLite and from MariaDB. The lifespan also starts what runs beside the requests: the version
poll of long-polls (service.server.runtime), the sweeper, the pruner, and the catalog front when
LAKELOCK_CATALOG_WAREHOUSE is set. Errors are answered by service.server.problems, every request
passes service.server.middleware, and openapi.json is service.server.openapi's.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import timedelta
from types import FrameType
from typing import Any

import anyio
from fastapi import Depends, FastAPI

from service.lock.db import make_engine
from service.server import page, problems
from service.server.auth import guard_table
from service.server.logs import mask_url
from service.server.metrics import process_exited
from service.server.middleware import RequestContext
from service.server.openapi import openapi
from service.server.parking import Parking
from service.server.periodic import sweeper as make_sweeper
from service.server.retention import pruner as make_pruner
from service.server.routes import router
from service.server.runtime import Changes, Runtime
from service.server.settings import Settings, get_settings

__all__ = ["create_app"]

log = logging.getLogger("lakelock.service")


class _Service(FastAPI):
    """The app, with the settings it was made with; its openapi.json is service.server.openapi's."""

    def __init__(self, settings: Settings, **options: Any) -> None:
        super().__init__(**options)
        self.settings = settings

    def openapi(self) -> dict[str, Any]:
        return openapi(self, self.settings)


def _wake_long_polls_on_exit_signal(notifier: Changes) -> Callable[[], None]:
    """On SIGTERM/SIGINT, wake every pending long-poll at once, then let the server's own
    handler stop it; returns the function that puts the server's handlers back.

    uvicorn waits for open connections to finish before it runs the lifespan shutdown, so a
    long-poll woken only there would hold the stop for up to LAKELOCK_MAX_WAIT_S. Hooking the
    handler here, not in `python -m service`, also covers worker processes uvicorn spawns.
    Nothing is hooked outside the main thread (signals go to it alone) or when no server
    handles the signal (a TestClient, a plain script).
    """
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous: dict[int, Callable[[int, FrameType | None], Any]] = {}
    for sig in (signal.SIGTERM, signal.SIGINT):
        handler = signal.getsignal(sig)
        if not callable(handler):
            continue

        def wake(sig: int, frame: FrameType | None, handler: Any = handler) -> None:
            notifier.close()
            handler(sig, frame)

        previous[sig] = handler
        signal.signal(sig, wake)

    def restore() -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler)

    return restore


class StartupError(RuntimeError):
    """The service cannot serve as configured (its message says why); it does not start."""


def _serve_catalog(app: FastAPI, runtime: Runtime, settings: Settings) -> None:
    """The catalog front over the lock database (docs/catalog-front.md): pyiceberg is imported
    only where it is served."""
    from service.catalog.front import Front
    from service.catalog.limits import Limits
    from service.catalog.pointers import Pointers
    from service.catalog.storage import S3Access, Storage
    from service.wire.errors import StorageFault

    storage = Storage(
        settings.catalog_warehouse,
        S3Access(
            endpoint=settings.catalog_s3_endpoint or None,
            region=settings.catalog_s3_region or None,
            path_style=settings.catalog_s3_path_style,
        ),
    )
    try:
        storage.check()
    except StorageFault as exc:
        # a catalog that cannot reach its warehouse answers nothing right: do not start
        log.error("not started: LAKELOCK_CATALOG_WAREHOUSE: %s", exc.detail)
        raise StartupError(f"LAKELOCK_CATALOG_WAREHOUSE: {exc.detail}") from exc
    app.state.storage = storage
    pointers = Pointers(
        settings.catalog_name,
        runtime.engine,
        warehouse=settings.catalog_warehouse,
        storage=storage,
    )
    # its own worker threads: metadata and manifest reads on object storage must not take the
    # slots the lease calls run in
    app.state.catalog_limiter = anyio.CapacityLimiter(settings.db_pool_size)
    app.state.parking = Parking(
        most=settings.catalog_max_parked, per_token=settings.catalog_max_parked_per_token
    )
    app.state.catalog = Front(
        pointers,
        transact=runtime.transact_sync,
        read=runtime.read_sync,
        caps=Limits(
            max_metadata_bytes=settings.catalog_max_metadata_bytes,
            max_properties=settings.catalog_max_properties,
            max_property_chars=settings.catalog_max_property_chars,
            max_name_chars=settings.catalog_max_name_chars,
            max_manifest_entries=settings.catalog_max_manifest_entries,
            max_manifest_bytes=settings.catalog_max_manifest_bytes,
            max_commit_entries=settings.catalog_max_commit_entries,
            max_commit_manifests=settings.catalog_max_commit_manifests,
        ),
        trigger=runtime.trigger,
        turn=timedelta(seconds=settings.catalog_head_turn_s),
    )


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if settings.auth == "off":
            log.warning(
                "authentication is OFF (LAKELOCK_AUTH=off): anyone can take and revoke leases"
            )
        engine = make_engine(
            settings.database_url, pool_size=settings.db_pool_size, timeout_s=settings.db_timeout_s
        )
        runtime = Runtime(settings, engine)
        runtime.metrics.track_state(engine, max_tables=settings.metrics_max_tables)
        app.state.runtime = runtime
        if settings.catalog_warehouse:
            _serve_catalog(app, runtime, settings)
        runtime.changes.bind(asyncio.get_running_loop())
        poller = asyncio.create_task(runtime.poll_versions(), name="lakelock-version-poll")
        threads = (make_sweeper(runtime), make_pruner(engine, settings, runtime.metrics))
        for thread in threads:
            thread.start()
        restore_signals = _wake_long_polls_on_exit_signal(runtime.changes)
        log.info("lakelock service started", extra={"database": mask_url(settings.database_url)})
        if settings.catalog_warehouse:
            log.info(
                "serving the Iceberg REST catalog %r at /iceberg, warehouse %s",
                settings.catalog_name,
                settings.catalog_warehouse,
            )
        try:
            yield
        finally:
            restore_signals()
            runtime.changes.close()
            poller.cancel()
            for thread in threads:
                thread.signal()  # both at once: neither waits for the other's pass
            for thread in threads:
                thread.join()
            engine.dispose()
            process_exited()
            log.info("lakelock service stopped")

    app = _Service(
        settings,
        title="lakelock",
        version="0.1.0",
        description="Lease-based write locks for Apache Iceberg tables (see docs/api.md).",
        lifespan=lifespan,
    )
    app.state.settings = settings
    # one place decides which tables a token may touch: every route of the lease API with a
    # {table} in its path (LAKELOCK_TOKEN_TABLES; the catalog front asks auth.may_touch)
    app.include_router(router, dependencies=[Depends(guard_table)])
    app.include_router(page.router)  # the status page at GET /
    if settings.catalog_warehouse:
        from service.server.routes import catalog  # pyiceberg is imported only where it is served

        app.include_router(catalog.router)  # the catalog front at /iceberg
    problems.install(app)
    app.add_middleware(RequestContext, max_body_bytes=settings.max_body_bytes)
    return app
