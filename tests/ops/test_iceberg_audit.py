"""`lakelock audit`'s rules over snapshot records and audit events (no Spark, no service)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from service.ops.iceberg_audit import SnapshotRecord, audit

T0 = datetime(2024, 6, 20, 13, 0, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def lease_events(lease_id, kind, start, end, *, token=None, partitions=None, end_event="released"):
    """The trail of one lease, oldest first, shaped as GET /v1/events answers."""
    base = {
        "table": "db.t",
        "lease_id": lease_id,
        "kind": kind,
        "holder": f"{kind}-h",
        "token": token,
        "actor": None,
    }
    grant = {
        **base,
        "event": "lease.acquired",
        "at": at(start).isoformat().replace("+00:00", "Z"),
        "detail": {"ttl_s": 30},
    }
    if partitions is not None:
        grant["partitions"] = partitions
    ended = {
        **base,
        "event": f"lease.{end_event}",
        "at": at(end + 5).isoformat(),
        "detail": {"held_s": end - start},
    }
    return [grant, ended]


def trail(*leases):
    """Events newest first, numbered, as the service answers them."""
    events = sorted((e for lease in leases for e in lease), key=lambda e: e["at"])
    for i, e in enumerate(events, 1):
        e["id"] = i
    return list(reversed(events))


def ingest(snapshot_id, seconds, lease_id, partitions=None):
    summary = {"lakelock.lease-id": lease_id, "lakelock.query-id": "q", "lakelock.batch-id": "1"}
    return SnapshotRecord(snapshot_id, at(seconds), "overwrite", summary, partitions)


def compaction(snapshot_id, seconds, lease_id, token):
    summary = {"lakelock.lease-id": lease_id, "lakelock.token": str(token)}
    return SnapshotRecord(snapshot_id, at(seconds), "replace", summary)


def violations(report):
    return {f.snapshot_id: f.problems for f in report.violations}


def test_commits_inside_their_own_leases_are_clean():
    events = trail(
        lease_events("c1", "commit", 0, 10),
        lease_events("m1", "maintenance", 11, 30, token=4),
        lease_events("c2", "commit", 31, 40, end_event="expired"),
    )
    report = audit([ingest(1, 9, "c1"), compaction(2, 20, "m1", 4), ingest(3, 35, "c2")], events)
    assert report.clean, violations(report)
    assert (len(report.checked), report.as_dict()["verdict"]) == (3, "clean")


def test_a_commit_after_its_lease_ended_is_caught():
    events = trail(lease_events("c1", "commit", 0, 10))
    report = audit([ingest(1, 5, "c1"), ingest(2, 12, "c1")], events)
    assert list(violations(report)) == [2]
    assert "outside its lease" in violations(report)[2][0]


def test_a_commit_without_any_lease_is_caught():
    report = audit(
        [ingest(1, 5, "none"), SnapshotRecord(2, at(6), "append", {}), ingest(3, 7, "nope")],
        trail(lease_events("c1", "commit", 0, 10)),
    )
    assert set(violations(report)) == {1, 2, 3}


def test_an_ingest_commit_inside_a_maintenance_lease_is_caught():
    # the commit lease's interval overlaps the maintenance lease's: the service never allows it
    events = trail(
        lease_events("c1", "commit", 0, 20),
        lease_events("m1", "maintenance", 5, 30, token=2),
    )
    report = audit([ingest(1, 10, "c1")], events)
    assert "inside maintenance lease m1" in violations(report)[1][0]


def test_disjoint_partition_scopes_may_overlap_in_time():
    events = trail(
        lease_events("c1", "commit", 0, 20, partitions=["dt=2024-06-21/hr=1"]),
        lease_events("m1", "maintenance", 5, 30, token=2, partitions=["dt=2024-06-20/hr=13"]),
    )
    assert audit([ingest(1, 10, "c1")], events).clean
    # what the commit touched wins over what its lease declared
    touched = frozenset({"dt=2024-06-20/hr=13"})
    assert not audit([ingest(1, 10, "c1", partitions=touched)], events).clean


def test_a_maintenance_commit_with_another_token_is_caught():
    events = trail(lease_events("m1", "maintenance", 0, 30, token=4))
    report = audit([compaction(1, 10, "m1", 3)], events)
    assert "token 3 is not its lease's (4)" in violations(report)[1]


def test_a_commit_under_the_other_kind_of_lease_is_caught():
    events = trail(lease_events("m1", "maintenance", 0, 30, token=4))
    assert (
        "ingest commit under a maintenance lease"
        in violations(audit([ingest(1, 10, "m1")], events))[1][0]
    )


def test_commits_older_than_a_truncated_trail_are_not_judged():
    events = trail(lease_events("c1", "commit", 100, 110))
    report = audit([ingest(1, 5, "c0"), ingest(2, 105, "c1")], events, limit=len(events))
    assert report.clean
    assert [f.snapshot_id for f in report.unverified] == [1]
    # the whole trail: the same old commit is a violation
    assert not audit([ingest(1, 5, "c0")], events).clean


def test_clock_skew_tolerance():
    events = trail(lease_events("c1", "commit", 0, 10))
    assert not audit([ingest(1, 10.5, "c1")], events).clean
    assert audit([ingest(1, 10.5, "c1")], events, skew=timedelta(seconds=1)).clean


def test_an_unattributed_commit_is_a_violation_that_says_what_it_changed():
    # Iceberg's own remove-dangling-deletes commit: a replace that only drops a delete file
    maintenance_like = SnapshotRecord(
        7,
        at(3),
        "replace",
        {"removed-position-delete-files": "1", "removed-delete-files": "1"},
        frozenset({"dt=2024-06-20/hr=13"}),
    )
    rows_like = SnapshotRecord(
        8, at(4), "append", {"added-data-files": "2", "added-records": "40"}, None
    )

    report = audit([maintenance_like, rows_like], [])

    assert not report.clean
    first, second = (v.problems[0] for v in report.violations)
    assert "takes no lease" in first
    assert first.endswith("replace that removed 1 position delete file in dt=2024-06-20/hr=13")
    assert second.endswith("append that added 2 data files (40 records)")
