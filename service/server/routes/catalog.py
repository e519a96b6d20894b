"""The Iceberg REST catalog at /iceberg (served when LAKELOCK_CATALOG_WAREHOUSE is set): parse,
call service.catalog.front on a worker thread, translate (docs/catalog-front.md).

Spark's `RESTCatalog` (`uri = http://host:8737/iceberg`) and pyiceberg's `RestCatalog` use it as
they use any REST catalog. Roles: a reader loads tables and namespaces (and reports scan
metrics); a job also creates namespaces and tables and commits; an operator also drops, renames
and changes namespace properties. A refusal is a problem+json body that also carries Iceberg's
`error` object, so both kinds of client read it (service.server.problems).

Namespaces with several levels come in the path joined by the unit separator (%1F), as the REST
specification says.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import Annotated, Any, TypeAlias, TypeVar

import anyio.to_thread
from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import JSONResponse
from pydantic import TypeAdapter, ValidationError
from pyiceberg.catalog.rest import CreateTableRequest
from pyiceberg.table.update import TableRequirement, TableUpdate
from pyiceberg.typedef import Identifier
from starlette.background import BackgroundTask

from service.catalog import park
from service.catalog.front import Front, Loaded
from service.lock.idempotency import Key, Stored
from service.server import idempotency
from service.server.auth import (
    JobDep,
    OperatorDep,
    ReaderDep,
    check_hold,
    check_touch,
    may_hold,
    may_touch,
)
from service.server.parking import Parking
from service.server.routes.common import clock
from service.server.runtime import ClientGone, Runtime
from service.server.settings import ApiToken
from service.wire.errors import InvalidRequest, StorageFault

__all__ = ["ENDPOINTS", "router"]

router = APIRouter(prefix="/iceberg", tags=["iceberg catalog"])
T = TypeVar("T")

# the roles of the catalog's calls (docs/catalog-front.md)
Reader: TypeAlias = ReaderDep
Job: TypeAlias = JobDep
Operator: TypeAlias = OperatorDep

ENDPOINTS = [
    "GET /v1/{prefix}/namespaces",
    "POST /v1/{prefix}/namespaces",
    "GET /v1/{prefix}/namespaces/{namespace}",
    "HEAD /v1/{prefix}/namespaces/{namespace}",
    "DELETE /v1/{prefix}/namespaces/{namespace}",
    "POST /v1/{prefix}/namespaces/{namespace}/properties",
    "GET /v1/{prefix}/namespaces/{namespace}/tables",
    "POST /v1/{prefix}/namespaces/{namespace}/tables",
    "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "HEAD /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "DELETE /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "POST /v1/{prefix}/tables/rename",
    "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}/metrics",
]

_REQUIREMENTS = TypeAdapter(list[TableRequirement])
_UPDATES = TypeAdapter(list[TableUpdate])
JSON = "application/json"


def _front(request: Request) -> Front:
    front: Front = request.app.state.catalog
    return front


def _runtime(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


async def _call(request: Request, fn: Callable[[Front], T]) -> T:
    front = _front(request)
    return await anyio.to_thread.run_sync(fn, front, limiter=request.app.state.catalog_limiter)


def _namespace(text: str) -> Identifier:
    return _levels(text.split("\x1f"))


def _levels(levels: Any) -> Identifier:
    """A namespace's levels: non-empty names without dots (the JdbcCatalog joins levels with
    dots, so a dot in one would name another namespace)."""
    if not isinstance(levels, list | tuple) or not levels:
        raise InvalidRequest("a namespace is a non-empty list of names")
    for level in levels:
        if not isinstance(level, str) or not level or "." in level or not level.isprintable():
            raise InvalidRequest(
                f"namespace level {str(level)[:80]!r}: a non-empty name of printable "
                "characters without dots (levels of a nested namespace are separate list "
                "items, or %1F in a path)"
            )
    return tuple(levels)


def _touched(request: Request, caller: ApiToken, identifier: Identifier) -> Identifier:
    """`identifier`, when `caller` may touch the table (LAKELOCK_TOKEN_TABLES, as on the lease
    API: service.server.auth.check_touch).

    Raises:
        Forbidden: the token's patterns do not cover the table.
    """
    check_touch(caller, _front(request).table_name(identifier))
    return identifier


def _held(request: Request, caller: ApiToken, levels: Identifier) -> Identifier:
    """`levels`, when `caller` may touch a table of the namespace (LAKELOCK_TOKEN_TABLES:
    service.server.auth.check_hold).

    Raises:
        Forbidden: the token's patterns match no table of the namespace.
    """
    check_hold(caller, _front(request).table_name(levels))
    return levels


async def _body(request: Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except ValueError as exc:
        raise InvalidRequest(f"the body is not JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise InvalidRequest("the body must be a JSON object")
    return body


def _parse(parse: Callable[[Any], T], value: Any, what: str) -> T:
    try:
        return parse(value)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise InvalidRequest(f"{what}: {where}: {first['msg']}") from exc
    # pyiceberg's own validators read the body before pydantic checks it, and pydantic passes
    # on what they raise but a ValueError: a missing field (`set-statistics` without its
    # `statistics`) is a KeyError, a list where an object belongs (`properties`) an
    # AttributeError, a value of the wrong kind (an `initial-default` its field's type cannot
    # hold) a TypeError. Each is the body's mistake, never the service's.
    except KeyError as exc:
        raise InvalidRequest(
            f"{what}: the field {str(exc)[:80]} is missing; send it as Iceberg's REST "
            "specification describes it"
        ) from exc
    except (AttributeError, TypeError, ValueError) as exc:
        raise InvalidRequest(
            f"{what}: a value of the wrong JSON type ({str(exc)[:300]}); send objects, lists "
            "and values as Iceberg's REST specification describes them"
        ) from exc


def _table(loaded: Loaded) -> Response:
    """A LoadTableResult (or a commit's answer): the metadata's JSON text as the catalog read or
    wrote it, not serialized again."""
    location, _, text = loaded
    return Response(
        f'{{"metadata-location":{json.dumps(location)},"metadata":{text},"config":{{}}}}',
        media_type=JSON,
    )


# -- config and namespaces ---------------------------------------------------------------------


@router.get("/v1/config")
async def config(request: Request, caller: Reader, warehouse: str | None = None) -> dict[str, Any]:
    """The catalog's configuration: the endpoints served, and as defaults (a client's own
    catalog properties win) where its S3 warehouse is, never a key (docs/catalogs.md)."""
    answer: dict[str, Any] = {
        "defaults": _storage_defaults(request),
        "overrides": {},
        "endpoints": ENDPOINTS,
    }
    seconds = _runtime(request).settings.catalog_idempotency_lifetime_s
    if seconds > 0:
        answer["idempotency-key-lifetime"] = idempotency.lifetime(seconds)
    return answer


def _storage_defaults(request: Request) -> dict[str, str]:
    """The non-secret S3 settings in the names Iceberg's S3FileIO and pyiceberg read."""
    s3 = _front(request).pointers.storage
    if not s3.on_s3:
        return {}
    found: dict[str, str] = {"s3.path-style-access": str(s3.s3.path_style).lower()}
    if s3.s3.endpoint:
        found["s3.endpoint"] = s3.s3.endpoint
    if s3.s3.region:
        found["client.region"] = found["s3.region"] = s3.s3.region
    return found


@router.get("/v1/namespaces")
async def list_namespaces(
    request: Request, caller: Reader, parent: str | None = None
) -> dict[str, Any]:
    under = _held(request, caller, _namespace(parent)) if parent else ()
    found = await _call(request, lambda f: f.list_namespaces(under))
    # a token narrowed to some tables sees the namespaces that can hold them only
    mine = [n for n in found if may_hold(caller, _front(request).table_name(n))]
    return {"namespaces": [list(n) for n in mine]}


@router.post("/v1/namespaces")
async def create_namespace(request: Request, caller: Job) -> Response:
    async def run(_key: Key | None) -> Response:
        body = await _body(request)
        levels = _held(request, caller, _levels(body.get("namespace")))
        properties = body.get("properties") or {}
        if not isinstance(properties, dict):
            raise InvalidRequest("properties: a JSON object of strings")
        properties = {str(k): str(v) for k, v in properties.items()}
        await _call(request, lambda f: f.create_namespace(levels, properties))
        return JSONResponse({"namespace": list(levels), "properties": properties})

    return await idempotency.once(request, caller, run)


@router.get("/v1/namespaces/{namespace}")
async def load_namespace(request: Request, caller: Reader, namespace: str) -> dict[str, Any]:
    levels = _held(request, caller, _namespace(namespace))
    properties = await _call(request, lambda f: f.namespace_properties(levels))
    return {"namespace": list(levels), "properties": properties}


@router.head("/v1/namespaces/{namespace}", status_code=204)
async def namespace_exists(request: Request, caller: Reader, namespace: str) -> Response:
    levels = _held(request, caller, _namespace(namespace))
    await _call(request, lambda f: f.namespace_properties(levels))
    return Response(status_code=204)


@router.delete("/v1/namespaces/{namespace}", status_code=204)
async def drop_namespace(request: Request, caller: Operator, namespace: str) -> Response:
    async def run(_key: Key | None) -> Response:
        levels = _namespace(namespace)
        await _call(request, lambda f: f.drop_namespace(levels))
        return Response(status_code=204)

    return await idempotency.once(request, caller, run)


@router.post("/v1/namespaces/{namespace}/properties")
async def update_namespace(request: Request, caller: Operator, namespace: str) -> Response:
    async def run(_key: Key | None) -> Response:
        levels = _namespace(namespace)
        body = await _body(request)
        removals, updates = body.get("removals") or [], body.get("updates") or {}
        if not isinstance(removals, list) or not isinstance(updates, dict):
            raise InvalidRequest("removals: a JSON list of keys; updates: a JSON object of strings")
        dropped = {str(k) for k in removals}
        changed = {str(k): str(v) for k, v in updates.items()}
        return JSONResponse(
            await _call(request, lambda f: f.update_namespace(levels, dropped, changed))
        )

    return await idempotency.once(request, caller, run)


# -- tables -----------------------------------------------------------------------------------


@router.get("/v1/namespaces/{namespace}/tables")
async def list_tables(request: Request, caller: Reader, namespace: str) -> dict[str, Any]:
    levels = _held(request, caller, _namespace(namespace))
    found = await _call(request, lambda f: f.list_tables(levels))
    # a token narrowed to some tables sees those only, as in GET /v1/tables
    mine = [t for t in found if may_touch(caller, _front(request).table_name(t))]
    return {"identifiers": [{"namespace": list(t[:-1]), "name": t[-1]} for t in mine]}


@router.post("/v1/namespaces/{namespace}/tables")
async def create_table(request: Request, caller: Job, namespace: str) -> Response:
    """Create a table, or stage one (`stage-create`: committed by the client's first commit)."""
    levels = _namespace(namespace)
    fields = await _body(request)
    for optional in ("location", "partition-spec", "write-order"):
        fields.setdefault(optional, None)  # optional in the specification, not in the model
    body = _parse(CreateTableRequest.model_validate, fields, "create table")
    identifier = _touched(request, caller, (*levels, body.name))

    async def run(key: Key | None) -> Response:
        return _table(
            await _call(request, lambda f: f.create(levels, body, principal=caller.name, key=key))
        )

    return await idempotency.once(request, caller, run, partial(_replay, request, identifier))


@router.get("/v1/namespaces/{namespace}/tables/{table}")
async def load_table(
    request: Request,
    caller: Reader,
    namespace: str,
    table: str,
    snapshots: Annotated[str | None, Query(pattern="^(all|refs)$")] = None,
) -> Response:
    identifier = _touched(request, caller, (*_namespace(namespace), table))
    return _table(await _call(request, lambda f: f.load(identifier)))


@router.head("/v1/namespaces/{namespace}/tables/{table}", status_code=204)
async def table_exists(request: Request, caller: Reader, namespace: str, table: str) -> Response:
    identifier = _touched(request, caller, (*_namespace(namespace), table))
    await _call(request, lambda f: f.load(identifier))
    return Response(status_code=204)


@router.post("/v1/namespaces/{namespace}/tables/{table}")
async def commit_table(request: Request, caller: Job, namespace: str, table: str) -> Response:
    """Commit `{requirements, updates}`: fenced against lakelock's leases (docs/catalogs.md)."""
    identifier = _touched(request, caller, (*_namespace(namespace), table))
    body = await _body(request)
    requirements = _parse(
        _REQUIREMENTS.validate_python, body.get("requirements", []), "requirements"
    )
    updates = _parse(_UPDATES.validate_python, body.get("updates", []), "updates")
    headers = {
        k.lower(): v for k, v in request.headers.items() if k.lower().startswith("x-lakelock-")
    }

    async def run(key: Key | None) -> Response:
        return _table(
            await park.held_until_free(
                _front(request),
                identifier,
                requirements,
                updates,
                principal=caller.name,
                headers=headers,
                key=key,
                lot=_Lot(request, caller),
            )
        )

    return await idempotency.once(request, caller, run, partial(_replay, request, identifier))


async def _replay(request: Request, identifier: Identifier, stored: Stored) -> Response:
    """A kept answer of a commit or a table's creation: the metadata file it wrote; the table
    as it is now when that is gone (the specification allows a newer state)."""
    location = stored.location
    assert location is not None  # kept with a table's answers only
    try:
        metadata, text = await _call(request, lambda f: f.pointers.read_metadata(location))
    except (FileNotFoundError, StorageFault):
        return _table(await _call(request, lambda f: f.load(identifier)))
    return _table((location, metadata, text))


class _Lot:
    """What the server lends a commit the catalog parks (service.catalog.park.Lot): the event
    loop's clock, the catalog's worker threads, the tables' lock versions and their waits
    (Runtime.changes), the parked places of `caller` (Parking) and their metrics."""

    def __init__(self, request: Request, caller: ApiToken) -> None:
        self._request, self._caller = request, caller
        self._rt: Runtime = request.app.state.runtime
        self._parking: Parking = request.app.state.parking
        self.wait_s = self._rt.settings.catalog_hold_wait_s

    def clock(self) -> float:
        return clock()

    def closing(self) -> bool:
        return self._rt.changes.closing.is_set()

    async def call(self, fn: Callable[[], T], /) -> T:
        return await anyio.to_thread.run_sync(fn, limiter=self._request.app.state.catalog_limiter)

    async def version(self, table: str) -> object:
        return await self._rt.version(table)

    async def wait(self, table: str, *, seen: object, until: float) -> bool:
        try:
            await self._rt.changes.wait(
                table, seen=seen, until=until, is_disconnected=self._request.is_disconnected
            )
        except ClientGone:
            return False
        return True

    def full(self) -> str | None:
        return self._parking.full(self._caller.name)

    @contextmanager
    def parked(self) -> Iterator[None]:
        with self._parking.parked(self._caller.name):
            self._rt.metrics.catalog_parked.inc()
            try:
                yield
            finally:
                self._rt.metrics.catalog_parked.dec()

    def judged(self, how: str) -> None:
        self._rt.metrics.catalog_parked_judged.labels(how).inc()


@router.delete("/v1/namespaces/{namespace}/tables/{table}", status_code=204)
async def drop_table(
    request: Request,
    caller: Operator,
    namespace: str,
    table: str,
    purge: Annotated[bool, Query(alias="purgeRequested")] = False,
) -> Response:
    identifier = (*_namespace(namespace), table)

    async def run(_key: Key | None) -> Response:
        rest = await _call(
            request, lambda f: f.drop(identifier, purge=purge, principal=caller.name)
        )
        if rest is None:
            return Response(status_code=204)
        # a purge deletes the files after the answer, in the catalog's worker threads
        task = BackgroundTask(_call, request, lambda f: rest())
        return Response(status_code=204, background=task)

    return await idempotency.once(request, caller, run)


@router.post("/v1/tables/rename", status_code=204)
async def rename_table(request: Request, caller: Operator) -> Response:
    async def run(_key: Key | None) -> Response:
        body = await _body(request)
        try:
            source = (*_levels(body["source"]["namespace"]), str(body["source"]["name"]))
            destination = (
                *_levels(body["destination"]["namespace"]),
                str(body["destination"]["name"]),
            )
        except (KeyError, TypeError) as exc:
            raise InvalidRequest("source and destination: {namespace: [...], name: ...}") from exc
        await _call(
            request,
            lambda f: f.rename(tuple(source), tuple(destination), principal=caller.name),
        )
        return Response(status_code=204)

    return await idempotency.once(request, caller, run)


@router.post("/v1/namespaces/{namespace}/tables/{table}/metrics", status_code=204)
async def report_metrics(request: Request, caller: Reader, namespace: str, table: str) -> Response:
    """Scan and commit reports of the clients: accepted and not kept."""
    await _body(request)
    return Response(status_code=204)
