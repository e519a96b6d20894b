"""The scopes benchmark's measures on a made-up history: what counts as ingest held, per lease
and for cold leases. No Spark; `python -m benchmarks.scopes` runs the real workload."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

from benchmarks.scopes import ingest_held, lease_spans
from ingest_gate.job.record import BatchRecord

T0 = 1_800_000_000.0  # seconds since the epoch
HOT, COLD = "dt=2024-05-01/hr=13", "dt=2024-05-01/hr=09"


def _at(seconds: float) -> str:
    return datetime.fromtimestamp(T0 + seconds, UTC).replace(tzinfo=None).isoformat() + "Z"


def _event(id_, event, at, lease_id=None, kind="maintenance", **detail):
    return {
        "id": id_,
        "event": event,
        "at": _at(at),
        "lease_id": lease_id,
        "kind": kind,
        "detail": detail,
    }


def _batch(start, waited, scope, reasons=("maintenance",)):
    """A batch whose gate wait starts at `start`, then a MERGE of 1 s."""
    record = BatchRecord(
        query_id="q",
        batch_id=int(start),
        gate_wait_s=waited,
        wait_reasons=list(reasons) if waited else [],
        scope=scope,
        commit_s=1.0,
        outcome="committed",
    )
    return SimpleNamespace(
        record=record, started_at=T0 + start - 0.5, ended_at=T0 + start + waited + 1
    )


def _result(events, batches, hot_window_s=5.0):
    options = SimpleNamespace(hot_window=timedelta(seconds=hot_window_s))
    return SimpleNamespace(events=events, batches=batches, options=options)


def test_a_lease_spans_from_its_intent_to_its_end():
    events = [
        _event(1, "intent.opened", 10, request_id="r1", partitions=[HOT]),
        _event(2, "lease.acquired", 12, "m1", request_id="r1", partitions=[HOT]),
        _event(3, "lease.released", 20, "m1"),
        _event(4, "lease.acquired", 30, "m2", request_id="r2"),  # still live at the end
    ]
    spans = lease_spans(events, until=T0 + 40)
    assert [(s.lease_id, s.start - T0, s.granted - T0, s.end - T0) for s in spans] == [
        ("m1", 10, 12, 20),
        ("m2", 30, 30, 40),
    ]
    assert spans[0].partitions == frozenset({HOT}) and spans[1].partitions is None


def test_ingest_held_counts_waits_on_intersecting_leases_only():
    events = [
        _event(1, "lease.acquired", 0, "cold", request_id="a", partitions=[COLD]),
        _event(2, "lease.released", 30, "cold"),
        _event(3, "intent.opened", 40, request_id="b", partitions=[HOT]),
        _event(4, "lease.acquired", 42, "hot", request_id="b", partitions=[HOT]),
        _event(5, "lease.released", 50, "hot"),
    ]
    batches = [
        _batch(10, 0.0, [HOT]),  # committed during the cold lease: not held
        _batch(41, 6.0, [HOT]),  # waited 6 s for the hot lease
        _batch(60, 0.0, [HOT]),
        _batch(70, 2.0, "table", reasons=("paused",)),  # not maintenance
    ]
    result = _result(events, batches)
    held = ingest_held(result, lease_spans(events, until=T0 + 80))
    assert held["ingest_held_total_s"] == 6.0
    assert held["ingest_held_per_lease_max_s"] == 6.0
    assert (held["cold_leases"], held["cold_lease_ingest_held_max_s"]) == (1, 0.0)
    assert held["batches_that_waited"] == 1


def test_a_whole_table_lease_is_never_cold_and_holds_every_batch_it_overlaps():
    events = [
        _event(1, "lease.acquired", 0, "m1", request_id="a"),
        _event(2, "lease.released", 10, "m1"),
    ]
    result = _result(events, [_batch(2, 5.0, [COLD]), _batch(3, 4.0, [HOT])])
    held = ingest_held(result, lease_spans(events, until=T0 + 20))
    assert held["ingest_held_total_s"] == 9.0
    assert held["ingest_held_per_lease_max_s"] == 9.0
    assert held["cold_leases"] == 0
