"""The two calls of every micro-batch, answered on a short path: a commit lease's acquire
(`POST /v1/tables/{table}/commit-leases` without `wait_s`) and a lease's release by its
holder (`DELETE /v1/leases/{lease_id}?holder=..[&token=..]`).

An ASGI layer in front of FastAPI's router: it matches those two paths with string tests,
checks the token, validates the request with the same `service.wire` model and patterns, runs
the same protocol call in one transaction (`Runtime.transact`) and writes the answer with the
same model, so what a client sees is what the FastAPI route would answer. Skipped are FastAPI's
route scan, dependency solving and response-model round trip (benchmarks/README.md has the
figures with and without). Anything else, and any request
it has a doubt about (a long poll, a body or query that does not validate, an unusual
parameter), goes to FastAPI untouched, before anything was done: its answers, errors included,
stay the routes' in service.api, which also declare these two calls in openapi.json.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any
from urllib.parse import parse_qsl

from fastapi import FastAPI
from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.api import check_acquire, count_denial, end_lease, router, try_commit
from service.auth import authenticate
from service.errors import Forbidden, Locked
from service.runtime import Runtime
from service.settings import ROLES
from service.wire import HOLDER_PATTERN, MAX_TOKEN, TABLE_PATTERN, AcquireBody, Lease, Released

__all__ = ["HotRoutes"]


def _whole(pattern: str) -> re.Pattern[str]:
    # fullmatch: `$` alone would let a trailing newline through, which the routes refuse
    return re.compile(pattern.removeprefix("^").removesuffix("$"))


_TABLE = _whole(TABLE_PATTERN)
_HOLDER = _whole(HOLDER_PATTERN)
_TOKEN = re.compile(r"[1-9][0-9]{0,15}")
_COMMIT_LEASES = ("/v1/tables/", "/commit-leases")
_LEASES = "/v1/leases/"

Answer = Callable[[Request, bytes], Awaitable[Response | None]]


class HotRoutes:
    """See the module docstring. `HotRoutes(app)` wraps the FastAPI app `app` (its router)."""

    def __init__(self, app: ASGIApp, *, fastapi: FastAPI) -> None:
        self.app = app
        self.fastapi = fastapi
        # the routes' own objects, so the request log and the latency metric name them
        self.acquire_route = _route("POST", "/v1/tables/{table}/commit-leases")
        self.release_route = _route("DELETE", "/v1/leases/{lease_id}")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        answer = self._match(scope) if scope["type"] == "http" else None
        if answer is None:
            await self.app(scope, receive, send)
            return
        body = b""
        if scope["method"] == "POST":
            body, receive = await _read(receive)
        response = await answer(Request(scope, receive), body)
        if response is None:
            await self.app(scope, receive, send)
            return
        await response(scope, receive, send)

    def _match(self, scope: Scope) -> Answer | None:
        path, method = scope["path"], scope["method"]
        if method == "POST" and path.startswith(_COMMIT_LEASES[0]):
            table = path[len(_COMMIT_LEASES[0]) :].removesuffix(_COMMIT_LEASES[1])
            if path.endswith(_COMMIT_LEASES[1]) and len(table) <= 194 and _TABLE.fullmatch(table):
                scope["route"] = self.acquire_route
                return lambda request, body: self._acquire(request, body, table.lower())
        elif method == "DELETE" and path.startswith(_LEASES):
            lease_id = path[len(_LEASES) :]
            if "/" not in lease_id:
                scope["route"] = self.release_route
                return lambda request, _: self._release(request, lease_id)
        return None

    async def _acquire(self, request: Request, raw: bytes, table: str) -> Response | None:
        try:
            body = AcquireBody.model_validate_json(raw)
        except ValidationError:
            return None  # FastAPI says what is wrong, in its words
        if body.wait_s > 0:
            return None  # a long poll: the route's loop
        return await self._answer(request, 201, lambda rt, who: self._grant(rt, table, body))

    async def _grant(self, rt: Runtime, table: str, body: AcquireBody) -> Lease:
        check_acquire(rt, body)
        try:
            return await try_commit(rt, table, body, timedelta(seconds=body.ttl_s))
        except Locked as exc:
            count_denial(rt, exc, body)
            raise

    async def _release(self, request: Request, raw_id: str) -> Response | None:
        query = parse_qsl(request.scope["query_string"].decode("latin-1"), keep_blank_values=True)
        params = dict(query)
        holder, token = params.get("holder"), params.get("token")
        if (
            len(params) != len(query)
            or not set(params) <= {"holder", "token"}
            or holder is None
            or len(holder) > 255
            or not _HOLDER.fullmatch(holder)
            or (token is not None and (not _TOKEN.fullmatch(token) or int(token) > MAX_TOKEN))
        ):
            return None
        try:
            lease_id = str(uuid.UUID(raw_id))
        except ValueError:
            return None

        return await self._answer(
            request,
            200,
            lambda rt, who: end_lease(
                rt, lease_id, who=who, holder=holder, token=None if token is None else int(token)
            ),
        )

    async def _answer(
        self,
        request: Request,
        status: int,
        call: Callable[[Runtime, Any], Awaitable[Lease | Released]],
    ) -> Response:
        """Run `call` as a caller with the job role at least; its answer, or the problem the
        app's own exception handlers make of what it raised."""
        rt: Runtime = request.app.state.runtime
        try:
            who = authenticate(request)
            request.state.caller = who.name
            if ROLES.index(who.role) < ROLES.index("job"):
                raise Forbidden(f"this call needs the job role; token {who.name} is {who.role}")
            answer = await call(rt, who)
        except Exception as exc:
            handler = _handler(self.fastapi, exc)
            if handler is None:
                raise
            return await _maybe_await(handler(request, exc))
        return Response(answer.model_dump_json(), status_code=status, media_type="application/json")


def _route(method: str, path: str) -> BaseRoute:
    for route in router.routes:
        if getattr(route, "path", None) == path and method in getattr(route, "methods", ()):
            return route
    raise LookupError(f"no route {method} {path}")


def _handler(app: FastAPI, exc: Exception) -> Callable[..., Any] | None:
    """The app's exception handler for `exc`, found along its class's MRO."""
    for cls in type(exc).__mro__:
        handler = app.exception_handlers.get(cls)
        if handler is not None:
            return handler
    return None


async def _maybe_await(value: Any) -> Response:
    return await value if isinstance(value, Awaitable) else value


async def _read(receive: Receive) -> tuple[bytes, Receive]:
    """The whole body, and a `receive` that hands it on again to whoever reads it next."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    body = b"".join(chunks)
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return body, replay
