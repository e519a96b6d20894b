"""Small calls the service tests share: one line per protocol step."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import create_engine, text

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent

HANG_GUARD_S = 120.0
"""How long a test waits for something that normally takes well under a second: a guard
against a hang only, never a measure (tests are driven by counts, benchmarks measure)."""


def wait_until(condition: Callable[[], Any], what: str, *, timeout: float = HANG_GUARD_S) -> Any:
    """Poll `condition` until it is truthy and return its value; fail naming `what` after
    `timeout` seconds (a hang)."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, f"{what}: not within {timeout:.0f}s"
        time.sleep(0.02)
    return value


def metric(client: httpx.Client, name: str, **labels: str) -> float:
    """One sample of the service's /metrics (0 when absent); `client` sends a reader token."""
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(client.get("/metrics").text):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return sample.value
    return 0.0


def wait_parked(client: httpx.Client, count: int) -> None:
    """Wait until `count` long-polls are parked in the service (they wait on the server, not
    still on their way to it)."""
    wait_until(
        lambda: metric(client, "lakelock_parked_long_polls") >= count,
        f"{count} long-polls parked",
    )


def run_module(module: str, *args: str, timeout: float = 300) -> str:
    """`python -m module args` from the checkout, as a user runs a benchmark; its stdout, or a
    failed test that shows its output."""
    done = subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def installed(command: str) -> str:
    """The path of a console script (`lakelock-ingest`, ...) or of `python` in the virtualenv
    the tests run in: what a user types when the venv is not activated."""
    return str(VENV_BIN / command)


def unactivated_env(**extra: str) -> dict[str, str]:
    """The environment of a user who runs an installed command without activating its venv:
    PATH without the venv's bin (its `python3` is the system's, without lakelock), and no
    VIRTUAL_ENV, PYTHONPATH or PYSPARK_PYTHON. Run it with a cwd outside the checkout too, so
    that nothing is found there either."""
    drop = ("VIRTUAL_ENV", "PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    venv = VENV_BIN.resolve()
    path = [p for p in env.get("PATH", "").split(os.pathsep) if p and Path(p).resolve() != venv]
    return {**env, "PATH": os.pathsep.join(path), **extra}


# `headers` sends the call with another token than the client's own (a lease belongs to the
# token that took it: docs/design.md §6)


def commit(
    api: httpx.Client,
    table: str = "lake.db.events",
    holder: str = "ingest-1",
    headers: dict[str, str] | None = None,
    **body: Any,
):
    return api.post(
        f"/v1/tables/{table}/commit-leases",
        json={"holder": holder, "ttl_s": 30, **body},
        headers=headers,
    )


def maintenance(
    api: httpx.Client,
    table: str = "lake.db.events",
    holder: str = "compactor-1",
    headers: dict[str, str] | None = None,
    **body: Any,
):
    return api.post(
        f"/v1/tables/{table}/maintenance-lease",
        json={"holder": holder, "ttl_s": 60, **body},
        headers=headers,
    )


def claim(
    api: httpx.Client, table: str = "lake.db.events", holder: str = "compactor-1", **body: Any
):
    return api.post(f"/v1/tables/{table}/claim", json={"holder": holder, "ttl_s": 60, **body})


def switch(api: httpx.Client, table: str = "lake.db.events", **body: Any):
    return api.put(f"/v1/tables/{table}/switch", json={"reason": "test", **body})


def state(api: httpx.Client, table: str = "lake.db.events") -> dict[str, Any]:
    response = api.get(f"/v1/tables/{table}")
    assert response.status_code == 200, response.text
    return response.json()


def unknown(api: httpx.Client, table: str = "lake.db.events") -> bool:
    """True when the service answers that `table` never had a lease, intent or switch."""
    response = api.get(f"/v1/tables/{table}")
    return response.status_code == 404 and response.json()["type"] == "urn:lakelock:not-found"


def release(api: httpx.Client, lease: dict[str, Any], **params: Any):
    """Release as the lease's holder (with its token for a maintenance lease)."""
    params = {"holder": lease["holder"], **params}
    if lease.get("token") and "token" not in params:
        params["token"] = lease["token"]
    return api.delete(f"/v1/leases/{lease['lease_id']}", params=params)


def renew(
    api: httpx.Client, lease: dict[str, Any], headers: dict[str, str] | None = None, **body: Any
):
    payload = {"holder": lease["holder"], **body}
    if lease.get("token") and "token" not in body:
        payload["token"] = lease["token"]
    return api.post(f"/v1/leases/{lease['lease_id']}/renew", json=payload, headers=headers)


def events(api: httpx.Client, table: str = "lake.db.events") -> list[dict[str, Any]]:
    return api.get("/v1/events", params={"table": table, "limit": 1000}).json()["events"]


def backdate(
    db_url: str,
    lease: dict[str, Any],
    seconds: float = 3600,
    *,
    intents_of: str | None = None,
    request_id: str | None = None,
) -> None:
    """Move a lease's expiry into the past, as if its TTL ran out without renewal; with
    `intents_of`, that table's intents' (or request `request_id`'s) too, in the same transaction,
    as when both lapse together: the service's sweeper never sees one moved without the other."""
    assert request_id is None or intents_of is not None, "request_id names an intent of intents_of"
    targets = [_lease_target(lease)]
    if intents_of is not None:
        targets.append(_intent_target(intents_of, request_id))
    _backdate(db_url, targets, seconds)


def held_since(db_url: str, lease: dict[str, Any], seconds: float) -> None:
    """Move a lease's start `seconds` into the past, as if it had been held that long (its
    expiry stays ahead)."""
    _backdate(db_url, [_lease_target(lease)], seconds, column="acquired_at")


def backdate_intent(
    db_url: str, table: str, seconds: float = 3600, *, request_id: str | None = None
) -> None:
    """Move the expiry of the table's intents (or of request `request_id`'s) into the past."""
    _backdate(db_url, [_intent_target(table, request_id)], seconds)


def backdate_reader(db_url: str, table: str, reader: str, seconds: float = 3600) -> None:
    """Move a reader hold's expiry into the past, as if the reader stopped putting it."""
    target = ("lakelock_readers", "table_name = :t AND reader = :r", {"t": table, "r": reader})
    _backdate(db_url, [target], seconds)


Target = tuple[str, str, dict[str, Any]]  # rows, where, values


def _lease_target(lease: dict[str, Any]) -> Target:
    kind = lease["kind"]
    rows = "lakelock_claims" if kind == "claim" else f"lakelock_{kind}_leases"
    return rows, "id = :id", {"id": lease["lease_id"]}


def _intent_target(table: str, request_id: str | None) -> Target:
    if request_id is None:
        return "lakelock_intents", "table_name = :t", {"t": table}
    return "lakelock_intents", "table_name = :t AND request_id = :r", {"t": table, "r": request_id}


def _backdate(
    db_url: str, targets: list[Target], seconds: float, *, column: str = "expires_at"
) -> None:
    """Move `column` of every target's rows `seconds` into the past, in one transaction. The
    rows are locked as read (MariaDB; on SQLite a row the sweeper ended meanwhile fails the
    write), and each must still be there when written: the service's sweeper runs beside the
    test."""
    engine = create_engine(db_url)
    lock = " FOR UPDATE" if engine.dialect.name != "sqlite" else ""
    with engine.begin() as conn:
        for rows, where, values in targets:
            select = f"SELECT {column} FROM {rows} WHERE {where}{lock}"
            found = conn.execute(text(select), values).all()
            assert found, f"nothing in {rows} where {where} {values}"
            for at in {at for (at,) in found}:  # rows alike move together
                moved = conn.execute(
                    text(f"UPDATE {rows} SET {column} = :at WHERE {where} AND {column} = :was"),
                    {**values, "at": _minus(at, seconds), "was": at},
                )
                assert moved.rowcount >= 1, f"{rows} where {where} {values} changed meanwhile"
    engine.dispose()


def _minus(value: Any, seconds: float) -> Any:
    from datetime import datetime, timedelta

    if isinstance(value, str):  # SQLite hands back text
        value = datetime.fromisoformat(value)
    return value - timedelta(seconds=seconds)
