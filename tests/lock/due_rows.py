"""What the tests of due partitions share (docs/design.md §5.1): one line per step, and the
rows of migration 0014 emptied on the session's MariaDB, whose database the suite shares."""

from __future__ import annotations

from typing import Any

import httpx
from sqlalchemy import create_engine, text

from tests.conftest import auth
from tests.support.helpers import _backdate, commit, maintenance

TABLE = "lake.db.events"
DUE_TABLES = ("lakelock_due", "lakelock_due_samples", "lakelock_followers")


def forget_counts(db_url: str) -> None:
    """Empty the tables of due partitions (a new SQLite file has none; MariaDB is shared)."""
    engine = create_engine(db_url)
    with engine.begin() as conn:
        for table in DUE_TABLES:
            conn.execute(text(f"DELETE FROM {table}"))
    engine.dispose()


def release_with(
    api: httpx.Client, lease: dict[str, Any], headers: dict[str, str] | None = None, **body: Any
) -> httpx.Response:
    """`POST /v1/leases/{id}/release` as the lease's holder, with `body` (written, compacted)."""
    payload = {"holder": lease["holder"], **body}
    if lease.get("token") and "token" not in body:
        payload["token"] = lease["token"]
    return api.post(f"/v1/leases/{lease['lease_id']}/release", json=payload, headers=headers)


def files(data: int, deletes: int = 0) -> dict[str, int]:
    return {"data_files": data, "delete_files": deletes}


def write(
    api: httpx.Client, written: dict[str, tuple[int, int]], table: str = TABLE
) -> dict[str, Any]:
    """One gated commit: a commit lease on the partitions, released with the files it added."""
    lease = commit(api, table=table, partitions=sorted(written)).json()
    body = {name: files(*counts) for name, counts in written.items()}
    answer = release_with(api, lease, written=body)
    assert answer.status_code == 200, answer.text
    return lease


def compact(
    api: httpx.Client, partitions: list[str], table: str = TABLE, holder: str = "compactor-1"
) -> httpx.Response:
    """One compaction: a maintenance lease on the partitions, released as compacted."""
    lease = maintenance(api, table=table, holder=holder, partitions=partitions).json()
    return release_with(api, lease, compacted=partitions)


def due(
    api: httpx.Client,
    *tables: str,
    holder: str = "compactor-1",
    wait_s: float = 0,
    role: str = "job",
    **params: Any,
) -> httpx.Response:
    """`GET /v1/due` for `tables` (default the test table)."""
    return api.get(
        "/v1/due",
        params={"table": list(tables) or [TABLE], "holder": holder, "wait_s": wait_s, **params},
        headers=auth(role),
    )


def due_partitions(api: httpx.Client, *tables: str, **params: Any) -> list[tuple[str, int, int]]:
    """(partition, data files, delete files) of each due partition answered, in its order."""
    answer = due(api, *tables, **params)
    assert answer.status_code == 200, answer.text
    return [(d["partition"], d["data_files"], d["delete_files"]) for d in answer.json()["due"]]


def due_since(db_url: str, partition: str, seconds: float, table: str = TABLE) -> None:
    """Move when `partition` became due `seconds` into the past."""
    where = "table_name = :t AND partition_name = :p"
    target = ("lakelock_due", where, {"t": table, "p": partition})
    _backdate(db_url, [target], seconds, column="due_at")
