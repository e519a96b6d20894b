"""What every request passes through before a route: `RequestContext`.

    app.add_middleware(RequestContext, max_body_bytes=settings.max_body_bytes)

The request id (X-Request-ID, else a new one; sent back), the bounds on the body (its size, and
JSON only), the one-line request log and the latency histogram. Pure ASGI: no task per request.
"""

from __future__ import annotations

import logging
import time
import uuid

from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.server.problems import CATALOG_PREFIX, plain_problem
from service.server.runtime import Runtime

__all__ = ["CATALOG_MAX_BODY_BYTES", "RequestContext"]

request_log = logging.getLogger("lakelock.request")

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
        return plain_problem(413, "too-large", f"the body is over {limit} bytes")

    @staticmethod
    def _not_json() -> JSONResponse:
        return plain_problem(
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


class _BodyTooLarge(StarletteHTTPException):
    """The body grew past the limit while being read (no or a false Content-Length). An HTTP
    exception, so FastAPI's body parsing lets it through as itself (a 413), not as a 400."""

    def __init__(self) -> None:
        super().__init__(413, "the body is too large; send less")
