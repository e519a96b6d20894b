"""Compaction debt: what each table owes, as the compactors report it after each plan and run.

    report(conn, table=t, body=DebtBody(...), by="compactor")   TableDebt; the table's row made,
                                                                  its partitions' due counts
                                                                  replaced when it names them
    of_table(conn, t, at)                                         TableDebt | None
    heaviest(conn, limit=100)                                     [(table, TableDebt)], most first
    forget(conn, t) / move(conn, source=t, destination=u)        the table dropped / renamed
    add_commit(conn, t, counts, snapshot_id)                      a front's data commit counted
                                                                  on the row, where there is one

One row per table (`lakelock_debt`): a report replaces the one before it, whoever sends it (the
table's claim keeps one compactor on it at a time). Debt is not lock state: a report writes no
audit event and leaves the table's version alone. The service ranks nothing by debt for the
protocol; it stores it so operators (`lakelock status`, the status page, the per-table gauges)
see which tables owe most. The rank, here and in every view: small files plus delete files,
most first, then the table's name.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.engine import Connection

from service.lock import due, refusals, store
from service.lock.db import debt_t
from service.lock.rows import Caller, seconds
from service.wire import DebtBody, TableDebt

__all__ = ["add_commit", "forget", "heaviest", "move", "of_table", "report", "weight"]

_COUNTS = (
    "snapshot_id",
    "data_files",
    "small_files",
    "delete_files",
    "partitions_over_target",
    "partitions_over_bound",
    "worst_partition",
    "records",
)


def weight(debt: TableDebt | None) -> int:
    """What tables are ranked by: small files plus delete files (0 when none was reported)."""
    return 0 if debt is None else debt.weight


def report(
    conn: Connection,
    *,
    table: str,
    body: DebtBody,
    by: Caller,
    trigger: due.Trigger | None = None,
) -> TableDebt:
    """Store `body` as the table's debt, stamped with the database clock; the table's row is
    created on first use, as a lease or a switch does. Under the table's row lock, so reports
    of one table are stored in the order they are answered. Its `partitions`, when sent,
    replace the files counted per partition as commits landed (`due.replace`, due by
    `trigger`): the compactor's measure is the correction. While a claim on the table is live,
    only its principal (or an operator) reports: another token would erase the counts the
    claimant's follower waits on.

    Raises:
        NotOwner: another token holds the table's live claim; nothing is stored.
    """
    locked = store.lock_table(conn, table)
    assert locked is not None  # created
    _, at = locked
    for claim in store.live_claims(conn, table, at):
        if not by.may_end(claim):
            raise refusals.other_principal(
                f"the claim {claim.id} on {table}", claim, by, "report debt under"
            )
    if body.partitions is not None:
        measured = {n: due.Files.of(f) for n, f in body.partitions.items()}
        due.replace(conn, table=table, partitions=measured, at=at, trigger=trigger or due.Trigger())
    values: dict[str, Any] = {name: getattr(body, name) for name in _COUNTS}
    values.update(
        measured_at=body.measured_at,
        reported_at=at,
        reported_by=by.principal,
    )
    store.put_row(conn, debt_t, {"table_name": table}, values)
    return _view(values, at)


def forget(conn: Connection, table: str) -> bool:
    """A dropped table's debt goes with it; whether it had a row."""
    return store.forget_rows(conn, debt_t, table) > 0


def move(conn: Connection, *, source: str, destination: str) -> bool:
    """A renamed table's debt goes to its new name; whether it had a row."""
    return store.move_rows(conn, debt_t, source, destination) > 0


def of_table(conn: Connection, table: str, at: datetime) -> TableDebt | None:
    """The table's latest debt, as seen at `at`; None when none was reported."""
    row = conn.execute(select(debt_t).where(debt_t.c.table_name == table)).first()
    return None if row is None else _view(row._asdict(), at)


def heaviest(conn: Connection, *, limit: int, at: datetime) -> list[tuple[str, TableDebt]]:
    """The `limit` tables with the most debt, most first: those with partitions past the hard
    bound before any other (so the alert on them sees every one, whatever its size), then by
    small files plus delete files."""
    c = debt_t.c
    rows = conn.execute(
        select(debt_t)
        .order_by(
            func.coalesce(c.partitions_over_bound, 0).desc(),
            (c.small_files + c.delete_files).desc(),
            c.table_name,
        )
        .limit(limit)
    )
    return [(row.table_name, _view(row._asdict(), at)) for row in rows]


def _view(row: dict[str, Any], at: datetime) -> TableDebt:
    return TableDebt(
        **{name: row[name] for name in _COUNTS},
        measured_at=row["measured_at"],
        reported_by=row["reported_by"],
        reported_s_ago=max(0.0, seconds(at - row["reported_at"])),
    )


def add_commit(
    conn: Connection, table: str, counts: dict[str, int], snapshot_id: int | None
) -> None:
    """A data commit through the catalog front (service.lock.fence), `counts` its snapshot's
    summary totals, on the table's debt row, where a compactor reported one: new data files,
    net of those it deleted (a copy-on-write MERGE writes each file it changes anew, about as
    big), are small ones until the next report measures them."""
    added, deleted = counts.get("added-data-files", 0), counts.get("deleted-data-files", 0)
    deletes = counts.get("added-delete-files", 0) - counts.get("removed-delete-files", 0)
    c = debt_t.c
    conn.execute(
        update(debt_t)
        .where(c.table_name == table)
        .values(
            data_files=c.data_files + added - deleted,
            small_files=c.small_files + max(added - deleted, 0),
            delete_files=c.delete_files + deletes,
            snapshot_id=snapshot_id if snapshot_id is not None else c.snapshot_id,
        )
    )
