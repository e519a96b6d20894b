"""The lock over every table at one instant: what the service's state gauges show.

    seen = overview(conn, max_tables=100)    Overview: live leases by kind, open intents,
                                              backpressure, paused tables, debt, source lag,
                                              due partitions and due to compacted

Read-only, as `service.lock.state`: live is judged by expiry against the database clock, as
every transition judges it, so a lease the sweep has not ended yet is not counted. Which
backpressure intents hold writers is `rules.backpressure_holds`, asked of the table rows read
here: the gauge and the commit decision answer by the same rule (docs/jobs.md §3).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.engine import Connection

from service.lock import debt, due, ingest, store
from service.lock.db import intents_t, now, tables_t
from service.lock.due import Figures
from service.lock.rows import LeaseKind, seconds
from service.lock.rules import backpressure_holds
from service.wire import IngestLag, TableDebt

__all__ = ["Overview", "backpressure", "overview"]


@dataclass(frozen=True, slots=True)
class Overview:
    live: dict[LeaseKind, int]
    """Live leases by kind."""
    oldest_s: dict[LeaseKind, float]
    """How long the oldest live lease of each kind has been held (0: none is live)."""
    maintenance_by_table: list[tuple[str, float]]
    """(table, seconds) of the oldest live maintenance lease of each table that has one."""
    intents: int
    """Open intents: drains, backpressure and the catalog front's turns of the head, holding
    writers or not."""
    backpressure: list[tuple[str, int]]
    """(table, partitions) of the tables whose writers a compactor's backpressure holds now."""
    paused: int
    """Tables whose ingest switch is paused."""
    heaviest: list[tuple[str, TableDebt]]
    """The reported debt of the tables that owe most, most first."""
    behind: list[tuple[str, IngestLag]]
    """The source lag of the tables whose ingest is furthest behind, most first."""
    due: list[tuple[str, Figures]]
    """Due partitions, due to compacted over the last hour and followers of the tables that
    have due partitions or compactions, the slowest to be compacted first."""


def overview(conn: Connection, *, max_tables: int = 100) -> Overview:
    """The lock now; debt, lag and due figures of at most `max_tables` tables each."""
    at = now(conn)
    live: dict[LeaseKind, int] = {}
    oldest_s: dict[LeaseKind, float] = {}
    for kind, leases_t in store.LEASE_TABLES.items():
        c = leases_t.c
        # by the (ended_at, expires_at) index: not ended, expiry ahead
        query = select(func.count(), func.min(c.acquired_at)).where(
            c.ended_at.is_(None), c.expires_at > at
        )
        live[kind], oldest = conn.execute(query).one()
        oldest_s[kind] = _age(at, oldest)
    m = store.LEASE_TABLES["maintenance"].c
    oldest_per_table = (
        select(m.table_name, func.min(m.acquired_at))
        .where(m.ended_at.is_(None), m.expires_at > at)
        .group_by(m.table_name)
    )
    return Overview(
        live=live,
        oldest_s=oldest_s,
        maintenance_by_table=[
            (table, _age(at, oldest)) for table, oldest in conn.execute(oldest_per_table).all()
        ],
        intents=conn.execute(select(func.count()).where(intents_t.c.expires_at > at)).scalar_one(),
        backpressure=backpressure(conn, at),
        paused=conn.execute(select(func.count()).where(tables_t.c.ingest == "paused")).scalar_one(),
        heaviest=debt.heaviest(conn, limit=max_tables, at=at),
        behind=ingest.most_behind(conn, limit=max_tables, at=at),
        due=due.figures(conn, at=at, max_tables=max_tables),
    )


def backpressure(conn: Connection, at: datetime) -> list[tuple[str, int]]:
    """(table, partitions) of the tables whose backpressure holds writers at `at`: their live
    backpressure intents, where `rules.backpressure_holds` says the table's switch lets them
    hold. A partition held by two runs under one claim counts once (one partition an intent)."""
    i = intents_t.c
    counted = conn.execute(
        select(i.table_name, func.count(func.distinct(i.partitions)))
        .where(i.expires_at > at, i.cause == "backpressure")
        .group_by(i.table_name)
    )
    pressed: dict[str, int] = {table: int(partitions) for table, partitions in counted}
    return [
        (row.name, pressed[row.name])
        for row in store.tables_named(conn, pressed)
        if backpressure_holds(row)
    ]


def _age(at: datetime, since: datetime | None) -> float:
    return 0.0 if since is None else max(0.0, seconds(at - since))
