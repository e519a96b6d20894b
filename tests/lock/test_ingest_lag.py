"""What an ingest job reports about its source: its lag per topic-partition (table state,
gauge, `lakelock status`) and the ranges retention took that it skipped (`ingest.gap` events);
on SQLite and MariaDB."""

from __future__ import annotations

import pytest

from service.client import LeaseClient
from service.wire.errors import InvalidRequest
from tests.conftest import auth
from tests.support.helpers import events, metric, state

pytestmark = pytest.mark.dialect  # on SQLite and MariaDB (tests/conftest.py)

TABLE = "lake.db.events"


def lag(api, table: str = TABLE, role: str = "job", **partitions: int):
    body = {"query_id": "q-1", "batch_id": 7, "partitions": partitions or {"events:0": 12}}
    return api.put(f"/v1/tables/{table}/ingest-lag", json=body, headers=auth(role))


def test_a_lag_report_is_stored_with_its_total_and_shown_with_the_table(api):
    answer = lag(api, **{"events:0": 12, "events:1": 0, "events:2": 30})
    assert answer.status_code == 200, answer.text
    shown = state(api)["ingest_lag"]
    assert shown["records"] == 42 and shown["partitions"]["events:2"] == 30
    assert (shown["query_id"], shown["batch_id"], shown["reported_by"]) == ("q-1", 7, "job-client")
    assert events(api) == [] and state(api)["version"] == 0  # lag is not lock state


def test_a_new_lag_report_replaces_the_last_one(api):
    lag(api, **{"events:0": 12, "events:1": 5})
    lag(api, **{"events:0": 0})
    assert state(api)["ingest_lag"]["partitions"] == {"events:0": 0}


@pytest.mark.parametrize(
    "partitions",
    [{"": 3}, {"events:0": -1}, {"events:0": "3"}, {"events:0": True}],
)
def test_a_bad_lag_report_is_refused_and_changes_nothing(api, partitions):
    lag(api)
    body = {"query_id": "q-1", "batch_id": 8, "partitions": partitions}
    refused = api.put(f"/v1/tables/{TABLE}/ingest-lag", json=body, headers=auth("job"))
    assert refused.status_code == 422, refused.text
    assert state(api)["ingest_lag"]["batch_id"] == 7


def test_a_reader_may_not_report_lag_or_gaps(api):
    assert lag(api, role="reader").status_code == 403
    gaps = {"query_id": "q", "gaps": [{"topic": "t", "partition": 0, "start": 0, "records": 1}]}
    sent = api.post(f"/v1/tables/{TABLE}/ingest-gaps", json=gaps, headers=auth("reader"))
    assert sent.status_code == 403


def test_the_lag_gauge_names_the_tables_furthest_behind(api):
    lag(api, table="lake.db.a", **{"t:0": 5, "t:1": 6})
    lag(api, table="lake.db.b", **{"t:0": 0})
    api.headers.update(auth("reader"))
    assert metric(api, "lakelock_ingest_lag_records", table="lake.db.a") == 11
    assert metric(api, "lakelock_ingest_lag_records", table="lake.db.b") == 0


def test_each_gap_is_an_audit_event_naming_its_range(api):
    client = LeaseClient(http=api, retries=0)
    gaps = [
        {"topic": "events", "partition": 0, "start": 100, "records": 50},
        {"topic": "events", "partition": 3, "start": 7, "records": 2},
    ]
    recorded = client.record_ingest_gaps(TABLE, query_id="q-1", gaps=gaps)
    assert (recorded.recorded, recorded.records_lost) == (2, 52)
    found = sorted(
        (e for e in events(api) if e["event"] == "ingest.gap"), key=lambda e: e["detail"]["start"]
    )
    assert [
        (e["detail"]["partition"], e["detail"]["start"], e["detail"]["end"]) for e in found
    ] == [
        (3, 7, 9),
        (0, 100, 150),
    ]
    assert found[1]["detail"]["records"] == 50 and found[1]["actor"] == "operator-client"


def test_an_empty_gap_is_refused_naming_the_field(api):
    client = LeaseClient(http=api, retries=0)
    with pytest.raises(InvalidRequest, match="records"):
        client.record_ingest_gaps(
            TABLE, query_id="q", gaps=[{"topic": "t", "partition": 0, "start": 5, "records": 0}]
        )
    assert api.get(f"/v1/tables/{TABLE}").status_code == 404  # nothing made


def test_the_client_reports_lag(api):
    client = LeaseClient(http=api, retries=0)
    stored = client.report_ingest_lag(TABLE, query_id="q", batch_id=3, partitions={"t:0": 4})
    assert stored.records == 4 and client.state(TABLE)["ingest_lag"]["batch_id"] == 3
