"""Retention: delete audit events and ended leases older than a cutoff, a short batch at a time.

    pruned = prune(engine, retention=timedelta(days=30), batch_rows=1000)

Nothing is deleted in one long statement: each batch of at most `batch_rows` rows is its own
short transaction, followed by `pause` (the service pauses as long as the batch took), so lease
calls on the same tables (and on SQLite, the whole file) wait at most one batch.

    events          walked by primary key from the oldest: ids grow with time, so a pass stops at
                    the first row younger than the cutoff. Each table's newest event is kept, the
                    trail's last word on it.
    leases          commit and maintenance leases and claims, by their `(ended_at, expires_at)`
                    index: ended before the cutoff. Live or expired-but-unswept leases have no
                    `ended_at` and are never touched. A pruned lease is still answered from its
                    last audit event while that is kept.
    intents         deleted when they end: nothing to prune.
    due partitions  files counted of a partition that no commit, compaction or debt report
                    touched for the retention (docs/design.md §5.1)
    due samples     due to compacted, older than a day (the figures cover the last hour)
    followers       compactors that have not long-polled for a day
    idempotency     the catalog front's answers kept for Idempotency-Keys, once expired
                    (service.lock.idempotency)

The cutoff is the database clock minus the retention, read once per pass. Every replica prunes;
two passes over the same rows only delete fewer.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import takewhile

from sqlalchemy import Engine, Table, delete, func, select, tuple_
from sqlalchemy.engine import Connection
from sqlalchemy.sql.elements import ColumnElement

from service.lock.db import (
    claims_t,
    commit_leases_t,
    due_samples_t,
    due_t,
    events_t,
    followers_t,
    idempotency_t,
    maintenance_leases_t,
    now,
    run_transaction,
)

__all__ = ["SAMPLES_KEPT", "Pruned", "prune"]

SAMPLES_KEPT = timedelta(days=1)
"""How long due-to-compacted samples and idle followers are kept, whatever the retention."""


@dataclass
class Pruned:
    """What one pass deleted, and how long its longest batch transaction took."""

    events: int = 0
    commit_leases: int = 0
    maintenance_leases: int = 0
    claims: int = 0
    due_partitions: int = 0
    due_samples: int = 0
    followers: int = 0
    idempotency_keys: int = 0
    batches: int = 0
    longest_batch_s: float = 0.0


Batch = Callable[[Connection, int], tuple[int, int | None]]
"""`batch(conn, cursor)` deletes one batch; returns (rows deleted, the next cursor or None
when nothing is left)."""


def prune(
    engine: Engine,
    *,
    retention: timedelta,
    batch_rows: int,
    pause: Callable[[float], bool] = lambda _s: False,
) -> Pruned:
    """Delete events and ended leases older than `retention`, due partitions untouched for as
    long, due samples and idle followers older than `SAMPLES_KEPT`, batch by batch.

    `pause(seconds)` is called after each batch with the batch's duration; it returns True to
    stop the pass early (the service's shutdown), False to go on.

    Raises:
        db.DatabaseError: the database failed; the batches before it stay deleted.
    """
    with engine.connect() as conn:
        cutoff = now(conn) - retention
    done = Pruned()

    def events(conn: Connection, after_id: int) -> tuple[int, int | None]:
        return _prune_events(conn, cutoff=cutoff, after_id=after_id, limit=batch_rows)

    done.events, stopped = _in_batches(engine, events, done=done, pause=pause)
    for field, leases_t in (
        ("commit_leases", commit_leases_t),
        ("maintenance_leases", maintenance_leases_t),
        ("claims", claims_t),
    ):
        if stopped:
            break
        deleted, stopped = _in_batches(
            engine, _leases_batch(leases_t, cutoff, batch_rows), done=done, pause=pause
        )
        setattr(done, field, deleted)
    at = cutoff + retention
    day, n = at - SAMPLES_KEPT, batch_rows
    for field, batch in (
        # counted partitions no commit, compaction or report touched since the cutoff
        ("due_partitions", _stale_batch(due_t, due_t.c.updated_at < cutoff, n)),
        ("due_samples", _samples_batch(day, n)),
        # followers whose last long-poll began a day ago (and ended: none parks a day)
        ("followers", _stale_batch(followers_t, followers_t.c.polled_at < day, n)),
        # answers kept for Idempotency-Keys whose lifetime has ended
        ("idempotency_keys", _stale_batch(idempotency_t, idempotency_t.c.expires_at <= at, n)),
    ):
        if stopped:
            break
        deleted, stopped = _in_batches(engine, batch, done=done, pause=pause)
        setattr(done, field, deleted)
    return done


def _samples_batch(cutoff: datetime, limit: int) -> Batch:
    c = due_samples_t.c

    def batch(conn: Connection, _cursor: int) -> tuple[int, int | None]:
        ids = list(
            conn.execute(
                select(c.id).where(c.compacted_at < cutoff).order_by(c.compacted_at).limit(limit)
            ).scalars()
        )
        if ids:
            conn.execute(delete(due_samples_t).where(c.id.in_(ids)))
        return len(ids), 0 if len(ids) == limit else None

    return batch


def _stale_batch(rows: Table, stale: ColumnElement[bool], limit: int) -> Batch:
    """Up to `limit` rows of `rows` that are `stale`, found by their primary key, and deleted
    only while stale still: a row touched meanwhile (a partition counted, a follower polling,
    a key answered again) stays."""
    key = tuple(rows.primary_key.columns)

    def batch(conn: Connection, _cursor: int) -> tuple[int, int | None]:
        keys = conn.execute(select(*key).where(stale).limit(limit)).all()
        if keys:
            found = [tuple(k) for k in keys]
            conn.execute(delete(rows).where(tuple_(*key).in_(found), stale))
        return len(keys), 0 if len(keys) == limit else None

    return batch


def _leases_batch(leases_t: Table, cutoff: datetime, limit: int) -> Batch:
    def batch(conn: Connection, _cursor: int) -> tuple[int, int | None]:
        return _prune_leases(conn, leases_t, cutoff=cutoff, limit=limit)

    return batch


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
        count, cursor = run_transaction(engine, _from(batch, cursor))
        took = time.perf_counter() - started
        done.batches += 1
        done.longest_batch_s = max(done.longest_batch_s, took)
        deleted += count
        if cursor is not None and pause(took):
            return deleted, True
    return deleted, False


def _from(batch: Batch, cursor: int) -> Callable[[Connection], tuple[int, int | None]]:
    """`batch` from `cursor` on, as one transaction runs it."""
    return lambda conn: batch(conn, cursor)


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
