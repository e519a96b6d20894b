"""/metrics carries the lock state, read from the database at scrape time."""

from __future__ import annotations

import pytest

from service.lock import rules, store
from service.lock.db import make_engine
from service.lock.overview import overview
from service.server.metrics import Metrics
from testkit import free_port
from tests.server.test_metrics import _samples
from tests.support.helpers import (
    backdate,
    claim,
    commit,
    held_since,
    maintenance,
    metric,
    release,
    switch,
)

pytestmark = pytest.mark.dialect  # on SQLite and MariaDB (tests/conftest.py)

LIVE_COMMIT = ("lakelock_live_leases", (("kind", "commit"),))
LIVE_MAINTENANCE = ("lakelock_live_leases", (("kind", "maintenance"),))
INTENTS = ("lakelock_open_intents", ())
PAUSED = ("lakelock_paused_tables", ())


def test_gauges_count_live_leases_open_intents_and_paused_tables(api):
    first = commit(api, table="lake.db.a").json()
    commit(api, table="lake.db.a", holder="ingest-2")
    assert maintenance(api, table="lake.db.a").status_code == 202  # drains: an intent
    assert maintenance(api, table="lake.db.b").status_code == 201
    switch(api, table="lake.db.c", ingest="paused")
    switch(api, table="lake.db.d", ingest="paused")
    release(api, first)

    samples = _samples(api)
    assert samples[("lakelock_state_up", ())] == 1
    assert samples[LIVE_COMMIT] == 1
    assert samples[LIVE_MAINTENANCE] == 1
    assert samples[INTENTS] == 1
    assert samples[PAUSED] == 2


def test_each_table_with_a_live_maintenance_lease_shows_how_long_its_oldest_is_held(api, db_url):
    older = maintenance(api, partitions=["dt=2024-06-19"]).json()
    newer = maintenance(api, holder="compactor-2", partitions=["dt=2024-06-20"]).json()
    other = maintenance(api, table="lake.db.other").json()
    held_since(db_url, older, 1200)
    held_since(db_url, newer, 300)
    held_since(db_url, other, 60)
    commit(api, table="lake.db.third")  # a table with no maintenance lease: no series

    def held():
        return {
            labels[0][1]: value
            for (name, labels), value in _samples(api).items()
            if name == "lakelock_maintenance_lease_seconds"
        }

    first = held()
    assert set(first) == {"lake.db.events", "lake.db.other"}
    assert 1200 <= first["lake.db.events"] < 1300 and 60 <= first["lake.db.other"] < 160
    release(api, older)
    backdate(db_url, other)  # expired, not yet swept: no longer live
    after = held()
    assert set(after) == {"lake.db.events"} and 300 <= after["lake.db.events"] < 400


def test_an_expired_lease_is_not_counted_before_the_sweeper_ends_it(api, db_url, engine):
    lease = commit(api).json()
    held = maintenance(api, table="lake.db.b").json()
    backdate(db_url, lease)
    backdate(db_url, held)
    with engine.connect() as conn:
        seen = overview(conn)
    assert (seen.live["commit"], seen.live["maintenance"], seen.maintenance_by_table) == (0, 0, [])


@pytest.mark.parametrize(
    ("backpressure", "maintenance_switch", "holds"),
    [("enabled", "enabled", True), ("disabled", "enabled", False), ("enabled", "disabled", False)],
)
def test_the_backpressure_gauge_counts_what_the_commit_rule_holds(
    api, engine, backpressure, maintenance_switch, holds
):
    table, hot = "lake.db.events", "dt=2024-06-20/hr=13"
    held = claim(api, table=table).json()
    answer = api.post(
        f"/v1/tables/{table}/backpressure",
        json={
            "claim_id": held["lease_id"],
            "holder": "compactor-1/run-1",
            "partitions": [hot],
            "reason": "14 small files, hard bound 24",
        },
    )
    assert answer.json()["partitions"] == [hot]
    # the intent stays open whatever the switch says next; the rule says whether it holds
    switch(api, table=table, backpressure=backpressure, maintenance=maintenance_switch)
    with engine.connect() as conn:
        row = store.read_table(conn, table)
        assert row is not None
        by_rule = rules.backpressure_holds(row)
        seen = dict(overview(conn).backpressure)
    assert by_rule is holds
    assert seen == ({table: 1} if holds else {})
    assert metric(api, "lakelock_backpressure_partitions", table=table) == (1 if holds else 0)
    # ... and the commit decision answers by the same rule
    refused = commit(api, table=table, partitions=[hot]).status_code == 423
    assert refused is holds


def test_a_scrape_without_the_database_still_has_the_counters():
    metrics = Metrics()
    metrics.grants.labels("commit", "table").inc()
    unreachable = make_engine(f"mysql+pymysql://nobody@127.0.0.1:{free_port()}/none", timeout_s=1)
    metrics.track_state(unreachable)
    try:
        text = metrics.render().decode()
    finally:
        unreachable.dispose()
    assert 'lakelock_grants_total{kind="commit",scope="table"} 1.0' in text
    assert "lakelock_state_up 0.0" in text
    assert "lakelock_live_leases" not in text
