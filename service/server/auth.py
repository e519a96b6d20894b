"""Bearer tokens and roles: reader (GET) < job (leases, run reports) < operator (everything);
a token listed in LAKELOCK_TOKEN_TABLES touches only the tables its patterns match.

Secrets are compared in constant time against every configured token, and never logged: the
request log names the token's `name` only.
"""

from __future__ import annotations

import fnmatch
import hmac
import re
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Annotated

from fastapi import Depends, Request

from service.lock.rows import Caller
from service.server.settings import ANONYMOUS, ROLES, ApiToken, Role, Settings
from service.wire import TABLE_PATTERN
from service.wire.errors import Forbidden, Unauthorized

__all__ = [
    "JobDep",
    "OperatorDep",
    "ReaderDep",
    "authenticate",
    "caller",
    "check_hold",
    "check_touch",
    "guard_table",
    "may_hold",
    "may_touch",
    "require",
]

ANONYMOUS_OPERATOR = ApiToken(name=ANONYMOUS, role="operator", secret="")


def authenticate(request: Request) -> ApiToken:
    """The token the request carries (anonymous operator with auth off).

    Raises:
        Unauthorized: no bearer token, or an unknown one.
    """
    settings: Settings = request.app.state.settings
    if settings.auth == "off":
        return ANONYMOUS_OPERATOR
    known: ApiToken | None = getattr(request.state, "token", None)
    if known is not None:
        return known  # a table route's guard found it already (guard_table)
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
    request.state.token = found
    return found


def caller(token: ApiToken) -> Caller:
    """The lock's view of a token: its name is the principal of what it takes."""
    return Caller(token.name, operator=token.role == "operator")


def may_touch(token: ApiToken, table: str) -> bool:
    """Whether `token` may touch the table named `table` (`catalog.namespace.table`, any case):
    its LAKELOCK_TOKEN_TABLES patterns match the lower-case name, or it has none (operators
    never have any). `*` matches dots too: `lake.*` is every table of catalog `lake`."""
    if token.tables is None:
        return True
    name = table.lower()
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in token.tables)


def may_hold(token: ApiToken, namespace: str) -> bool:
    """Whether `token` may touch some table of the namespace `namespace` (`catalog.namespace`,
    any case): one of its LAKELOCK_TOKEN_TABLES patterns matches a table name in it, or it has
    none. `lake.db.*`, `lake.*` and `lake.d?.events` hold `lake.db`; `lake.db.*` holds no other
    namespace of catalog `lake` (but its nested ones, `lake.db.x`, as `may_touch` has it)."""
    if token.tables is None:
        return True
    prefix = namespace.lower() + "."
    return any(_matches_under(pattern, prefix) for pattern in token.tables)


def _matches_under(pattern: str, prefix: str) -> bool:
    """Whether `pattern` (a glob of letters, digits, `_`, `.`, `*` and `?`, as
    LAKELOCK_TOKEN_TABLES allows; `*` matching dots too) matches `prefix` followed by some
    table name: a non-empty name without dots. Walks the pattern's positions as a set, one
    character of `prefix` at a time: no recursion, linear in the name."""

    closure = partial(_star_closure, pattern)
    states = closure({0})
    for char in prefix:
        after: set[int] = set()
        for at in states:
            if at == len(pattern):
                continue
            if pattern[at] == "*":
                after.add(at)
            elif pattern[at] in ("?", char):
                after.add(at + 1)
        states = closure(after)
        if not states:
            return False
    # what is left of the pattern must match a name: something, and no literal dot
    return any(pattern[at:] and "." not in pattern[at:] for at in states)


def _star_closure(pattern: str, states: set[int]) -> set[int]:
    """`states` with every position a star may skip to (a star may match nothing)."""
    found, todo = set(), list(states)
    while todo:
        at = todo.pop()
        if at not in found:
            found.add(at)
            if at < len(pattern) and pattern[at] == "*":
                todo.append(at + 1)
    return found


def check_hold(token: ApiToken, namespace: str) -> None:
    """Refuse a token whose LAKELOCK_TOKEN_TABLES patterns match no table of `namespace`
    (`may_hold`): a narrowed token creates and reads namespaces within its patterns only.

    Raises:
        Forbidden: 403, naming the token, the namespace and the setting.
    """
    if not may_hold(token, namespace):
        raise _outside(token, "namespace", namespace.lower(), "a table of the namespace")


def check_touch(token: ApiToken, table: str) -> None:
    """Refuse a token whose LAKELOCK_TOKEN_TABLES patterns do not cover `table` (`may_touch`):
    the one check of every route that names a table, in the lease API and the catalog front.

    Raises:
        Forbidden: 403, naming the token, the table and the setting.
    """
    if not may_touch(token, table):
        raise _outside(token, "table", table.lower(), "the table")


def _outside(token: ApiToken, kind: str, name: str, covering: str) -> Forbidden:
    """The 403 of a token whose patterns do not reach the `kind` (table, namespace) `name`."""
    patterns = ", ".join(token.tables or ())
    return Forbidden(
        f"token {token.name} may not touch {kind} {name}: LAKELOCK_TOKEN_TABLES lets it touch "
        f"{patterns} only; use a token whose patterns cover {covering}, or have an operator "
        "add one",
        token=token.name,
        setting="LAKELOCK_TOKEN_TABLES",
        **{kind: name},
    )


_TABLE_NAME = re.compile(TABLE_PATTERN)


async def guard_table(request: Request) -> None:
    """On every route of the lease API: a `{table}` in the path must be one the caller's token
    may touch (`may_touch`), before anything runs, so a refused call changes nothing. A name
    that is no table name is left to the route's own validation (its 422 says what to fix)."""
    table = request.path_params.get("table")
    if table is None or not _TABLE_NAME.match(table):
        return
    token = authenticate(request)
    request.state.caller = token.name
    check_touch(token, table)


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
