"""Retention: delete audit events and ended leases older than LAKELOCK_RETENTION_DAYS.

    pruned = prune(engine, retention=timedelta(days=30), batch_rows=1000)
    pruner = Pruner(engine, settings, metrics); pruner.start(); ...; pruner.stop()

Nothing is deleted in one long statement: each batch of at most `batch_rows` rows is its own
short transaction, followed by a pause as long as the batch took, so lease calls on the same
tables (and on SQLite, the whole file) wait at most one batch.

    events          walked by primary key from the oldest: ids grow with time, so a pass stops at
                    the first row younger than the cutoff. Each table's newest event is kept, the
                    trail's last word on it.
    leases          commit and maintenance leases and claims, by their `(ended_at, expires_at)`
                    index: ended before the cutoff. Live or expired-but-unswept leases have no
                    `ended_at` and are never touched. A pruned lease is still answered from its
                    last audit event while that is kept.
    intents         deleted when they end: nothing to prune.

The cutoff is the database clock minus the retention, read once per pass. Every replica prunes;
two passes over the same rows only delete fewer.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import takewhile

from sqlalchemy import Engine, Table, delete, func, select
from sqlalchemy.engine import Connection

from service.lock.db import (
    claims_t,
    commit_leases_t,
    events_t,
    is_unavailable,
    maintenance_leases_t,
    now,
    run_transaction,
)
from service.server.metrics import Metrics
from service.server.settings import Settings

__all__ = ["Pruned", "Pruner", "prune"]

log = logging.getLogger("lakelock.retention")


@dataclass
class Pruned:
    """What one pass deleted, and how long its longest batch transaction took."""

    events: int = 0
    commit_leases: int = 0
    maintenance_leases: int = 0
    claims: int = 0
    batches: int = 0
    longest_batch_s: float = 0.0


def prune(
    engine: Engine,
    *,
    retention: timedelta,
    batch_rows: int,
    pause: Callable[[float], bool] = lambda _s: False,
) -> Pruned:
    """Delete events and ended leases older than `retention`, batch by batch.

    `pause(seconds)` is called after each batch with the batch's duration; it returns True to
    stop the pass early (the service's shutdown), False to go on.

    Raises:
        sqlalchemy.exc.DBAPIError: the database failed; the batches before it stay deleted.
    """
    with engine.connect() as conn:
        cutoff = now(conn) - retention
    done = Pruned()
    done.events, stopped = _in_batches(
        engine,
        lambda conn, after_id: _prune_events(
            conn, cutoff=cutoff, after_id=after_id, limit=batch_rows
        ),
        done=done,
        pause=pause,
    )
    for field, leases_t in (
        ("commit_leases", commit_leases_t),
        ("maintenance_leases", maintenance_leases_t),
        ("claims", claims_t),
    ):
        if stopped:
            break
        deleted, stopped = _in_batches(
            engine,
            lambda conn, _cursor, t=leases_t: _prune_leases(
                conn, t, cutoff=cutoff, limit=batch_rows
            ),
            done=done,
            pause=pause,
        )
        setattr(done, field, deleted)
    return done


Batch = Callable[[Connection, int], tuple[int, int | None]]
"""`batch(conn, cursor)` deletes one batch; returns (rows deleted, the next cursor or None
when nothing is left)."""


def _in_batches(
    engine: Engine, batch: Batch, *, done: Pruned, pause: Callable[[float], bool]
) -> tuple[int, bool]:
    """Run `batch` in one transaction each until nothing is left or `pause` says stop; returns
    (rows deleted, whether it was stopped)."""
    cursor: int | None = 0
    deleted = 0
    while cursor is not None:
        started = time.perf_counter()
        # the cursor moves only once the batch committed: a retried batch starts where it did
        count, cursor = run_transaction(engine, lambda conn, at=cursor: batch(conn, at))
        took = time.perf_counter() - started
        done.batches += 1
        done.longest_batch_s = max(done.longest_batch_s, took)
        deleted += count
        if cursor is not None and pause(took):
            return deleted, True
    return deleted, False


def _prune_events(
    conn: Connection, *, cutoff: datetime, after_id: int, limit: int
) -> tuple[int, int | None]:
    """Delete the old events among the next `limit` ids after `after_id`, except each table's
    newest; returns (deleted, the last id looked at, or None when no old one may follow)."""
    e = events_t.c
    rows = conn.execute(
        select(e.id, e.at, e.table_name).where(e.id > after_id).order_by(e.id).limit(limit)
    ).all()
    old = list(takewhile(lambda row: row.at < cutoff, rows))
    if not old:
        return 0, None
    # each table's newest event stays; a newer one written meanwhile only means one more kept
    newest = set(
        conn.execute(
            select(func.max(e.id))
            .where(e.table_name.in_({row.table_name for row in old}))
            .group_by(e.table_name)
        ).scalars()
    )
    # by the ids read, not by a range: a row committed in the range since then is not judged
    doomed = [row.id for row in old if row.id not in newest]
    if doomed:
        conn.execute(delete(events_t).where(e.id.in_(doomed)))
    return len(doomed), old[-1].id if len(old) == limit else None


def _prune_leases(
    conn: Connection, leases_t: Table, *, cutoff: datetime, limit: int
) -> tuple[int, int | None]:
    """Delete up to `limit` leases of `leases_t` that ended before `cutoff`; returns (deleted, 0
    when more may be left, else None). Deleted rows leave the index, so no cursor is needed."""
    c = leases_t.c
    ids = list(
        conn.execute(
            select(c.id).where(c.ended_at < cutoff).order_by(c.ended_at).limit(limit)
        ).scalars()
    )
    if ids:
        conn.execute(delete(leases_t).where(c.id.in_(ids), c.ended_at < cutoff))
    return len(ids), 0 if len(ids) == limit else None


class Pruner:
    """Runs `prune` every LAKELOCK_PRUNE_INTERVAL_S on a daemon thread until `stop()`."""

    def __init__(self, engine: Engine, settings: Settings, metrics: Metrics) -> None:
        self.engine = engine
        self.settings = settings
        self.metrics = metrics
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lakelock-pruner", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Ends the pass in progress after its current batch, then the thread."""
        self._stop.set()
        self._thread.join(timeout)

    def _run(self) -> None:
        interval = self.settings.prune_interval_s
        # replicas started together (a deploy) would otherwise prune at the same instants
        wait = random.uniform(0, interval)
        while not self._stop.wait(wait):
            wait = interval
            try:
                self.prune_once()
            except Exception as exc:
                # the next interval tries again; an outage must not end pruning for good, nor
                # write a traceback every interval while it lasts
                if is_unavailable(exc):
                    log.warning("pruning skipped, database unavailable: %s", exc)
                else:
                    log.exception("pruning failed")

    def prune_once(self) -> Pruned:
        pruned = prune(
            self.engine,
            retention=timedelta(days=self.settings.retention_days),
            batch_rows=self.settings.prune_batch_rows,
            pause=self._stop.wait,
        )
        self.metrics.pruned.labels("events").inc(pruned.events)
        self.metrics.pruned.labels("commit_leases").inc(pruned.commit_leases)
        self.metrics.pruned.labels("maintenance_leases").inc(pruned.maintenance_leases)
        self.metrics.pruned.labels("claims").inc(pruned.claims)
        if pruned.events or pruned.commit_leases or pruned.maintenance_leases or pruned.claims:
            log.info(
                "pruned rows past the retention",
                extra={
                    "events": pruned.events,
                    "commit_leases": pruned.commit_leases,
                    "maintenance_leases": pruned.maintenance_leases,
                    "claims": pruned.claims,
                    "batches": pruned.batches,
                    "longest_batch_ms": round(pruned.longest_batch_s * 1000, 1),
                },
            )
        return pruned
