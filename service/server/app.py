"""The FastAPI application: `create_app(settings)`.

The engine is made in the lifespan, not at import, so one test run can serve the app from
SQLite and from MariaDB. The one error handler turns every `LakelockError` into
`application/problem+json`; a database that cannot be reached becomes 503 with Retry-After;
anything else is a 500, logged with its traceback.
"""

from __future__ import annotations

import asyncio
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

import anyio
from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.lock.db import is_unavailable, make_engine
from service.server import page
from service.server.auth import guard_table
from service.server.logs import mask_url
from service.server.metrics import process_exited
from service.server.retention import Pruner
from service.server.routes import router
from service.server.runtime import Changes, Runtime
from service.server.settings import Settings, get_settings
from service.wire.errors import (
    PROBLEM_TYPE_PREFIX,
    InvalidRequest,
    LakelockError,
    ServerError,
    Unavailable,
    to_problem,
)

__all__ = ["create_app"]

log = logging.getLogger("lakelock.service")
request_log = logging.getLogger("lakelock.request")
PROBLEM = "application/problem+json"


def problem_response(
    request: Request, exc: LakelockError, headers: dict[str, str] | None = None
) -> JSONResponse:
    headers = dict(headers or {})
    if exc.retry_after_s is not None or exc.status in (423, 503):
        runtime = getattr(request.app.state, "runtime", None)
        default = runtime.settings.retry_after_s if runtime else 1.0
        seconds = exc.retry_after_s if exc.retry_after_s is not None else default
        headers["Retry-After"] = str(max(1, math.ceil(seconds)))
        exc.extra.setdefault("retry_after_s", seconds)
    body = to_problem(exc, instance=request.url.path)
    status = exc.status
    if request.url.path.startswith(CATALOG_PREFIX):
        # the REST catalog's bad request is a 400 (Iceberg maps 422 to no exception of its own)
        status = body["status"] = 400 if status == 422 else status
        # Iceberg's clients read `error` (ErrorResponse); the problem members stay beside it
        body["error"] = {"message": exc.detail, "type": _iceberg_type(exc), "code": status}
    return JSONResponse(body, status_code=status, media_type=PROBLEM, headers=headers)


CATALOG_PREFIX = "/iceberg/"
UNKNOWN_OUTCOME = (
    "the lock database did not answer: whether this call took effect is unknown; reload the "
    "table (or namespace) to see"
)
# Iceberg's exception names for the REST `error.type`: Spark tells a missing namespace from a
# missing table by it
_ICEBERG_TYPES = {
    "no-such-table": "NoSuchTableException",
    "no-such-namespace": "NoSuchNamespaceException",
    "already-exists": "AlreadyExistsException",
    "not-empty": "NamespaceNotEmptyException",
    "commit-conflict": "CommitFailedException",
    "fenced": "ForbiddenException",
    "forbidden": "ForbiddenException",
    "unauthorized": "NotAuthorizedException",
    "commit-held": "TooManyRequestsException",
    "invalid-request": "BadRequestException",
    "unavailable": "ServiceUnavailableException",
}


def _iceberg_type(exc: LakelockError) -> str:
    return _ICEBERG_TYPES.get(
        exc.slug, "ServerErrorException" if exc.status >= 500 else "RESTException"
    )


def _validation_problem(request: Request, exc: RequestValidationError) -> JSONResponse:
    errors = []
    for error in exc.errors():
        where = [str(part) for part in error["loc"] if part != "body"] or ["body"]
        errors.append({"field": ".".join(where), "rule": error["msg"], "type": error["type"]})
    detail = "; ".join(f"{e['field']}: {e['rule']}" for e in errors)
    return problem_response(request, InvalidRequest(detail, errors=errors))


_HTTP_SLUGS = {
    400: "unparsable-body",
    404: "no-route",
    405: "method-not-allowed",
    413: "too-large",
    415: "unsupported-media-type",
}


def _http_problem(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    error = LakelockError(str(exc.detail))
    error.status = exc.status_code  # type: ignore[misc]
    error.slug = _HTTP_SLUGS.get(exc.status_code, "http-error")  # type: ignore[misc]
    error.title = str(exc.detail)  # type: ignore[misc]
    headers = dict(exc.headers or {})
    if exc.status_code == 405:
        headers["Allow"] = _allowed_methods(request)
    return problem_response(request, error, headers=headers)


def _allowed_methods(request: Request) -> str:
    """Every method served at this path: the router's own 405 names only those of the first
    route whose path matched (GET /v1/leases/{id} hides DELETE)."""
    routes = request.app.router.routes
    allowed = [
        method
        for method in ("GET", "POST", "PUT", "PATCH", "DELETE")
        if any(r.matches({**request.scope, "method": method})[0] == Match.FULL for r in routes)
    ]
    return ", ".join(allowed)


def _unknown_outcome(request: Request) -> bool:
    """A catalog call that may write (a commit above all): a database failure leaves its
    outcome unknown, which Iceberg clients hear from a 500 (never a 503: from 1.10 they read
    it the same way, and they retry a 503 before that)."""
    return request.url.path.startswith(CATALOG_PREFIX) and request.method != "GET"


def _database_problem(request: Request, exc: DBAPIError) -> JSONResponse:
    if is_unavailable(exc) and _unknown_outcome(request):
        log.warning(
            "database unavailable during %s %s: %s", request.method, request.url.path, _reason(exc)
        )
        return problem_response(request, ServerError(UNKNOWN_OUTCOME))
    if is_unavailable(exc):
        log.warning("database unavailable: %s", _reason(exc))
        return problem_response(
            request, Unavailable("the lock database cannot be reached; retry later")
        )
    return _server_fault(request, exc)


def _pool_exhausted(request: Request, exc: PoolTimeout) -> JSONResponse:
    log.warning("no database connection free within the pool timeout: %s", exc)
    if _unknown_outcome(request):
        return problem_response(request, ServerError(UNKNOWN_OUTCOME))
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


CATALOG_MAX_BODY_BYTES = 16 * 1024 * 1024


class RequestContext:
    """Request id (from X-Request-ID, else generated; returned), body size limit, the
    one-line request log and the latency histogram. Pure ASGI: no per-request task."""

    def __init__(self, app: ASGIApp, *, max_body_bytes: int) -> None:
        self.app = app
        self.lease_body_bytes = max_body_bytes

    def _limit(self, scope: Scope) -> int:
        # a catalog commit carries whole snapshots and schemas: the lease API's bound is not it
        return (
            CATALOG_MAX_BODY_BYTES
            if scope["path"].startswith(CATALOG_PREFIX)
            else self.lease_body_bytes
        )

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
                message["headers"] = [
                    *list(message["headers"]),
                    (b"x-request-id", request_id.encode("latin-1")),
                ]
            await send(message)

        limit = self._limit(scope)
        length = headers.get(b"content-length")
        if length is not None and length.isdigit() and int(length) > limit:
            await self._too_large(limit)(scope, receive, send_with_id)
        elif _sends_body(headers) and not _is_json(headers.get(b"content-type", b"")):
            await self._not_json()(scope, receive, send_with_id)
        else:
            received = 0

            async def limited_receive() -> Message:
                nonlocal received
                message = await receive()
                received += len(message.get("body", b""))
                if received > limit:
                    raise _BodyTooLarge()
                return message

            try:
                await self.app(scope, limited_receive, send_with_id)
            except _BodyTooLarge:
                await self._too_large(limit)(scope, receive, send_with_id)
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
                # the caller's address: the peer's, or the one X-Forwarded-For names when the
                # peer is in LAKELOCK_TRUSTED_PROXIES (the load balancer)
                "client": (scope.get("client") or (None,))[0],
            },
        )

    @staticmethod
    def _too_large(limit: int) -> JSONResponse:
        return _plain_problem(413, "too-large", f"the body is over {limit} bytes")

    @staticmethod
    def _not_json() -> JSONResponse:
        return _plain_problem(
            415,
            "unsupported-media-type",
            "the body must be JSON: send content-type: application/json",
        )


def _sends_body(headers: dict[bytes, bytes]) -> bool:
    length = headers.get(b"content-length", b"0")
    return (length.isdigit() and int(length) > 0) or b"transfer-encoding" in headers


def _is_json(content_type: bytes) -> bool:
    media = content_type.split(b";")[0].strip().lower()
    return media == b"application/json" or media.endswith(b"+json")


def _plain_problem(status: int, slug: str, detail: str) -> JSONResponse:
    """A problem answered by the middleware, before any route or handler ran."""
    error = LakelockError(detail)
    body = to_problem(error) | {
        "type": PROBLEM_TYPE_PREFIX + slug,
        "title": detail,
        "status": status,
    }
    return JSONResponse(body, status_code=status, media_type=PROBLEM)


class _BodyTooLarge(StarletteHTTPException):
    """The body grew past the limit while being read (no or a false Content-Length). An HTTP
    exception, so FastAPI's body parsing lets it through as itself (a 413), not as a 400."""

    def __init__(self) -> None:
        super().__init__(413, "the body is too large; send less")


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
            from service.catalog.front import Front
            from service.catalog.limits import Limits
            from service.catalog.pointers import Pointers

            pointers = Pointers(settings.catalog_name, engine, warehouse=settings.catalog_warehouse)
            # its own worker threads: metadata and manifest reads on object storage must not
            # take the slots the lease calls run in
            app.state.catalog_limiter = anyio.CapacityLimiter(settings.db_pool_size)
            app.state.catalog = Front(
                pointers,
                transact=runtime.transact_sync,
                read=runtime.read_sync,
                caps=Limits(
                    max_metadata_bytes=settings.catalog_max_metadata_bytes,
                    max_properties=settings.catalog_max_properties,
                    max_property_chars=settings.catalog_max_property_chars,
                    max_name_chars=settings.catalog_max_name_chars,
                ),
            )
        runtime.changes.bind(asyncio.get_running_loop())
        poller = asyncio.create_task(runtime.poll_versions(), name="lakelock-version-poll")
        stop = threading.Event()
        sweeper = threading.Thread(
            target=_sweeper, args=(runtime, stop), name="lakelock-sweeper", daemon=True
        )
        sweeper.start()
        pruner = Pruner(engine, settings, runtime.metrics)
        pruner.start()
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
    # one place decides which tables a token may touch: every route of the lease API with a
    # {table} in its path (LAKELOCK_TOKEN_TABLES; the catalog front asks auth.may_touch)
    app.include_router(router, dependencies=[Depends(guard_table)])
    app.include_router(page.router)  # the status page at GET /
    if settings.catalog_warehouse:
        from service.server import iceberg  # pyiceberg is imported only where it is served

        app.include_router(iceberg.router)  # the catalog front at /iceberg
    app.add_exception_handler(LakelockError, problem_response)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, _validation_problem)  # type: ignore[arg-type]
    app.add_exception_handler(StarletteHTTPException, _http_problem)  # type: ignore[arg-type]
    app.add_exception_handler(DBAPIError, _database_problem)  # type: ignore[arg-type]
    app.add_exception_handler(PoolTimeout, _pool_exhausted)  # type: ignore[arg-type]
    app.add_exception_handler(Exception, _server_fault)
    app.add_middleware(RequestContext, max_body_bytes=settings.max_body_bytes)
    app.openapi = lambda: _openapi(app, settings)  # type: ignore[method-assign]
    return app


_PROBLEM_SCHEMA = {
    "type": "object",
    "description": "RFC 9457 problem details; clients map `type` back to an error class. "
    "Extra members (reason, blocking_holder, retry_after_s, outcome, field, errors, ...) "
    "depend on the type.",
    "required": ["type", "title", "status", "detail"],
    "properties": {
        "type": {"type": "string", "examples": ["urn:lakelock:locked"]},
        "title": {"type": "string"},
        "status": {"type": "integer"},
        "detail": {"type": "string", "description": "what to fix or do next"},
        "instance": {"type": "string"},
    },
    "additionalProperties": True,
}

_OPEN = {"/healthz", "/readyz", "/openapi.json"}


def _openapi(app: FastAPI, settings: Settings) -> dict[str, Any]:
    """openapi.json, with what FastAPI cannot know: problem+json errors, the bearer scheme,
    and the bounds this service was configured with."""
    if app.openapi_schema:
        return app.openapi_schema
    schema = get_openapi(
        title=app.title, version=app.version, description=app.description, routes=app.routes
    )
    components = schema.setdefault("components", {})
    components.setdefault("schemas", {})["Problem"] = _PROBLEM_SCHEMA
    for unused in ("HTTPValidationError", "ValidationError"):
        components["schemas"].pop(unused, None)
    components["securitySchemes"] = {
        "bearer": {
            "type": "http",
            "scheme": "bearer",
            "description": "a secret from LAKELOCK_TOKENS; roles reader < job < operator",
        }
    }
    _secure_and_bound_waits(schema["paths"], settings)
    _bound_bodies(components["schemas"], settings)
    _exact_integer_bounds(schema)
    app.openapi_schema = schema
    return schema


def _secure_and_bound_waits(paths: dict[str, Any], settings: Settings) -> None:
    """The bearer scheme on every route but the open ones (when auth is on); the longest wait."""
    for path, operations in paths.items():
        for operation in operations.values():
            if path not in _OPEN and settings.auth == "on":
                operation["security"] = [{"bearer": []}]
            for parameter in operation.get("parameters", []):
                if parameter["name"] in ("wait", "wait_s"):
                    parameter["schema"]["maximum"] = settings.max_wait_s


_INT64 = (-(2**63), 2**63 - 1)


def _exact_integer_bounds(node: Any) -> None:
    """Integer bounds as exact JSON integers. FastAPI's OpenAPI model holds `minimum` and
    `maximum` as floats: a bound past 2**53 rounds, and a 64-bit one (a snapshot id's 2**63 - 1)
    becomes 2**63, which would declare an id the service refuses valid. Every integer bound
    here is either exact as a float or a 64-bit extreme, so rounding back and clamping to the
    64-bit range gives the model's own bound."""
    if isinstance(node, list):
        for item in node:
            _exact_integer_bounds(item)
    elif isinstance(node, dict):
        if node.get("type") == "integer":
            for key in ("minimum", "maximum"):
                if isinstance(node.get(key), float):
                    node[key] = min(max(int(node[key]), _INT64[0]), _INT64[1])
        for value in node.values():
            _exact_integer_bounds(value)


def _bound_bodies(bodies: dict[str, Any], settings: Settings) -> None:
    """The TTL, wait and partition bounds of this service in the request bodies."""
    for name in ("AcquireBody", "ClaimBody", "RenewBody"):
        ttl = bodies.get(name, {}).get("properties", {}).get("ttl_s")
        if ttl is not None:
            target = next((o for o in ttl.get("anyOf", []) if o.get("type") == "number"), ttl)
            target.pop("exclusiveMinimum", None)
            target.update(minimum=settings.min_ttl_s, maximum=settings.max_ttl_s)
    acquire = bodies.get("AcquireBody", {}).get("properties", {})
    if "wait_s" in acquire:
        acquire["wait_s"]["maximum"] = settings.max_wait_s
    for option in acquire.get("partitions", {}).get("anyOf", []):
        if option.get("type") == "array":
            option.update(minItems=1, maxItems=settings.max_partitions, uniqueItems=True)
