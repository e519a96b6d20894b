"""Every error as `application/problem+json` (RFC 9457): the app's exception handlers.

    install(app)                          the handlers, once, in create_app
    problem_response(request, exc)        a LakelockError as its problem+json answer

A `LakelockError` is answered as itself; a request that fails validation is a 422 naming each
field; Starlette's own HTTP errors keep their status; a database that cannot be reached is a
503 with Retry-After (a 500 for a catalog call that may have written: its outcome is unknown);
anything else is a 500, logged with its traceback. Under /iceberg/ the body also carries
Iceberg's `error` object (docs/catalog-front.md).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any, TypeVar, cast

from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match
from starlette.types import ExceptionHandler

from service.lock.db import DatabaseError, PoolExhausted, driver_message, is_unavailable
from service.wire.errors import (
    PROBLEM_TYPE_PREFIX,
    InvalidRequest,
    LakelockError,
    ServerError,
    Unavailable,
    to_problem,
)

__all__ = [
    "CATALOG_PREFIX",
    "PROBLEM",
    "install",
    "plain_problem",
    "problem_response",
]

log = logging.getLogger("lakelock.service")

PROBLEM = "application/problem+json"
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
    "storage-unavailable": "ServiceUnavailableException",
}


E = TypeVar("E", bound=Exception)


def install(app: FastAPI) -> None:
    """Answer every error `app` raises as a problem."""
    _handle(app, LakelockError, problem_response)
    _handle(app, RequestValidationError, _validation_problem)
    _handle(app, StarletteHTTPException, _http_problem)
    _handle(app, DatabaseError, _database_problem)
    _handle(app, PoolExhausted, _pool_exhausted)
    _handle(app, Exception, _server_fault)


def _handle(app: FastAPI, errors: type[E], handler: Callable[[Request, E], Response]) -> None:
    # Starlette types every handler as taking any Exception; it calls this one with `errors` only
    app.add_exception_handler(errors, cast(ExceptionHandler, handler))


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
    return _answer(request, to_problem(exc, instance=request.url.path), headers)


def plain_problem(status: int, slug: str, detail: str) -> JSONResponse:
    """A problem answered before any route or handler ran (the middleware's)."""
    return JSONResponse(_body(status, slug, detail), status_code=status, media_type=PROBLEM)


def _body(status: int, slug: str, detail: str, instance: str | None = None) -> dict[str, Any]:
    """The problem of an error that is no LakelockError: its detail is its title too."""
    body: dict[str, Any] = {
        "type": PROBLEM_TYPE_PREFIX + slug,
        "title": detail,
        "status": status,
        "detail": detail,
    }
    if instance is not None:
        body["instance"] = instance
    return body


def _answer(request: Request, body: dict[str, Any], headers: dict[str, str]) -> JSONResponse:
    status: int = body["status"]
    if request.url.path.startswith(CATALOG_PREFIX):
        # the REST catalog's bad request is a 400 (Iceberg maps 422 to no exception of its own)
        status = body["status"] = 400 if status == 422 else status
        # Iceberg's clients read `error` (ErrorResponse); the problem members stay beside it
        body["error"] = {"message": body["detail"], "type": _iceberg_type(body), "code": status}
    return JSONResponse(body, status_code=status, media_type=PROBLEM, headers=headers)


def _iceberg_type(body: dict[str, Any]) -> str:
    slug = str(body["type"]).removeprefix(PROBLEM_TYPE_PREFIX)
    return _ICEBERG_TYPES.get(
        slug, "ServerErrorException" if body["status"] >= 500 else "RESTException"
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
    """Starlette's own refusals (no route, another method, a body it cannot read)."""
    slug = _HTTP_SLUGS.get(exc.status_code, "http-error")
    body = _body(exc.status_code, slug, str(exc.detail), instance=request.url.path)
    headers = dict(exc.headers or {})
    if exc.status_code == 405:
        headers["Allow"] = _allowed_methods(request)
    return _answer(request, body, headers)


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


def _database_problem(request: Request, exc: DatabaseError) -> JSONResponse:
    if is_unavailable(exc) and _unknown_outcome(request):
        log.warning(
            "database unavailable during %s %s: %s",
            request.method,
            request.url.path,
            driver_message(exc),
        )
        return problem_response(request, ServerError(UNKNOWN_OUTCOME))
    if is_unavailable(exc):
        log.warning("database unavailable: %s", driver_message(exc))
        return problem_response(
            request, Unavailable("the lock database cannot be reached; retry later")
        )
    return _server_fault(request, exc)


def _pool_exhausted(request: Request, exc: PoolExhausted) -> JSONResponse:
    log.warning("no database connection free within the pool timeout: %s", exc)
    if _unknown_outcome(request):
        return problem_response(request, ServerError(UNKNOWN_OUTCOME))
    return problem_response(
        request, Unavailable("the lock database is not answering in time; retry later")
    )


def _server_fault(request: Request, exc: Exception) -> JSONResponse:
    log.error("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return problem_response(request, ServerError("a fault in the service; it is logged there"))
