"""The lakelock error tree, shared by the service and its client.

    * LakelockError
      x InvalidRequest      422  a field broke a rule; fix the field named in `detail`
      x Unauthorized        401  no bearer token, or an unknown one
      x Forbidden           403  the token's role may not do this
        + Fenced            403  a maintenance commit without a live lease and its token
      x NotFound            404  unknown lease id
      x Refused                  the protocol said no; nothing changed
        + Locked            423  no commit lease now: reason paused | maintenance | intent
        + MaintenanceHeld   409  another maintenance lease (or intent) is live
        + MaintenanceOff    423  an operator disabled maintenance on the table
        + ClaimHeld         409  another compactor has claimed the table; move on to the next
        + NotOwner          409  the lease belongs to another holder, or was revoked
        + StaleToken        412  the token sent is not the lease's; stop writing
        + CommitHeld        429  a data commit meets a draining or held maintenance lease
        + CommitConflict    409  the table changed since the commit's base; refresh, retry
        + AlreadyExists     409  a table or namespace of that name exists
        + NotEmpty          409  the namespace still holds tables
        + InUse             409  a table to drop or rename has live leases or intents
      x NoSuchTable         404  no table of that name in the catalog
      x NoSuchNamespace     404  no namespace of that name in the catalog
      x LeaseExpired        410  renewed too late, or already released; acquire again
      x Unavailable         503  the lock database cannot be reached; retry later
      x ServerError         500  a fault in the service; it is logged there
      x OutcomeUnknown           client side: timed out, may have taken effect;
                                 retry with the same request id

Each class carries `status`, `slug` and a docstring that says what to do next. The service
raises only these (`HTTPException` appears nowhere); `to_problem()` turns one into an RFC 9457
problem body, and `from_problem()` turns a body back into the same class by its `type`, so
refusals that share a status stay distinct.
"""

from __future__ import annotations

from typing import Any, ClassVar

__all__ = [
    "PROBLEM_TYPE_PREFIX",
    "TRANSIENT",
    "AlreadyExists",
    "ClaimHeld",
    "CommitConflict",
    "CommitHeld",
    "Fenced",
    "Forbidden",
    "InUse",
    "InvalidRequest",
    "LakelockError",
    "LeaseExpired",
    "Locked",
    "MaintenanceHeld",
    "MaintenanceOff",
    "NoSuchNamespace",
    "NoSuchTable",
    "NotEmpty",
    "NotFound",
    "NotOwner",
    "OutcomeUnknown",
    "Refused",
    "ServerError",
    "StaleToken",
    "Unauthorized",
    "Unavailable",
    "from_problem",
    "to_problem",
]

PROBLEM_TYPE_PREFIX = "urn:lakelock:"


class LakelockError(Exception):
    """Base of every lakelock error."""

    status: ClassVar[int] = 500
    slug: ClassVar[str] = "error"
    title: ClassVar[str] = "lakelock error"

    def __init__(self, detail: str, **extra: Any) -> None:
        super().__init__(detail)
        self.detail = detail
        self.extra = extra

    @property
    def retry_after_s(self) -> float | None:
        value = self.extra.get("retry_after_s")
        return None if value is None else float(value)


class InvalidRequest(LakelockError):
    """The request broke a rule; fix the field named in the detail and send it again."""

    status, slug, title = 422, "invalid-request", "Invalid request"


class Unauthorized(LakelockError):
    """Send `Authorization: Bearer <secret>` with a token configured in LAKELOCK_TOKENS."""

    status, slug, title = 401, "unauthorized", "Unauthorized"


class Forbidden(LakelockError):
    """The token's role may not do this; use a token with the role named in the detail."""

    status, slug, title = 403, "forbidden", "Forbidden"


class NotFound(LakelockError):
    """No such lease (never granted, or forgotten); acquire a new one."""

    status, slug, title = 404, "not-found", "Not found"


class Refused(LakelockError):
    """The protocol refused the request; nothing changed. Retry after `retry_after_s`."""

    status, slug, title = 409, "refused", "Refused"


class Locked(Refused):
    """No commit lease now (`reason`: paused, maintenance, intent); retry after `retry_after_s`."""

    status, slug, title = 423, "locked", "Table locked for ingest"


class MaintenanceHeld(Refused):
    """A live maintenance lease intersects the scope asked for; skip this run or retry later."""

    status, slug, title = 409, "maintenance-held", "Maintenance lease held"


class MaintenanceOff(Refused):
    """An operator disabled maintenance on the table; skip this run."""

    status, slug, title = 423, "maintenance-off", "Maintenance disabled"


class ClaimHeld(Refused):
    """Another holder has a live claim on the table (`holder`, `remaining_s`): move on to the
    next table, do not wait; it is free again once released or expired."""

    status, slug, title = 409, "claim-held", "Table claimed"


class NotOwner(Refused):
    """The lease is another holder's, or an operator revoked it; stop writing, do not commit."""

    status, slug, title = 409, "not-owner", "Not the lease's holder"


class StaleToken(Refused):
    """The fencing token is not the lease's; a newer holder exists. Stop writing."""

    status, slug, title = 412, "stale-token", "Stale fencing token"


class Fenced(Forbidden):
    """A maintenance commit (files replaced, delete files removed, snapshots removed) named no
    live maintenance lease of the table with its current token (`reason` says which); the
    table is unchanged. Acquire a maintenance lease and commit under it."""

    status, slug, title = 403, "fenced", "Commit fenced"


class CommitHeld(Refused):
    """A data commit touches partitions a maintenance lease is draining or holds; nothing was
    committed. Retry after `retry_after_s` (a client retries 429 by itself)."""

    status, slug, title = 429, "commit-held", "Commit held for maintenance"


class CommitConflict(Refused):
    """The table's metadata changed since the commit's base, or a requirement failed; reload
    the table and commit again (Iceberg clients do this by themselves)."""

    status, slug, title = 409, "commit-conflict", "Commit conflict"


class AlreadyExists(Refused):
    """A table or namespace of that name exists; pick another name or load it."""

    status, slug, title = 409, "already-exists", "Already exists"


class NotEmpty(Refused):
    """The namespace still holds tables; drop them first."""

    status, slug, title = 409, "not-empty", "Namespace not empty"


class InUse(Refused):
    """The table has a live lease or intent (`live` names them): stop the jobs that hold them,
    or end them as an operator, then drop or rename it."""

    status, slug, title = 409, "in-use", "Table in use"


class NoSuchTable(LakelockError):
    """No table of that name in the catalog; check the name or create it."""

    status, slug, title = 404, "no-such-table", "No such table"


class NoSuchNamespace(LakelockError):
    """No namespace of that name in the catalog; create it first."""

    status, slug, title = 404, "no-such-namespace", "No such namespace"


class LeaseExpired(LakelockError):
    """The lease expired (or was released) before this call; acquire a new one."""

    status, slug, title = 410, "expired", "Lease expired"


class Unavailable(LakelockError):
    """The lock database cannot be reached; retry after `retry_after_s`."""

    status, slug, title = 503, "unavailable", "Service unavailable"


class StorageFault(Unavailable):
    """The catalog's warehouse storage failed or could not be reached: nothing was applied;
    retry after `retry_after_s`."""

    slug, title = "storage-unavailable", "Warehouse storage unavailable"


class ServerError(LakelockError):
    """A fault in the service; it is logged there. Retry later or report it."""

    status, slug, title = 500, "server-error", "Internal server error"


class OutcomeUnknown(LakelockError):
    """The call timed out or the connection broke: it may have taken effect.

    Retry with the same request id; an acquire is then answered with the same lease.
    """

    status, slug, title = 0, "outcome-unknown", "Outcome unknown"


def _all_classes(base: type[LakelockError]) -> list[type[LakelockError]]:
    found = [base]
    for sub in base.__subclasses__():
        found.extend(_all_classes(sub))
    return found


_BY_SLUG = {cls.slug: cls for cls in _all_classes(LakelockError)}


def to_problem(exc: LakelockError, *, instance: str | None = None) -> dict[str, Any]:
    """The RFC 9457 body for `exc`: type, title, status, detail and its extra members."""
    body: dict[str, Any] = {
        "type": PROBLEM_TYPE_PREFIX + exc.slug,
        "title": exc.title,
        "status": exc.status,
        "detail": exc.detail,
    }
    if instance is not None:
        body["instance"] = instance
    body.update(exc.extra)
    return body


def from_problem(body: Any, status: int) -> LakelockError:
    """The exception a problem body stands for; an unknown type falls back on its status."""
    if not isinstance(body, dict):
        body = {"detail": str(body)}
    kind = str(body.get("type", ""))
    cls = (
        _BY_SLUG.get(kind.removeprefix(PROBLEM_TYPE_PREFIX))
        if kind.startswith(PROBLEM_TYPE_PREFIX)
        else None
    )
    if cls is None:
        cls = next(
            (c for c in _BY_SLUG.values() if c.status == status and c is not LakelockError),
            ServerError if status >= 500 else InvalidRequest,
        )
    extra = {k: v for k, v in body.items() if k not in {"type", "title", "status", "detail"}}
    return cls(str(body.get("detail", "")), **extra)


TRANSIENT = (Unavailable, OutcomeUnknown, ServerError)
"""The failures that asking again may cure (the client retries them; a renewer keeps trying
until its deadline); every other error is the protocol's answer and stands."""
