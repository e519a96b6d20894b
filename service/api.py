"""The HTTP routes: parse, run one protocol call in one transaction, translate the answer.

Routes are plain `def` (PyMySQL blocks), run in the threadpool. A long-poll (`wait_s`) loops
"try once, then wait for the table's version to move", so each try is its own short
transaction and no lock is held while waiting. The protocol is in service.leases.
"""

from __future__ import annotations

import json
import math
import time
from datetime import timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.responses import JSONResponse, PlainTextResponse
from sqlalchemy import delete, insert, select, text

from service import audit, leases, migrate
from service.auth import JobDep, OperatorDep, ReaderDep
from service.db import now, runs_t
from service.errors import InvalidRequest, Locked, Refused, Unavailable
from service.runtime import Runtime
from service.schemas import (
    AcquireBody,
    LeaseId,
    RenewBody,
    RevokeBody,
    RunBody,
    SwitchBody,
    TableName,
    draining_out,
    lease_out,
    state_out,
)

__all__ = ["router", "RuntimeDep"]

router = APIRouter()


def _runtime(request: Request) -> Runtime:
    return request.app.state.runtime


RuntimeDep = Annotated[Runtime, Depends(_runtime)]


def _check_ttl(rt: Runtime, ttl_s: float | None, wait_s: float = 0.0) -> None:
    s = rt.settings
    if ttl_s is not None and not s.min_ttl_s <= ttl_s <= s.max_ttl_s:
        raise InvalidRequest(
            f"ttl_s must be between {s.min_ttl_s:g} and {s.max_ttl_s:g} seconds, got {ttl_s:g}",
            field="ttl_s",
        )
    if wait_s > s.max_wait_s:
        raise InvalidRequest(
            f"wait_s must be between 0 and {s.max_wait_s:g} seconds, got {wait_s:g}",
            field="wait_s",
        )


def _retry_header(seconds: float | None, rt: Runtime) -> dict[str, str]:
    value = seconds if seconds is not None else rt.settings.retry_after_s
    return {"Retry-After": str(max(1, math.ceil(value)))}


# -- health ----------------------------------------------------------------------------------


@router.get("/healthz", tags=["health"])
def healthz() -> dict[str, str]:
    """The process is up (liveness); says nothing about the database."""
    return {"status": "ok"}


@router.get("/readyz", tags=["health"])
def readyz(rt: RuntimeDep) -> dict[str, Any]:
    """The database answers and its schema is at the migration head (readiness)."""
    if rt.notifier.closing.is_set():
        raise Unavailable("shutting down", retry_after_s=rt.settings.retry_after_s)
    try:
        rt.read(lambda conn: conn.execute(text("SELECT 1")).scalar())
        revision = migrate.current(rt.engine)
    except Exception as exc:
        raise Unavailable(
            f"the lock database cannot be reached: {type(exc).__name__}",
            retry_after_s=rt.settings.retry_after_s,
        ) from exc
    if revision != migrate.head():
        raise Unavailable(
            f"the lock database is at migration {revision}, not {migrate.head()}: "
            "run `python -m service migrate`",
            retry_after_s=rt.settings.retry_after_s,
        )
    return {"status": "ready", "migration": revision}


@router.get("/metrics", tags=["health"])
def metrics(rt: RuntimeDep, _: ReaderDep) -> Response:
    return PlainTextResponse(rt.metrics.render(), media_type="text/plain; version=0.0.4")


# -- tables ----------------------------------------------------------------------------------


@router.get("/v1/tables", tags=["tables"])
def list_tables(rt: RuntimeDep, _: ReaderDep) -> dict[str, Any]:
    return {"tables": [state_out(s) for s in rt.read(leases.list_tables)]}


@router.get("/v1/tables/{table}", tags=["tables"])
def get_table(
    table: TableName,
    rt: RuntimeDep,
    _: ReaderDep,
    wait: Annotated[float, Query(ge=0, description="long-poll up to this many seconds")] = 0.0,
    since: Annotated[int | None, Query(ge=0, description="answer once version > since")] = None,
) -> dict[str, Any]:
    _check_ttl(rt, None, wait)
    deadline = time.monotonic() + wait
    while True:
        state = rt.read(lambda conn: leases.table_state(conn, table=table))
        if since is None or state.version > since or time.monotonic() >= deadline:
            return state_out(state)
        if rt.notifier.closing.is_set():
            return state_out(state)
        rt.wait_for_change(table, seen=state.version, deadline=deadline)


@router.put("/v1/tables/{table}/switch", tags=["tables"])
def set_switch(table: TableName, body: SwitchBody, rt: RuntimeDep, who: OperatorDep) -> Any:
    if body.ingest is None and body.maintenance is None:
        raise InvalidRequest("send ingest and/or maintenance with the reason", field="ingest")
    state = rt.transact(
        lambda conn: leases.set_switch(
            conn,
            table=table,
            reason=body.reason,
            actor=who.name,
            ingest=body.ingest,
            maintenance=body.maintenance,
        )
    )
    return state_out(state)


@router.get("/v1/tables/{table}/runs", tags=["runs"])
def list_runs(
    table: TableName,
    rt: RuntimeDep,
    _: ReaderDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 20,
) -> dict[str, Any]:
    def read(conn: Any) -> list[dict[str, Any]]:
        rows = conn.execute(
            select(runs_t)
            .where(runs_t.c.table_name == table)
            .order_by(runs_t.c.id.desc())
            .limit(limit)
        )
        return [
            {
                "run_id": row.id,
                "reported_at": row.reported_at.isoformat() + "Z",
                **json.loads(row.report),
            }
            for row in rows
        ]

    return {"runs": rt.read(read)}


@router.post("/v1/tables/{table}/runs", status_code=201, tags=["runs"])
def report_run(table: TableName, body: RunBody, rt: RuntimeDep, who: JobDep) -> dict[str, Any]:
    report = body.model_dump(mode="json")
    encoded = json.dumps(report, sort_keys=True, default=str)

    def store(conn: Any) -> int:
        at = now(conn)
        run_id = conn.execute(
            insert(runs_t).values(
                table_name=table,
                reported_at=at,
                holder=body.holder or who.name,
                outcome=body.outcome,
                report=encoded,
            )
        ).inserted_primary_key[0]
        # keep the last runs per table only
        keep = rt.settings.runs_kept
        oldest = conn.execute(
            select(runs_t.c.id)
            .where(runs_t.c.table_name == table)
            .order_by(runs_t.c.id.desc())
            .offset(keep - 1)
            .limit(1)
        ).scalar()
        if oldest is not None:
            conn.execute(delete(runs_t).where(runs_t.c.table_name == table, runs_t.c.id < oldest))
        audit.record(
            conn,
            at=at,
            table=table,
            event="run.reported",
            holder=body.holder or who.name,
            actor=who.name,
            outcome=body.outcome,
        )
        return int(run_id)

    return {"run_id": rt.transact(store)}


# -- leases ----------------------------------------------------------------------------------


@router.post("/v1/tables/{table}/commit-leases", status_code=201, tags=["leases"])
def acquire_commit(table: TableName, body: AcquireBody, rt: RuntimeDep, _: JobDep) -> Any:
    _check_ttl(rt, body.ttl_s, body.wait_s)
    ttl = timedelta(seconds=body.ttl_s)
    deadline = time.monotonic() + body.wait_s
    while True:
        # read before trying, so a change between the try and the wait is not missed; a call
        # that will not wait does not need it
        seen = rt.version(table) if body.wait_s else 0
        try:
            lease = rt.transact(
                lambda conn: leases.acquire_commit(
                    conn, table=table, holder=body.holder, ttl=ttl, request_id=body.request_id
                )
            )
            return lease_out(lease)
        except Locked as exc:
            if time.monotonic() >= deadline or rt.notifier.closing.is_set():
                rt.metrics.denials.labels("commit", exc.extra.get("reason", "")).inc()
                raise
            retry = exc.retry_after_s
            rt.wait_for_change(
                table,
                seen=seen,
                deadline=deadline,
                retry_at=None if retry is None else time.monotonic() + retry,
            )


@router.post("/v1/tables/{table}/maintenance-lease", status_code=201, tags=["leases"])
def acquire_maintenance(table: TableName, body: AcquireBody, rt: RuntimeDep, _: JobDep) -> Any:
    _check_ttl(rt, body.ttl_s, body.wait_s)
    ttl = timedelta(seconds=body.ttl_s)
    intent_ttl = timedelta(seconds=rt.settings.intent_ttl_s)
    deadline = time.monotonic() + body.wait_s
    while True:
        seen = rt.version(table) if body.wait_s else 0
        try:
            result = rt.transact(
                lambda conn: leases.acquire_maintenance(
                    conn,
                    table=table,
                    holder=body.holder,
                    ttl=ttl,
                    request_id=body.request_id,
                    intent_ttl=intent_ttl,
                )
            )
        except Refused as exc:
            rt.metrics.denials.labels("maintenance", exc.slug).inc()
            raise
        if isinstance(result, leases.Lease):
            return lease_out(result)
        if time.monotonic() >= deadline or rt.notifier.closing.is_set():
            return JSONResponse(
                draining_out(result),
                status_code=202,
                headers=_retry_header(result.retry_after_s, rt),
            )
        # the intent is kept open by asking again before it expires
        rt.wait_for_change(
            table,
            seen=seen,
            deadline=deadline,
            retry_at=time.monotonic() + rt.settings.intent_ttl_s / 3,
        )


@router.get("/v1/leases/{lease_id}", tags=["leases"])
def get_lease(lease_id: LeaseId, rt: RuntimeDep, _: ReaderDep) -> Any:
    return lease_out(rt.transact(lambda conn: leases.lease_state(conn, lease_id=str(lease_id))))


@router.post("/v1/leases/{lease_id}/renew", tags=["leases"])
def renew(lease_id: LeaseId, body: RenewBody, rt: RuntimeDep, _: JobDep) -> Any:
    _check_ttl(rt, body.ttl_s)
    ttl = None if body.ttl_s is None else timedelta(seconds=body.ttl_s)
    lease = rt.transact(
        lambda conn: leases.renew(
            conn, lease_id=str(lease_id), holder=body.holder, ttl=ttl, token=body.token
        )
    )
    rt.metrics.renewals.labels(lease.kind).inc()
    return {"outcome": "ok", "lease": lease_out(lease)}


@router.delete("/v1/leases/{lease_id}", tags=["leases"])
def release(
    lease_id: LeaseId,
    rt: RuntimeDep,
    _: JobDep,
    token: Annotated[int | None, Query(ge=1, description="a maintenance lease's token")] = None,
) -> Any:
    lease = rt.transact(lambda conn: leases.release(conn, lease_id=str(lease_id), token=token))
    out = lease_out(lease)
    return {"lease_id": str(lease_id), "state": out["state"], "released": True, "lease": out}


@router.post("/v1/leases/{lease_id}/revoke", tags=["leases"])
def revoke(lease_id: LeaseId, body: RevokeBody, rt: RuntimeDep, who: OperatorDep) -> Any:
    lease = rt.transact(
        lambda conn: leases.revoke(conn, lease_id=str(lease_id), reason=body.reason, actor=who.name)
    )
    return lease_out(lease)


# -- events ----------------------------------------------------------------------------------


@router.get("/v1/events", tags=["events"])
def events(
    rt: RuntimeDep,
    _: ReaderDep,
    table: Annotated[str | None, Query(pattern=r"^[A-Za-z0-9_.]{1,194}$")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> dict[str, Any]:
    return {"events": rt.read(lambda conn: audit.recent(conn, table=table, limit=limit))}
