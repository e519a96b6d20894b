"""Compaction debt: what a compactor reports per table, and where operators see it (the table
state, the per-table gauges); on SQLite and MariaDB."""

from __future__ import annotations

from datetime import datetime

import pytest

from service.client import DebtBody, LeaseClient
from tests.conftest import auth
from tests.support.helpers import events, metric, state

pytestmark = pytest.mark.dialect  # on SQLite and MariaDB (tests/conftest.py)

TABLE = "lake.db.events"
SNAPSHOT = 3051729675574597004  # a real Iceberg snapshot id: past 2**53


def debt(small: int = 38, deletes: int = 9, **changes: object) -> dict[str, object]:
    return {
        "snapshot_id": SNAPSHOT,
        "data_files": 40,
        "small_files": small,
        "delete_files": deletes,
        "partitions_over_target": 3,
        "records": 1000,
        **changes,
    }


def put(api, table: str = TABLE, role: str = "job", **body: object):
    return api.put(f"/v1/tables/{table}/debt", json=debt(**body), headers=auth(role))


@pytest.fixture
def settings_overrides() -> dict[str, object]:
    return {"metrics_max_tables": 2}


def test_a_report_is_stored_answered_and_shown_with_the_table(api):
    answer = put(api)
    assert answer.status_code == 200, answer.text
    stored = answer.json()
    assert stored["snapshot_id"] == SNAPSHOT  # exact, past what a double holds
    assert (stored["small_files"], stored["delete_files"], stored["records"]) == (38, 9, 1000)
    assert stored["reported_by"] == "job-client" and stored["measured_at"] is None
    assert state(api)["debt"]["snapshot_id"] == SNAPSHOT
    listed = {t["table"]: t["debt"] for t in api.get("/v1/tables").json()["tables"]}
    assert listed[TABLE]["partitions_over_target"] == 3


def test_a_new_report_replaces_the_last_one(api):
    put(api, small=38)
    put(api, small=2, deletes=0, snapshot_id=None, records=None)
    now = state(api)["debt"]
    assert (now["small_files"], now["delete_files"], now["snapshot_id"], now["records"]) == (
        2,
        0,
        None,
        None,
    )


def test_a_report_makes_an_unknown_table_known_and_writes_no_event(api):
    assert api.get(f"/v1/tables/{TABLE}").status_code == 404
    assert put(api).status_code == 200
    table = state(api)
    assert table["debt"]["small_files"] == 38 and table["switch"]["ingest"] == "running"
    assert events(api) == [] and table["version"] == 0  # debt is not lock state


@pytest.mark.parametrize(
    "sent",
    ["2024-06-20T13:05:00+02:00", "2016-12-31T23:59:60Z", "2024-06-20t13:05:00.123456789z"],
)
def test_measured_at_is_any_rfc3339_date_time_kept_as_sent(api, sent):
    put(api, measured_at=sent)
    assert state(api)["debt"]["measured_at"] == sent


def test_a_count_written_as_a_whole_float_is_the_integer(api):
    assert put(api, small=37.0, snapshot_id=float(2**53)).status_code == 200
    assert (state(api)["debt"]["small_files"], state(api)["debt"]["snapshot_id"]) == (37, 2**53)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"small_files": -1}, "small_files"),
        ({"small_files": True}, "small_files"),
        ({"delete_files": "9"}, "delete_files"),
        ({"delete_files": 9.5}, "delete_files"),
        ({"data_files": None}, "data_files"),
        ({"measured_at": 1718888700}, "measured_at"),
        ({"measured_at": "yesterday"}, "measured_at"),
        ({"measured_at": "2024-06-20T13:05:00"}, "measured_at"),  # no offset
        ({"measured_at": "2024-02-30T13:05:00Z"}, "measured_at"),
        ({"snapshot_id": 2**63}, "snapshot_id"),
        ({"files": 3}, "files"),
    ],
)
def test_a_bad_report_is_refused_naming_the_field_and_changes_nothing(api, change, field):
    put(api)
    refused = api.put(f"/v1/tables/{TABLE}/debt", json=debt(**change), headers=auth("job"))
    assert refused.status_code == 422
    assert refused.json()["errors"][0]["field"] == field
    assert state(api)["debt"]["small_files"] == 38


def test_a_missing_count_is_refused():
    body = debt()
    del body["partitions_over_target"]
    with pytest.raises(ValueError, match="partitions_over_target"):
        DebtBody.model_validate(body)


def test_a_reader_may_not_report(api):
    assert put(api, role="reader").status_code == 403


def test_the_debt_gauges_cover_the_tables_that_owe_most(api):
    put(api, table="lake.db.light", small=1, deletes=0)
    put(api, table="lake.db.heavy", small=50, deletes=7)
    put(api, table="lake.db.middle", small=3, deletes=4)
    api.headers.update(auth("reader"))
    small = {t: metric(api, "lakelock_table_small_files", table=t) for t in ("heavy", "middle")}
    assert small == {"heavy": 0.0, "middle": 0.0}  # labels are the whole names

    def gauge(name: str, table: str) -> float:
        return metric(api, f"lakelock_table_{name}", table=f"lake.db.{table}")

    assert gauge("small_files", "heavy") == 50 and gauge("delete_files", "heavy") == 7
    assert gauge("partitions_over_target", "middle") == 3
    # LAKELOCK_METRICS_MAX_TABLES is 2 here: the table that owes least has no series
    body = api.get("/metrics").text
    assert 'table="lake.db.light"' not in body
    assert body.count("lakelock_table_small_files{") == 2


def test_the_client_reports_a_dict_or_a_model(api):
    client = LeaseClient(http=api, retries=0)
    measured = datetime(2024, 6, 20, 13, 5)  # naive: taken as UTC
    stored = client.report_debt(TABLE, debt(small=5, measured_at=measured))
    assert stored.small_files == 5 and stored.weight == 14
    assert stored.measured_at == "2024-06-20T13:05:00+00:00"
    again = client.report_debt(TABLE, stored)  # an answer is sent with the fields it reports
    assert again.small_files == 5 and again.snapshot_id == SNAPSHOT
    client.report_debt(TABLE, DebtBody.model_validate(debt(small=6)))
    assert client.state(TABLE)["debt"]["small_files"] == 6


def test_a_table_past_the_bound_gets_its_gauges_whatever_its_size(api):
    """The alert on partitions past the hard bound must see every such table, not only the
    LAKELOCK_METRICS_MAX_TABLES (2 here) with the most files."""
    put(api, "lake.db.big_a", small=500)
    put(api, "lake.db.big_b", small=400)
    put(api, "lake.db.small", small=30, deletes=26, partitions_over_bound=1, worst_partition=31)
    assert metric(api, "lakelock_table_partitions_over_bound", table="lake.db.small") == 1
    assert metric(api, "lakelock_table_worst_partition", table="lake.db.small") == 31
    assert metric(api, "lakelock_table_small_files", table="lake.db.big_a") == 500
    assert metric(api, "lakelock_table_small_files", table="lake.db.big_b") == 0  # left out
