"""Events, ended leases, ended claims and untouched due partitions past LAKELOCK_RETENTION_DAYS
are deleted, due samples and idle followers after a day, in batches."""

from __future__ import annotations

import time
import uuid
from datetime import datetime, timedelta

import pytest
from sqlalchemy import Engine, insert, select

from service.lock.db import claims_t, commit_leases_t, events_t, now
from service.lock.retention import prune
from tests.server.test_metrics import _samples

pytestmark = pytest.mark.dialect  # on SQLite and MariaDB (tests/conftest.py)

RETENTION = timedelta(days=30)
OLD = timedelta(days=31)


def _clock(engine: Engine) -> datetime:
    with engine.connect() as conn:
        return now(conn)


def _add_events(engine: Engine, table: str, ats: list[datetime]) -> list[int]:
    ids = []
    with engine.begin() as conn:
        for at in ats:
            result = conn.execute(
                insert(events_t).values(at=at, table_name=table, event="lease.acquired")
            )
            ids.append(result.inserted_primary_key[0])
    return ids


def _add_lease(
    engine: Engine,
    table: str,
    *,
    acquired_at: datetime,
    ended_at: datetime | None,
    leases_t=commit_leases_t,
) -> str:
    lease_id = str(uuid.uuid4())
    with engine.begin() as conn:
        conn.execute(
            insert(leases_t).values(
                id=lease_id,
                table_name=table,
                holder="ingest-1",
                request_id=lease_id,
                ttl_s=30,
                acquired_at=acquired_at,
                expires_at=acquired_at + timedelta(seconds=30),
                ended_at=ended_at,
                end="released" if ended_at else None,
            )
        )
    return lease_id


def _event_ids(engine: Engine) -> set[int]:
    with engine.connect() as conn:
        return set(conn.execute(select(events_t.c.id)).scalars())


def _lease_ids(engine: Engine, leases_t=commit_leases_t) -> set[str]:
    with engine.connect() as conn:
        return set(conn.execute(select(leases_t.c.id)).scalars())


def test_old_events_are_deleted_but_each_table_keeps_its_newest(engine):
    t = _clock(engine)
    old_a = _add_events(
        engine, "lake.db.a", [t - OLD - timedelta(hours=h) for h in range(5, 0, -1)]
    )
    old_b = _add_events(engine, "lake.db.b", [t - OLD - timedelta(minutes=m) for m in (9, 8)])
    young_a = _add_events(engine, "lake.db.a", [t - timedelta(days=1), t])

    pruned = prune(engine, retention=RETENTION, batch_rows=2)

    # lake.db.a's newest event is young, so all its old ones go; lake.db.b keeps its newest
    assert _event_ids(engine) == set(young_a) | {old_b[-1]}
    assert pruned.events == len(old_a) + 1
    assert pruned.batches > 3, "two rows per batch: the work was split"


def test_ended_commit_leases_past_the_retention_are_deleted(engine):
    t = _clock(engine)
    gone = [
        _add_lease(engine, "lake.db.a", acquired_at=t - OLD, ended_at=t - OLD) for _ in range(5)
    ]
    recent = _add_lease(engine, "lake.db.a", acquired_at=t - OLD, ended_at=t - timedelta(days=2))
    # granted before the cutoff and never ended (live, or expired and not yet swept): kept
    unended = _add_lease(engine, "lake.db.a", acquired_at=t - OLD, ended_at=None)
    live = _add_lease(engine, "lake.db.b", acquired_at=t, ended_at=None)

    pruned = prune(engine, retention=RETENTION, batch_rows=2)

    assert _lease_ids(engine) == {recent, unended, live}
    assert pruned.commit_leases == len(gone)


def test_ended_claims_past_the_retention_are_deleted(engine):
    t = _clock(engine)
    old = {"acquired_at": t - OLD, "leases_t": claims_t}
    gone = [_add_lease(engine, f"lake.db.t{n}", ended_at=t - OLD, **old) for n in range(3)]
    kept = _add_lease(engine, "lake.db.a", ended_at=None, **old)  # never swept: not touched
    commit = _add_lease(engine, "lake.db.a", acquired_at=t - OLD, ended_at=t - OLD)

    pruned = prune(engine, retention=RETENTION, batch_rows=2)

    assert _lease_ids(engine, claims_t) == {kept}
    assert (pruned.claims, pruned.commit_leases) == (len(gone), 1)
    assert commit not in _lease_ids(engine)


def test_nothing_young_is_touched(engine):
    t = _clock(engine)
    events = _add_events(engine, "lake.db.a", [t - RETENTION + timedelta(minutes=5), t])
    lease = _add_lease(engine, "lake.db.a", acquired_at=t, ended_at=t)

    pruned = prune(engine, retention=RETENTION, batch_rows=100)

    assert (pruned.events, pruned.commit_leases) == (0, 0)
    assert _event_ids(engine) == set(events)
    assert _lease_ids(engine) == {lease}


def test_a_pass_stops_between_batches_when_asked(engine):
    t = _clock(engine)
    _add_events(engine, "lake.db.a", [t - OLD] * 6 + [t])
    _add_lease(engine, "lake.db.a", acquired_at=t - OLD, ended_at=t - OLD)

    pruned = prune(engine, retention=RETENTION, batch_rows=2, pause=lambda _took: True)

    assert (pruned.events, pruned.commit_leases, pruned.batches) == (2, 0, 1)
    assert len(_event_ids(engine)) == 5


def test_due_samples_and_idle_followers_go_after_a_day_counts_after_the_retention(engine, db_url):
    from service.lock.db import due_samples_t, due_t, followers_t
    from tests.lock.due_rows import forget_counts

    forget_counts(db_url)
    t = _clock(engine)
    day = timedelta(days=1)
    with engine.begin() as conn:
        for partition, touched in (("dt=1", t - OLD), ("dt=2", t - day - day)):
            conn.execute(
                insert(due_t).values(
                    table_name="lake.db.a",
                    partition_name=partition,
                    data_files=3,
                    delete_files=0,
                    commits=3,
                    first_at=touched,
                    updated_at=touched,
                )
            )
        for compacted in (t - day - timedelta(minutes=1), t - day + timedelta(minutes=5)):
            conn.execute(
                insert(due_samples_t).values(
                    table_name="lake.db.a",
                    partition_name="dt=3",
                    due_at=compacted,
                    compacted_at=compacted,
                    seconds=1.0,
                )
            )
        for holder, polled in (("idle", t - day - day), ("following", t)):
            conn.execute(
                insert(followers_t).values(
                    principal="job-client", holder=holder, tables='["lake.db.*"]', polled_at=polled
                )
            )

    pruned = prune(engine, retention=RETENTION, batch_rows=1)

    assert (pruned.due_partitions, pruned.due_samples, pruned.followers) == (1, 1, 1)
    with engine.connect() as conn:
        assert list(conn.execute(select(due_t.c.partition_name)).scalars()) == ["dt=2"]
        assert len(list(conn.execute(select(due_samples_t.c.id)).scalars())) == 1
        assert list(conn.execute(select(followers_t.c.holder)).scalars()) == ["following"]
    forget_counts(db_url)


@pytest.fixture
def settings_overrides():
    return {"prune_interval_s": 0.05, "retention_days": 30}


def test_the_service_prunes_by_itself_and_counts_it(api, engine):
    t = _clock(engine)
    _add_events(engine, "lake.db.a", [t - OLD] * 3 + [t])
    _add_lease(engine, "lake.db.a", acquired_at=t - OLD, ended_at=t - OLD)

    pruned_events = ("lakelock_pruned_rows_total", (("table", "events"),))
    pruned_leases = ("lakelock_pruned_rows_total", (("table", "commit_leases"),))
    deadline = time.monotonic() + 30  # guards against a hang only
    while _samples(api).get(pruned_leases, 0) < 1:
        assert time.monotonic() < deadline, "the service did not prune"
        time.sleep(0.05)

    assert _samples(api)[pruned_events] == 3
    assert len(_event_ids(engine)) == 1
    assert _lease_ids(engine) == set()
