"""What a run report says about the table: changed or not, and the hold it cost ingest."""

from __future__ import annotations

from benchmarks.conflicts import ingest_held_s
from compactor.report import EXIT_CODES, Outcome, RunReport, changed_anything


def report(*outputs: dict, before: int = 1, after: int = 1) -> RunReport:
    r = RunReport(table="local.db.events", run_uid="r1", holder="compactor/r1")
    r.steps = [{"procedure": "p", "output": o} for o in outputs]
    r.snapshot_before, r.snapshot_after = before, after
    return r


def test_steps_that_counted_nothing_changed_nothing():
    nothing = report(
        {"rewritten_data_files": 0, "added_data_files": 0, "file_groups": 0},
        {"rewritten_delete_files": 0, "added_delete_files": 0, "failed_data_files": 0},
    )

    assert not changed_anything(nothing)
    assert EXIT_CODES[Outcome.NO_CHANGE] == 0


def test_a_new_snapshot_a_dropped_delete_file_or_an_expired_snapshot_is_a_change():
    assert changed_anything(report({"rewritten_data_files": 0}, before=1, after=2))
    assert changed_anything(report({"rewritten_delete_files": 24, "added_delete_files": 0}))
    assert changed_anything(report({"expired_snapshots": 3, "deleted_data_files": 0}))


def event(event_id: int, at: str, event: str, kind: str = "maintenance") -> dict:
    return {"id": event_id, "at": f"2024-05-10T12:00:{at}Z", "event": event, "kind": kind}


def test_ingest_is_held_from_the_intent_or_the_grant_to_the_release():
    events = [
        event(1, "00", "intent.opened"),
        event(2, "01", "lease.released", kind="commit"),
        event(3, "02", "lease.acquired"),
        event(4, "05", "lease.released"),  # 5 s from the intent
        event(5, "10", "lease.acquired"),
        event(6, "12", "lease.expired"),  # 2 s, no drain
        event(7, "20", "intent.opened"),
        event(8, "23", "intent.expired", kind=""),  # 3 s of an intent that got no lease
    ]

    assert ingest_held_s(events) == 10.0
    assert ingest_held_s([]) is None


def test_the_report_lists_each_group_with_its_lease_and_outcome():
    r = report({"rewritten_data_files": 12})
    r.groups = [
        {
            "partitions": ["dt=2024-06-20/hr=10"],
            "hot": False,
            "lease_id": "l1",
            "token": 7,
            "lease_wait_s": 0.12345,
            "held_s": 1.23456,
            "steps": [{"procedure": "rewrite_data_files", "outcome": "changed"}],
            "outcome": Outcome.COMPACTED,
        },
        {"partitions": None, "hot": False, "outcome": Outcome.SKIPPED, "reason": "drain_timeout"},
    ]

    groups = r.as_dict()["groups"]

    assert groups[0]["held_s"] == 1.235 and groups[0]["lease_wait_s"] == 0.123
    assert [g["outcome"] for g in groups] == ["compacted", "skipped"]
    assert type(groups[0]["outcome"]) is str
