"""The catalog front's Idempotency-Key (Iceberg's REST specification from 1.11): a mutation
sent again with the same key is answered as it was the first time, never applied twice
(docs/catalog-front.md §4).

    answer = await once(request, caller, run)    run(key) the first time; the kept answer after

`/v1/config` advertises `idempotency-key-lifetime` (LAKELOCK_CATALOG_IDEMPOTENCY_LIFETIME_S;
0: not advertised, keys ignored), and Iceberg's 1.11 Java client then sends a UUIDv7 key with
each mutation and the same key with each retry of it. Kept, as the specification says: 200 and
204 answers and the 4xx that a resend would meet again; not kept: 429 (held: a resend may
pass), a drop's or rename's 409 `in-use` (it may pass once the leases end) and 5xx (nothing or
an unknown part was applied). A commit and a table's creation keep
their answer in the transaction that swaps the pointer (service.catalog.front); others once
they are done.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta

from fastapi import Request, Response

from service.lock import idempotency
from service.server.problems import problem_response
from service.server.runtime import Runtime
from service.server.settings import ApiToken
from service.wire.errors import InUse, InvalidRequest, LakelockError

__all__ = ["HEADER", "lifetime", "once"]

HEADER = "Idempotency-Key"
_NOT_KEPT = (408, 425, 429)  # a resend may be answered otherwise
_PASSING = (InUse,)  # refusals a resend may pass: a drop or rename once the leases ended


def lifetime(seconds: float) -> str:
    """The key lifetime as `/v1/config` advertises it: an ISO-8601 duration."""
    return f"PT{int(seconds)}S"


async def once(
    request: Request,
    caller: ApiToken,
    run: Callable[[idempotency.Key | None], Awaitable[Response]],
    replay: Callable[[idempotency.Stored], Awaitable[Response]] | None = None,
) -> Response:
    """`run(key)`'s answer, kept for the request's Idempotency-Key (None without one); the
    answer kept for it when the key was seen: as kept, or through `replay` when it names a
    table's metadata file. With `replay`, `run` keeps its own success (in the transaction that
    applies it), here only its refusals.

    Raises:
        InvalidRequest: the key is no UUID, or was sent before with another request.
    """
    rt: Runtime = request.app.state.runtime
    key = await _key(request, caller, rt.settings.catalog_idempotency_lifetime_s)
    if key is None:
        return await run(None)
    stored = await rt.read(lambda conn: idempotency.find(conn, key))
    if stored is not None:
        return await _replayed(stored, replay)
    try:
        answer = await run(key)
    except idempotency.KeyTaken:
        return await _taken(rt, key, replay)  # the copy sent at the same time committed first
    except LakelockError as exc:
        if not 400 <= exc.status < 500 or exc.status in _NOT_KEPT or isinstance(exc, _PASSING):
            raise
        answer = problem_response(request, exc)
    if answer.status_code < 300 and replay is not None:
        return answer  # kept in the transaction that applied it
    if answer.status_code < 500 and answer.status_code not in _NOT_KEPT:
        body = bytes(answer.body).decode() if answer.body else None
        try:
            await rt.transact(
                lambda conn: idempotency.remember(conn, key, status=answer.status_code, body=body)
            )
        except idempotency.KeyTaken:
            # a copy sent at the same time was answered first (this one may have been
            # refused because of it: a 409 after the other's commit): its answer stands
            return await _taken(rt, key, replay)
    return answer


async def _taken(
    rt: Runtime,
    key: idempotency.Key,
    replay: Callable[[idempotency.Stored], Awaitable[Response]] | None,
) -> Response:
    """The answer kept for `key` by a copy of the request answered first."""
    stored = await rt.read(lambda conn: idempotency.find(conn, key))
    if stored is None:  # expired meanwhile: only with a lifetime shorter than a request
        raise InvalidRequest(
            f"{HEADER}: {key.key} was answered for another copy of this request, and its "
            "answer expired; send a new key"
        )
    return await _replayed(stored, replay)


async def _key(request: Request, caller: ApiToken, seconds: float) -> idempotency.Key | None:
    value = request.headers.get(HEADER)
    if value is None or seconds <= 0:
        return None
    try:
        parsed = uuid.UUID(value)
    except ValueError:
        parsed = None
    if parsed is None or len(value) != 36:
        raise InvalidRequest(
            f"{HEADER}: {value[:40]!r} is no UUID; send a new UUIDv7 (36 characters) per "
            "operation, and the same one with each retry of it"
        )
    digest = hashlib.sha256()
    for part in (request.method, request.url.path, request.url.query):
        digest.update(part.encode())
        digest.update(b"\x00")
    digest.update(await request.body())
    return idempotency.Key(
        principal=caller.name,
        key=str(parsed),
        fingerprint=digest.hexdigest(),
        lifetime=timedelta(seconds=seconds),
    )


async def _replayed(
    stored: idempotency.Stored,
    replay: Callable[[idempotency.Stored], Awaitable[Response]] | None,
) -> Response:
    if stored.location is not None and replay is not None:
        return await replay(stored)
    media = "application/problem+json" if stored.status >= 400 else "application/json"
    return Response(stored.body, status_code=stored.status, media_type=media)
