"""Bearer tokens and roles: reader (GET) < job (leases, run reports) < operator (everything).

Secrets are compared in constant time against every configured token, and never logged: the
request log names the token's `name` only.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from typing import Annotated

from fastapi import Depends, Request

from service.server.settings import ROLES, ApiToken, Role
from service.wire.errors import Forbidden, Unauthorized

__all__ = ["authenticate", "require", "ReaderDep", "JobDep", "OperatorDep"]

ANONYMOUS_OPERATOR = ApiToken(name="anonymous", role="operator", secret="")


def authenticate(request: Request) -> ApiToken:
    """The token the request carries (anonymous operator with auth off).

    Raises:
        Unauthorized: no bearer token, or an unknown one.
    """
    settings = request.app.state.settings
    if settings.auth == "off":
        return ANONYMOUS_OPERATOR
    header = request.headers.get("authorization", "")
    scheme, _, secret = header.partition(" ")
    if scheme.lower() != "bearer" or not secret:
        raise Unauthorized("send Authorization: Bearer <secret> with a configured token")
    found = None
    for token in settings.api_tokens:
        # check every token, without stopping early: the time taken says nothing about a match
        if hmac.compare_digest(token.secret.encode(), secret.strip().encode()):
            found = token
    if found is None:
        raise Unauthorized("unknown token; use one configured in LAKELOCK_TOKENS")
    return found


def require(role: Role) -> Callable[[Request], Awaitable[ApiToken]]:
    needed = ROLES.index(role)

    # async: a plain `def` dependency would take a worker thread for a few microseconds of work
    async def dependency(request: Request) -> ApiToken:
        caller = authenticate(request)
        request.state.caller = caller.name
        if ROLES.index(caller.role) < needed:
            raise Forbidden(
                f"this call needs the {role} role; token {caller.name} is {caller.role}"
            )
        return caller

    return dependency


ReaderDep = Annotated[ApiToken, Depends(require("reader"))]
JobDep = Annotated[ApiToken, Depends(require("job"))]
OperatorDep = Annotated[ApiToken, Depends(require("operator"))]
