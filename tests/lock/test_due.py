"""Due partitions (docs/design.md §5.1): the files each partition gains as commits land, counted
from commit-lease releases, zeroed by compactions, replaced by a compactor's measured debt;
answered to the compactors that follow them; on SQLite and MariaDB."""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine, text

from service.wire.models import MAX_COUNTED_FILES
from tests.conftest import auth
from tests.lock.due_rows import (
    TABLE,
    compact,
    due,
    due_partitions,
    due_since,
    files,
    forget_counts,
    release_with,
    write,
)
from tests.support.helpers import (
    _backdate,
    claim,
    commit,
    events,
    maintenance,
    metric,
    release,
    state,
    switch,
)

pytestmark = pytest.mark.dialect  # on SQLite and MariaDB (tests/conftest.py)

P1, P2, P3 = "dt=2024-06-20/hr=13", "dt=2024-06-20/hr=14", "dt=2024-06-20/hr=15"


@pytest.fixture(autouse=True)
def _counts_of_this_test_only(db_url):
    forget_counts(db_url)
    yield
    forget_counts(db_url)


def _row(db_url: str, partition: str, column: str = "due_at"):
    engine = create_engine(db_url)
    with engine.connect() as conn:
        found = conn.execute(
            text(
                f"SELECT {column} FROM lakelock_due WHERE table_name = :t AND partition_name = :p"
            ),
            {"t": TABLE, "p": partition},
        ).scalar()
    engine.dispose()
    return found


def test_a_release_with_written_counts_the_files_until_the_partition_is_due(api):
    write(api, {P1: (2, 1), P2: (1, 0)})
    counted = state(api)["due"]
    assert (counted["partitions_counted"], counted["data_files"], counted["delete_files"]) == (
        2,
        3,
        1,
    )
    assert counted["partitions_due"] == 0 and due_partitions(api) == []
    write(api, {P1: (2, 0)})  # 4 data files: LAKELOCK_DUE_DATA_FILES
    assert due_partitions(api) == [(P1, 4, 1)]
    answer = due(api).json()["due"][0]
    assert answer["table"] == TABLE and answer["commits"] == 2 and answer["due_s"] >= 0
    assert state(api)["due"]["partitions_due"] == 1


def test_delete_files_alone_make_a_partition_due(api):
    write(api, {P2: (0, 4)})
    assert due_partitions(api) == [(P2, 0, 4)]


def test_one_equality_delete_file_makes_a_partition_due_and_others_wait_for_four(api, db_url):
    """LAKELOCK_DUE_EQUALITY_DELETE_FILES (1): every reader joins an equality delete with every
    older data file of its partition, so one is due at once; three position deletes are not."""
    write(api, {P1: (1, 3)})
    assert due_partitions(api) == []
    write(api, {P2: (1, 0)})
    lease = commit(api, partitions=[P2]).json()
    written = {P2: files(0, 1) | {"equality_delete_files": 1}}
    release_with(api, lease, written=written).raise_for_status()
    assert due_partitions(api) == [(P2, 1, 1)]
    assert _row(db_url, P2, "equality_delete_files") == 1
    assert due(api).json()["due"][0]["equality_delete_files"] == 1
    # a compactor's measure: the equality deletes resolved, the position deletes left
    report = {
        "data_files": 2,
        "small_files": 2,
        "delete_files": 4,
        "partitions_over_target": 2,
        "partitions": {P1: files(1, 3), P2: files(1, 1)},
    }
    api.put(f"/v1/tables/{TABLE}/debt", json=report, headers=auth("job")).raise_for_status()
    assert due_partitions(api) == []
    report["partitions"] = {P1: files(1, 3) | {"equality_delete_files": 1}, P2: files(1, 1)}
    api.put(f"/v1/tables/{TABLE}/debt", json=report, headers=auth("job")).raise_for_status()
    assert due_partitions(api) == [(P1, 1, 3)]


def test_counting_writes_no_event_and_leaves_the_version_alone(api):
    lease = commit(api, partitions=[P1]).json()
    version = state(api)["version"]
    release_with(api, lease, written={P1: files(5)}).raise_for_status()
    assert state(api)["version"] == version + 1  # the release's own lease.released
    assert [e["event"] for e in events(api)][:1] == ["lease.released"]


def test_a_repeated_release_counts_nothing_twice(api):
    lease = commit(api, partitions=[P1]).json()
    for _ in range(3):  # a client retrying after lost answers
        answer = release_with(api, lease, written={P1: files(2)})
        assert answer.status_code == 200 and answer.json()["state"] == "released"
    assert state(api)["due"]["data_files"] == 2


def test_holder_and_token_may_come_in_the_query_as_for_a_delete(api):
    lease = maintenance(api, partitions=[P1]).json()
    write(api, {P2: (1, 0)})
    answer = api.post(
        f"/v1/leases/{lease['lease_id']}/release",
        params={"holder": lease["holder"], "token": lease["token"]},
        json={"compacted": [P1]},
    )
    assert answer.status_code == 200 and answer.json()["state"] == "released"
    clash = commit(api, partitions=[P3]).json()
    refused = api.post(
        f"/v1/leases/{clash['lease_id']}/release",
        params={"holder": "ingest-2"},
        json={"holder": clash["holder"]},
    )
    assert refused.status_code == 422 and "send it once" in refused.json()["detail"]


def test_an_empty_body_releases_as_the_delete_does(api):
    lease = commit(api, partitions=[P1]).json()
    answer = api.post(f"/v1/leases/{lease['lease_id']}/release", params={"holder": lease["holder"]})
    assert answer.status_code == 200 and answer.json()["state"] == "released"
    assert state(api)["due"] is None


@pytest.mark.parametrize(
    ("kind", "body", "field", "says"),
    [
        ("maintenance", {"written": {P1: files(2)}}, "written", "a maintenance"),
        ("claim", {"written": {P1: files(2)}}, "written", "a claim"),
        ("commit", {"compacted": [P1]}, "compacted", "a commit"),
        ("maintenance", {"compacted": [P1, P3]}, "compacted", "outside the partitions"),
    ],
)
def test_a_body_of_another_kind_of_lease_is_refused_and_changes_nothing(
    api, kind, body, field, says
):
    write(api, {P1: (4, 0)})
    lease = {
        "commit": lambda: commit(api, partitions=[P1]),
        "maintenance": lambda: maintenance(api, partitions=[P1, P2]),
        "claim": lambda: claim(api),
    }[kind]().json()
    refused = release_with(api, lease, **body)
    assert refused.status_code == 422, refused.text
    problem = refused.json()
    assert problem["field"] == field and says in problem["detail"]
    assert state(api)["due"]["data_files"] == 4 and due_partitions(api) == [(P1, 4, 0)]
    assert api.get(f"/v1/leases/{lease['lease_id']}").json()["state"] == "live"


def test_counts_are_the_holders_to_report_not_an_operators_revoke(api):
    lease = commit(api, partitions=[P1]).json()
    refused = api.post(f"/v1/leases/{lease['lease_id']}/release", json={"written": {P1: files(4)}})
    assert refused.status_code == 422 and refused.json()["field"] == "holder"
    assert api.get(f"/v1/leases/{lease['lease_id']}").json()["state"] == "live"


@pytest.mark.parametrize(
    "body",
    [
        {"written": {"hr": files(1)}},  # no partition name
        {"written": {P1: files(-1)}},
        {"written": {P1: {"data_files": 1}}},
        {"written": {P1: files(1) | {"files": 2}}},
        {"compacted": [P1, P1]},
        {"written": {f"id={n}": files(1) for n in range(1001)}},
        {"written": {P1: files(MAX_COUNTED_FILES + 1)}},  # no commit adds that many
        {"written": {P1: files(1), P2: files(1)}},  # P2: outside the lease's partitions
        {"written": {P1: files(1, 1) | {"equality_delete_files": 2}}},  # more than the deletes
    ],
)
def test_a_malformed_count_is_refused_and_the_lease_stays(api, body):
    lease = commit(api, partitions=[P1]).json()
    refused = release_with(api, lease, **body)
    assert refused.status_code in (413, 422), refused.text
    assert api.get(f"/v1/leases/{lease['lease_id']}").json()["state"] == "live"
    assert state(api)["due"] is None


def test_counts_stop_at_their_cap_and_the_tables_sums_never_overflow(api, db_url):
    """However many files are counted (the catalog front counts a commit's manifests, which a
    client writes), a partition's counts stop at COUNT_CAP, so the sums of GET /v1/tables and
    the status page stay within a 64-bit integer: a job token cannot make them fail."""
    from service.lock import db, due

    names = [f"id={n}" for n in range(40)]
    write(api, {names[0]: (1, 0)})  # the table known, as every counted table is
    engine = create_engine(db_url)
    for _ in range(3):
        with engine.begin() as conn:
            huge = dict.fromkeys(names, due.Files(2**62, 2**62, 2**62))
            due.add_written(conn, table=TABLE, written=huge, at=db.now(conn), trigger=due.Trigger())
    engine.dispose()
    assert _row(db_url, names[0], "data_files") == due.COUNT_CAP
    listed = api.get("/v1/tables")
    assert listed.status_code == 200, listed.text
    counted = state(api)["due"]
    assert counted["data_files"] == counted["delete_files"] == 40 * due.COUNT_CAP


def test_a_compaction_zeroes_its_partitions_and_samples_those_that_were_due(api, db_url):
    write(api, {P1: (4, 0), P2: (2, 2), P3: (1, 0)})
    write(api, {P2: (0, 2)})
    due_since(db_url, P1, 100)
    due_since(db_url, P2, 10)
    assert [p for p, *_ in due_partitions(api)] == [P2, P1]  # most files first
    answer = compact(api, [P1, P2, P3])
    assert answer.status_code == 200, answer.text
    assert due_partitions(api) == []
    seen = state(api)["due"]
    assert (seen["partitions_counted"], seen["partitions_due"], seen["data_files"]) == (0, 0, 0)
    assert seen["compacted_last_hour"] == 2  # P3 was not due: no sample
    assert 10 <= seen["due_to_compacted_p50_s"] < 100 <= seen["due_to_compacted_p95_s"]


def test_due_to_compacted_is_over_the_last_hour_only(api, db_url):
    write(api, {P1: (4, 0)})
    compact(api, [P1])
    engine = create_engine(db_url)
    with engine.begin() as conn:
        conn.execute(text("UPDATE lakelock_due_samples SET seconds = 30"))
    engine.dispose()
    write(api, {P2: (4, 0)})
    due_since(db_url, P2, 5)
    compact(api, [P2])
    sample = ("lakelock_due_samples", "partition_name = :p", {"p": P1})
    _backdate(db_url, [sample], 3700, column="compacted_at")
    seen = state(api)["due"]
    assert seen["compacted_last_hour"] == 1
    assert 5 <= seen["due_to_compacted_p95_s"] < 30


def test_the_debt_report_replaces_the_counts(api, db_url):
    write(api, {P1: (4, 0), P2: (4, 0)})
    due_since(db_url, P2, 50)
    was_due = _row(db_url, P2)
    report = {
        "data_files": 12,
        "small_files": 7,
        "delete_files": 1,
        "partitions_over_target": 1,
        "partitions": {P2: files(6, 0), P3: files(1, 1), "dt=2024-06-19/hr=01": files(0, 0)},
    }
    answer = api.put(f"/v1/tables/{TABLE}/debt", json=report, headers=auth("job"))
    assert answer.status_code == 200, answer.text
    assert due_partitions(api) == [(P2, 6, 0)]  # P1 not named: counts nothing now
    assert _row(db_url, P2) == was_due  # still due: since when it became due
    seen = state(api)["due"]
    assert (seen["partitions_counted"], seen["data_files"], seen["delete_files"]) == (2, 7, 1)
    assert seen["compacted_last_hour"] == 0  # a measure is no compaction
    report["partitions"] = {P2: files(1, 0), P3: files(0, 5)}
    api.put(f"/v1/tables/{TABLE}/debt", json=report, headers=auth("job")).raise_for_status()
    assert due_partitions(api) == [(P3, 0, 5)]
    assert _row(db_url, P2) is None  # no longer due


def test_a_debt_report_without_partitions_leaves_the_counts(api):
    write(api, {P1: (4, 0)})
    report = {"data_files": 12, "small_files": 7, "delete_files": 1, "partitions_over_target": 1}
    api.put(f"/v1/tables/{TABLE}/debt", json=report, headers=auth("job")).raise_for_status()
    assert due_partitions(api) == [(P1, 4, 0)]


def test_most_files_first_and_at_most_limit(api):
    write(api, {P1: (4, 0), P2: (5, 3), P3: (6, 0)})
    write(api, {"dt=2024-06-21/hr=00": (4, 0)}, table="lake.db.clicks")
    assert due_partitions(api, TABLE, "lake.db.clicks") == [
        (P2, 5, 3),
        (P3, 6, 0),
        (P1, 4, 0),
        ("dt=2024-06-21/hr=00", 4, 0),
    ]
    assert due_partitions(api, "lake.db.*", limit=2) == [(P2, 5, 3), (P3, 6, 0)]
    assert due_partitions(api, "lake.db.click?") == [("dt=2024-06-21/hr=00", 4, 0)]
    assert due_partitions(api, "other.*") == []


def test_a_table_name_with_an_underscore_is_matched_as_named(api):
    write(api, {P1: (4, 0)}, table="lake.db.a_b")
    write(api, {P1: (4, 0)}, table="lake.db.axb")
    assert [d["table"] for d in due(api, "lake.db.a_b").json()["due"]] == ["lake.db.a_b"]


def test_tables_another_compactor_claimed_are_left_out(api):
    write(api, {P1: (4, 0)})
    write(api, {P1: (4, 0)}, table="lake.db.clicks")
    held = claim(api, holder="compactor-2").json()
    assert [d["table"] for d in due(api, "lake.db.*").json()["due"]] == ["lake.db.clicks"]
    # its own claim, and its runs' (`<holder>/<run>`), hide nothing from the claimant
    for holder in ("compactor-2", "compactor-2/run-7"):
        assert len(due(api, "lake.db.*", holder=holder).json()["due"]) == 2
    release(api, held).raise_for_status()
    assert len(due(api, "lake.db.*").json()["due"]) == 2


def test_tables_whose_maintenance_is_off_are_left_out(api):
    write(api, {P1: (4, 0)})
    switch(api, maintenance="disabled").raise_for_status()
    assert due_partitions(api) == []
    switch(api, maintenance="enabled").raise_for_status()
    assert due_partitions(api) == [(P1, 4, 0)]


def test_the_long_poll_answers_empty_after_its_wait(api):
    write(api, {P1: (3, 0)})
    answer = due(api, wait_s=0.3)
    assert answer.status_code == 200
    assert answer.json()["due"] == [] and answer.json()["waited_s"] >= 0.3


def test_a_follower_is_seen_with_the_tables_it_follows(api):
    write(api, {P1: (1, 0)})
    write(api, {P1: (1, 0)}, table="lake.db.clicks")
    due(api, "lake.db.ev*", holder="follower-1").raise_for_status()
    due(api, TABLE, holder="follower-2").raise_for_status()
    assert state(api)["due"]["followers"] == 2
    assert state(api, "lake.db.clicks")["due"]["followers"] == 0
    assert state(api)["due"]["followers_waiting"] == 0  # answered, not parked


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"table": ["lake.db.[ab]"]}, "table"),
        ({"table": ["lake db"]}, "table"),
        ({"table": [f"t{n}.*" for n in range(101)]}, "table"),
        ({"wait_s": 61}, "wait_s"),
        ({"wait_s": -1}, "wait_s"),
        ({"limit": 0}, "limit"),
        ({"limit": 1001}, "limit"),
        ({"holder": "\n"}, "holder"),
    ],
)
def test_a_bad_long_poll_is_refused_naming_the_field(api, params, field):
    params = {"table": [TABLE], "holder": "compactor-1", **params}
    refused = api.get("/v1/due", params=params, headers=auth("job"))
    assert refused.status_code == 422, refused.text
    assert field in refused.text


def test_the_long_poll_needs_a_job_token(api):
    assert due(api, role="reader").status_code == 403
    unknown = {"Authorization": "Bearer not-a-token-of-ours"}
    assert (
        api.get("/v1/due", params={"table": TABLE, "holder": "x"}, headers=unknown).status_code
        == 401
    )


@pytest.fixture
def settings_overrides() -> dict[str, object]:
    return {"metrics_max_tables": 2}


def test_the_gauges_show_due_to_compacted_due_partitions_and_followers(api, db_url):
    write(api, {P1: (4, 0), P2: (4, 0), P3: (4, 0)})
    due_since(db_url, P1, 100)
    due_since(db_url, P2, 10)
    compact(api, [P1, P2]).raise_for_status()
    due(api, "lake.db.*", holder="follower-1").raise_for_status()
    took = {
        q: metric(api, "lakelock_due_to_compacted_seconds", table=TABLE, quantile=q)
        for q in ("0.5", "0.95")
    }
    assert 10 <= took["0.5"] < 100 <= took["0.95"]
    assert metric(api, "lakelock_due_partitions", table=TABLE) == 1
    assert metric(api, "lakelock_due_followers", table=TABLE) == 1


def test_the_gauges_cover_the_tables_slowest_to_be_compacted(api, db_url):
    for table, seconds in (("lake.db.a", 5), ("lake.db.b", 50), ("lake.db.c", 500)):
        write(api, {P1: (4, 0)}, table=table)
        due_since(db_url, P1, seconds, table=table)
        compact(api, [P1], table=table).raise_for_status()
    shown = {
        table: metric(api, "lakelock_due_to_compacted_seconds", table=table, quantile="0.95")
        for table in ("lake.db.a", "lake.db.b", "lake.db.c")
    }
    assert shown["lake.db.a"] == 0  # LAKELOCK_METRICS_MAX_TABLES: the 2 slowest only
    assert 50 <= shown["lake.db.b"] < 500 <= shown["lake.db.c"]


def test_concurrent_releases_lose_no_count(api):
    """Counts change under the table's row lock: releases racing on one partition (and on a
    partition none counted before) each add theirs."""
    from concurrent.futures import ThreadPoolExecutor

    def batches(writer: int) -> None:
        for _ in range(4):
            write(api, {P1: (1, 0), f"dt=2024-06-2{writer % 3}/hr=00": (0, 1)})

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(batches, range(8)))
    counted = state(api)["due"]
    assert (counted["data_files"], counted["delete_files"]) == (32, 32)
    found = due(api).json()["due"]
    assert sorted(
        (d["partition"], d["data_files"], d["delete_files"], d["commits"]) for d in found
    ) == [
        ("dt=2024-06-20/hr=00", 0, 12, 12),
        ("dt=2024-06-20/hr=13", 32, 0, 32),
        ("dt=2024-06-21/hr=00", 0, 12, 12),
        ("dt=2024-06-22/hr=00", 0, 8, 8),
    ]
