"""The FastAPI application: `create_app(settings)`.

The engine is made in the lifespan, not at import, so one test run can serve the app from
SQLite and from MariaDB. The one error handler turns every `LakelockError` into
`application/problem+json`; a database that cannot be reached becomes 503 with Retry-After;
anything else is a 500, logged with its traceback.
"""

from __future__ import annotations

import logging
import math
import signal
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from types import FrameType
from typing import Any

import anyio.to_thread
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.api import router
from service.db import is_unavailable, make_engine
from service.errors import InvalidRequest, LakelockError, ServerError, Unavailable, to_problem
from service.logs import mask_url
from service.metrics import process_exited
from service.retention import Pruner
from service.runtime import Notifier, Runtime
from service.settings import Settings, get_settings

__all__ = ["create_app"]

log = logging.getLogger("lakelock.service")
request_log = logging.getLogger("lakelock.request")
PROBLEM = "application/problem+json"


def problem_response(request: Request, exc: LakelockError) -> JSONResponse:
    headers = {}
    if exc.retry_after_s is not None or exc.status in (423, 503):
        runtime = getattr(request.app.state, "runtime", None)
        default = runtime.settings.retry_after_s if runtime else 1.0
        seconds = exc.retry_after_s if exc.retry_after_s is not None else default
        headers["Retry-After"] = str(max(1, math.ceil(seconds)))
        exc.extra.setdefault("retry_after_s", seconds)
    body = to_problem(exc, instance=request.url.path)
    return JSONResponse(body, status_code=exc.status, media_type=PROBLEM, headers=headers)


def _validation_problem(request: Request, exc: RequestValidationError) -> JSONResponse:
    errors = []
    for error in exc.errors():
        where = [str(part) for part in error["loc"] if part != "body"] or ["body"]
        errors.append({"field": ".".join(where), "rule": error["msg"], "type": error["type"]})
    detail = "; ".join(f"{e['field']}: {e['rule']}" for e in errors)
    return problem_response(request, InvalidRequest(detail, errors=errors))


def _http_problem(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    error = LakelockError(str(exc.detail))
    error.status = exc.status_code  # type: ignore[misc]
    error.slug = {404: "no-route", 405: "method-not-allowed"}.get(exc.status_code, "http-error")  # type: ignore[misc]
    error.title = str(exc.detail)  # type: ignore[misc]
    return problem_response(request, error)


def _database_problem(request: Request, exc: DBAPIError) -> JSONResponse:
    if is_unavailable(exc):
        log.warning("database unavailable: %s", _reason(exc))
        return problem_response(
            request, Unavailable("the lock database cannot be reached; retry later")
        )
    return _server_fault(request, exc)


def _pool_exhausted(request: Request, exc: PoolTimeout) -> JSONResponse:
    log.warning("no database connection free within the pool timeout: %s", exc)
    return problem_response(
        request, Unavailable("the lock database is not answering in time; retry later")
    )


def _reason(exc: BaseException) -> str:
    """The driver's own message, e.g. `(2003, "Can't connect to MySQL server on 'db' ...")`:
    it names the host, never the password, and leaves out the SQL that SQLAlchemy adds."""
    orig = getattr(exc, "orig", None)
    return f"{type(orig or exc).__name__}: {orig or exc}"


def _server_fault(request: Request, exc: Exception) -> JSONResponse:
    log.error("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return problem_response(request, ServerError("a fault in the service; it is logged there"))


class RequestContext:
    """Request id (from X-Request-ID, else generated; returned), body size limit, the
    one-line request log and the latency histogram. Pure ASGI: no per-request task."""

    def __init__(self, app: ASGIApp, *, max_body_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        request_id = headers.get(b"x-request-id", b"").decode("latin-1")[:128] or uuid.uuid4().hex
        scope.setdefault("state", {})["request_id"] = request_id
        started = time.perf_counter()
        status = 500

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message.setdefault("headers", [])
                message["headers"] = list(message["headers"]) + [
                    (b"x-request-id", request_id.encode("latin-1"))
                ]
            await send(message)

        length = headers.get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_body_bytes:
            await self._too_large()(scope, receive, send_with_id)
        else:
            received = 0

            async def limited_receive() -> Message:
                nonlocal received
                message = await receive()
                received += len(message.get("body", b""))
                if received > self.max_body_bytes:
                    raise _BodyTooLarge()
                return message

            try:
                await self.app(scope, limited_receive, send_with_id)
            except _BodyTooLarge:
                await self._too_large()(scope, receive, send_with_id)
        duration = time.perf_counter() - started
        route = scope.get("route")
        path_template = getattr(route, "path", "unmatched")
        runtime: Runtime | None = getattr(scope["app"].state, "runtime", None)
        if runtime is not None:
            runtime.metrics.latency.labels(scope["method"], path_template, str(status)).observe(
                duration
            )
        state = scope.get("state", {})
        request_log.info(
            "request",
            extra={
                "method": scope["method"],
                "path": scope["path"],
                "route": path_template,
                "status": status,
                "duration_ms": round(duration * 1000, 2),
                "request_id": request_id,
                "caller": state.get("caller"),  # the token's name, never its secret
                # the caller's address; behind the load balancer, from X-Forwarded-For
                "client": (scope.get("client") or (None,))[0],
            },
        )

    def _too_large(self) -> JSONResponse:
        error = InvalidRequest(f"the body is over {self.max_body_bytes} bytes; send less")
        body = to_problem(error) | {"status": 413}
        return JSONResponse(body, status_code=413, media_type=PROBLEM)


class _BodyTooLarge(Exception):
    """The body grew past the limit while being read (no or a false Content-Length)."""


def _sweeper(runtime: Runtime, stop: threading.Event) -> None:
    """End expired leases and intents promptly, so the trail, metrics and long-polls see
    expiries even on tables nobody is asking about."""
    while not stop.wait(runtime.settings.sweep_interval_s):
        try:
            runtime.sweep_once()
        except Exception as exc:
            # the next tick tries again; a database outage must not kill the sweeper, nor
            # write a traceback every tick while it lasts
            if is_unavailable(exc):
                log.warning("sweep skipped, database unavailable: %s", _reason(exc))
            else:
                log.exception("sweep failed")


def _wake_long_polls_on_exit_signal(notifier: Notifier) -> Callable[[], None]:
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
        runtime.metrics.track_state(engine)
        app.state.runtime = runtime
        # long-polls hold a worker thread while they wait; leave room for them
        anyio.to_thread.current_default_thread_limiter().total_tokens = max(
            100, settings.db_pool_size * 2
        )
        stop = threading.Event()
        sweeper = threading.Thread(
            target=_sweeper, args=(runtime, stop), name="lakelock-sweeper", daemon=True
        )
        sweeper.start()
        pruner = Pruner(engine, settings, runtime.metrics)
        pruner.start()
        restore_signals = _wake_long_polls_on_exit_signal(runtime.notifier)
        log.info("lakelock service started", extra={"database": mask_url(settings.database_url)})
        try:
            yield
        finally:
            restore_signals()
            runtime.notifier.close()
            stop.set()
            pruner.stop()
            sweeper.join(timeout=5)
            engine.dispose()
            process_exited()
            log.info("lakelock service stopped")

    app = FastAPI(
        title="lakelock",
        version="0.1.0",
        description="Lease-based write locks for Apache Iceberg tables (see docs/api.md).",
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.include_router(router)
    app.add_exception_handler(LakelockError, problem_response)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, _validation_problem)  # type: ignore[arg-type]
    app.add_exception_handler(StarletteHTTPException, _http_problem)  # type: ignore[arg-type]
    app.add_exception_handler(DBAPIError, _database_problem)  # type: ignore[arg-type]
    app.add_exception_handler(PoolTimeout, _pool_exhausted)  # type: ignore[arg-type]
    app.add_exception_handler(Exception, _server_fault)
    app.add_middleware(RequestContext, max_body_bytes=settings.max_body_bytes)
    return app
